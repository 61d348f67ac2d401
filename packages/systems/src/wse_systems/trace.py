"""Per-PE traces of a pipelined decoder: the head and the stages on each wafer.

Contract. `pipeline_traces(shape, plan, kv_tokens=..., defects=...)` prices one batch-1
decode step of `shape` on `plan` (`wse_systems.token.price_token`, the one pricer of a
token, on the same plan object the inference engine emulates) and returns one
`wse_core.trace.PeTrace` per wafer: the regions are the plan's (`head` on wafer 0, `stageN`
where the planner put them), the SRAM layer is each region's weights, KV cache and
activations as the planner declared them, and each stage's phases run on its own region
(a phase of another wafer runs on none of this wafer's PEs; the passes between wafers are
off-wafer I/O). With `wafers` (a sequence of `Wafer`s with the plan's spec, e.g. built with
a defect seed) the traces carry their dead PEs and detours.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from wse_core.cost.report import RunReport
from wse_core.hw.sram import SramLedger
from wse_core.trace import PeTrace, trace_from

from wse_systems.decoder import PER_TOKEN
from wse_systems.pipeline import PipelinePlan, StagePlan
from wse_systems.token import price_token

__all__ = ["pipeline_report", "pipeline_traces"]


def pipeline_report(shape: Any, plan: PipelinePlan, *, kv_tokens: int | None = None) -> RunReport:
    """One decode step (one token) of `shape` on `plan`: `wse_systems.token.price_token`."""
    return price_token(shape, plan, kv_tokens=kv_tokens)


def _ledger(plan: PipelinePlan, regions: Sequence[StagePlan]) -> SramLedger:
    spec = plan.spec
    ledger = SramLedger.for_spec(spec)
    for s in regions:
        for part, b in (
            ("weights", s.weight_bytes),
            ("kv_cache", s.kv_bytes),
            ("act", s.act_bytes),
        ):
            ledger.allocate(f"{s.name}.{part}", math.ceil(b / s.region.num_pes), s.region)
    return ledger


def pipeline_traces(
    shape: Any,
    plan: PipelinePlan,
    *,
    kv_tokens: int | None = None,
    wafers: Sequence[Any] | None = None,
    report: RunReport | None = None,
) -> list[PeTrace]:
    """One trace per wafer of the plan (see the module docstring)."""
    report = report or pipeline_report(shape, plan, kv_tokens=kv_tokens)
    spec, grid = plan.spec, (plan.spec.pe_rows, plan.spec.pe_cols)
    everything = (plan.head, *plan.stages)
    out = []
    for w in range(plan.num_wafers):
        mine = [s for s in everything if s.wafer == w]
        # the head's phases are the per-token group (hunt 77: keyed "head", no phase, its work
        # was spread over every PE of every wafer)
        key = {id(plan.head): PER_TOKEN}
        work: dict[str, Any] = {key.get(id(s), s.name): np.zeros(grid) for s in everything}
        work |= {key.get(id(s), s.name): s.region for s in mine}
        work["between_wafers"] = np.zeros(grid)
        target = wafers[w] if wafers is not None else spec
        trace = trace_from(
            target,
            report,
            per_pe_work=work,
            regions=[s.region for s in mine],
            sram=_ledger(plan, mine),
            grid=grid,
        )
        out.append(trace)
    return out
