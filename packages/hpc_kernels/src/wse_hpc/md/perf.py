"""The performance model of one EAM timestep with one atom per PE, on WSE-2 and WSE-3.

Counted work on the busiest PE (`wse_core.perf.Work`), nothing fitted to Santos et al.:
- flops (fp32): per window slot, `FLOPS_PER_SLOT_DENSITY` in phase 1 and
  `FLOPS_PER_SLOT_FORCE` in phase 2 (counted from `wse_hpc.md.eam`: displacement and minimum
  image, r^2, sqrt, knot location, the cubic and its slope, the force sum), plus the
  embedding and the Verlet update per atom. Every slot is evaluated: SIMD lanes do not skip
  the window PEs that hold no neighbour.
- SRAM: each slot reads its window words and 4 table coefficients per spline evaluated.
- fabric: `wse_core.fabric.count` of the row-window multicasts, one marching step N/S (times
  k_rows), the F' exchange and the swap sweep; the coverage test's reductions counted too.
`predict(spec, n_atoms, plan)` returns the `Prediction` and timesteps per second; the
overlap rule is wse_core's (compute, SRAM and fabric streaming overlap; latency adds).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from wse_core import PerfModel, Prediction, Work, fabric
from wse_core.spec import WaferSpec
from wse_core.traffic import Traffic
from wse_core.wafer import build_wafer

from wse_hpc.md.eam import EamPlan, _overflow, _row_window, geometry
from wse_hpc.md.mapping import NFIELDS

__all__ = ["FLOPS_PER_SLOT_DENSITY", "FLOPS_PER_SLOT_FORCE", "StepModel", "predict"]

FLOPS_PER_SLOT_DENSITY = 30  # d (3), min image (9), r^2 (5), mask (3), sqrt (1), locate (4),
# cubic (6), accumulate (1) — counted from eam.forces_fn's phase 1
FLOPS_PER_SLOT_FORCE = 65  # phase 1's geometry again (25), rho' (5), z2 value+slope (11),
# phi, phi' (4), psi' (5), force (7), energy and virial (4), locate (4)
FLOPS_PER_ATOM = 60  # embedding (10), two half kicks and the drift (24), sort compares (26)
WORDS_PER_SLOT = 4 + 5  # phase 1: x y z species; phase 2: x y z species F'


@dataclasses.dataclass(frozen=True)
class StepModel:
    prediction: Prediction
    traffic: Traffic
    work: Work
    window_pes: int

    @property
    def timesteps_per_s(self) -> float:
        return 1.0 / self.prediction.seconds


def _traffic(spec: WaferSpec, grid: tuple[int, int], plan: EamPlan) -> Traffic:
    """Fabric traffic of one timestep, traced abstractly (no data on the wafer)."""
    wafer = build_wafer(spec, grid=grid, mesh_shape=(1, 1), devices=jax.devices()[:1])
    pr, pc = wafer.padded_shape
    m = 2 * plan.k_cols + 1
    state = jax.ShapeDtypeStruct((pr, pc, NFIELDS), jnp.float32)
    geo = geometry(wafer)

    def phase_rows(x):  # the row windows of both phases
        _row_window(wafer, x[..., :4], plan.k_cols)
        return _row_window(wafer, x[..., :5], plan.k_cols)

    def march_step(x):  # one marching step N and S of both phases' row windows
        for f in (4, 5):
            slab = jnp.zeros((pr, pc, f, m), x.dtype)
            fabric.shift(wafer, slab, "S", boundary="periodic")
            fabric.shift(wafer, slab, "N", boundary="periodic")
        return x

    def swaps(x):
        for d in ("W", "E", "W", "E", "N", "S", "N", "S"):
            x = fabric.shift(wafer, x, d)
        return x

    total = fabric.count(wafer, phase_rows, state)
    total = total + fabric.count(wafer, march_step, state).scaled(plan.k_rows)
    total = total + fabric.count(wafer, swaps, state)
    return total + fabric.count(wafer, lambda s: _overflow(wafer, s, geo, plan, 1.0), state)


def predict(spec: WaferSpec, grid: tuple[int, int], plan: EamPlan) -> StepModel:
    """Predicted wafer time of one timestep for a grid and window plan."""
    w = plan.window_pes
    traffic = _traffic(spec, grid, plan)
    flops = w * (FLOPS_PER_SLOT_DENSITY + FLOPS_PER_SLOT_FORCE) + FLOPS_PER_ATOM
    sram_read = 4.0 * w * (WORDS_PER_SLOT + 4 + 7)  # window words + table coefficients
    work = Work.from_traffic(
        traffic,
        flops={"fp32": float(flops)},
        sram_read_bytes=sram_read,
        sram_write_bytes=4.0 * w * WORDS_PER_SLOT,
    )
    return StepModel(PerfModel(spec).predict(work), traffic, work, w)
