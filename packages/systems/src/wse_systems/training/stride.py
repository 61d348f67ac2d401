"""Which activation stride a replica keeps when the params file sets none: the fastest.

Contract. `run_plan(model, spec, micro_batch, seq_len, stride=0, chunks=0,
optimizer_slots=2)` is the `MemoryPlan` (`wse_systems.training.plan.memory_plan`) a run of
one micro-batch runs and every planner prices (`micro_batch.plan_step`: `wse plan train`,
`trillion-scaling`): `runconfig.activation_stride` k > 0 as given; 0, the plan of
`fastest_stride(model, spec, micro_batch, seq_len, chunks, optimizer_slots)`: of the strides
that place (each planned as `plan_activations(stride=k)` plans it), the one whose predicted
step (`wse_systems.training.performance.predict_step` on that stride's own memory plan: one
micro-batch on one system) is the fastest, the smaller on a tie. A stride outside `_frontier`
holds at least as many layer inputs as a smaller one, which recomputes fewer layers, so only
the frontier's strides are priced (about sqrt(L) + 1 of them at most). `stride_reason`, and
the chunks' `reason` that `wse train --validate-only` prints after "why:", list each stride's
predicted step. `plan.memory_plan(stride=0)` itself keeps the smallest stride that fits: the
predictor imports `plan`, so `plan` cannot ask it.

Hunt 74: the plan kept the smallest stride that fits. Llama 3 8B with 48 x 8,192 tokens at
once held 13 layer inputs at stride 3 and left the products so little SRAM that the step took
33.5 s (`dsd_issue`-bound); stride 4 holds 11 and takes 9.02 s (the shipped llama3_8b.yaml:
4 x wse3, AdamW clipping the global norm, `wse plan train -m llama3_8b --batch 48
--micro-batch none`; the llama3-8b preset, one system and no clipping: 33.4 s and 8.92 s).
The times listed after "why:" are each stride's step of one micro-batch on one system with
MemoryX updating each group as its gradient arrives, which ranks them; the run's own step
(its systems, micro-batches and a clipped update held to the step's end) is priced apart.

Answers are kept (`wse_systems.serving.memo.Memo`: by value of the model, the spec and the
arguments, and the assumptions and calibration in force): a planner asks the same
micro-batch's plan for every step it prices.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from wse_core import SramBudgetError, WaferSpec, WseError

from wse_systems.serving.memo import Memo, frozen
from wse_systems.training.plan import (
    ActivationPlan,
    MemoryPlan,
    inputs_held,
    memory_plan,
    plan_activations,
)

__all__ = ["run_plan", "fastest_stride"]

# a planner asks the same micro-batch's plan for every step it prices (hunt 74's wall time)
_PLANS = Memo(4096)  # hunt 79: 256 held 178 of a search's 370 micro-batches


def run_plan(
    model: Any, spec: WaferSpec, micro_batch: int, seq_len: int, stride: int = 0,
    chunks: int = 0, optimizer_slots: int = 2,
) -> MemoryPlan:  # fmt: skip
    """The memory plan a run of one micro-batch runs (module contract); a plan that does not
    place carries the ledger's error, as `memory_plan`'s does."""
    streaming = None
    if stride == 0:
        try:
            streaming = fastest_stride(model, spec, micro_batch, seq_len, chunks, optimizer_slots)
        except SramBudgetError:  # memory_plan plans it again and keeps the ledger's line
            pass
    return memory_plan(model, spec, micro_batch, seq_len, optimizer_slots, stride=stride,
                       streaming=streaming, chunks=chunks)  # fmt: skip


def _frontier(n_layers: int) -> list[int]:
    """The strides that hold fewer layer inputs than every smaller stride: any other holds at
    least as many as a smaller one, which recomputes fewer layers, so it is never faster."""
    out, least = [], math.inf
    for k in range(1, n_layers + 1):
        if inputs_held(n_layers, k) < least:
            out.append(k)
            least = inputs_held(n_layers, k)
    return out


def fastest_stride(
    model: Any, spec: WaferSpec, micro_batch: int, seq_len: int, chunks: int = 0,
    optimizer_slots: int = 2,
) -> ActivationPlan:  # fmt: skip
    """The stride plan of the module contract (`runconfig.activation_stride` 0). A step the
    predictor refuses (MemoryX's capacity, the sequence) keeps the smallest stride that fits:
    the refusal is raised where that step is priced."""
    key = (frozen(model), frozen(spec), micro_batch, seq_len, chunks, optimizer_slots)
    return _PLANS.get(key, lambda: _fastest(model, spec, micro_batch, seq_len, chunks,
                                            optimizer_slots))  # fmt: skip


def _fastest(model, spec, micro_batch, seq_len, chunks, optimizer_slots) -> ActivationPlan:
    from wse_systems.training.performance import StepLayout  # it imports plan
    from wse_systems.training.step_parts import step_seconds

    least = plan_activations(model, spec, micro_batch, seq_len, 0, chunks)  # none fits: raised
    placed = {least.stride: least}
    for k in _frontier(int(model.n_layers)):
        try:
            placed.setdefault(k, plan_activations(model, spec, micro_batch, seq_len, k, chunks))
        except SramBudgetError:
            continue
    if len(placed) == 1:
        return least

    def step_s(p: ActivationPlan) -> float:
        mp = memory_plan(model, spec, micro_batch, seq_len, optimizer_slots, streaming=p)
        return step_seconds(model, spec, num_csx=1, batch_per_system=micro_batch,
                            micro_batch=micro_batch, seq_len=seq_len,
                            layout=StepLayout(mp))  # fmt: skip

    try:
        timed = {k: step_s(p) for k, p in sorted(placed.items())}
    except WseError:
        return least
    best = min(timed, key=lambda k: (timed[k], k))
    tried = ", ".join(f"{k}: {s:.4g} s" for k, s in timed.items())
    why = (f"stride {best}: the fastest predicted step of the strides that fit ({tried}; each "
           f"a step of one micro-batch of {micro_batch} on one system with MemoryX updating "
           "each group as its gradient arrives, not the run's step, which adds its other "
           "micro-batches and systems and, where it clips, the update held to the step's end; "
           "a stride not tried holds at least as many layer inputs as a smaller one and "
           "recomputes more layers); runconfig.activation_stride sets one")  # fmt: skip
    p = placed[best]
    ck = dataclasses.replace(p.chunks, reason=f"{p.chunks.reason}; {why}") if p.chunks else None
    return dataclasses.replace(p, chunks=ck, stride_reason=why)
