"""How one training step lies on the wafer (host-side, static), and one product priced there.

Contract. `place_step(model, spec, plan, StepWorkload(micro_batch=, seq_len=), num_csx=)`
returns the `StepPlacement` that `wse_systems.training.performance` prices, read from the trainer's
own memory plan (`wse_systems.training.plan.memory_plan`; `plan.streaming` is the `ActivationPlan`
the `StreamedTrainer` runs); a step that cannot run is a `WseError` here, at plan time:

- **Placement of a layer.** Each layer computes on the whole wafer. Its weights land spread
  over every PE (the plan's "current + prefetched layer" allocation): each PE holds an
  ceil(n_out / rows) x ceil(n_in / cols) block of every product (`weight_block`), as in
  `wse_systems.decoder.matvec_work`. The layer inputs stay resident in SRAM (the plan keeps
  every `stride`-th one and recomputes the rest) and flow through the products in passes of
  `chunk` tokens: a token's input is split over the columns and multicast down them ("S"),
  each PE runs one FMAC over the pass's tokens per weight it holds, and the partial sums are
  added along the rows ("E") (`gemm_work`). `chunk` is the most tokens whose inputs and
  partial sums fit in the SRAM the plan leaves free for data (the PE's data budget, its
  program's reserve aside, less the plan's allocations) plus its working-set allocation, so a
  plan that holds more activations runs shorter vectors.
- **Precision** (`precision_of(model)`: the numerics `wse train` runs): fp32 compute -> fp32
  FMAC; bf16 compute -> "mixed" (`fmac_mixed`: bf16 operands, fp32 partial sums), whatever
  param_dtype, because MemoryX keeps fp32 masters; "bf16" (bf16 operands and partial sums)
  only when a caller asks for it (`StepLayout.precision`, a what-if no run does). Weights
  and gradients stream in the compute dtype, as the emulator's SwarmX moves them.
- **Sparsity** (`StepWorkload`, refused when it cannot happen): an MLP zero fraction only
  on a ReLU-like activation (`check_sparsity`), causal pairs per row within what a row of
  `seq_len` tokens has.
- **Resident** placement (`placement="resident"`, only when `plan.resident`): the training
  state stays in SRAM; the chunk is sized from what it leaves free.
- **Below the layer** (the plan's `chunks` not whole): each matrix streams in column chunks
  (`wse_systems.training.chunks`), each chunk spread over every PE like a whole product
  (`weight_block` of its columns). A streamed model whose MemoryX state exceeds the spec's
  `memoryx_capacity_bytes` is refused here (`wse_systems.training.plan.check_memoryx`).

`StepWorkload` is what flows through one replica's step (validated when built).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

from wse_core import Op, WaferSpec, Work, WseError
from wse_core.cost.collectives import wavelets

from wse_systems.training.chunks import WeightChunks
from wse_systems.training.plan import MemoryPlan, check_memoryx, working_bytes
from wse_systems.transformer import mlp_zeros_problem

__all__ = [
    "PRECISIONS",
    "PRECISION_WORDS",
    "Numerics",
    "StepWorkload",
    "Sparsity",
    "StepLayout",
    "StepPlacement",
    "precision_of",
    "check_sparsity",
    "weight_block",
    "place_step",
    "gemm_work",
]

# precision -> (FMAC kind, operand dtype, operand bytes, partial-sum bytes)
PRECISIONS = {
    "fp32": ("fmac", "fp32", 4, 4),
    "bf16": ("fmac", "bf16", 2, 2),
    "mixed": ("fmac_mixed", "bf16", 2, 4),
}
# what each precision is, in the words a plan prints beside its figures
PRECISION_WORDS = {
    "fp32": "fp32 compute, weights streamed in fp32, fp32 masters in MemoryX",
    "mixed": "bf16 compute with fp32 partial sums, weights streamed in bf16, fp32 masters "
    "in MemoryX",
    "bf16": "bf16 compute and partial sums, weights streamed in bf16 (a what-if: wse train "
    "keeps fp32 masters)",
}


@dataclasses.dataclass(frozen=True)
class Numerics:
    """How a product's FMACs run: instruction kind, operand dtype, and bytes."""

    precision: str
    kind: str
    dtype: str
    operand_bytes: int
    acc_bytes: int

    @classmethod
    def of(cls, precision: str) -> Numerics:
        if precision not in PRECISIONS:
            raise WseError(f"unknown precision {precision!r}; use one of {list(PRECISIONS)}")
        return cls(precision, *PRECISIONS[precision])

    @property
    def acc_dtype(self) -> str:
        return "fp32" if self.acc_bytes == 4 else self.dtype


def precision_of(model: Any) -> str:
    """The numerics `wse train` runs for `model`: "fp32" for fp32 compute, else "mixed".

    Whatever param_dtype, MemoryX keeps fp32 masters and fp32 optimizer state and sums the
    gradients in fp32 (`wse_trainer.memoryx`: every group cast to fp32), and the compute is
    model.dtype's. Hunt 68: param_dtype bfloat16 was priced as "bf16" (bf16 partial sums,
    1.76x faster than mixed for GPT-2 124M) while the run did the mixed arithmetic."""
    return "fp32" if str(model.dtype) == "float32" else "mixed"


@dataclasses.dataclass(frozen=True, kw_only=True)
class StepWorkload:
    """What flows through one replica's step: `micro_batch` sequences of `seq_len` tokens."""

    micro_batch: int
    seq_len: int
    mlp_zero_fraction: float = 0.0  # zeros of the MLP hidden activation (ReLU-like MLPs)
    # Causal (query, key) pairs per row: seq (seq + 1) / 2 unless documents are packed with
    # attention kept within each (then the sum of n (n + 1) / 2 over its documents).
    attention_pairs_per_row: float | None = None

    def __post_init__(self) -> None:
        if not 0.0 <= self.mlp_zero_fraction < 1.0:
            raise WseError(f"mlp_zero_fraction must be in [0, 1), got {self.mlp_zero_fraction}")
        pairs, s = self.attention_pairs_per_row, self.seq_len
        # each token attends to itself at least (s pairs: documents of one token) and to
        # every earlier token at most (s (s + 1) / 2: one document); hunt 68: 1e7 at seq
        # 1024 priced a step 30% slower than full causal attention
        if pairs is not None and not s <= pairs <= s * (s + 1) / 2:
            raise WseError(
                f"attention_pairs_per_row must be in [{s:,}, {s * (s + 1) // 2:,}] for "
                f"seq_len {s:,} (s to s (s + 1) / 2 causal pairs), got {pairs:g}"
            )


def check_sparsity(model: Any, work: StepWorkload) -> None:
    """WseError for an MLP zero fraction on an activation without exact zeros (hunt 68:
    0.75 on GELU priced a 6.6% faster step). Skipping needs ReLU-like zeros in the hidden
    activation and, behind them, zero gradients (`layer_cost.sparse_density`); the words
    are `transformer.mlp_zeros_problem`'s, which decoding shares."""
    if why := mlp_zeros_problem(model, float(work.mlp_zero_fraction)):
        raise WseError(why)


class Sparsity(NamedTuple):
    """What the data lets a step skip (the fields of `StepWorkload` beside its batch)."""

    mlp_zero_fraction: float = 0.0  # zeros of the MLP hidden activation (ReLU-like MLPs)
    attention_pairs_per_row: float | None = None  # causal pairs per row (None: seq (seq+1)/2)


class StepLayout(NamedTuple):
    """Where a step's training state lives and in which numbers (what `place_step` reads
    beside the workload): `plan` the memory plan of one micro-batch (None: the one `wse
    train` builds, `memory_plan(model, spec, micro_batch, seq_len)`), its state `placement`
    "streamed" or "resident", its `precision` (None: the model's, `precision_of`), and
    `clip_gradients`, whether the run clips the global gradient norm (its
    `optimizer.max_gradient_norm` set: MemoryX holds the updates, `update`)."""

    plan: MemoryPlan | None = None
    placement: str = "streamed"
    precision: str | None = None
    clip_gradients: bool = False


@dataclasses.dataclass(frozen=True)
class StepPlacement:
    """One replica's step as the plan lays it out (static; built by `place_step`)."""

    spec: WaferSpec
    num: Numerics
    num_csx: int
    micro_batch: int
    seq_len: int
    resident: bool
    stride: int  # layer inputs kept every `stride` layers (the ActivationPlan's)
    chunk_bytes_per_pe: int  # SRAM for one pass's inputs and partial sums
    mlp_zero_fraction: float = 0.0  # as StepWorkload's
    attention_pairs_per_row: float | None = None  # as StepWorkload's
    chunks: WeightChunks | None = None  # streamed below the layer (None: whole layers)

    @property
    def tokens(self) -> int:
        return self.micro_batch * self.seq_len

    def chunk(self, n_in: int, n_out: int) -> int:
        """Tokens per pass through an n_in x n_out product (at least 1, at most all)."""
        ro, ci = weight_block(self.spec, n_in, n_out)
        per_token = ci * self.num.operand_bytes + ro * self.num.acc_bytes
        return max(1, min(self.tokens, self.chunk_bytes_per_pe // per_token))


def weight_block(spec: WaferSpec, n_in: int, n_out: int) -> tuple[int, int]:
    """(outputs, inputs) of a product's weight block on one PE."""
    return math.ceil(n_out / spec.pe_rows), math.ceil(n_in / spec.pe_cols)


def place_step(
    model: Any,
    spec: WaferSpec,
    plan: MemoryPlan,
    work: StepWorkload,
    *,
    num_csx: int,
    placement: str = "streamed",
    precision: str | None = None,
) -> StepPlacement:
    """The placement of one step from the trainer's memory plan (refused if it cannot run)."""
    check_sparsity(model, work)
    per_pe = lambda n: -(-int(n) // spec.num_pes)  # noqa: E731
    working = per_pe(working_bytes(model, work.micro_batch, work.seq_len))
    if placement == "resident":
        if not plan.resident:
            raise WseError(
                f"the training state ({plan.resident_bytes:,} B) does not fit in wafer SRAM for "
                f"data ({plan.sram_total_bytes:,} B): it cannot stay resident; stream it"
            )
        free, stride = spec.data_bytes_per_pe - per_pe(plan.resident_bytes), 1
    elif placement == "streamed":
        check_memoryx(plan)
        if plan.streaming is None:
            raise WseError(f"the step cannot be placed: {plan.streaming_error}")
        free = _data_free(plan.streaming.sram)
        stride = plan.streaming.stride
    else:
        raise WseError(f"unknown placement {placement!r}; use 'streamed' or 'resident'")
    num = Numerics.of(precision or precision_of(model))
    return StepPlacement(
        spec,
        num,
        num_csx,
        work.micro_batch,
        work.seq_len,
        placement == "resident",
        stride,
        free + working,
        work.mlp_zero_fraction,
        work.attention_pairs_per_row,
        plan.streaming.chunks if placement == "streamed" and plan.streaming.chunked else None,
    )


def _data_free(sram: dict[str, Any]) -> int:
    """Bytes a PE has free for data after the plan's allocations: its data budget (the
    PE's SRAM less the program's reserve, `SramLedger.data_bytes_per_pe`) less what is in use.
    Hunt 82 (jobs18 H2): the whole PE less the use counted the program's 2,048 B as free for
    the token passes."""
    data = int(sram["bytes_per_pe"]) - int(sram.get("reserved_bytes_per_pe", 0))
    return data - int(sram["used_bytes_per_pe"])


def _passes(kind: str, dtype: str, tokens: int, chunk: int, per_pass: int) -> tuple[Op, ...]:
    """`per_pass` instructions over each pass of `chunk` tokens (the last pass shorter)."""
    full, rest = divmod(tokens, chunk)
    ops = (Op(kind, dtype, chunk, count=per_pass * full),) if full else ()
    return ops + ((Op(kind, dtype, rest, count=per_pass),) if rest else ())


def _pass_words(tokens: int, chunk: int, per_token: int, nbytes: int) -> int:
    """Wavelets of `per_token` values a token over the passes of `chunk` tokens: each pass's
    message whole wavelets (hunt 82, jobs18 L3: 16-bit values were counted in fractions)."""
    full, rest = divmod(tokens, chunk)
    return full * wavelets(per_token * chunk, nbytes) + wavelets(per_token * rest, nbytes)


def gemm_work(pl: StepPlacement, n_in: int, n_out: int, *, density: float = 1.0) -> Work:
    """Y[T, n_out] = X[T, n_in] W on the whole wafer, on its busiest PE (module contract).

    Per PE: ro * ci FMACs per pass (ro x ci its weight block), the partial sums arriving
    from the west added in; SRAM reads the input and partial sum of every FMAC element and
    each weight once per pass, writes the partial sums and the arriving inputs; words out:
    the inputs down the column ("S"), the partial sums along the row ("E"), each pass's
    message in whole wavelets. `density`: the
    nonzero fraction of the sparse operand; an FMAC fires only on a nonzero one."""
    s, num, tokens = pl.spec, pl.num, pl.tokens
    ro, ci = weight_block(s, n_in, n_out)
    chunk = pl.chunk(n_in, n_out)
    ops = _passes(num.kind, num.dtype, tokens, chunk, ro * ci)
    if density < 1.0:
        ops = tuple(dataclasses.replace(op, count=op.count * density) for op in ops)
    ops += _passes("add", num.acc_dtype, tokens, chunk, ro)
    elems, passes = ro * ci * tokens * density, math.ceil(tokens / chunk)
    return Work(
        ops=ops,
        sram_read_bytes=elems * (num.operand_bytes + num.acc_bytes)
        + ro * ci * passes * num.operand_bytes,
        sram_write_bytes=elems * num.acc_bytes + ci * tokens * num.operand_bytes,
        links={
            "S": _pass_words(tokens, chunk, ci, num.operand_bytes),
            "E": _pass_words(tokens, chunk, ro, num.acc_bytes),
        },
        latency_hops=(s.pe_rows - 1) + (s.pe_cols - 1),
    )
