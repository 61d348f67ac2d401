"""Scale-out of weight-streaming training: N systems against one, at a fixed global batch
(strong scaling) or at a fixed per-system batch (weak scaling); both computed.

Contract. `strong_scaling(model, spec, global_batch=, seq_len=, systems=)` (each N that
divides the global batch runs global_batch / N sequences per system) and
`weak_scaling(model, spec, batch_per_system=, seq_len=, systems=)` (global batch N x that)
return one `ScalePoint` per system count, each the step `plan_step` plans (micro-batch
`micro_batch`: "explore" by default, so every N gets its fastest micro-batch). Speedup is
tokens/s(N) / tokens/s(1), efficiency speedup / N.

What a step of N data-parallel systems pays, and what shrinks as N grows:

- compute: each system runs its own sequences: strong scaling G / N of them (shrinks as
  1 / N), weak scaling b (stays);
- weights in: every system receives every weight every micro-batch (MemoryX sends each
  weight once, SwarmX replicates it on every system's link): the bytes per system per
  micro-batch do not shrink with N (per step they shrink only while a system still runs
  several micro-batches: strong scaling takes micro-batches away, never a weight), and
  every streamed item pays `system_latency_s` per SwarmX level (ceil(log_fanout N),
  `stream_cost.tree_levels`), which grows;
- gradients out: each system's gradient of every weight, every micro-batch, sum-reduced
  on the way up; a SwarmX node of fan-in `swarmx_fanout` takes each child on its own link
  and adds as the words arrive, so a level keeps the link's pace and adds its latency;
  above the tree MemoryX's ingress (`memoryx_bytes_per_s`) is shared by all N systems and
  takes the one reduced stream: the gradient bytes per micro-batch do not shrink either;
- MemoryX's optimizer update: applied group by group as each group's reduced gradient
  arrives in the step's last micro-batch (earlier micro-batches are accumulated, at the same
  pace): **overlapped** with the wafer's backward of the next layer (MemoryX and the wafer
  are separate machines and the update of group l needs nothing the wafer computes after
  it), except the last group's (the embedding's), which is **on the critical path**: the
  step ends when it lands. Its seconds per micro-batch do not shrink with N.

Under strong scaling a system's compute per micro-batch shrinks once it runs a single
micro-batch of fewer sequences, and the streams per micro-batch do not, so once its compute
no longer hides them the step stops shrinking: speedup < N, and it can fall as N grows.
Under weak scaling only the tree latency grows. `ScalePoint` shows each part's busy
seconds (hidden or not), the seconds the streams add beyond compute (`exposed_s`) and what
sets the step (`bound`, `performance.step_bound`). `stream_busy_s(spec, report)` is the
busy seconds of each part of one step; `ASSUMPTIONS` the rules above in a line each.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from wse_core import PerfModel, RunReport, WaferSpec

from wse_systems.training.micro_batch import plan_step
from wse_systems.training.stream_cost import PARTS, tree_levels

__all__ = ["ASSUMPTIONS", "ScalePoint", "stream_busy_s", "scale_point", "strong_scaling",
           "weak_scaling"]  # fmt: skip

ASSUMPTIONS = {
    "data parallel": "every system holds the whole model's current layer and runs its own "
    "sequences; a step's weights reach every system (SwarmX replicates MemoryX's stream)",
    "strong scaling": "a fixed global batch G over N systems (G / N sequences each; only N "
    "that divide G)",
    "weak scaling": "a fixed batch per system b on N systems (a global batch of N b)",
    "gradient reduce": "SwarmX nodes of fan-in swarmx_fanout, each child on its own link, "
    "add as the words arrive (a level keeps the link's pace, adds system_latency_s); "
    "MemoryX's ingress (memoryx_bytes_per_s) takes the one reduced stream for all N",
    "MemoryX update": "overlapped with the wafer's backward (each group's update as its "
    "gradient lands, while the wafer computes the next layer down); the last group's on the "
    "critical path; only in a step's last micro-batch (earlier ones are summed); a run that "
    "clips the global gradient norm holds every update to the step's end (the step's own "
    "MemoryX update line says which)",
    "micro-batch": "explored per system count: the divisor of the per-system batch with "
    "the most predicted tokens/s (plan_step)",
}


@dataclasses.dataclass(frozen=True)
class ScalePoint:
    """One system count of a scaling curve (seconds per step; busy seconds of each part
    whether hidden or not)."""

    systems: int
    batch_per_system: int
    micro_batch: int
    global_batch: int
    step_s: float
    tokens_per_s: float
    speedup: float  # tokens/s over one system's
    efficiency: float  # speedup / systems
    compute_s: float  # the step with every stream off
    weights_in_s: float
    gradients_out_s: float
    memoryx_update_s: float
    exposed_s: float  # step_s - compute_s: what the streams add
    swarmx_levels: int
    bound: str  # what sets the step (performance.step_bound)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def stream_busy_s(spec: WaferSpec, report: RunReport) -> dict[str, float]:
    """Seconds each off-wafer part of a step keeps its link busy (all repeats, hidden or
    not): the `stream_cost.PARTS` leaves of the report's phases, priced alone."""
    pm, out = PerfModel(spec), dict.fromkeys(sorted(set(PARTS.values())), 0.0)
    for leaf, k in report.phases.leaves():
        if leaf.name in PARTS:
            out[PARTS[leaf.name]] += k * pm.seconds(leaf.work)
    return out


def scale_point(spec: WaferSpec, r: RunReport, base: float) -> ScalePoint:
    """The point of `r` (a `predict_step` report of N systems) against one system's
    tokens/s `base`."""
    busy, x = stream_busy_s(spec, r), r.extra
    speedup = x["tokens_per_s"] / base
    return ScalePoint(
        r.systems, x["batch_per_system"], x["micro_batch"], x["global_batch"], r.predicted_s,
        x["tokens_per_s"], speedup, speedup / r.systems, x["compute_s"], busy["weights_in"],
        busy["gradients_out"], busy["memoryx_update"], r.predicted_s - x["compute_s"],
        tree_levels(r.systems, spec.swarmx_fanout), x["step_bound"],
    )  # fmt: skip


def _curve(
    model: Any, spec: WaferSpec, cases: list[tuple[int, int]], seq_len: int, **kw: Any
) -> list[ScalePoint]:
    """The planned step of each (systems, batch per system), against the first (one system)."""
    if not cases or cases[0][0] != 1:
        raise ValueError("scaling is measured against one system: start at 1")
    reports = [
        plan_step(model, spec, num_csx=n, batch_per_system=b, seq_len=seq_len, **kw)
        for n, b in cases
    ]
    base = reports[0].extra["tokens_per_s"]
    return [scale_point(spec, r, base) for r in reports]


def strong_scaling(
    model: Any, spec: WaferSpec, *, global_batch: int, seq_len: int, systems: Sequence[int],
    micro_batch: int | str | None = "explore", **kw: Any,
) -> list[ScalePoint]:  # fmt: skip
    """A fixed global batch over each system count that divides it (`systems` starts at 1:
    the speedups are against one system)."""
    cases = [(n, global_batch // n) for n in systems if global_batch % n == 0]
    return _curve(model, spec, cases, seq_len, micro_batch=micro_batch, **kw)


def weak_scaling(
    model: Any, spec: WaferSpec, *, batch_per_system: int, seq_len: int,
    systems: Sequence[int], micro_batch: int | str | None = "explore", **kw: Any,
) -> list[ScalePoint]:  # fmt: skip
    """A fixed per-system batch on each system count (`systems` starts at 1)."""
    cases = [(n, batch_per_system) for n in systems]
    return _curve(model, spec, cases, seq_len, micro_batch=micro_batch, **kw)
