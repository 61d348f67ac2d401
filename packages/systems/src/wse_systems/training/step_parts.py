"""A training step's seconds without its report: the speed explore's micro-batch search and
the stride search compare (`wse_systems.training.micro_batch`, `stride`).

Contract. `step_seconds(model, spec, num_csx=, batch_per_system=, seq_len=, micro_batch=,
layout=, sparsity=)` is `performance.predict_step(...).predicted_s`, the same float: a step of
k = batch_per_system / micro_batch micro-batches is k - 1 accumulating ones and the last
(`performance._accumulated`), each independent of k, so the two are priced once for each
micro-batch, wafer count and plan (`_PARTS`, by value, as `stride`'s plans are kept, the
constants read replayed on a hit) and the step is (k - 1) x the first + the last, summed as
the report's serial node sums them.

Hunt 79: `wse plan train -m gpt2-124m --systems 1680 --batch 720720` priced a whole report
(the compute-only phases too) for each of the 178 divisors that fit at each of three
searches (one system at 720,720 and at 1680 x 720,720 sequences, 1680 systems), 725 reports
and 1,565 more for the strides, with the stride plans of 370 micro-batches through a cache of
256: 37.4 s of CPU, now 15.3 s (the wafer side's searches alone, no constants recorded:
34.1 s, now 7.0 s); the choice is unchanged (the same floats).
"""

from __future__ import annotations

from typing import Any

from wse_core import PerfModel, WaferSpec, WseError

from wse_systems.serving.memo import Memo, frozen
from wse_systems.training.performance import (
    Sparsity,
    StepLayout,
    StepWorkload,
    check_step_shape,
    place_step,
    step_phases,
)
from wse_systems.training.plan import memory_plan

__all__ = ["step_seconds"]

# (an accumulating micro-batch's seconds, the last's) by micro-batch, wafers and plan: the
# searches of one plan ask each again at other batches
_PARTS = Memo(4096)


def step_seconds(
    model: Any, spec: WaferSpec, *, num_csx: int, batch_per_system: int, seq_len: int,
    micro_batch: int | None = None, layout: StepLayout | None = None,
    sparsity: Sparsity | None = None,
) -> float:  # fmt: skip
    """`predict_step(...)`'s predicted seconds, the same float, without its report (module
    contract): k = batch_per_system / micro_batch micro-batches, (k - 1) x an accumulating
    one + the last, each priced once (`_PARTS`)."""
    check_step_shape(model, batch_per_system=batch_per_system, seq_len=seq_len,
                     micro_batch=micro_batch)  # fmt: skip
    micro = micro_batch or batch_per_system
    if batch_per_system % micro:
        raise WseError(
            f"micro-batch {micro} does not divide the per-system batch of {batch_per_system}"
        )
    k = batch_per_system // micro
    job = (num_csx, micro, seq_len, layout or StepLayout(), sparsity or Sparsity())
    if k == 1:  # the last alone, as `_accumulated` returns it
        return _parts(model, spec, job, accumulate=False)[1]
    key = (frozen(model), frozen(spec), num_csx, micro, seq_len, frozen(job[3]), job[4])
    early, last = _PARTS.get(key, lambda: _parts(model, spec, job, accumulate=True))
    return sum((early * (k - 1), last))  # the report's serial sum


def _parts(model: Any, spec: WaferSpec, job: tuple, *, accumulate: bool) -> tuple[float, float]:
    """(an accumulating micro-batch's seconds or 0.0 where not `accumulate`, the last's) of
    `job` (num_csx, micro_batch, seq_len, layout, sparsity), priced as `predict_step` prices
    them (`place_step` on the layout's plan, `step_phases`, `PerfModel.evaluate`)."""
    num_csx, micro, seq_len, layout, sparsity = job
    plan, placement, precision, clipped = layout
    if plan is None:
        plan = memory_plan(model, spec, micro, seq_len)
    work = StepWorkload(micro_batch=micro, seq_len=seq_len, **sparsity._asdict())
    pl = place_step(model, spec, plan, work, num_csx=num_csx, placement=placement,
                    precision=precision)  # fmt: skip
    pm = PerfModel(spec)
    last = pm.evaluate(step_phases(model, pl, clipped=clipped)).seconds
    if not accumulate:
        return 0.0, last
    return pm.evaluate(step_phases(model, pl, accumulate=True)).seconds, last
