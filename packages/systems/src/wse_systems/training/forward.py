"""What an eval pass takes on `num_csx` wafers: the training step's forward alone, per batch.

Contract. `predict_eval(model, spec, num_csx=, batch_per_system=, seq_len=, micro_batch=,
batches=, layout=)` returns a `wse_core.cost.report.RunReport` (units "eval pass",
`systems=num_csx`) of `batches` eval batches, each `batch_per_system` sequences of `seq_len`
tokens per system run as micro-batches of `micro_batch`, priced from the same parts as
`wse_systems.training.performance.predict_step` (`forward_phases`): the weights streamed in
as the step's forward streams them (the next layer's during this one's compute; in column
chunks where the plan chunks), the embedding, every layer's forward and the head's logits and
loss (`head_phases(part="forward")`); no backward, no gradient out, no MemoryX update. Each
micro-batch streams every weight in again, as the step's micro-batches do. `extra`:
tokens_per_s, batch_s, batches, micro_batch, micro_batches, batch_per_system, seq_len,
stall_fraction, precision, placement.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from wse_core import Phase, Phases, RunReport, WaferSpec, WseError, overlap, serial
from wse_core.cost.reads import recording

from wse_systems.training.layer_cost import (
    chunked_layer_phases,
    embed_work,
    head_phases,
    layer_phases,
)
from wse_systems.training.performance import (
    ASSUMPTIONS,
    CHUNKED_ASSUMPTIONS,
    _groups,
    _runs,
    forward_nodes,
)
from wse_systems.training.placement import StepLayout, StepPlacement, StepWorkload, place_step
from wse_systems.training.plan import memory_plan
from wse_systems.training.stream_cost import Streams

__all__ = ["EVAL_ASSUMPTIONS", "forward_phases", "predict_eval"]

# The step's assumptions that an eval pass prices too, and what it prices otherwise
_SHARED = ("layer placement", "token passes", "attention", "streams", "exp", "MemoryX capacity")
EVAL_ASSUMPTIONS = {
    **{k: ASSUMPTIONS[k] for k in _SHARED},
    "eval pass": "the training step's forward alone, per micro-batch (weights streamed in "
    "again each), the head's logits and loss; no backward, gradients or update",
    "eval placement": "the training ledger's plan at the eval shape (it holds the "
    "backward's activations too, which a forward does not need: passes no longer than a "
    "forward-only plan's)",
}


def forward_phases(model: Any, pl: StepPlacement, *, streams: bool = True) -> Phases:
    """One micro-batch's forward on one replica, streamed as the step's forward is
    (`streams` False: its compute alone, what the streams add is the rest)."""
    st = Streams(pl, streams)
    g, L = _groups(model), int(model.n_layers)
    embed = Phase("embed_forward", embed_work(model, pl, backward=False))
    head = head_phases(model, pl, part="forward")
    if pl.chunks is not None:
        fwd = chunked_layer_phases(model, pl, st)
        return serial(
            overlap(st.weights_in(g["embed"]), embed, name="embedding"),
            dataclasses.replace(fwd, name="forward", repeat=L),
            overlap(st.weights_in(g["head"]), head, name="head"),
            name="eval_forward",
        )
    fwd = layer_phases(model, pl)
    nodes = forward_nodes(st, g, L, embed, fwd)
    nodes.append(serial(head, name="head"))
    return serial(*_runs(nodes), name="eval_forward")


def predict_eval(
    model: Any,
    spec: WaferSpec,
    *,
    num_csx: int,
    batch_per_system: int,
    seq_len: int,
    micro_batch: int,
    batches: int,
    layout: StepLayout = StepLayout(),
) -> RunReport:
    """`batches` eval batches' forward passes (module contract)."""
    if batches < 1 or micro_batch < 1 or batch_per_system % micro_batch:
        raise WseError(
            f"an eval pass needs batches >= 1 and a micro-batch dividing the per-system batch, "
            f"got {batches} batches, micro-batch {micro_batch} of {batch_per_system}"
        )
    plan, placement, precision, _ = layout  # an eval pass updates nothing: no clipping
    if plan is None:
        plan = memory_plan(model, spec, micro_batch, seq_len)
    work = StepWorkload(micro_batch=micro_batch, seq_len=seq_len)
    pl = place_step(model, spec, plan, work, num_csx=num_csx, placement=placement,
                    precision=precision)  # fmt: skip
    k = batch_per_system // micro_batch
    with recording() as got:
        one = forward_phases(model, pl)
        compute = RunReport.build("compute", spec, forward_phases(model, pl, streams=False))
        whole = serial(dataclasses.replace(one, repeat=k * batches), name="eval_pass")

    def figures(t: Any) -> dict[str, Any]:
        return {
            "tokens_per_s": num_csx * batch_per_system * seq_len * batches / t.seconds,
            "batch_s": t.seconds / batches,
            "batches": batches,
            "micro_batch": micro_batch,
            "micro_batches": k,
            "batch_per_system": batch_per_system,
            "seq_len": seq_len,
            "stall_fraction": 1.0 - k * batches * compute.predicted_s / t.seconds
            if t.seconds
            else 0.0,
            "precision": pl.num.precision,
            "placement": placement,
        }

    chunked = CHUNKED_ASSUMPTIONS if pl.chunks is not None else {}
    return RunReport.build(
        "eval_pass", spec, whole,
        sram=plan.streaming.sram if plan.streaming is not None else {},
        assumptions={**EVAL_ASSUMPTIONS, **chunked}, units="eval pass", systems=num_csx,
        extra=figures, reads=got,
    )  # fmt: skip
