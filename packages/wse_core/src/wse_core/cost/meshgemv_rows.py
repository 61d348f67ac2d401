"""WaferLLM's MeshGEMV measured on a CS-3 by a third party: the calibration's rows that fit
CS-3's `hop_latency_cycles` and `ramp_latency_cycles` (`wse_core.cost.calibration`, which
fits them after the WSE-2 constants and prices the rows' table; docs/references/
calibration-rows.md). The data file beside this module (`waferllm_meshgemv_wse3.csv`) holds
28 rows of FxPiGaAo/WaferLLM `MeshGEMV/WSE-3/wse_result.json` at 5c67053 (per-PE TSC mean,
100 repeats, one raw log per run), each priced as the kernel runs it
(`meshgemv_row_phases`: the same counts as `wse_systems.meshgemv`)."""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from wse_core.cost.collectives import two_tree_allreduce
from wse_core.cost.mechanisms import CONSTANTS, SYSTEM_FITTED
from wse_core.cost.pricing import Phase, Phases, Pricing, serial
from wse_core.cost.work import Op, Work
from wse_core.hw.spec import WaferSpec

__all__ = [
    "MESHGEMV_SOURCE",
    "MESHGEMV_WSE3",
    "MESHGEMV_FITTED",
    "MESHGEMV_SYSTEM",
    "MESHGEMV_ROWS_TEXT",
    "meshgemv_row_phases",
    "meshgemv_row_case",
    "gemv_fits",
    "gemv_cycles",
    "fit_meshgemv",
]

# WaferLLM's MeshGEMV measured on a CS-3 by a third party (module docstring; the data file's
# header cites repository, file and commit): (P, M, N, group_num, mean cycles, log file).
MESHGEMV_SOURCE = {
    "repository": "FxPiGaAo/WaferLLM",
    "file": "MeshGEMV/WSE-3/wse_result.json",
    "commit": "5c6705353f956012b974d54c42916f091322f136",
    "logs": "MeshGEMV/WSE-3/wse_in_out/outputs/",
}
_MESHGEMV_FILE = Path(__file__).with_name("waferllm_meshgemv_wse3.csv")


def _meshgemv_rows() -> tuple[tuple[int, int, int, int, float, str], ...]:
    lines = [x for x in _MESHGEMV_FILE.read_text().splitlines() if not x.startswith("#")]
    return tuple((int(r["P"]), int(r["M"]), int(r["N"]), int(r["group_num"]),
                  float(r["mean_cycle_count"]), r["log_file"])
                 for r in csv.DictReader(lines))  # fmt: skip


MESHGEMV_WSE3 = _meshgemv_rows()
# The rows that fit CS-3's constants: Mt = Nt = 1 (one FMAC DSD of one element: the
# allreduce's latency is the GEMV) across P, and the group_num series that separates a hop
# from a relay stage (at P = 80: g = 2, 4, 8 move the hops by 20, 10 and the relays by 9, 3).
# (P, group_num); every other row of MESHGEMV_WSE3 is a check.
MESHGEMV_FITTED = ((16, 2), (16, 4), (16, 8), (80, 2), (80, 4), (80, 8),
                   (144, 8), (336, 8), (528, 8), (720, 8))  # fmt: skip
# The system whose wafer the rows were measured on, and the fields they fit on it.
MESHGEMV_SYSTEM = "CS-3"
MESHGEMV_ROWS_TEXT = (
    "WaferLLM MeshGEMV on a CS-3 (FxPiGaAo/WaferLLM MeshGEMV/WSE-3/wse_result.json @5c67053; "
    "third-party hardware runs): Mt = Nt = 1 rows at P = 16, 80 (group_num 2, 4, 8), 144, "
    "336, 528, 720, least squares"
)


def meshgemv_row_phases(p: int, m: int, n: int, groups: int) -> Phases:
    """One measured MeshGEMV as the kernel runs it on the allreduce's root of a p x p region
    (`wse_systems.meshgemv.meshgemv_phases` with reduce_axis "rows", 16-bit values: the same
    counts): `@fmovh` zero of Nt, Mt FMAC DSDs of Nt (2 reads and a write an element), then
    `two_tree_allreduce` over the p PEs of a column in `groups` groups."""
    kt, nt = math.ceil(m / p), math.ceil(n / p)
    zero = Work(ops=(Op("move", "fp16", nt, mem_reads=0.0),), sram_write_bytes=nt * 2)
    gemv = Work(ops=(Op("fmac", "fp16", nt, count=kt),), sram_read_bytes=2 * kt * nt * 2,
                sram_write_bytes=kt * nt * 2)  # fmt: skip
    reduce = two_tree_allreduce(p, groups, nt, 2, "fp16")
    parts = (("zero", zero), ("gemv", gemv), *reduce)
    return serial(*(Phase(name, w) for name, w in parts), name="meshgemv")


def meshgemv_row_case(r: tuple) -> str:
    """A MeshGEMV row's case name ("meshgemv wse3 P80 M80 N80 g2") from its (P, M, N, g)."""
    return f"meshgemv wse3 P{r[0]} M{r[1]} N{r[2]} g{r[3]}"


def gemv_fits(r: tuple) -> bool:
    """Row `r` (P, M, N, g, ...) is one of `MESHGEMV_FITTED`'s."""
    return r[1] == r[0] and r[2] == r[0] and (r[0], r[3]) in MESHGEMV_FITTED


def gemv_cycles(spec: WaferSpec, cal: Any, r: tuple, intercept: float) -> float:
    """Row `r`'s cycles priced on `spec` with calibration `cal`, the intercept added."""
    timing = Pricing(spec, cal).evaluate(meshgemv_row_phases(*r[:4]))
    return timing.seconds * spec.clock_hz + intercept


def fit_meshgemv(
    base: WaferSpec, priced: Any, excluded: frozenset[str], published: Mapping[str, float]
) -> tuple[dict[str, float], float]:
    """CS-3's hop and ramp latencies and the rows' intercept: least squares on the fitted
    rows' relative residuals (the rows are linear in the three while no bound changes, so
    Gauss-Newton with a finite-difference Jacobian converges in a step or two); none are
    negative and a hop takes at least its limit's cycle. `base`: the rows' wafer
    (`calibration_spec("wse3")`), `priced`: the calibration its other constants come from."""
    import numpy as np

    fit = [r for r in MESHGEMV_WSE3 if gemv_fits(r) and meshgemv_row_case(r) not in excluded]
    if len(fit) < 3:  # three unknowns
        return {}, 0.0
    figures = np.array([published.get(meshgemv_row_case(r), r[4]) for r in fit])
    low = np.array([CONSTANTS["hop_latency_cycles"].limits[0], 0.0, 0.0])

    def residual(x) -> np.ndarray:
        spec = base.replace(hop_latency_cycles=float(x[0]), ramp_latency_cycles=float(x[1]))
        return np.array([gemv_cycles(spec, priced, r, float(x[2])) for r in fit]) / figures - 1

    # started off the preset's prior: a wse3 at the prior is the wafer being priced, which
    # `wse_core.cost.unapplied` warns of under an assumption (the rows' wafer is exempt)
    x = np.array([1.5, 3.0, 0.0])
    for _ in range(20):
        r0 = residual(x)
        jac = np.column_stack([(residual(x + e) - r0) for e in np.eye(3)])  # linear: step 1
        step = np.linalg.lstsq(jac, r0, rcond=None)[0]
        x = np.maximum(x - step, low)
        if np.max(np.abs(step)) < 1e-9:
            break
    keys = SYSTEM_FITTED[MESHGEMV_SYSTEM]
    return dict(zip(keys, (float(v) for v in x[:2]), strict=True)), float(x[2])
