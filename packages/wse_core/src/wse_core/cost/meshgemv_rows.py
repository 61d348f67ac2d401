"""WaferLLM's MeshGEMV measured on a CS-3 by a third party: the calibration's rows that fit
CS-3's `hop_latency_cycles`, `ramp_latency_cycles`, `dsd_issue_cycles` and
`control_instruction_cycles` (`wse_core.cost.calibration`, which fits them after the WSE-2
constants and prices the rows' table; docs/references/calibration-rows.md). The data file
beside this module (`waferllm_meshgemv_wse3.csv`) holds 38 rows of FxPiGaAo/WaferLLM
`MeshGEMV/WSE-3/wse_result.json` at 5c67053 (per-PE TSC mean, 100 repeats, one raw log per
run), each priced as the kernel runs it (`meshgemv_row_phases`: the counts of
`wse_systems.meshgemv`, plus the measurement loop's own control, `HARNESS_CONTROL`).

What lies between a PE's TSC start and end (meshgemv.csl `meshgemv_entry` / `mv_compute`,
comm_pe.csl `two_tree_allreduce_y`; launch_wse3.py): 100 repeats of one GEMV, each entered by
a plain function call (`mv_compute` calls `meshgemv_entry` again: a recursion, no task, no
wavelet-triggered activation), the timer read three times in all (twice before the first
repeat, once after the last: 0.03 reads a GEMV, not priced). A repeat's critical cycle runs
from the far end's receipt of the last broadcast through its zero, its `@map` of Mt FMACs, its
send, the chains and adds to the root, and the root's broadcast back: the DSDs and relay
stages `wse_systems.meshgemv` counts, and the control instructions between them
(`KERNEL_CONTROL`, which a decode's call pays too; `HARNESS_CONTROL`, the repeat loop's, which
only these rows pay)."""

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
    "KERNEL_CONTROL",
    "HARNESS_CONTROL",
    "control_count",
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
# The rows that fit CS-3's constants, (P, Mt, Nt, group_num): Mt = Nt = 1 (one FMAC DSD of one
# element: the allreduce's latency is the GEMV) across P, the group_num series that separates
# a hop from a relay stage (at P = 80: g = 2, 4, 8 move the hops by 20, 10 and the relays by
# 9, 3), and Mt = 8, Nt = 1 at P = 80 and 720 (seven more FMAC DSDs of one element: the cycles
# a DSD issued by `@map` costs, against the per-call control the Mt = 1 rows hold). Every
# other row of MESHGEMV_WSE3 is a check (Mt = Nt = 8; Mt = 1, Nt = 8; the other P).
MESHGEMV_FITTED = ((16, 1, 1, 2), (16, 1, 1, 4), (16, 1, 1, 8), (80, 1, 1, 2), (80, 1, 1, 4),
                   (80, 1, 1, 8), (144, 1, 1, 8), (336, 1, 1, 8), (528, 1, 1, 8),
                   (720, 1, 1, 8), (80, 8, 1, 8), (720, 8, 1, 8))  # fmt: skip
# The system whose wafer the rows were measured on, and the fields they fit on it.
MESHGEMV_SYSTEM = "CS-3"
MESHGEMV_ROWS_TEXT = (
    "WaferLLM MeshGEMV on a CS-3 (FxPiGaAo/WaferLLM MeshGEMV/WSE-3/wse_result.json @5c67053; "
    "third-party hardware runs): Mt = Nt = 1 rows at P = 16, 80 (group_num 2, 4, 8), 144, "
    "336, 528, 720 and Mt = 8, Nt = 1 at P = 80, 720, least squares"
)

# Control instructions (`Work.control_instructions`: control flow between DSDs, not a
# kernel's own scalar arithmetic) on one repeat's critical cycle, counted by hand from the CSL
# (meshgemv.csl at FxPiGaAo/WaferLLM 672b4dd, which is MeshInfra/WaferLLM 7865af3's; comm_pe.csl
# at MeshInfra/WaferLLM 2cd13b5), one per load, store, add, compare, branch, call, return,
# `@load_to_dsr` and `@set_dsd_base_addr` (an inferred count: the compiled code is not
# published). The `@map` loop's own control per input is in `dsd_issue_cycles` (the busy
# cycles of a DSD beyond its elements, the loop around it included), not here.
KERNEL_CONTROL = (
    ("call of the product (mv_compute; decode.csl calls each *_matvec_mult alike)", 1),
    ("3 @load_to_dsr of the FMAC's operands (mv_compute)", 3),
    ("@map set-up: its counter and the input DSD", 2),
    ("call of two_tree_allreduce_y with its buffer", 2),
    ("@set_dsd_base_addr and @load_to_dsr of the buffer", 2),
    ("the far end's phase-1 role tests: is_group_root_py, is_group_first_py (load, branch)", 4),
    ("return from two_tree_allreduce_y after the broadcast's receive", 1),
    ("the far group root's phase-2 tests: py == root_2nd_phase (load, compare, branch), "
     "is_group_root_py, is_first_group_py (load, branch each)", 7),
    ("the root's broadcast test: py == root_2nd_phase (load, compare, branch)", 3),
)  # fmt: skip
# The measurement loop's control (meshgemv.csl `meshgemv_entry`): only the rows pay it.
HARNESS_CONTROL = (
    ("repeat_times == total_repeat_times + total_warmup_times: 3 loads, add, compare, branch", 6),
    ("repeat_times == total_warmup_times: 2 loads, compare, branch", 4),
    ("repeat_times += 1: load, add, store", 3),
    ("mv_compute's call of meshgemv_entry (the repeat loop is a recursion)", 1),
)


def control_count(table: tuple[tuple[str, int], ...]) -> int:
    """Control instructions of a control table (`KERNEL_CONTROL`, `HARNESS_CONTROL`)."""
    return sum(n for _, n in table)


def meshgemv_row_phases(p: int, m: int, n: int, groups: int) -> Phases:
    """One measured MeshGEMV as the kernel runs it on the allreduce's root of a p x p region
    (`wse_systems.meshgemv.meshgemv_phases` with reduce_axis "rows", 16-bit values: the same
    counts, its call's control `KERNEL_CONTROL` included): `@fmovh` zero of Nt, Mt FMAC DSDs
    of Nt (2 reads and a write an element), `two_tree_allreduce` over the p PEs of a column
    in `groups` groups, and the repeat loop's control (`HARNESS_CONTROL`, these rows only)."""
    kt, nt = math.ceil(m / p), math.ceil(n / p)
    zero = Work(ops=(Op("move", "fp16", nt, mem_reads=0.0),), sram_write_bytes=nt * 2)
    gemv = Work(ops=(Op("fmac", "fp16", nt, count=kt),), sram_read_bytes=2 * kt * nt * 2,
                sram_write_bytes=kt * nt * 2)  # fmt: skip
    reduce = two_tree_allreduce(p, groups, nt, 2, "fp16")
    control = Work(control_instructions=control_count(KERNEL_CONTROL))
    harness = Work(control_instructions=control_count(HARNESS_CONTROL))
    parts = (("zero", zero), ("gemv", gemv), *reduce, ("control", control), ("harness", harness))
    return serial(*(Phase(name, w) for name, w in parts), name="meshgemv")


def meshgemv_row_case(r: tuple) -> str:
    """A MeshGEMV row's case name ("meshgemv wse3 P80 M80 N80 g2") from its (P, M, N, g)."""
    return f"meshgemv wse3 P{r[0]} M{r[1]} N{r[2]} g{r[3]}"


def gemv_fits(r: tuple) -> bool:
    """Row `r` (P, M, N, g, ...) is one of `MESHGEMV_FITTED`'s."""
    return (r[0], r[1] // r[0], r[2] // r[0], r[3]) in MESHGEMV_FITTED


def gemv_cycles(spec: WaferSpec, cal: Any, r: tuple) -> float:
    """Row `r`'s cycles priced on `spec` with calibration `cal`."""
    timing = Pricing(spec, cal).evaluate(meshgemv_row_phases(*r[:4]))
    return timing.seconds * spec.clock_hz


def _pairs(fit: list[tuple]) -> list[tuple[tuple, tuple]]:
    """(the Mt = 1 row, the Mt > 1 row) of each fitted pair at the same P, Nt and group_num."""
    ones = {(r[0], r[2], r[3]): r for r in fit if r[1] == r[0]}
    return [(ones[(r[0], r[2], r[3])], r) for r in fit
            if r[1] > r[0] and (r[0], r[2], r[3]) in ones]  # fmt: skip


# The fit's start, off the preset's prior in every field it fits (`fit_meshgemv`)
_START_OFF_PRIOR = {"hop_latency_cycles": 1.5, "ramp_latency_cycles": 3.0,
                    "dsd_issue_cycles": 2.0, "control_instruction_cycles": 2.0}  # fmt: skip


def fit_meshgemv(
    base: WaferSpec, priced: Any, excluded: frozenset[str], published: Mapping[str, float]
) -> dict[str, float]:
    """CS-3's `SYSTEM_FITTED` constants, each on the rows that determine it. First
    `dsd_issue_cycles` on the M series: each fitted Mt = 8 row less its Mt = 1 partner (same
    P, Nt, group_num) is Mt - 1 more FMAC DSDs and nothing else, so the cycles a DSD issues
    solve sum(model differences) = sum(measured differences) (linear in it). Then the hop
    and ramp latencies and `control_instruction_cycles` (the per-call control's) by least
    squares on the Mt = 1 rows' relative residuals (linear in the three while no bound
    changes: Gauss-Newton with a finite-difference Jacobian converges in a step or two).
    None is negative and a hop takes at least its limit's cycle. No intercept: every cycle
    of a row is a counted mechanism. Without a pair, all four are fitted together on the
    rows left. `base`: the rows' wafer (`calibration_spec("wse3")`), `priced`: the
    calibration its other constants come from (the WSE-2 fit's; not its values of these)."""
    import dataclasses

    import numpy as np

    keys = SYSTEM_FITTED[MESHGEMV_SYSTEM]
    fit = [r for r in MESHGEMV_WSE3 if gemv_fits(r) and meshgemv_row_case(r) not in excluded]
    figure = {r: published.get(meshgemv_row_case(r), r[4]) for r in fit}
    others = dataclasses.replace(
        priced, values={k: v for k, v in priced.values.items() if k not in keys}
    )
    pairs = _pairs(fit)

    def cycles(x: dict[str, float], r: tuple) -> float:
        return gemv_cycles(base.replace(**x), others, r)

    issue: dict[str, float] = {}
    if pairs:  # dsd_issue_cycles on the M series (the other three do not move a difference)
        probe = {k: getattr(base, k) for k in keys}

        def diff(d: float) -> float:
            at = {**probe, "dsd_issue_cycles": d}
            return sum(cycles(at, hi) - cycles(at, lo) for lo, hi in pairs)

        want = sum(figure[hi] - figure[lo] for lo, hi in pairs)
        slope = diff(1.0) - diff(0.0)  # 0 where an assumption holds the issue's value
        # that value, priced everywhere; on a wafer off the preset's prior (a bare wse3 is the
        # wafer being priced, which `unapplied` warns of under an assumption)
        held = Pricing(base.replace(**_START_OFF_PRIOR), others).rates.dsd_issue_cycles
        issue = {"dsd_issue_cycles": max(0.0, (want - diff(0.0)) / slope) if slope else held}
        fit = [r for r in fit if r[1] == r[0]]
    free = [k for k in keys if k not in issue]
    if len(fit) < len(free):
        return {}
    figures = np.array([figure[r] for r in fit])
    low = np.array([CONSTANTS[k].limits[0] for k in free])

    def residual(x) -> np.ndarray:
        given = {**issue, **dict(zip(free, (float(v) for v in x), strict=True))}
        return np.array([cycles(given, r) for r in fit]) / figures - 1

    # started off the preset's prior: a wse3 at the prior is the wafer being priced, which
    # `wse_core.cost.unapplied` warns of under an assumption (the rows' wafer is exempt)
    x = np.array([_START_OFF_PRIOR[k] for k in free])
    for _ in range(20):
        r0 = residual(x)
        jac = np.column_stack([(residual(x + e) - r0) for e in np.eye(len(free))])  # linear
        step = np.linalg.lstsq(jac, r0, rcond=None)[0]
        x = np.maximum(x - step, low)
        if np.max(np.abs(step)) < 1e-9:
            break
    out = {**issue, **dict(zip(free, (float(v) for v in x), strict=True))}
    return {k: out[k] for k in keys}
