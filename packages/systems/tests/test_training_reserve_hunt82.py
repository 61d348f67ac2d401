"""Hunt 82 (jobs18 H2): a training step's token passes get the SRAM the plan leaves for data.

Before: `placement.place_step` sized the passes as the whole PE (49,152 B on wse3) less the
plan's use, so the program's 2,048 B reserve (hunt 81: code and stack, never data's) was
counted as free: the same placement priced the same at a 0 B and a 2 KiB reserve (llama_1t,
stride 4, 10 chunks of <= 1,311M: 76.49 s a micro-batch at both).

Oracle: the SRAM ledger itself, rebuilt from the plan's allocations on the spec priced
(`SramLedger.free_bytes`: its data budget less the fullest PE's use), plus the plan's
working-set allocation, which the passes reuse.
"""

from __future__ import annotations

import dataclasses

import pytest
import wse_models
from wse_core import SramLedger
from wse_core.cost.assumptions import assumed_spec
from wse_systems.training.performance import StepLayout
from wse_systems.training.placement import StepWorkload, place_step
from wse_systems.training.plan import memory_plan, plan_activations
from wse_systems.training.step_parts import step_seconds

LLAMA8B = wse_models.preset_config("llama3-8b", dtype="bfloat16")
WSE3 = assumed_spec("wse3")


def _free_by_ledger(spec, sram) -> int:
    ledger = SramLedger.for_spec(spec)
    for a in sram["allocations"]:
        ledger.allocate(a["name"], a["bytes_per_pe"])
    allocs = sram["allocations"]
    working = next(a["bytes_per_pe"] for a in allocs if a["name"].startswith("working"))
    return ledger.free_bytes() + working


@pytest.mark.parametrize("reserve", [0, 2048, 4096])
@pytest.mark.parametrize(("micro", "seq"), [(8, 8192), (2, 8192)])
def test_the_passes_get_the_data_budget_the_plan_leaves(reserve, micro, seq):
    spec = dataclasses.replace(WSE3, code_stack_bytes_per_pe=reserve)
    plan = memory_plan(LLAMA8B, spec, micro, seq)
    pl = place_step(LLAMA8B, spec, plan, StepWorkload(micro_batch=micro, seq_len=seq),
                    num_csx=1)  # fmt: skip
    assert pl.chunk_bytes_per_pe == _free_by_ledger(spec, plan.streaming.sram)


def test_the_same_placement_is_slower_under_a_larger_program_reserve():
    """One activation plan (placed where every reserve holds it) priced on PEs whose program
    takes 0, 2 and 4 KiB: fewer bytes for the passes, more of them (before: all equal)."""
    # hunt 85: at CS-3's fitted DSD issue (2.14 cycles) the three price alike (the passes'
    # issue no longer shows); held at WSE-2's fitted 11.49 the passes' count still does
    wse3 = dataclasses.replace(WSE3, dsd_issue_cycles=11.4934257)
    roomy = dataclasses.replace(wse3, code_stack_bytes_per_pe=4096)
    act = plan_activations(LLAMA8B, roomy, 8, 8192)
    steps = []
    for reserve in (0, 2048, 4096):
        spec = dataclasses.replace(wse3, code_stack_bytes_per_pe=reserve)
        sram = {**act.sram, "reserved_bytes_per_pe": reserve,
                "bytes_per_pe": spec.sram_bytes_per_pe}  # fmt: skip
        plan = memory_plan(LLAMA8B, spec, 8, 8192, streaming=dataclasses.replace(act, sram=sram))
        steps.append(step_seconds(LLAMA8B, spec, num_csx=1, batch_per_system=8, micro_batch=8,
                                  seq_len=8192, layout=StepLayout(plan)))  # fmt: skip
    assert steps[0] < steps[1] < steps[2]
