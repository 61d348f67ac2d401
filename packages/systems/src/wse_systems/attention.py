"""One layer's decode attention on a wafer region, as one consistent dataflow, counted by
mechanism on the busiest PE.

Contract. `attention_phases(shape, region, kv_tokens, bytes_per_value, spec)` is the
attention of one decode token over `kv_tokens` cached tokens on a `rows x cols` region, its
K and V cache laid out the one way that matches the query the layer's q projection leaves
(split over the top row's columns) and the input the o projection takes (the same):

- columns split the KV dimensions (n_kv_heads x hd): each column holds `g = ceil(n_kv hd /
  cols)` of them, and the `grp = n_heads / n_kv_heads` query heads that share a KV head
  work on the same column (grouped-query attention: the cache is stored once, never
  replicated per query head); rows split the tokens: each PE holds `t = ceil(kv / rows)`
  tokens of its column's dimensions;
- rope: the rotary position embedding of the new q and k on the top row (`_rope`; none for
  GPT-2), assumed layout and recurrence as `_rope` states;
- q_in: each column's `grp x g` query values, with the new token's `g` keys and `g` values
  for the cache (the row that owns the token's position stores them), flooded down its
  rows (`wse_core.cost.collectives.broadcast_line`);
- scores: each PE's partial q.k over its g dimensions for its t tokens and its query heads
  (`qh = grp x ceil(g / hd)`), as the faster of the two loop orders (`_faster`): column
  AXPYs over the tokens, one per (head, dimension), or dot products over the dimensions
  (one accumulator: one element per cycle), one per (head, token);
- scores_sum: where a KV head spans `s = ceil(hd / g)` columns, the partial scores
  (t x qh values) are summed across those s columns and back
  (`collectives.allreduce_2d` over 1 x s PEs); none where a column holds whole heads;
- softmax: the exponential (`exp_fmacs()` FMACs, an assumption: `EXP`) and subtract on the
  PE's t x qh scores, each head's max and sum over its t tokens (one accumulator each: one
  element per cycle), then the max and the sum of each head over the tokens,
  along the column (an allreduce over rows x 1 PEs of 2 qh fp32 values, one word each);
- values: each PE's partial p.v (qh x g values) over its t tokens, the faster loop order
  again (AXPYs of length g, one per (head, token), or dots over the tokens);
- heads_reduce: the partial outputs summed down the column to its top PE (the fastest of
  Luczynski et al.'s line reduces to an end, `collectives.reduce_line`), then scaled by
  the reciprocal of each head's softmax sum (normalise: qh divides, qh multiplies of g):
  the output lands on the top row split over the columns, the o projection's input
  layout, so no move is needed.

Before issue 41's fix the attention mixed three layouts (q split over the columns, each
PE's tokens with whole heads, the heads' outputs reduced along the rows); this is the one
dataflow priced now, the same on a band and on a compact region.
"""

from __future__ import annotations

import dataclasses
import math

from wse_core.cost.assumptions import register_system_constant, system_constant
from wse_core.cost.collectives import allreduce_2d, broadcast_line, reduce_line, wavelets
from wse_core.cost.mechanisms import Constant
from wse_core.cost.perf import Op, PerfModel, Phase, Phases, Work, serial
from wse_core.hw.dtypes import DTYPE_BYTES
from wse_core.hw.spec import WaferSpec
from wse_core.hw.sram import Region

__all__ = [
    "EXP_FMACS",
    "EXP",
    "EXP_KEY",
    "exp_fmacs",
    "AttentionSplit",
    "attention_split",
    "attention_phases",
    "value_dtype",
]

EXP_FMACS = 6.0  # FMACs an exp costs per element where no --assume changes it: `EXP`
EXP = Constant(
    units="FMACs/element",
    mechanism="an exponential on the wafer (softmax; the MLP's activation at 2 FMACs more): "
    "a polynomial by Horner's rule, one FMAC per term",
    basis="assumed",
    source="no WSE figure (the SDK publishes no exp instruction or cost); float32 exp is range "
    "reduction and a polynomial: degree 6 in Eigen's exp<float> (faithfully rounded; its "
    "commit 'Improve exp<float>()' cut it from 7), degree 4 in LLVM libc's expf after a "
    "table lookup (reviews.llvm.org/D122418). 4: the table's; 12: twice Eigen's, room for "
    "the range reduction (scale by log2 e, round, subtract, set the exponent) and its guards",
    sweep=(4.0, 6.0, 12.0),
    limits=(0.0, 1000.0),
)
# `--assume attention.exp_fmacs=N`: registered as the GPU's kernel cost is (hunt 69: the
# constant moved the wafer's tokens/s 4% and was in no registry, so no prediction listed it)
EXP_KEY = "attention.exp_fmacs"
register_system_constant(EXP_KEY, EXP, value=EXP_FMACS)


def exp_fmacs() -> float:
    """FMACs an exponential costs per element: `EXP_FMACS`, or `--assume
    attention.exp_fmacs=N` (noted as read: `wse_core.cost.reads`)."""
    return system_constant(EXP_KEY)


@dataclasses.dataclass(frozen=True)
class AttentionSplit:
    """How the KV cache splits over a region: per PE `g` KV dimensions, `t` tokens, `qh`
    query heads; `s` columns share one KV head (1: a column holds whole heads); `grp`
    query heads share a KV head."""

    g: int
    t: int
    qh: int
    s: int
    grp: int


def attention_split(shape, region: Region, kv_tokens: int) -> AttentionSplit:
    """The split of the module contract for `shape` (a DecoderShape) on `region`."""
    hd, nh, nkv = shape.hd, shape.n_heads, shape.n_kv_heads
    grp = max(1, nh // nkv)
    g = math.ceil(nkv * hd / region.cols)
    t = math.ceil(kv_tokens / region.rows)
    s = math.ceil(hd / g) if g < hd else 1
    return AttentionSplit(g, t, grp * math.ceil(g / hd), s, grp)


def value_dtype(bytes_per_value: int) -> str:
    """The SIMD dtype of a stored value: fp16 for 2 bytes (the 16-bit weights and KV), else
    fp32 (shared by `decoder` and `meshgemv`)."""
    return "fp16" if bytes_per_value == 2 else "fp32"


def _faster(rates: WaferSpec, heads: int, outer: int, inner: int, dt: str) -> Op:
    """`heads x outer` results, each a sum over `inner` products: AXPYs (one per (head,
    inner) over the outer results, length `outer`) or dots (one per (head, outer), length
    `inner`, into one accumulator); the PE runs whichever takes fewer core cycles."""
    axpy = Op("fmac", dt, outer, count=heads * inner)
    dot = Op("fmac", dt, inner, count=heads * outer, accumulate=True, mem_writes=0.0)
    return min((axpy, dot), key=lambda op: op.cycles(rates))


def _allreduce(rates: WaferSpec, rows: int, cols: int, words: float) -> Work:
    """`collectives.allreduce_2d`, nothing over one PE."""
    return allreduce_2d(rates, rows, cols, words) if rows * cols > 1 else Work()


def _sram(ops: tuple[Op, ...], dt: str) -> tuple[float, float]:
    size = DTYPE_BYTES[dt]
    return (
        sum(op.elements * op.reads * size for op in ops),
        sum(op.elements * op.mem_writes * size for op in ops),
    )


def _rope(shape, sp: AttentionSplit, dt: str) -> tuple[Op, ...]:
    """RoPE on a column's new q (grp x g) and k (g) values on the top row, before the flood
    (none for GPT-2's learned positions). Each rotation pair is made adjacent by permuting
    W_q's and W_k's rows at load (assumed; HF's Llama checkpoints are permuted so); the
    position's cos and sin advance from the last token's by one rotation (a multiply and an
    FMAC for each: 4 DSDs over the column's g / 2 frequencies) and each pair rotates (even'
    = e c - o s, odd' = o c + e s: 4 DSDs over the (grp + 1) g / 2 pairs at stride 2, one
    multi-dimensional DSD across the vectors, the angles repeated)."""
    if shape.arch == "gpt2":
        return ()
    freqs, pairs = math.ceil(sp.g / 2), math.ceil((sp.grp + 1) * sp.g / 2)
    return (
        Op("mul", dt, freqs, count=2),
        Op("fmac", dt, freqs, count=2),
        Op("mul", dt, pairs, count=2, stride=2),
        Op("fmac", dt, pairs, count=2, stride=2),
    )


def attention_phases(
    shape, region: Region, kv_tokens: int, bytes_per_value: int, spec: WaferSpec
) -> Phases:
    """The attention of one decode token on `region` (the module contract), its phases in
    order: rope, q_in, scores, scores_sum, softmax, softmax_sums, values, heads_reduce."""
    rates = PerfModel(spec).rates
    sp = attention_split(shape, region, kv_tokens)
    dt, b = value_dtype(bytes_per_value), bytes_per_value  # messages: whole wavelets
    qk = _faster(rates, sp.qh, sp.t, sp.g, dt)  # scores: qh x t, each over g dims
    pv = _faster(rates, sp.qh, sp.g, sp.t, dt)  # outputs: qh x g, each over t tokens
    n = sp.t * sp.qh
    # each head's max and sum over its t tokens reduce into one accumulator (1 element a
    # cycle; session 86: priced at the SIMD width before), the exponential and the
    # subtract run over all t x qh scores
    over_tokens = dict(count=sp.qh, accumulate=True, mem_writes=0.0)
    soft = (
        Op("fmac", dt, n, count=exp_fmacs()),
        Op("max", dt, sp.t, **over_tokens),
        Op("sub", dt, n),
        Op("add", dt, sp.t, **over_tokens),
    )
    # 1 / sum per head (one DSD of qh divides), then each head's g outputs scaled by it
    div = (Op("div", dt, sp.qh), Op("mul", dt, sp.g, count=sp.qh))

    def work(ops: tuple[Op, ...], tasks: float = 0.0) -> Work:
        read, write = _sram(ops, dt)
        return Work(ops=ops, sram_read_bytes=read, sram_write_bytes=write,
                    task_activations=tasks)  # fmt: skip

    return serial(
        Phase("rope", work(_rope(shape, sp, dt))),
        Phase("q_in", broadcast_line(region.rows, wavelets((sp.grp + 2) * sp.g, b))),
        Phase("scores", work((qk,), 1.0)),
        Phase("scores_sum", _allreduce(rates, 1, sp.s, wavelets(n, b))),
        Phase("softmax", work(soft)),
        Phase("softmax_sums", _allreduce(rates, region.rows, 1, 2 * sp.qh)),
        Phase("values", work((pv,))),
        Phase("heads_reduce", reduce_line(rates, region.rows, wavelets(sp.qh * sp.g, b))),
        Phase("normalise", work(div)),
        name="attention",
    )
