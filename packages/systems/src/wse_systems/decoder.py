"""What a decoder-only transformer costs on wafer regions, counted per instruction.

Contract. `matvec_phases(region, n_in, n_out, ...)` is one matrix-vector product on a PE
region as the SDK's gemv examples lay it out (`wse_systems.matvec`: x_in flooded down the
columns, one column AXPY per input element, the partial sums reduced along the rows, the
output moved back to the top row); `matvec_work` is the same counts as one `Work`.
`decode_phases(shape, plan, ...)` is one batch-1 decode step of `shape` laid out by
`wse_systems.pipeline.plan_pipeline`: per layer the norms, the q/k/v, attention
(`wse_systems.attention`, one dataflow on any region), output and MLP products on that
layer's region, the residual stream's move to the next region (its top row's values down
the region's height: words over the links between the bands), the
passes between wafers, and a named `per_token` group (the head's product, the argmax, the
token's way back to the embedding and, with `token_out`, the token's trip off the wafer to the
host, `token_out_work`). It is the same plan object the inference engine
emulates, so a change of the plan changes the prediction through it.

The GEMV program is the plan's `gemv` (`wse_systems.pipeline.GEMV_PROGRAMS`, a stated
assumption of every prediction): "sdk" is the form above; "meshgemv" is WaferLLM's
(`wse_systems.meshgemv`): each product's input already replicated along its reduce axis,
one FMAC per input element, a two-level allreduce along that axis leaving the output
replicated for the next product, which reduces along the other axis (qkv and up_gate along
the columns, o_proj and down along the rows, the head along the columns). No data moves
between products; the routes do: each layer pays WaferLLM's 6 reconfigurations of its
allreduce's 5 colours (`wse_systems.meshgemv.route_resets`, an assumed cost a colour,
`meshgemv.route_reset_cycles`); a prompt block pays them once a layer, as the decode
program's MeshGEMVs streamed k times would (WaferLLM's MeshGEMM prefill, Prefill/WSE-2 at
the same commit, resets none; a block whose products all run as MeshGEMMs is not told apart:
at the assumed 10 cycles a colour, 300 cycles a layer a block). The residual is flooded
down a region once as it enters it (`x_in` of the stage) and, held on every row after
`down`, leaves from the region's bottom row. The
attention is priced as in the "sdk" form (`wse_systems.attention`) under both. Under
"meshgemv", `block_tokens` k > 1 gives each product as WaferLLM's prefill runs it, one
MeshGEMM of the k tokens (`wse_systems.meshgemm`): one of a prompt block's two programs;
`wse_systems.serving.blocks` prices each product as the cheaper of it (where its buffers
fit) and k MeshGEMVs one after another (this tree at k = 1, streamed k times).

`shape` is a `wse_systems.transformer.DecoderShape` (its counts), e.g. a
`wse_models.ModelConfig` or `transformer.LLAMA31_8B`, the calibration case.

Activation sparsity (ReLU and squared-ReLU MLPs): the wafer's dataflow triggers a PE's
FMAC only when a nonzero operand arrives (Cerebras states the hardware skips zeros), so the
down projection's column AXPYs run only for the nonzero hidden values: `mlp_zero_fraction`
s scales its FMACs and their SRAM traffic by (1 - s). The zeros are still multicast (the
fabric time does not shrink; a sender-side filter would be a further gain, not assumed).

Assumptions (listed in every prediction built from here): the exponential of the softmax
costs `exp_fmacs()` FMACs per element (a polynomial; not published: assumed, listed); the
attention reads the KV cache of `kv_tokens` tokens (default: half the context); words of
partial sums travel in the weights' dtype (two 16-bit values per wavelet); reductions over a
region (norms, the argmax) are `wse_core.cost.collectives.allreduce_2d` over its rectangle.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from wse_core.cost.collectives import allreduce_2d, broadcast_line, wavelets
from wse_core.cost.perf import Op, Phase, Phases, Work, serial
from wse_core.errors import WseError
from wse_core.hw.spec import WaferSpec
from wse_core.hw.sram import Region

from wse_systems.attention import EXP_FMACS, EXP_KEY, attention_phases, exp_fmacs, value_dtype
from wse_systems.matvec import matvec_phases, matvec_work, perf_rates
from wse_systems.meshgemm import meshgemm_phases
from wse_systems.meshgemv import DECODE_AXES, meshgemv_phases, route_resets
from wse_systems.pipeline import check_gemv
from wse_systems.transformer import DecoderShape, layer_products, mlp_zeros_problem

__all__ = ["EXP_FMACS", "DECODER_ASSUMPTIONS", "matvec_phases", "matvec_work", "layer_phases",
           "decode_phases", "PER_TOKEN", "TOKEN_ID_BYTES", "token_out_work"]  # fmt: skip

# The group of what every token costs outside the layers; it runs on the head region.
PER_TOKEN = "per_token"
# The chosen token's id as it leaves the wafer: one 32-bit word (a 128,256-entry vocabulary
# needs 17 bits; the fabric's wavelet carries 32).
TOKEN_ID_BYTES = 4
DECODER_ASSUMPTIONS = {
    "matvec layout": "input split over the top row's columns and flooded down them; partial "
    "sums reduced along rows to their middle PEs (the fastest of Luczynski et al.'s line "
    "reduces); the output moved back to the top row along the rows and up the columns",
    "exp": f"a polynomial, {EXP_FMACS:g} FMACs per element unless --assume {EXP_KEY}=N (not "
    "published; listed with the value priced: wse_systems.attention.EXP)",
    "attention layout": "KV dimensions over the region's columns, tokens over its rows "
    "(wse_systems.attention): q and the new K/V flooded down the columns, scores summed "
    "across a KV head's columns, softmax sums and p.v reduced down the columns",
    "rope": "the new q and k rotated on the top row before the flood, rotation pairs adjacent "
    "(W_q and W_k rows permuted at load), the angles advanced from the last position's "
    "(wse_systems.attention._rope)",
    "kv_tokens": "the attention reads the filled cache, half the context unless stated, not "
    "the whole allocated buffer (WaferLLM's decode computes over its buffer: swept beside the "
    "8B check, wse_systems.published.check_sweeps)",
    "zero skipping": "an FMAC fires only on a nonzero activation (no cost for a zero); zeros "
    "still cross the fabric; a stage's layers share its mean zero fraction",
    "argmax": "each PE's max over its logits and then the max's position, two passes into one "
    "accumulator (the SDK has no argmax instruction: the second pass is assumed), then the "
    "(max, index) pairs over the head region",
}


def _reduce_work(region: Region, words: float, spec: WaferSpec) -> Work:
    """A sum (or max) of `words` per PE over the region and back to every PE (norms,
    softmax): `wse_core.cost.collectives.allreduce_2d`."""
    return allreduce_2d(perf_rates(spec), region.rows, region.cols, words)


def _elementwise(kind: str, n: float, region: Region, dtype: str, per: float = 1.0) -> Op:
    return Op(kind, dtype, math.ceil(n / region.num_pes), count=per)


def _row_op(kind: str, n: float, region: Region, dtype: str, per: float = 1.0, **kw: Any) -> Op:
    """An op on a vector held by the region's top row (n / cols per PE); `kw`: `Op`'s own."""
    return Op(kind, dtype, math.ceil(n / region.cols), count=per, **kw)


# The norm's statistic on each PE of the row once the sum is back: 1 / sqrt(mean + eps), one
# fp32 square root and one fp32 divide of one element (`sqrt_cycles`, `div_cycles`: a
# scalar of the sum, whatever the values' dtype; unpriced until session 86)
NORM_STATISTIC = (Op("sqrt", "fp32", 1), Op("div", "fp32", 1))


def _norm(region: Region, d: int, dt: str, spec: WaferSpec, name: str = "norm") -> Phases:
    """RMS/layer norm of the residual on the top row: square-and-sum, the row's sum and
    back, then each PE's reciprocal root (`NORM_STATISTIC`) and the scale of its values."""
    # x * x into one accumulator: 1 element a cycle
    local = Work(ops=(_row_op("fmac", d, region, dt, accumulate=True, mem_writes=0.0),))
    total = allreduce_2d(perf_rates(spec), 1, region.cols, 1)
    scale = Work(ops=(*NORM_STATISTIC, _row_op("mul", d, region, dt)))
    return serial(
        Phase("norm_local", local), Phase("norm_sum", total), Phase("norm_scale", scale),
        name=name,
    )  # fmt: skip


def layer_phases(
    shape: DecoderShape,
    region: Region,
    *,
    kv_tokens: int,
    bytes_per_value: int = 2,
    mlp_zero_fraction: float = 0.0,
    spec: WaferSpec,
    gemv: str = "sdk",
    block_tokens: int = 1,
) -> Phases:
    """One layer's decode step (one token) on `region`, phase by phase (`mlp_zero_fraction`:
    the share of the MLP hidden activation that is zero, skipped by the down projection;
    `spec`: whose constants choose the collectives' algorithms; `gemv`: the GEMV program,
    `wse_systems.pipeline.GEMV_PROGRAMS`; under "meshgemv" the layer's input is already on
    every row, `decode_phases` floods it once per region, and with `block_tokens` k > 1
    each product is one MeshGEMM of the k tokens, the rest one token's)."""
    check_gemv(gemv)
    d, ff, dims = shape.d_model, shape.d_ff, layer_products(shape)
    dt, b = value_dtype(bytes_per_value), bytes_per_value
    act = Work(ops=(_row_op("fmac", ff, region, dt, exp_fmacs() + 2),), task_activations=1.0)
    residual = Work(ops=(_row_op("add", d, region, dt),))

    def mv(name: str, density: float = 1.0) -> Phases:
        n_in, n_out = dims[name]
        if gemv == "meshgemv":
            return _mesh(region, name, dims[name], b, spec, block_tokens, density)
        return matvec_phases(
            region, n_in, n_out, bytes_per_value=b, input_density=density, spec=spec, name=name
        )

    # WaferLLM's decode rewrites its allreduce routes 6 times a layer (`meshgemv.route_resets`;
    # the SDK dataflow keeps its routes). A block's tree holds the same leaf: the serving
    # blocks walk it beside the token's, whose resets a block pays once (module docstring)
    resets = [Phase("route_resets", route_resets())] if gemv == "meshgemv" else []
    return serial(
        _norm(region, d, dt, spec, "norm_attn"),
        mv("qkv"),
        attention_phases(shape, region, kv_tokens, b, spec),
        mv("o_proj"),
        Phase("residual_attn", residual),
        _norm(region, d, dt, spec, "norm_mlp"),
        mv("up_gate"),
        Phase("activation", act),
        mv("down", 1 - mlp_zero_fraction),
        Phase("residual_mlp", residual),
        *resets,
        name="layer",
    )


def _to_next(
    region: Region, d: int, b: int, nxt: Region | None = None, from_bottom: bool = False
) -> Work:
    """The residual stream (on the top row, d / cols values per column) down the region's
    height to the next region's top row: words over the links between the bands. When the
    next region (`nxt`, on the same wafer) does not start right below (a column strip's
    end, or the way back to the head), the stream also travels from below this region's
    bottom centre to the next one's top centre (Manhattan hops) and, across strips, shifts
    sideways as one row: all d values over the strip boundary's link. `from_bottom`: the
    stream is on the region's bottom row already (MeshGEMV)."""
    words = wavelets(math.ceil(d / region.cols), b)
    # from the top row down the region's height, or (`from_bottom`: MeshGEMV leaves the
    # residual on every row) one hop from its bottom row
    hops, lateral = (1.0 if from_bottom else float(region.rows)), 0.0
    if nxt is not None:
        out = (region.row0 + region.rows, region.col0 + region.cols // 2)
        into = (nxt.row0, nxt.col0 + nxt.cols // 2)
        hops += abs(out[0] - into[0]) + abs(out[1] - into[1])
        lateral = float(wavelets(d, b)) if nxt.col0 != region.col0 else 0.0
    links = {"S": words, "ramp": words} | ({"E": lateral} if lateral else {})
    return Work(links=links, latency_hops=hops, relay_stages=1.0)


def token_out_work(plan: Any) -> Work:
    """The chosen token's trip off the wafer to the host, once per token: from the head
    region to its wafer's nearest edge (`PipelinePlan.to_edge`, fabric hops), its id
    (`TOKEN_ID_BYTES`) at the system's I/O rate and one pass to the host
    (`system_latency_s`). On the critical path only when the wafer's I/O waits on compute
    (Cerebras' first inference release; `wse_systems.published.PUBLISHED_SETUP`)."""
    return Work(
        host_io_bytes=TOKEN_ID_BYTES,
        system_hops=1.0,
        latency_hops=float(plan.to_edge(plan.head.region)),
    )


def _entry_flood(region: Region, d: int, b: int) -> Phase:
    """MeshGEMV's input layout at a region's entry: the residual (top row, d / cols values
    per column) flooded down every column once (a product's input replicated along rows)."""
    return Phase("x_in", broadcast_line(region.rows, wavelets(math.ceil(d / region.cols), b)))


def _mesh(
    region: Region, product: str, dims: tuple[int, int], b: int, spec: WaferSpec, k: int,
    density: float = 1.0, name: str | None = None,
) -> Phases:  # fmt: skip
    """WaferLLM's programs: one token's MeshGEMV of `dims` (n_in, n_out) along `product`'s
    axis (`DECODE_AXES`), or for a prompt block of k > 1 tokens one MeshGEMM (the prefill's;
    dense: no skipping)."""
    if k > 1:
        return meshgemm_phases(region, k, *dims, bytes_per_value=b, name=name or product)
    return meshgemv_phases(
        region, dims, reduce_axis=DECODE_AXES[product], bytes_per_value=b,
        input_density=density, spec=spec, name=name or product,
    )  # fmt: skip


def _per_token(shape: DecoderShape, plan: Any, spec: WaferSpec, token_out: bool, k=1) -> Phases:
    """What every token costs outside the layers: the final norm, the head's product, the
    argmax over the vocabulary (each PE's max and its index, then over the head region), the
    chosen token's embedding row from its PE to the first stage's top row and, with
    `token_out`, the token's trip to the host (`token_out_work`)."""
    head, b, d = plan.head.region, plan.bytes_per_param, shape.d_model
    row = wavelets(math.ceil(d / head.cols), b)  # a PE's share of the embedding row
    embed = Work(
        links={"S": row, "ramp": row},
        latency_hops=float(head.rows + head.cols),
        relay_stages=2.0,  # the argmax's PE to the embedding row's, that one to the top row
        task_activations=1.0,
    )
    if plan.gemv == "meshgemv":
        mm = _mesh(head, "lm_head", (d, shape.vocab_size), b, spec, k, name="gemv")
        lm_head = serial(_entry_flood(head, d, b), mm, name="lm_head")
    else:
        lm_head = matvec_phases(
            head, d, shape.vocab_size, bytes_per_value=b, spec=spec, name="lm_head"
        )
    # the argmax (session 86: its local pass was unpriced): each PE holding logits after the
    # head's reduce (ceil(vocab / head rows) of them, either program) takes its max, then the
    # max's position, each pass into one accumulator (`DECODER_ASSUMPTIONS["argmax"]`), then
    # the (max, index) pairs over the region (`allreduce_2d`, two words)
    logits = math.ceil(shape.vocab_size / head.rows)
    local = Op("max", value_dtype(b), logits, count=2, accumulate=True, mem_writes=0.0)
    argmax = serial(
        Phase("argmax_local", Work(ops=(local,))),
        Phase("argmax_reduce", _reduce_work(head, 2, spec)),
        name="argmax",
    )
    return serial(
        _norm(head, d, value_dtype(b), spec, "norm_final"),
        lm_head,
        argmax,
        Phase("embed", embed),
        *([Phase("token_out", token_out_work(plan))] if token_out else []),
        name=PER_TOKEN,
    )


def _next_on_wafer(plan: Any, i: int) -> Region | None:
    """The region after stage i on its wafer (the head after the last stage when the
    pipeline closes on one wafer); None where the next is on another wafer (a crossing)."""
    stages = plan.stages
    nxt = stages[i + 1] if i + 1 < len(stages) else plan.head
    return nxt.region if nxt.wafer == stages[i].wafer else None


def _own(part: Phase | Phases) -> Phase | Phases:
    """`part` as new nodes over the same (immutable) `Work`s: a stage's own layer tree."""
    if isinstance(part, Phases):
        return Phases(part.mode, tuple(_own(p) for p in part.parts), part.name, part.repeat)
    return Phase(part.name, part.work, part.repeat)


def decode_phases(
    shape: DecoderShape,
    plan: Any,
    *,
    kv_tokens: int | None = None,
    mlp_zero_fraction: float | Sequence[float] = 0.0,
    token_out: bool = False,
    block_tokens: int = 1,
    shared_layers: bool = False,
    build_layer: Callable[..., Phases] | None = None,
) -> Phases:
    """One batch-1 decode step (one token) of `shape` on `plan` (a `PipelinePlan`);
    `mlp_zero_fraction` is one value or one per layer (a stage takes its layers' mean);
    `token_out`: the token's trip to the host is on the step's path (`token_out_work`).

    At batch 1 only one region works at a time: the regions' phases are serial. Each region
    passes the residual stream to the next (`_to_next`); each wafer boundary and the way back
    to wafer 0 is a crossing by its mechanisms: the trip to the wafer's edge and from the
    next wafer's edge (`PipelinePlan.edge_hops`, fabric hops), the d_model values serialised
    at the system's I/O rate (`host_io_bytes_per_s`) and one network latency
    (`system_latency_s`, assumed, with its sweep in `wse_core.cost.mechanisms`);
    `per_token` is the head, the argmax and the embedding of the next token. `block_tokens`
    k > 1 under "meshgemv": each product one MeshGEMM of k tokens, the rest one token's (the
    MeshGEMM program of a prompt block; `wse_systems.serving.blocks` weighs it against k
    MeshGEMVs).
    `shared_layers`: the stages of one region shape (and zero fraction) hold one layer tree,
    the same object, for a pricer that prices a node once (`wse_systems.serving.blocks`);
    by default each stage has nodes of its own (over the same `Work`s), as what tells
    leaves apart by identity needs (`wse_core.trace`: a leaf's region). `build_layer`: what builds
    a region shape's layer tree, called as `layer_phases` (default: it; a pricer of many
    plans passes one that keeps the trees: `wse_systems.serving.blocks`)."""
    kv = plan.context_len // 2 if kv_tokens is None else kv_tokens
    b, d, spec = plan.bytes_per_param, shape.d_model, plan.spec
    gemv = check_gemv(plan.gemv)
    mesh = gemv == "meshgemv"
    parts: list[Phase | Phases] = []
    zeros = np.broadcast_to(np.asarray(mlp_zero_fraction, np.float64), (shape.n_layers,))
    for f in {float(z) for z in zeros}:  # hunt 68: any fraction on any activation was priced
        if why := mlp_zeros_problem(shape, f):
            raise WseError(why)
    # hunt 63: a 4,096-layer model built 4,096 equal layer trees per token priced (a minute
    # per plan); a layer's phases depend on its region's rows x cols only (not where it
    # lies), so each distinct (rows, cols, zero fraction) is built once
    layers: dict[tuple[int, int, float], Phases] = {}
    for i, stage in enumerate(plan.stages):
        s = float(zeros[stage.layers[0] : stage.layers[1]].mean())
        key = (stage.region.rows, stage.region.cols, s)
        if key not in layers:
            layers[key] = (build_layer or layer_phases)(
                shape, stage.region, kv_tokens=kv, bytes_per_value=b, mlp_zero_fraction=s,
                spec=spec, gemv=gemv, block_tokens=block_tokens,
            )  # fmt: skip
        layer = layers[key] if shared_layers else _own(layers[key])
        handoff = _to_next(stage.region, d, b, _next_on_wafer(plan, i), from_bottom=mesh)
        parts.append(
            serial(
                *([_entry_flood(stage.region, d, b)] if mesh else []),
                dataclasses.replace(layer, repeat=stage.num_layers),
                Phase("to_next", handoff),
                name=stage.name,
            )
        )
    passes = Work(
        host_io_bytes=plan.wafer_crossings * d * b,
        system_hops=plan.wafer_crossings,
        latency_hops=float(plan.edge_hops),
    )
    return serial(
        *parts,
        _per_token(shape, plan, spec, token_out, block_tokens),
        Phase("between_wafers", passes),
        name="decode_step",
    )
