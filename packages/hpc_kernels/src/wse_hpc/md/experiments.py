"""Experiment `santos24-md` and the `wse demo` part: EAM MD with one atom per PE.

Predictions (the same with and without `quick`): timesteps per second of the one-atom-per-PE
mapping on WSE-2 and WSE-3 for Cu crystals of about 200k and 800k atoms at 300 K, from the
window our map needs (`window_needed` on the actual crystal) and the counted work of one
step (`wse_hpc.md.perf`). Santos et al. (arXiv:2405.07898) is not in the calibration set and
shared/REFERENCES.md lists no figure of theirs, so `published` stays empty.
Measurements: the emulator's rate on this machine and the NVE energy drift of a short run.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from wse_core import ExperimentResult, PredictionRow, preset

from wse_hpc.md import mapping
from wse_hpc.md.eam import EamPlan
from wse_hpc.md.perf import predict
from wse_hpc.md.simulate import WINDOW_MARGIN_A, MdConfig, run_md
from wse_hpc.md.testing import perturbed
from wse_hpc.md.zhou04 import zhou04

__all__ = ["run", "part", "SYSTEMS"]

# fcc cells: 202,612 and 793,936 atoms; 800k atoms do not fit WSE-2's 757 x 996 = 753,972
# PEs one per PE, so there the "800k" row is the largest crystal that does (753,768 atoms).
SYSTEMS = {"200k": (37, 37, 37), "800k": (58, 58, 59)}
FITS_WSE2 = {"800k": (57, 57, 58)}
SOURCE = "model (Santos et al. arXiv:2405.07898 is not in the calibration set)"


def _plan_for(cells, pot, seed: int, spec):
    """Grid and window the map needs for a 300 K-like Cu crystal (0.07 A displacements)."""
    s = perturbed("fcc", "Cu", pot.lattice_A[0], cells, 0.07, seed=seed)
    grid = mapping.choose_grid(s.num_atoms, spec.pe_rows, spec.pe_cols)
    state = mapping.pack(
        mapping.initial_map(s.positions_A, grid, s.box_A),
        s.positions_A,
        np.zeros(s.num_atoms, np.int32),
    )
    kr, kc = mapping.window_needed(state, s.box_A, pot.cutoff_A + WINDOW_MARGIN_A)
    return s.num_atoms, grid, EamPlan(kr, kc, tuple(s.box_A))


def _predictions(pot, seed: int) -> tuple[list[PredictionRow], list[dict]]:
    rows, rates = [], []
    for label, cells in SYSTEMS.items():
        for wafer in ("wse2", "wse3"):
            spec = preset(wafer)
            fits = 4 * int(np.prod(cells)) <= spec.num_pes
            n, grid, plan = _plan_for(cells if fits else FITS_WSE2[label], pot, seed, spec)
            model = predict(preset(wafer), grid, plan)
            params = {
                "wafer": wafer,
                "atoms": n,
                "grid": f"{grid[0]}x{grid[1]}",
                "window": f"{2 * plan.k_rows + 1}x{2 * plan.k_cols + 1}",
                "bound": model.prediction.bound,
            }
            rows.append(
                PredictionRow("timesteps_per_s", model.timesteps_per_s, "1/s", params, None, SOURCE)
            )
            rates.append(
                {
                    "system": label,
                    "wafer": wafer,
                    "atoms": n,
                    "timesteps_per_s": model.timesteps_per_s,
                }
            )
    return rows, rates


def _measure(pot, quick: bool, seed: int) -> dict:
    cells, steps = ((4, 4, 4), 100) if quick else ((8, 8, 8), 1000)
    s = perturbed("fcc", "Cu", pot.lattice_A[0], cells, 0.0, seed=seed)
    cfg = MdConfig(steps=steps, temperature_K=600.0, thermo_every=max(steps // 10, 1), seed=seed)
    res = run_md(s, pot, cfg)
    e = np.array([r.etotal for r in res.thermo])
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
    }


def _figure(rates: list[dict]):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for k, wafer in enumerate(("wse2", "wse3")):
        pts = [r for r in rates if r["wafer"] == wafer]
        xs = np.arange(len(pts)) + 0.38 * k
        ax.bar(xs, [p["timesteps_per_s"] for p in pts], width=0.36, label=wafer)
    ax.set_xticks(np.arange(len(SYSTEMS)) + 0.19, [f"{p} atoms" for p in SYSTEMS])
    ax.set_ylabel("predicted timesteps / s")
    ax.set_title("EAM Cu, one atom per PE (model)")
    ax.legend()
    return fig


def run(*, quick: bool, seed: int) -> ExperimentResult:
    pot = zhou04(["Cu"], knots=1000)
    predictions, rates = _predictions(pot, seed=0)  # the crystal is fixed: same either way
    measured = _measure(pot, quick, seed)
    return ExperimentResult(
        experiment="santos24-md",
        seed=seed,
        config={
            "potential": "zhou04 Cu, 1000 knots",
            "cutoff_A": pot.cutoff_A,
            "window_margin_A": WINDOW_MARGIN_A,
            "quick": quick,
        },
        measurements=[measured],
        predictions=predictions,
        figure=_figure(rates),
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
    model = predict(preset("wse3"), res.grid, res.plan)
    path = write_xyz(Path(out_dir) / "md_cu.xyz", [res.structure])
    console.print(
        f"{res.grid[0]} x {res.grid[1]} PEs, window {2 * res.window[0] + 1} x "
        f"{2 * res.window[1] + 1}; predicted on WSE-3: {model.timesteps_per_s:.3g} timesteps/s "
        f"({model.prediction.bound}-bound); wall {time.perf_counter() - t0:.1f} s; wrote {path}"
    )
