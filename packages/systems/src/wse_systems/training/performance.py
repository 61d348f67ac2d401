"""What one weight-streaming training step takes on `num_csx` wafers, priced from its placement.

Contract. `predict_step(model, spec, num_csx=, batch_per_system=, seq_len=, micro_batch=,
layout=, sparsity=)` returns a
`wse_core.cost.report.RunReport` (units "step", `systems=num_csx`) whose phases are counted from
the trainer's own memory plan (`wse_systems.training.plan.memory_plan`; `plan.streaming` is the
`ActivationPlan` the `StreamedTrainer` runs), per instruction, on the busiest PE.
Batches: `batch_per_system` is per system (the global batch, params.yaml's `batch_size`, is
num_csx times it); each system runs it as batch_per_system / micro_batch micro-batches:

- **Micro-batches** (ModelZoo's `micro_batch_size`; `wse_systems.training.micro_batch`):
  each is the whole step below (every weight streamed in, every gradient out, at the
  micro-batch's placement: its activations, its passes); MemoryX sums the gradients of all
  but the last (`memoryx_accumulate`, at the update's pace) and updates in the last, so a
  step of k micro-batches takes k times one and tokens/s depends on the micro-batch only.
  Why a larger batch at once can be slower: the plan keeps as many layer inputs as SRAM
  holds (stride 1 when they fit), and the product passes get only what that leaves
  (`placement.StepPlacement.chunk`); more sequences at once hold more activations, so the
  passes shorten and each pass's DSDs issue over fewer tokens (`dsd_issue` overhead and the
  weights re-read per pass grow) until the plan jumps to recomputing (stride 2...), which
  frees SRAM again: a saw-tooth in tokens/s. `step_bound(timing)` names what sets a step.

- **Placement of a layer and precision**: `wse_systems.training.placement` (`place_step`: each
  layer on the whole wafer, tokens through its products in passes; `gemm_work`: one
  product's work there), whose names this module re-exports.
- **Backward** = the transposed product (dX) and the weight-gradient product (dW), each
  priced like the forward one; the elementwise work and the attention twice the forward's.
- **Streams** (`wse_systems.training.stream_cost`). Weights flow MemoryX -> SwarmX -> every
  wafer at min(memoryx, swarmx) bytes/s; gradients flow back, sum-reduced by SwarmX, at the
  same rate; a SwarmX tree of ceil(log_fanout num_csx) levels adds `system_latency_s` per
  level to every streamed item. A tied head's gradient carries the embedding's share (the
  trainer's SwarmX reduces the head's whole gradient, the embedding group's included, and
  MemoryX adds it to the embedding's). MemoryX applies each group's update as its gradient
  arrives and keeps pace with that stream (overlapped with the backward; the last group's on
  the critical path), or, with global-norm clipping (`layout.clip_gradients`), holds them
  all and applies every update after the last gradient (`wse_systems.training.update`); a
  model over its capacity is refused (`check_memoryx`).
- **Overlap, as Cerebras describes weight streaming**: forward,
  `overlap(weights_in(l + 1), forward(l))`; backward,
  `overlap(weights_in(l - 1), backward(l), gradients_out(l + 1), memoryx_update(l + 1))`;
  the first weights in and the last gradients out and update are exposed. Recomputed layers
  stream their weights again, as the emulator does.
- **Below the layer** (the plan's chunks, `wse_systems.training.chunks`): each matrix streams in
  column chunks, each chunk's stream overlapped with its own product (`layer_cost.
  chunked_layer_phases`); a layer's backward first recomputes its inner activations (its
  chunks stream again; its vectors once, before), then runs each chunk's dX and dW with its
  gradient out; the embedding and the head stream during their own work (`_chunked_step`).
- **Resident** placement (`placement="resident"`, only when `plan.resident`): no weight
  streams; with num_csx > 1 the gradients are sum-reduced through SwarmX and come back,
  overlapped with the backward; the optimizer runs on the wafer (fp32 Adam) after it.

`PerfModel` applies the one calibration of `wse_core.cost.calibration`; nothing here is fitted.
`step_trace(spec, report)` is the step per PE (`wse train --validate-only --trace FILE`):
every PE runs every layer's block and holds the plan's allocations.
`no_stall_batch(...)` is the smallest per-system batch whose streams hide under compute;
N systems against one, strong and weak, are `wse_systems.training.scaling`.

The GPU side of every comparison is `wse_systems.gpu` (one GPU model for the stack).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from wse_core import Phase, Phases, RunReport, Timing, WaferSpec, WseError, overlap, serial
from wse_core.cost.reads import recording
from wse_core.errors import is_int, require_int, shown_setting
from wse_core.hw.sram import Region
from wse_core.trace import PeTrace, trace_uniform

from wse_systems.attention import EXP_FMACS, EXP_KEY
from wse_systems.training.layer_cost import (
    chunked_layer_phases,
    embed_work,
    head_phases,
    layer_phases,
)
from wse_systems.training.placement import (
    PRECISIONS,
    Numerics,
    Sparsity,
    StepLayout,
    StepPlacement,
    StepWorkload,
    gemm_work,
    place_step,
    precision_of,
)
from wse_systems.training.plan import memory_plan
from wse_systems.training.stream_cost import PARTS, Streams, wafer_update
from wse_systems.training.update import held_update, update_assumption, update_streams

__all__ = [
    "PRECISIONS",
    "Numerics",
    "Sparsity",
    "StepLayout",
    "StepPlacement",
    "StepWorkload",
    "precision_of",
    "place_step",
    "gemm_work",
    "layer_phases",
    "step_phases",
    "predict_step",
    "step_tokens_per_s",
    "check_step_shape",
    "step_bound",
    "no_stall_batch",
    "step_trace",
]


def _groups(model: Any) -> dict[str, int]:
    """Parameters each stream carries: the embedding, one layer, the head (final norm and,
    untied, the output matrix; tied, it reads the embedding too) and its gradient (tied: the
    embedding group's too, tokens and positions, as the trainer's SwarmX reduces it each
    micro-batch; hunt 74: 11,065,344 bytes reduced where 8,706,048 were priced), and the
    head's own update (the final group: the tied share joins the embedding's gradient)."""
    embed, layer = int(model.embed_params()), int(model.layer_params())
    final = int(model.num_params()) - embed - int(model.n_layers) * layer
    tied = embed if model.tie_embeddings else 0
    return {"embed": embed, "layer": layer, "head": final + tied, "head_grad": final + tied,
            "head_update": final}  # fmt: skip


def forward_nodes(st: Any, g: dict[str, int], L: int, embed: Phase, fwd: Phases) -> list:
    """The streamed forward pass up to the head, as a step and an eval pass run it: the
    embedding's weights in, then each layer's forward under the next group's weights in
    (the last under the head's)."""
    nodes: list[Phase | Phases] = [
        serial(st.weights_in(g["embed"]), name="first_weights_in"),
        overlap(st.weights_in(g["layer"]), embed, name="embedding"),
    ]
    for i in range(L):
        nxt = g["layer"] if i + 1 < L else g["head"]
        nodes.append(overlap(st.weights_in(nxt), fwd, name="forward"))
    return nodes


def _runs(nodes: list[Phase | Phases]) -> list[Phase | Phases]:
    """Equal neighbours folded into one node with a repeat."""
    out: list[Phase | Phases] = []
    for node in nodes:
        if out and out[-1] == dataclasses.replace(node, repeat=out[-1].repeat):
            out[-1] = dataclasses.replace(out[-1], repeat=out[-1].repeat + node.repeat)
        else:
            out.append(node)
    return out


def step_phases(model: Any, pl: StepPlacement, *, streams: bool = True, accumulate: bool = False,
                clipped: bool = False) -> Phases:  # fmt: skip
    """One micro-batch of one replica (the whole step without accumulation) as the overlap
    rules of the module contract say; `accumulate`: MemoryX only sums its gradients;
    `clipped`: MemoryX holds the updates until the last gradient (`update.held_update`)."""
    st = update_streams(pl, streams, accumulate, clipped)
    if pl.chunks is not None:
        held = held_update(st, _groups(model), int(model.n_layers))
        return serial(*_runs([*_chunked_step(model, pl, st), *held]), name="train_step")
    g, L = _groups(model), int(model.n_layers)
    fwd, bwd = layer_phases(model, pl), layer_phases(model, pl, backward=True)
    embed_f = Phase("embed_forward", embed_work(model, pl, backward=False))
    embed_b = Phase("embed_backward", embed_work(model, pl, backward=True))
    nodes = forward_nodes(st, g, L, embed_f, fwd)
    nodes.append(overlap(st.weights_in(g["layer"]), head_phases(model, pl), name="head"))
    kept = math.ceil(L / pl.stride)
    if L > kept:
        again = overlap(st.weights_in(g["layer"]), fwd, name="recompute", repeat=L - kept)
        nodes.append(again)
    for i in reversed(range(L)):
        nxt = g["layer"] if i else g["embed"]
        out, done = (g["head_grad"], g["head_update"]) if i == L - 1 else (g["layer"],) * 2
        parts = (st.returned(nxt), bwd, st.gradients_out(out), st.update(done))
        nodes.append(overlap(*parts, name="backward"))
    tail = (st.gradients_out(g["layer"]), st.update(g["layer"]))
    nodes.append(overlap(embed_b, *tail, name="embedding_backward"))
    nodes.append(serial(st.gradients_out(g["embed"]), st.update(g["embed"]), name="last_update"))
    nodes += held_update(st, g, L)
    if pl.resident:
        n = int(model.num_params())
        nodes.append(serial(Phase("adam_on_wafer", wafer_update(pl, n)), name="optimizer"))
    return serial(*_runs(nodes), name="train_step")


def _chunked_step(model: Any, pl: StepPlacement, st: Streams) -> list[Phase | Phases]:
    """Streaming below the layer: every item's stream overlaps its own compute (the link
    carries one item at a time); the embedding and the head stream during their own work,
    their gradients out with it; a layer's backward recomputes its inner activations first
    (its chunks and vectors stream again; the backward that follows, only its chunks)."""
    g, L = _groups(model), int(model.n_layers)
    fwd = chunked_layer_phases(model, pl, st)
    bwd = serial(dataclasses.replace(fwd, name="inner_recompute"),
                 chunked_layer_phases(model, pl, st, backward=True, vectors_in=False),
                 name="backward")  # fmt: skip
    embed_f = Phase("embed_forward", embed_work(model, pl, backward=False))
    embed_b = Phase("embed_backward", embed_work(model, pl, backward=True))
    out = (st.gradients_out(g["head_grad"]), st.update(g["head_update"]))
    head = overlap(st.weights_in(g["head"]), head_phases(model, pl), *out, name="head")
    done = (st.gradients_out(g["embed"]), st.update(g["embed"]))
    recompute = L - math.ceil(L / pl.stride)
    return [
        overlap(st.weights_in(g["embed"]), embed_f, name="embedding"),
        dataclasses.replace(fwd, name="forward", repeat=L),
        head,
        *([dataclasses.replace(fwd, name="recompute", repeat=recompute)] if recompute else []),
        dataclasses.replace(bwd, repeat=L),
        overlap(st.weights_in(g["embed"]), embed_b, *done, name="embedding_backward"),
    ]


ASSUMPTIONS = {
    "layer placement": "each layer on the whole wafer; its weights spread over every PE "
    "(a ceil(n_out/rows) x ceil(n_in/cols) block per product), inputs multicast down the "
    "columns, partial sums added along the rows (wse_systems.decoder.matvec_work's layout)",
    "token passes": "activations resident; tokens flow through a product in passes sized by "
    "the SRAM the plan leaves free plus its working set; one FMAC per held weight per pass",
    "attention": "q.k and p.v over the mean causal context (s + 1) / 2 spread over every PE; "
    "its K/V exchange is not counted (assumed hidden under the FMACs)",
    "backward": "dX and dW products priced like the forward one; attention and pointwise "
    "work twice the forward's",
    "streams": "weights in and gradients out in the compute dtype at min(memoryx, swarmx) "
    "bytes/s; SwarmX a tree of ceil(log_fanout num_csx) levels (spec swarmx_fanout), "
    "system_latency_s each, paid by every streamed item",
    "weight-streaming overlap": "next layer's weights prefetched during this layer's "
    "compute; gradients out and the MemoryX update overlap the previous layer's backward",
    "MemoryX update": update_assumption(False),  # or, clipping, update_assumption(True)
    "exp": f"{EXP_FMACS:g} FMACs per element unless --assume {EXP_KEY}=N "
    "(wse_systems.attention.EXP)",
    "zero skipping": "with mlp_zero_fraction s (ReLU-like MLPs only: other activations have "
    "no exact zeros and are refused), an FMAC fires only on a nonzero operand: the "
    "down projection (forward, dW) and the up projection (dX, dW) run (1 - s) of their "
    "FMACs; zeros still cross the fabric",
    "MemoryX capacity": "fp32 masters and the optimizer's slots (plan.slots_of: Adam 2, sgd 1 "
    "or 0) per parameter; gradients held while a layer's chunks arrive, or for clipping",
}
CHUNKED_ASSUMPTIONS = {
    "below the layer": "a layer that does not fit streams matrix by matrix in column chunks "
    "sized by the SRAM ledger (wse_systems.training.chunks); each chunk spread over every PE "
    "like a whole product; the embedding and the head stream whole during their own work (not "
    "chunked in the emulator; the plan's chunk buffers are sized for a layer's matrices)",
    "chunk overlap": "each chunk's stream overlaps its own product (one link, one item at a "
    "time, double-buffered); backward: its gradient out and MemoryX's update too; the "
    "vectors stream during the attention and pointwise work",
    "chunked backward": "a chunked layer's backward streams its chunks twice: to recompute "
    "its inner activations from its input, then for the gradients (forward: once); its "
    "vectors once, before the recompute, their gradient out last",
}


def predict_step(
    model: Any,
    spec: WaferSpec,
    *,
    num_csx: int,
    batch_per_system: int,
    seq_len: int,
    micro_batch: int | None = None,
    layout: StepLayout = StepLayout(),
    sparsity: Sparsity = Sparsity(),
) -> RunReport:
    """One training step of `num_csx` wafers, each with `batch_per_system` sequences of
    `seq_len` tokens (the global batch is num_csx times that) run as micro-batches of
    `micro_batch` (default: the whole per-system batch at once), placed as `layout` says
    (`StepLayout`: its `plan` by default `memory_plan(model, spec, micro_batch, seq_len)`,
    the plan `wse train` builds for one micro-batch, streamed, in the model's precision;
    a `clip_gradients` True where the run clips the global gradient norm: `update`),
    skipping what `sparsity` lets it. `extra`: tokens_per_s (all systems), stall_fraction
    (the share of the step the streams add), step_bound (`step_bound`), micro_batch,
    micro_batches, batch_per_system, global_batch, placement, precision, stride."""
    check_step_shape(model, batch_per_system=batch_per_system, seq_len=seq_len,
                     micro_batch=micro_batch)  # fmt: skip
    micro = micro_batch or batch_per_system
    if micro < 1 or batch_per_system % micro:
        raise WseError(
            f"micro-batch {micro} does not divide the per-system batch of {batch_per_system}"
        )
    plan, placement, precision, clipped = layout
    if plan is None:
        plan = memory_plan(model, spec, micro, seq_len)
    mlp_zero_fraction = sparsity.mlp_zero_fraction
    work = StepWorkload(micro_batch=micro, seq_len=seq_len, **sparsity._asdict())
    pl = place_step(
        model, spec, plan, work, num_csx=num_csx, placement=placement, precision=precision
    )
    k = batch_per_system // micro
    with recording() as got:  # building the phases reads constants too (exp_fmacs)
        compute = step_phases(model, pl, streams=False)
        compute_s = k * RunReport.build("compute", spec, compute).predicted_s
        step = _accumulated(model, pl, k, clipped)

    def figures(step: Timing) -> dict[str, Any]:
        step_s = step.seconds
        return {
            "tokens_per_s": step_tokens_per_s(num_csx, batch_per_system, seq_len, step_s),
            "compute_s": compute_s,
            "stall_fraction": 1.0 - compute_s / step_s if step_s else 0.0,
            "step_bound": step_bound(step),
            "placement": placement,
            "precision": pl.num.precision,
            "stride": pl.stride,
            "batch_per_system": batch_per_system,
            "global_batch": num_csx * batch_per_system,
            "micro_batch": micro,
            "micro_batches": k,
            "seq_len": seq_len,
            "mlp_zero_fraction": mlp_zero_fraction,
            "weight_chunks": pl.chunks.summary() if pl.chunks is not None else "whole layers",
            "swarmx_fanout": spec.swarmx_fanout,
        }

    said = ASSUMPTIONS | {"MemoryX update": update_assumption(clipped)}
    return RunReport.build(
        "train_step",
        spec,
        step,
        sram=plan.streaming.sram if plan.streaming is not None else {},
        assumptions=said | (CHUNKED_ASSUMPTIONS if pl.chunks is not None else {}),
        units="step",
        systems=num_csx,
        extra=figures,
        reads=got,
    )


def step_tokens_per_s(num_csx: int, batch_per_system: int, seq_len: int, step_s: float) -> float:
    """A step's tokens/s over all systems: `predict_step`'s tokens_per_s and the speed
    `micro_batch.plan_step` compares, one formula (review 79: written twice, which
    `step_parts` keeps the same float)."""
    return num_csx * batch_per_system * seq_len / step_s


def check_step_shape(
    model: Any, *, batch_per_system: int, seq_len: int, micro_batch: int | None = None
) -> None:
    """WseError for a step no run has: hunt 67 priced GPT-2 (1,024 positions) at 4,096
    tokens per sequence (682k tokens/s), 0 tokens as a 5 ms step and 2.5 sequences. The
    sequence within the model's `max_seq_len`, as `wse train` checks a params file's and
    transformers / vLLM refuse a max_model_len past max_position_embeddings."""
    require_int("batch_per_system", batch_per_system, 1)
    if micro_batch is not None:
        require_int("micro_batch", micro_batch, 1)
    limit = getattr(model, "max_seq_len", None)
    if is_int(seq_len) and 1 <= seq_len and (limit is None or seq_len <= limit):
        return
    allowed = ">= 1" if limit is None else f"in 1..{limit} (the model's max_seq_len)"
    raise WseError(f"seq_len must be an integer {allowed}, got {shown_setting(seq_len)}")


def _accumulated(model: Any, pl: StepPlacement, k: int, clipped: bool = False) -> Phases:
    """k micro-batches one after another, each the whole stream of a step; MemoryX sums the
    first k - 1 gradients (`memoryx_accumulate`) and updates in the last."""
    last = step_phases(model, pl, clipped=clipped)
    if k == 1:
        return last
    early = dataclasses.replace(step_phases(model, pl, accumulate=True), name="micro_batch")
    last = dataclasses.replace(last, name="last_micro_batch")
    return serial(dataclasses.replace(early, repeat=k - 1), last, name="train_step")


def step_bound(step: Timing) -> str:
    """What sets a step: of the seconds its critical path spends, the part (compute, or a
    stream of `stream_cost.PARTS`) with the most; compute names the mechanism with the most
    cycles (simd: the datapath; dsd_issue: instruction issue, short vectors; sram; link...)."""
    parts = step.by_leaf(lambda name: PARTS.get(name, "compute"))
    part = max(parts, key=parts.__getitem__)
    if part != "compute":
        return part
    mech = {k: v for k, v in step.by_mechanism().items() if k != "host_io"}
    return f"compute ({max(mech, key=mech.__getitem__)})" if mech else "compute"


def no_stall_batch(
    model: Any, spec: WaferSpec, *, num_csx: int, seq_len: int, stall: float = 0.01
) -> int | None:
    """Smallest per-system batch whose streams add at most `stall` of the step (None when
    no batch that the SRAM plan can place gets there)."""
    check_step_shape(model, batch_per_system=1, seq_len=seq_len)  # not a batch that failed

    def ok(b: int) -> bool | None:
        try:
            r = predict_step(model, spec, num_csx=num_csx, batch_per_system=b, seq_len=seq_len)
        except WseError:
            return None
        return r.extra["stall_fraction"] <= stall

    hi = 1
    while (got := ok(hi)) is False:
        hi *= 2
    if got is None:
        return None
    lo = hi // 2  # ok(lo) is False (or lo == 0)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi


def step_trace(spec: WaferSpec, report: RunReport) -> PeTrace:
    """The per-PE trace of a `predict_step` report: each layer computes on the whole wafer
    (every PE its block of every product), so every PE does the busiest PE's work of every
    phase and holds each of the memory plan's allocations (`report.sram`)."""
    rows, cols = spec.pe_rows, spec.pe_cols
    region = Region(f"every layer's block on every PE ({rows} x {cols})", 0, 0, rows, cols)
    return trace_uniform(spec, report, region=region)
