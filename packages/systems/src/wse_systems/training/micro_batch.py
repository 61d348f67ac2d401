"""Which micro-batch a replica runs: ModelZoo's `micro_batch_size`, resolved once, host-side.

Contract. Batches here are **per system** (per replica): `batch_per_system` is
`train_input.batch_size / num_csx` (`batch_size` is global, split over `num_csx`), and a
micro-batch divides it; the replica runs `batch_per_system / micro_batch` micro-batches and
MemoryX accumulates their gradients (the emulator: `wse_trainer.stream`, `wse_trainer.memoryx`).

`resolve_micro_batch(setting, model, spec, batch_per_system=, seq_len=, stride=, chunks=,
speed=)`:

- an int: itself (`wse_trainer.config_check.check_config` has checked that it divides);
- "none" or None: the whole per-system batch at once;
- "auto": the largest divisor whose memory plan the SRAM ledger fits
  (`wse_systems.training.plan.plan_activations`: whole layers or column chunks, any stride); when
  not even one sequence fits, the ledger's `SramBudgetError` for one sequence. ModelZoo
  documents its auto as finding "a reasonable" micro-batch size, faster to compile than
  explore but maybe "less optimal", without saying how; ours is this stated rule (the fewest
  micro-batches, each of which streams every weight again), which `wse train` runs and `wse
  plan train` prices, with explore's gain as a hint where explore is faster (hunt 74: the
  shipped llama3_8b.yaml, 4 x wse3 clipping the global norm, at 48 sequences per system,
  `wse plan train -m llama3_8b --batch 48 --micro-batch none`: 48 x 1 takes 7.60 s a step,
  explore's 8 x 6 6.24 s (9.76 and 6.46 s until hunt 85 fitted CS-3's own DSD issue, 2.14
  cycles, not WSE-2's 11.49); the llama3-8b preset, one system, no clipping: 9.66 s and 6.36 s
  before hunt 85;
  9.02 / 6.45 and 8.92 / 6.35 s until hunt 82 took the program's 2 KiB off the passes);
- "explore": of the divisors that fit, the one `speed(micro_batch)` (tokens/s, e.g. the
  predicted step's) finds fastest, the larger on a tie.

`plan_step(model, spec, num_csx=, batch_per_system=, seq_len=, micro_batch="explore")` is the
step a planner prices (`wse plan train`, `trillion-scaling`): the micro-batch resolved as
above ("explore" by `predict_step`'s tokens/s), then `predict_step` on that micro-batch's
memory plan (`wse_systems.training.stride.run_plan`: `stride` 0, the fastest activation
stride that fits; `optimizer_slots`, the optimizer's MemoryX state, `plan.slots_of`). It
never refuses a batch that micro-batches fit: only a model whose one sequence the ledger
cannot place (or whose state MemoryX cannot hold) is an error.

Explore's speed is `wse_systems.training.step_parts.step_seconds`'s, the float
`predict_step`'s report holds, each micro-batch's parts priced once (hunt 79).

`divisors(n)` lists a batch's divisors in increasing order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from wse_core import RunReport, SramBudgetError, WaferSpec
from wse_core.divisors import divisors

from wse_systems.training.plan import plan_activations
from wse_systems.training.step_parts import step_seconds

__all__ = ["MODES", "divisors", "fits", "resolve_micro_batch", "plan_step", "step_seconds"]

MODES = ("auto", "explore", "none")  # besides an int (ModelZoo's micro_batch_size values)


def fits(model: Any, spec: WaferSpec, micro_batch: int, seq_len: int, stride: int = 0,
         chunks: int = 0) -> bool:  # fmt: skip
    """Whether one replica's SRAM ledger places `micro_batch` sequences of `seq_len`."""
    try:
        plan_activations(model, spec, micro_batch, seq_len, stride, chunks)
    except SramBudgetError:
        return False
    return True


def resolve_micro_batch(
    setting: int | str | None,
    model: Any,
    spec: WaferSpec,
    *,
    batch_per_system: int,
    seq_len: int,
    stride: int = 0,
    chunks: int = 0,
    speed: Callable[[int], float] | None = None,
) -> int:
    """The micro-batch (sequences per replica at once) that `setting` names (module contract)."""
    if isinstance(setting, int):
        return setting
    if setting in (None, "none"):
        return batch_per_system
    placed = [
        d for d in reversed(divisors(batch_per_system))
        if fits(model, spec, d, seq_len, stride, chunks)
    ]  # fmt: skip
    if not placed:  # the ledger's own error, naming the allocation, for one sequence
        plan_activations(model, spec, 1, seq_len, stride, chunks)
    if setting == "auto":
        return placed[0]
    if setting == "explore" and speed is not None:
        return max(placed, key=lambda d: (speed(d), d))
    raise ValueError(f"micro_batch_size {setting!r}: explore needs speed=")


def plan_step(
    model: Any,
    spec: WaferSpec,
    *,
    num_csx: int,
    batch_per_system: int,
    seq_len: int,
    micro_batch: int | str | None = "explore",
    stride: int = 0,
    chunks: int = 0,
    **kw: Any,
) -> RunReport:
    """The planned step (module contract); `kw` goes to `predict_step` (`layout`: its
    placement and precision, the plan each micro-batch's; `sparsity`) but
    `optimizer_slots` (`plan.slots_of`: the optimizer's MemoryX state; 2, Adam's), which
    goes to each micro-batch's plan."""
    from wse_systems.training.performance import StepLayout, predict_step, step_tokens_per_s
    from wse_systems.training.stride import run_plan

    reports: dict[int, RunReport] = {}
    layout = kw.pop("layout", StepLayout())  # its plan: each micro-batch's own
    slots = kw.pop("optimizer_slots", 2)

    def report(m: int) -> RunReport:
        if m not in reports:
            plan = run_plan(model, spec, m, seq_len, stride, chunks, slots)
            reports[m] = predict_step(
                model, spec, num_csx=num_csx, batch_per_system=batch_per_system,
                micro_batch=m, seq_len=seq_len, layout=layout._replace(plan=plan), **kw,
            )  # fmt: skip
        return reports[m]

    def speed(m: int) -> float:  # the report's tokens/s, the same float (`step_parts`)
        plan = run_plan(model, spec, m, seq_len, stride, chunks, slots)
        s = step_seconds(model, spec, num_csx=num_csx, batch_per_system=batch_per_system,
                         seq_len=seq_len, micro_batch=m, layout=layout._replace(plan=plan),
                         **kw)  # fmt: skip
        return step_tokens_per_s(num_csx, batch_per_system, seq_len, s)

    m = resolve_micro_batch(
        micro_batch, model, spec, batch_per_system=batch_per_system, seq_len=seq_len,
        stride=stride, chunks=chunks, speed=speed,
    )  # fmt: skip
    return report(m)
