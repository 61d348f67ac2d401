"""Memory plans from the model's analytic counts (nothing is allocated).

- `plan_activations(model, spec, micro_batch, seq_len, stride=0, chunks=0)` asks a
  replica's SRAM ledger (`wse_core.SramLedger`) what fits next to the streamed weights (the
  current and the prefetched layer), one layer's gradient and one layer's working set: it
  keeps every layer's input when they fit, otherwise the inputs of every `stride`-th layer,
  recomputing the others segment by segment in the backward pass (at most ceil(L / stride) +
  stride - 1 layer inputs held at once: `inputs_held`; a stride past L is refused:
  `check_stride`); `stride=0` takes the smallest that fits (a run keeps the fastest of
  them: `wse_systems.training.stride`). When even that
  leaves no room for a whole layer, the layer streams below itself
  (`wse_systems.training.chunks`): its matrices in column chunks whose three buffers
  (current, prefetched, gradient) replace the layer's; the activations come first (the
  smallest stride beside a floor chunk of one output column per PE row), the chunk takes
  the SRAM left (`WeightChunks.reason` says so). `chunks=k` forces k chunks per matrix.
  Too little SRAM even for the floor chunk is a `SramBudgetError` from the ledger. This
  is the plan that shows what fits (`micro_batch.fits`, "auto"); the plan a run runs is the
  fastest of every stride and weight streaming that places (`stride.run_plan`), each placed
  by `place(model, spec, micro_batch, seq_len, stride, ck)` (`ck` whole layers or a cut of
  `chunks.choices`); `bytes_needed(...)` is what such a placement asks of the ledger, for a
  stride that does not fit.
- `memory_plan(..., optimizer_slots=)` is the `--validate-only` table (`optimizer_slots`:
  the optimizer's fp32 values per parameter, `slots_of(config.optimizer)`; 2, Adam's, by
  default): weights, gradients, optimizer state and activations in total and per PE, for a
  model resident in wafer SRAM and for weight streaming (wafer: two layers or two chunks,
  MemoryX: fp32 masters and optimizer state, fp32 whatever param_dtype, as
  `wse_trainer.memoryx` holds them: `MASTER_BYTES`);
  `check_memoryx(plan)` refuses a model whose MemoryX state exceeds the spec's capacity,
  noting the capacity as read (`wse_core.cost.reads`), so `--assume` may set it.
- `host_bytes(...)` is what the emulator holds in host memory for a run on one process
  (MemoryX, and every local replica's streamed layers and activations: CPU devices are host
  memory); `wse train` refuses a run whose total exceeds the host (`wse_core.host.memory`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from wse_core import SramBudgetError, SramLedger, WaferSpec, WseError
from wse_core.cost.reads import read
from wse_core.hw.spec import dtype_bytes

from wse_systems.training.chunks import WeightChunks, floor_params, forced, whole, within

__all__ = [
    "ActivationPlan",
    "MemoryPlan",
    "plan_activations",
    "place",
    "bytes_needed",
    "memory_plan",
    "check_memoryx",
    "check_stride",
    "layer_counts",
    "slots_of",
    "inputs_held",
    "host_bytes",
    "MASTER_BYTES",
]


# Bytes per parameter of the masters, the optimizer's slots and the gradients MemoryX sums:
# fp32 whatever the model's param_dtype (wse_trainer.memoryx casts every group to fp32 and
# sums gradients in fp32; hunt 68: a param_dtype bfloat16 plan showed fp32 here, which is
# what its run holds, without saying so).
MASTER_BYTES = 4


def slots_of(optimizer: Any) -> int:
    """fp32 values per parameter that `optimizer` (its `optimizer_type` and `momentum`, as a
    params file's optimizer section) keeps in MemoryX beside the master, as
    `wse_trainer.optimizer.base_transform` builds it with optax: adam and adamw two (mu,
    nu); sgd and momentum one (the trace) with a momentum, none without (`optax.sgd` keeps no
    trace for momentum None). Hunt 74: every plan sized Adam's two."""
    if optimizer.optimizer_type in ("adam", "adamw"):
        return 2
    return 1 if optimizer.momentum else 0


def layer_counts(model: Any) -> tuple[int, int]:
    """(parameters per layer, parameters outside the layers)."""
    per_layer = int(model.layer_params())
    return per_layer, int(model.num_params()) - per_layer * int(model.n_layers)


def working_bytes(model: Any, micro_batch: int, seq_len: int) -> int:
    """Transient bytes inside one layer, which runs one sequence at a time: its q/k/v and
    MLP hidden, and one attention head's scores (the wafer computes heads in turn)."""
    del micro_batch  # sequences run one after another through the layer's working set
    s = seq_len
    hidden = (2 if model.arch == "llama" else 1) * model.d_ff
    elems = s * (3 * model.d_model + hidden) + s * s
    return elems * dtype_bytes(model.dtype)


@dataclasses.dataclass(frozen=True)
class ActivationPlan:
    stride: int  # inputs of layers 0, stride, 2*stride, ... are kept
    held_layers: int  # layer inputs held at once at most
    activation_bytes_per_pe: int  # one layer input, per PE
    sram: dict[str, Any]  # the ledger's summary
    chunks: WeightChunks | None = None  # how each matrix streams (None: whole layers)
    stride_reason: str = ""  # why this stride (`fastest_stride`; "" when given or the least)

    def keeps(self, layer: int) -> bool:
        return layer % self.stride == 0

    @property
    def chunked(self) -> bool:
        return self.chunks is not None and not self.chunks.whole


def inputs_held(n_layers: int, stride: int) -> int:
    """Layer inputs held at once at most when every `stride`-th is kept (module contract)."""
    return n_layers if stride == 1 else math.ceil(n_layers / stride) + stride - 1


class _Replica:
    """One replica's SRAM ledger with the helpers the plan asks it."""

    def __init__(self, model: Any, spec: WaferSpec, micro_batch: int, seq_len: int):
        self.model, self.spec, self.L = model, spec, int(model.n_layers)
        self.size = dtype_bytes(model.dtype)
        self.ledger = SramLedger.for_spec(spec)
        self.act = self.per_pe(micro_batch * seq_len * model.d_model * self.size)
        self.working = self.per_pe(working_bytes(model, micro_batch, seq_len))

    def per_pe(self, n: int) -> int:
        return -(-int(n) // self.spec.num_pes)

    def weight_items(self, ck: WeightChunks | None) -> list[tuple[str, int]]:
        """The streamed weights' buffers, (allocation, bytes per PE): a whole layer (current
        + prefetched, gradient) or the layer's vectors and the largest chunk (current +
        prefetched, gradient)."""
        if ck is None or ck.whole:
            per_layer = int(self.model.layer_params())
            return [
                ("weights: current + prefetched layer", self.per_pe(2 * per_layer * self.size)),
                ("gradient of one layer", self.per_pe(per_layer * self.size)),
            ]
        chunk = self.per_pe(ck.largest_params * self.size)
        return [
            (
                "layer vectors: current, prefetched, gradient",
                self.per_pe(3 * ck.vector_params * self.size),
            ),
            ("weights: current + prefetched chunk", 2 * chunk),
            ("gradient of one chunk", chunk),
        ]

    def weights(self, ck: WeightChunks | None) -> None:
        """Allocate the streamed weights' buffers (`weight_items`) and the working set."""
        for name, n in self.weight_items(ck):
            self.ledger.allocate(name, n)
        self.ledger.allocate("working set of one layer", self.working)

    def needed(self, stride: int, ck: WeightChunks | None) -> int:
        """Bytes per PE that `stride`'s held inputs, `ck`'s buffers and the working set ask
        for together (what a plan that does not place would need)."""
        held = inputs_held(self.L, min(stride, self.L))
        return sum(n for _, n in self.weight_items(ck)) + self.working + held * self.act

    def stride(self, stride: int) -> int:
        """`stride`, or (0) the smallest whose held inputs fit; the cheapest if none fits
        (what fits, and the chunk a chunked plan sizes; `fastest_stride` chooses among them)."""
        if stride > 0:
            return stride
        fit = self.ledger.free_bytes() // max(self.act, 1)
        held = {k: inputs_held(self.L, k) for k in range(1, self.L + 1)}
        choices = [k for k, n in held.items() if n <= fit]
        return choices[0] if choices else min(held, key=held.__getitem__)

    def activations(self, stride: int) -> int:
        held = inputs_held(self.L, min(stride, self.L))
        self.ledger.allocate(f"activations: {held} layer inputs (stride {stride})", held * self.act)
        return held


def _floor_chunk(model: Any, spec: WaferSpec) -> WeightChunks:
    """The smallest chunking the planner considers (`chunks.floor_params`)."""
    return within(model, floor_params(model, spec.pe_rows))


def _auto_chunks(model: Any, spec: WaferSpec, mb: int, seq: int, stride: int) -> WeightChunks:
    """Activations first (at the smallest stride beside the floor chunk), then the largest
    chunk the SRAM left over holds in its three buffers (current, prefetched, gradient)."""
    r = _Replica(model, spec, mb, seq)
    r.weights(_floor_chunk(model, spec))
    k = r.stride(stride)
    held = r.activations(k)
    r.ledger.free("weights: current + prefetched chunk")
    r.ledger.free("gradient of one chunk")
    buffer = r.ledger.free_bytes() // 3
    params = buffer * spec.num_pes // r.size
    layer = r.per_pe(int(model.layer_params()) * r.size)
    why = (
        f"a whole layer needs {3 * layer} B per PE (current + prefetched weights, its "
        f"gradient); beside the working set and {held} layer inputs (stride {k}) the ledger "
        f"leaves {3 * buffer} B: each matrix is cut into column chunks of at most "
        f"{params:,} parameters ({buffer} B per PE, three buffers: current, prefetched, "
        "gradient)"
    )
    return within(model, params, why)


def check_stride(model: Any, stride: int) -> None:
    """Refuse an activation stride past the layer count (hunt 75: 100 on 32 layers was
    planned as "kept every 100 layer(s)", which keeps what stride 32 keeps, layer 0's)."""
    n_layers = int(model.n_layers)
    if stride > n_layers:
        raise WseError(
            f"runconfig.activation_stride {stride} is more than the model's {n_layers} layers: "
            f"give 1 to {n_layers} (keep every k-th layer's input) or 0 (the fastest predicted "
            "stride that fits)"
        )


def plan_activations(
    model: Any, spec: WaferSpec, micro_batch: int, seq_len: int, stride: int = 0, chunks: int = 0
) -> ActivationPlan:
    """Keep or recompute layer inputs within one replica's SRAM (`stride` 0: choose; past
    the layer count: refused, `check_stride`) and stream each layer whole when it fits, else
    in column chunks (`chunks` k > 0: force every matrix into k chunks; 0: as the ledger
    allows, `WeightChunks.reason` says why)."""
    check_stride(model, stride)
    if chunks > 0:
        ck = forced(model, chunks, f"forced: every matrix in {chunks} column chunks "
                    "(runconfig.weight_chunks)")  # fmt: skip
    else:
        ck = None
        try:
            return _place(model, spec, micro_batch, seq_len, stride, None)
        except SramBudgetError:
            ck = _auto_chunks(model, spec, micro_batch, seq_len, stride)
    return _place(model, spec, micro_batch, seq_len, stride, ck)


def _place(model, spec, micro_batch, seq_len, stride, ck) -> ActivationPlan:
    r = _Replica(model, spec, micro_batch, seq_len)
    r.weights(ck)
    k = r.stride(stride)
    held = r.activations(k)
    if ck is None:
        ck = whole(model, _whole_reason(r, held, k))
    return ActivationPlan(
        stride=k, held_layers=held, activation_bytes_per_pe=r.act, sram=r.ledger.summary(),
        chunks=ck,
    )  # fmt: skip


def _whole_reason(r: _Replica, held: int, k: int) -> str:
    layer = r.per_pe(int(r.model.layer_params()) * r.size)
    return (f"whole layers: a layer's weights (current + prefetched, {2 * layer} B per PE) "
            f"and its gradient ({layer} B) fit beside the working set and {held} layer "
            f"inputs (stride {k})")  # fmt: skip


def place(
    model: Any, spec: WaferSpec, micro_batch: int, seq_len: int, stride: int, ck: WeightChunks
) -> ActivationPlan:
    """The plan that keeps every `stride`-th layer input (>= 1) and streams the weights as
    `ck` says (whole layers or column chunks: `chunks.choices`), its `reason` saying what
    the buffers take; the ledger's `SramBudgetError` where they do not fit."""
    r = _Replica(model, spec, micro_batch, seq_len)
    r.weights(ck)
    held = r.activations(stride)
    if ck.whole:
        why = _whole_reason(r, held, stride)
    else:
        layer = r.per_pe(int(model.layer_params()) * r.size)
        chunk = r.per_pe(ck.largest_params * r.size)
        why = (f"a whole layer needs {3 * layer} B per PE (current + prefetched weights, its "
               f"gradient); each matrix is cut into column chunks of at most "
               f"{ck.largest_params:,} parameters ({chunk} B per PE, three buffers: current, "
               f"prefetched, gradient) beside the working set and {held} layer inputs (stride "
               f"{stride})")  # fmt: skip
    return ActivationPlan(
        stride=stride, held_layers=held, activation_bytes_per_pe=r.act,
        sram=r.ledger.summary(), chunks=dataclasses.replace(ck, reason=why),
    )  # fmt: skip


def bytes_needed(
    model: Any, spec: WaferSpec, micro_batch: int, seq_len: int, stride: int, ck: WeightChunks
) -> int:
    """Bytes per PE that `place(...)` asks the ledger for (held inputs, `ck`'s buffers and
    the working set), whether or not they fit its data budget."""
    return _Replica(model, spec, micro_batch, seq_len).needed(stride, ck)


@dataclasses.dataclass(frozen=True)
class MemoryPlan:
    rows: list[dict[str, Any]]  # {"item", "where", "bytes", "bytes_per_pe"}
    resident_bytes: int
    sram_total_bytes: int  # the wafer's SRAM for data (`WaferSpec.data_total_bytes`)
    resident: bool  # whole training state fits in wafer SRAM
    streaming: ActivationPlan | None
    streaming_error: str | None
    memoryx_bytes: int = 0  # fp32 masters and optimizer state in MemoryX
    memoryx_capacity_bytes: float = math.inf  # the spec's


def check_memoryx(plan: MemoryPlan) -> None:
    """Refuse a model whose MemoryX state exceeds the spec's MemoryX capacity. The capacity
    is noted as read (`wse_core.cost.reads.read`; it moves no figure, so it is listed only
    where `--assume` changed it): hunt 75, `--assume memoryx_capacity_bytes` of a model
    that fits was refused as a constant `wse plan train` does not read."""
    if math.isfinite(plan.memoryx_capacity_bytes):
        read("memoryx_capacity_bytes", plan.memoryx_capacity_bytes, moves=False)
    if plan.memoryx_bytes > plan.memoryx_capacity_bytes:
        raise WseError(
            f"the model does not fit in MemoryX: its fp32 masters and optimizer state take "
            f"{plan.memoryx_bytes / 1e12:,.4g} TB but MemoryX holds "
            f"{plan.memoryx_capacity_bytes / 1e12:,.4g} TB (memoryx_capacity_bytes, the wafer "
            "spec's or the one assumed); shrink the model or plan a larger MemoryX"
        )


def memory_plan(
    model: Any,
    spec: WaferSpec,
    micro_batch: int,
    seq_len: int,
    optimizer_slots: int = 2,
    stride: int = 0,
    streaming: ActivationPlan | None = None,
    chunks: int = 0,
) -> MemoryPlan:
    """Training memory, resident vs streamed, for one replica of `micro_batch` sequences.

    `streaming`: the `ActivationPlan` a trainer already runs (default: planned here with
    `stride` and `chunks`; `stride` 0, the smallest that fits: a run's plan, the fastest of
    them, is `wse_systems.training.stride.run_plan`'s), so that the prediction
    (`wse_systems.training.performance.predict_step`) reads the same object."""
    n_params = int(model.num_params())
    per_layer, _ = layer_counts(model)
    size = dtype_bytes(model.dtype)
    act_all = model.n_layers * micro_batch * seq_len * model.d_model * size
    m = MASTER_BYTES
    items = [
        ("weights (fp32 master)", m * n_params),
        ("gradients (fp32)", m * n_params),
        ("optimizer state (fp32)", m * optimizer_slots * n_params),
        ("activations (every layer input)", act_all),
        ("working set (one layer)", working_bytes(model, micro_batch, seq_len)),
    ]
    rows = [
        {"item": k, "where": "wafer if resident", "bytes": v, "bytes_per_pe": -(-v // spec.num_pes)}
        for k, v in items
    ]
    check_stride(model, stride)  # refused, not reported as a plan that does not place
    error = None
    try:
        if streaming is None:
            streaming = plan_activations(model, spec, micro_batch, seq_len, stride, chunks)
    except Exception as e:  # a SramBudgetError: reported in the plan, raised by the run
        error = str(e)
    ck = streaming.chunks if streaming is not None else None
    unit, streamed = "layer", per_layer
    if ck is not None and not ck.whole:
        unit, streamed = "chunk", ck.largest_params
    memx = m * (1 + optimizer_slots) * n_params
    rows += [
        {
            "item": f"streamed weights (current + prefetched {unit})",
            "where": "wafer, streaming",
            "bytes": 2 * streamed * size,
            "bytes_per_pe": -(-2 * streamed * size // spec.num_pes),
        },
        {
            "item": "fp32 masters + optimizer state" + _kept(model),
            "where": "MemoryX",
            "bytes": memx,
            "bytes_per_pe": 0,
        },
    ]
    resident = sum(v for _, v in items)
    return MemoryPlan(
        rows, resident, spec.data_total_bytes, resident <= spec.data_total_bytes, streaming,
        error, memx, spec.memoryx_capacity_bytes,
    )  # fmt: skip


def _kept(model: Any) -> str:
    """Words for a model stored in another dtype: MemoryX's state stays fp32 (MASTER_BYTES)."""
    pd = str(getattr(model, "param_dtype", "float32"))
    return "" if pd == "float32" else f" (param_dtype {pd}: MemoryX keeps fp32)"


def host_bytes(
    model: Any,
    micro_batch: int,
    seq_len: int,
    replicas: int = 1,
    optimizer_slots: int = 2,
) -> dict[str, int]:
    """Host bytes by item for `replicas` local replicas of `micro_batch` sequences.

    MemoryX keeps fp32 masters, optimizer state and (clipping needs them all) the gradients;
    each replica holds two streamed layers and one layer's gradient in the compute dtype, its
    layer inputs (every layer's at most), one layer's fp32 working set for all its sequences
    and heads at once (q/k/v, MLP hidden, attention scores and probabilities, forward and
    backward), and the fp32 logits, their softmax and gradient."""
    n_params = int(model.num_params())
    per_layer, _ = layer_counts(model)
    size = dtype_bytes(model.dtype)
    b, s = micro_batch, seq_len
    hidden = (2 if model.arch == "llama" else 1) * model.d_ff
    work = 2 * 4 * b * (s * (3 * model.d_model + hidden) + 2 * model.n_heads * s * s)
    per_replica = {
        "streamed layers and a gradient": 3 * per_layer * size,
        "layer inputs": int(model.n_layers) * b * s * model.d_model * size,
        "working set of one layer": work,
        "logits, softmax and gradient (fp32)": 3 * 4 * b * s * int(model.vocab_size),
    }
    return {
        "MemoryX: masters, optimizer state, gradients": MASTER_BYTES
        * (2 + optimizer_slots)
        * n_params,
        **{k: replicas * v for k, v in per_replica.items()},
    }
