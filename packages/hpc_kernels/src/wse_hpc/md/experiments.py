"""Experiment `santos24-md` and the `wse demo` part: EAM MD with one atom per PE.

Predictions (the same with and without `quick`), row for row as Santos et al.
(arXiv:2405.07898) ran them: timesteps per second of 801,792-atom crystals of Cu (fcc), W
and Ta (bcc) on WSE-2 and WSE-3 (params `wafer`, `atoms`, `element`, `precision`), each
priced by `wse_hpc.md.perf` from a plan of the whole crystal (`plan_crystal`: the map, the
window and the neighbour-list capacities on the host; no emulation array is allocated). An
element's crystal and its pairs within cutoff + skin (`crystal`) are found once and planned
on both wafers (their grids, hence maps and plans, differ).
Potentials: the repo's Zhou et al. 2004 tables (`zhou04`, 1000 knots), whose cutoffs are
Cu 5.72, W 6.13, Ta 6.40 A; skin 1 A. The crystals are near-cubic with the shortest side
along z, the axis the map folds into rows and columns (the march's words grow with the
folded side: see `plan_crystal`). 801,792 atoms need more PEs than WSE-2's 757 x 996: that
row keeps WSE-2's 757 rows and prices a grid 1,060 columns wide with WSE-2's per-PE costs
(param `fits`: False, and an assumption says so). REFERENCES lists only the inputs, so
`published` stays empty. Measurements: the emulator's rate on this machine, the NVE drift
of a short run, and the prediction for the emulated plan with its measured rebuild cadence.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import NamedTuple

import jax
import numpy as np
from wse_core import ExperimentResult, PredictionRow, preset
from wse_core.wafer import build_wafer

from wse_hpc.md import mapping
from wse_hpc.md.lattice import Structure
from wse_hpc.md.list_plan import reach_pairs
from wse_hpc.md.perf import pe_trace, predict, run_report
from wse_hpc.md.simulate import MdConfig, plan_window, run_md
from wse_hpc.md.testing import perturbed
from wse_hpc.md.zhou04 import zhou04

__all__ = ["run", "part", "CRYSTALS", "Crystal", "crystal", "plan_crystal", "REBUILD_EVERY_STEPS"]

# 801,792 atoms: fcc 64 x 58 x 54 cells (x 4 atoms), bcc 87 x 72 x 64 cells (x 2)
CRYSTALS = {"Cu": ("fcc", (64, 58, 54)), "W": ("bcc", (87, 72, 64)), "Ta": ("bcc", (87, 72, 64))}
THERMAL_SIGMA_A = 0.07  # displacements of a ~300 K crystal, for the map and the lists
REBUILD_EVERY_STEPS = 20.0  # assumption: list rebuild cadence of a 300 K crystal, 1 A skin
ATOMS = 801_792
SOURCE = "model (Santos et al. arXiv:2405.07898: REFERENCES lists the inputs only)"


def lattice_A(pot, kind: str) -> float:
    """The cubic lattice constant: Zhou 2004 tabulates sqrt(2) r_e (fcc); bcc has 2 r_e /
    sqrt(3)."""
    a_fcc = pot.lattice_A[0]
    return a_fcc if kind == "fcc" else a_fcc * math.sqrt(2.0 / 3.0)


class Crystal(NamedTuple):
    """One element's 801,792-atom crystal and its pairs within cutoff + skin (by atom id,
    from the float32 positions a plan's state holds): found once, planned on every wafer."""

    structure: Structure
    pairs: np.ndarray


def crystal(element: str, pot, seed: int = 0) -> Crystal:
    """The crystal of `element` (CRYSTALS' cells, THERMAL_SIGMA_A) and its pairs."""
    kind, cells = CRYSTALS[element]
    s = perturbed(kind, element, lattice_A(pot, kind), cells, THERMAL_SIGMA_A, seed=seed)
    assert s.num_atoms == ATOMS, s.num_atoms  # CRYSTALS' cells
    reach = pot.cutoff_A + MdConfig().skin_A
    return Crystal(s, reach_pairs(s.positions_A.astype(np.float32), s.box_A, reach))


def plan_crystal(element: str, wafer: str, pot, seed: int = 0, *, found: Crystal | None = None):
    """(wafer, plan, fits) for the 801,792-atom crystal of `element` on `wafer`: the map,
    the window for cutoff + skin and the list capacities, planned on the host. A crystal
    larger than the preset keeps its rows and widens the grid (fits False). `found`: the
    element's `crystal(element, pot, seed)`, when already built for another wafer."""
    s, pairs = found if found is not None else crystal(element, pot, seed)
    spec = preset(wafer)
    fits = s.num_atoms <= spec.num_pes
    if fits:
        grid = mapping.choose_grid(s.num_atoms, spec.pe_rows, spec.pe_cols)
    else:
        grid = (spec.pe_rows, -(-s.num_atoms // spec.pe_rows))
        spec = spec.replace(pe_cols=grid[1])
    w = build_wafer(spec, grid=grid, mesh_shape=(1, 1), devices=jax.devices()[:1])
    state = mapping.pack(
        mapping.initial_map(s.positions_A, grid, s.box_A),
        s.positions_A,
        np.zeros(s.num_atoms, np.int32),
        dtype=np.float32,  # the positions `crystal` found its pairs from
    )
    plan = plan_window(state, s.box_A, pot, MdConfig(), w, host_lists=False, pairs=pairs)
    return w, plan, fits


def _predictions(seed: int) -> tuple[list[PredictionRow], list[dict]]:
    rows, rates = [], []
    for element in CRYSTALS:
        pot = zhou04([element], knots=1000)
        found = crystal(element, pot, seed)  # the same crystal on both wafers
        for wafer in ("wse2", "wse3"):
            w, plan, fits = plan_crystal(element, wafer, pot, seed, found=found)
            note = {} if fits else {
                "md.grid": f"801,792 atoms exceed {wafer}'s PEs: a {w.rows} x {w.cols} grid "
                f"priced with {wafer}'s per-PE costs"
            }  # fmt: skip
            rep = predict(
                preset(wafer), w, pot, plan, rebuild_every=REBUILD_EVERY_STEPS, assumptions=note
            )
            params = {
                "wafer": wafer,
                "atoms": ATOMS,
                "element": element,
                "precision": "fp32",
                "fits": fits,
                "grid": rep.extra["grid"],
                "window": rep.extra["window"],
                "candidates": rep.extra["candidates"],
                "link_words_per_step": max(rep.extra["link_words_per_step"].values()),
                "bound": rep.bound,
            }
            tps = rep.extra["timesteps_per_s"]
            rows.append(PredictionRow("timesteps_per_s", tps, "1/s", params, None, SOURCE))
            rates.append({"element": element, "wafer": wafer, "timesteps_per_s": tps})
    return rows, rates


def _measure(pot, quick: bool, seed: int) -> tuple[dict, object]:
    """The emulated NVE run's figures and its per-PE figure (the atoms' PEs, the window of
    the middle PE that the marching multicast covers, the predicted WSE-3 cycles and words
    per link on each PE)."""
    cells, steps = ((4, 4, 4), 100) if quick else ((8, 8, 8), 1000)
    s = perturbed("fcc", "Cu", pot.lattice_A[0], cells, 0.0, seed=seed)
    cfg = MdConfig(steps=steps, temperature_K=600.0, thermo_every=max(steps // 10, 1), seed=seed)
    res = run_md(s, pot, cfg)
    e = np.array([r.etotal for r in res.thermo])
    report = run_report(res, pot, "wse3")
    from wse_core.trace_png import trace_figure

    figure = trace_figure(
        pe_trace(res, report),
        title=f"EAM Cu, {s.num_atoms} atoms emulated: per PE (WSE-3 prediction), window",
    )
    return {
        "atoms": s.num_atoms,
        "steps": res.steps,
        "emulated_atom_steps_per_s": s.num_atoms * res.steps / res.loop_wall_s,
        "emulated_timesteps_per_s": res.steps / res.loop_wall_s,
        "nve_drift_eV_per_atom": float((e[-1] - e[0]) / s.num_atoms),
        "nve_max_deviation_eV_per_atom": float(np.abs(e - e[0]).max() / s.num_atoms),
        "window": f"{2 * res.window[0] + 1}x{2 * res.window[1] + 1}",
        "compile_s": res.compile_s,
        "precision": "fp32",
        "list_builds": res.list_builds,
        "predicted_wse3_timesteps_per_s": report.extra["timesteps_per_s"],
    }, figure


def _figure(rates: list[dict]):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for k, wafer in enumerate(("wse2", "wse3")):
        pts = [r for r in rates if r["wafer"] == wafer]
        xs = np.arange(len(pts)) + 0.38 * k
        ax.bar(xs, [p["timesteps_per_s"] for p in pts], width=0.36, label=wafer)
    ax.set_xticks(np.arange(len(CRYSTALS)) + 0.19, list(CRYSTALS))
    ax.set_ylabel("predicted timesteps / s")
    ax.set_title("EAM, 801,792 atoms, one atom per PE (model)")
    ax.legend()
    return fig


def run(*, quick: bool, seed: int) -> ExperimentResult:
    predictions, rates = _predictions(seed=0)  # the crystals are fixed: same either way
    pot = zhou04(["Cu"], knots=1000)
    measured, per_pe = _measure(pot, quick, seed)
    return ExperimentResult(
        experiment="santos24-md",
        seed=seed,
        config={
            "potential": "zhou04, 1000 knots",
            "crystals": {e: f"{k} {c} cells" for e, (k, c) in CRYSTALS.items()},
            "rebuild_every_steps": REBUILD_EVERY_STEPS,
            "quick": quick,
        },
        measurements=[measured],
        predictions=predictions,
        figure=_figure(rates),
        extra_figures={"per_pe_cu_emulated": per_pe},
    )


def part(console, *, out_dir: Path, quick: bool) -> None:
    """`wse demo`: a short NVE run of Cu on the emulated wafer, LAMMPS-style output."""
    from wse_hpc.md.thermo import format_header, format_row, performance_line
    from wse_hpc.md.xyz import write_xyz

    pot = zhou04(["Cu"], knots=500)
    s = perturbed("fcc", "Cu", pot.lattice_A[0], (4, 4, 4), 0.0, seed=0)
    steps = 50 if quick else 200
    console.print(
        f"{s.num_atoms} Cu atoms (Zhou 2004 EAM, generated), 600 K start, "
        f"{steps} steps of 1 fs, one atom per PE"
    )
    console.print(format_header())
    t0 = time.perf_counter()
    res = run_md(
        s,
        pot,
        MdConfig(steps=steps, temperature_K=600.0, thermo_every=steps // 5),
        on_thermo=lambda r: console.print(format_row(r)),
    )
    console.print(performance_line(res.steps, res.loop_wall_s, s.num_atoms, 1.0))
    rep = run_report(res, pot, "wse3")
    path = write_xyz(Path(out_dir) / "md_cu.xyz", [res.structure])
    console.print(
        f"{res.grid[0]} x {res.grid[1]} PEs, window {2 * res.window[0] + 1} x "
        f"{2 * res.window[1] + 1}; predicted on WSE-3: {rep.extra['timesteps_per_s']:.3g} "
        f"timesteps/s ({rep.bound}-bound); wall {time.perf_counter() - t0:.1f} s; wrote {path}"
    )
