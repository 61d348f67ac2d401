"""Experiment `santos24-md` and the `wse demo` part: EAM MD with one atom per PE.

Predictions (the same with and without `quick`; `run_predictions` alone for `wse experiments
run santos24-md --sweep KEY=...`): timesteps per second of Santos et al.'s 801,792-atom
crystals of Cu (fcc), W and Ta (bcc) on WSE-2 and WSE-3, each priced by `wse_hpc.md.perf`
from a plan made on the host (`wse_hpc.md.samples`: the map, the window for cutoff + skin,
the list capacities; no emulation array is allocated), with its cycles by mechanism:
- `plan` "published": the sample as we read the published map (`samples.slab`: a (001) slab
  CELLS_Z cells thick laid on 696 x 1152 PEs, tile map), the window for the cutoff + SKIN_A,
  priced as the released PE program runs (`wse_hpc.md.pe_program`: the window filtered every
  step, vectors over the busiest PE's neighbours within the cutoff, `samples.max_hits`),
  atoms swapped every `pe_program.ballistic_every` steps (TEMPERATURE_K, DT_FS);
- `plan` "emulator": the near-cubic crystal as `wse hpc md` plans it by default (a
  near-square grid, `mapping.TILES[0]`), the same kernel and cadences: every window a prism
  through the crystal's depth;
- sweeps of what the paper's text does not give (Cu, WSE-3; params `sweep`): the slab's
  thickness (SWEEP_CELLS_Z), the skin (SWEEP_SKIN_A, each with its ballistic cadence) and
  the rebuild cadence (SWEEP_EVERY).
The 696 x 1152 grid exceeds WSE-2's 757 x 996 PEs: those rows keep the grid and price it with
WSE-2's per-PE costs (param `fits`: False, and an assumption says so). Potentials: the repo's
Zhou et al. 2004 tables (`zhou04`, 1000 knots), cutoffs Cu 5.72, W 6.13, Ta 6.40 A.
REFERENCES lists only the inputs, so `published` stays empty.
Each of the 11 crystals (element, geometry, skin) is built and its pairs found once, planned
on each PE grid its wafers give it (the slab's is the same on both) with its N_h, and kept
on disk (`plan_cache`, kind CRYSTAL_KIND: keyed by `_crystal_key` and the code, written
aside and renamed): a cold set of predictions spends a few minutes on the host (5-30 s a
crystal on 2 cores; the counts over its 40 M pairs are numba loops), a warm one loads them
(hunt 76: `--quick` ran past 600 s, planning each cube twice and every crystal again in
every run, printing nothing). On a terminal each crystal planned prints a line on stderr.

Measurements: the emulator's rate on this machine, the NVE drift and the prediction for the
emulated plan with its measured rebuild cadence, for a 256-atom cube (the emulator's own
map) and for a Cu slab laid as the published rows are (tile map, 2 x 2 tiles, no empty PE).
"""

from __future__ import annotations

import functools
import hashlib
import sys
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np
from wse_core import ExperimentResult, PredictionRow
from wse_core.cost.assumptions import assumed_spec
from wse_core.hw.wafer import Wafer

from wse_hpc.md import plan_cache, samples
from wse_hpc.md.config import MdConfig
from wse_hpc.md.eam import EamPlan
from wse_hpc.md.pe_program import ballistic_every
from wse_hpc.md.perf import Lists, pe_trace, predict
from wse_hpc.md.simulate import run_md
from wse_hpc.md.testing import perturbed
from wse_hpc.md.zhou04 import zhou04

__all__ = [
    "run",
    "run_predictions",
    "part",
    "SKIN_A",
    "TEMPERATURE_K",
    "DT_FS",
    "SWEEP_CELLS_Z",
    "SWEEP_SKIN_A",
    "SWEEP_EVERY",
]

SKIN_A = 1.0  # assumption: LAMMPS's Cu EAM benchmark (`neighbor 1.0 bin`); swept
TEMPERATURE_K, DT_FS = 300.0, 1.0  # assumptions: a room-temperature crystal, 1 fs steps
SWEEP_CELLS_Z = (8, 16, 48)  # with CELLS_Z = 4: 14 to 174 A thick (48: near-cubic)
SWEEP_SKIN_A = (0.5, 1.5)  # with SKIN_A
SWEEP_EVERY = (10.0, 100.0)  # steps per rebuild, beside the ballistic cadence
WAFERS = ("wse2", "wse3")
SOURCE = "model (Santos et al. arXiv:2405.07898: REFERENCES lists the inputs only)"
CRYSTAL_KIND = "santos24-md crystal"  # its `plan_cache` entries


class _Crystal(NamedTuple):
    """What the predictions need of one 801,792-atom crystal: its plans by PE grid (rows,
    cols) and N_h, the busiest PE's neighbours within the cutoff (`samples.max_hits`)."""

    plans: dict[tuple[int, int], EamPlan]
    hits: int


_CRYSTALS: dict[tuple, _Crystal] = {}  # by `_crystal_key`: each crystal planned once
_PLANS: dict[tuple, tuple[samples.Planned, int]] = {}  # by case: a --sweep never replans


def _layout(geometry: str, wafer: str) -> tuple[Wafer, bool]:
    """The wafer a crystal of `geometry` is planned on for `wafer`, and whether it fits."""
    return samples.layout(None if geometry == "cube" else samples.GRID, assumed_spec(wafer))


def _config(skin_A: float) -> MdConfig:
    return MdConfig(skin_A=skin_A, spec=assumed_spec("wse3"))


def _crystal_key(element: str, geometry: str, skin_A: float, pot) -> tuple:
    """Everything a crystal's plans depend on besides the code (`plan_cache` adds its hash,
    so the module constants of `samples` and `neighbour_plan` count too): the crystal, its
    grids on the wafers, what `plan_window` reads of the config, the potential."""
    grids = tuple(sorted({(w.rows, w.cols) for w, _ in (_layout(geometry, x) for x in WAFERS)}))
    cfg = _config(skin_A)
    plan_reads = (cfg.skin_A, str(np.dtype(cfg.dtype)), cfg.rebuild_every)
    tables = hashlib.sha256()  # the tables by digest: the key is hashable, a memory key too
    for t in (pot.frho, pot.rhor, pot.z2r):
        tables.update(repr((t.shape, str(t.dtype))).encode() + np.ascontiguousarray(t).tobytes())
    potential = (pot.cutoff_A, pot.lattice_A, tables.hexdigest())
    return (element, geometry, skin_A, grids, plan_reads, potential)


def _planned_crystal(element: str, geometry: str, skin_A: float, pot) -> _Crystal:
    """The crystal built and its pairs found once, planned on each grid its wafers have
    (the slab: one for both), and its N_h."""
    if geometry == "cube":
        sample = samples.cube(element, pot, skin_A=skin_A)
    else:
        sample = samples.slab(element, pot, int(geometry.split()[1]), skin_A=skin_A)
    plans = {}
    for w, _ in (_layout(geometry, wafer) for wafer in WAFERS):
        if (w.rows, w.cols) not in plans:
            plans[(w.rows, w.cols)] = samples.window(sample, w, pot, _config(skin_A))
    return _Crystal(plans, samples.max_hits(sample, pot.cutoff_A))


def _crystal(element: str, geometry: str, skin_A: float, pot) -> _Crystal:
    """`_planned_crystal`, from this process's memory or from disk (`plan_cache`: written
    aside and renamed, read back as written)."""
    key = _crystal_key(element, geometry, skin_A, pot)
    if key not in _CRYSTALS:
        make = functools.partial(_planned_crystal, element, geometry, skin_A, pot)
        _CRYSTALS[key] = plan_cache.cached(CRYSTAL_KIND, key, make)
    return _CRYSTALS[key]


def _planned(element: str, geometry: str, wafer: str, skin_A: float, pot):
    """(wafer, plan, fits) of a case and the crystal's N_h."""
    key = (element, geometry, wafer, skin_A)
    if key not in _PLANS:
        w, fits = _layout(geometry, wafer)
        crystal = _crystal(element, geometry, skin_A, pot)
        _PLANS[key] = samples.Planned(w, crystal.plans[(w.rows, w.cols)], fits), crystal.hits
    return _PLANS[key]


def _say(line: str) -> None:
    """A progress line on stderr when it is a terminal (under the CLI's spinner too, which
    prints it above itself); nothing in a log or a test."""
    try:
        shown = sys.stderr is not None and sys.stderr.isatty()
    except (OSError, ValueError):  # closed by the program
        shown = False
    if shown:
        print(line, file=sys.stderr, flush=True)


def _plan_crystals(crystals: list[tuple[str, str, float]], pots: dict) -> None:
    """Each crystal planned or loaded once, with a line for each one planned (a cold run
    plans 11, 5-30 s each on a 2-core host, by its load)."""
    todo = [
        c for c in crystals
        if (key := _crystal_key(*c, pots[c[0]])) not in _CRYSTALS
        and not _stored(key)
    ]  # fmt: skip
    if todo:
        kept = "; kept on disk" if plan_cache.plan_path(CRYSTAL_KIND, ()) else ""
        _say(  # within 80 columns: a terminal's, where the CLI's spinner runs below it
            f"santos24-md: planning {len(todo)} crystals of {samples.ATOMS:,} atoms, 5-30 s "
            f"each{kept}"
        )
    for i, (element, geometry, skin) in enumerate(todo, 1):
        t0 = time.perf_counter()
        _crystal(element, geometry, skin, pots[element])
        _say(
            f"santos24-md: crystal {i}/{len(todo)} ({element}, {geometry}, skin {skin:g} A) "
            f"planned in {time.perf_counter() - t0:.0f} s"
        )


def _stored(key: tuple) -> bool:
    path = plan_cache.plan_path(CRYSTAL_KIND, key)
    return path is not None and path.exists()


def _row(element: str, wafer: str, case: dict, pot) -> PredictionRow:
    """One prediction: `case` holds plan, geometry, skin_A and optionally every / sweep."""
    skin = case["skin_A"]
    p, hits = _planned(element, case["geometry"], wafer, skin, pot)
    every = case.get("every") or ballistic_every(
        skin, TEMPERATURE_K, pot.masses_amu[0], samples.ATOMS, DT_FS
    )
    note = {} if p.fits else {
        "md.grid": f"801,792 atoms exceed {wafer}'s PEs: a {p.wafer.rows} x {p.wafer.cols} "
        f"grid priced with {wafer}'s per-PE costs"
    }  # fmt: skip
    rep = predict(
        assumed_spec(wafer), p.wafer, pot, p.plan, lists=Lists(every, hits), assumptions=note
    )
    label = case.get("sweep", case["plan"])
    params = {
        "case": f"{label} {element} {wafer}",
        "plan": case["plan"],
        "wafer": wafer,
        "atoms": samples.ATOMS,
        "element": element,
        "precision": "fp32",
        "geometry": case["geometry"],
        "fits": p.fits,
        "grid": rep.extra["grid"],
        "window": rep.extra["window"],
        "candidates": rep.extra["candidates"],
        "hits": rep.extra["hits"],
        "skin_A": skin,
        "rebuild_every": every,
        "link_words_per_step": max(rep.extra["link_words_per_step"].values()),
        "bound": rep.bound,
        "per": "step",
    }
    tps = rep.units_per_s
    return PredictionRow(
        "timesteps_per_s", tps, "1/s", params, None, SOURCE, rep.cycles_by_mechanism()
    )


def _cases() -> list[tuple[str, str, dict]]:
    slab = f"slab {samples.CELLS_Z} cells"
    out = []
    for element in samples.KINDS:
        for plan, geometry in (("published", slab), ("emulator", "cube")):
            for wafer in WAFERS:
                out.append((element, wafer, {"plan": plan, "geometry": geometry, "skin_A": SKIN_A}))
    sweeps = [{"geometry": f"slab {n} cells", "sweep": f"cells_z={n}"} for n in SWEEP_CELLS_Z]
    sweeps += [{"geometry": slab, "skin_A": s, "sweep": f"skin={s}A"} for s in SWEEP_SKIN_A]
    sweeps += [{"geometry": slab, "every": e, "sweep": f"every={e:g}"} for e in SWEEP_EVERY]
    for case in sweeps:
        out.append(("Cu", "wse3", {"plan": "published", "skin_A": SKIN_A, **case}))
    return out


def run_predictions(*, seed: int = 0) -> list[PredictionRow]:
    """Every prediction row (the crystals are fixed: `seed` is unused)."""
    pots = {e: zhou04([e], knots=1000) for e in samples.KINDS}
    cases = _cases()
    _plan_crystals(list(dict.fromkeys((e, c["geometry"], c["skin_A"]) for e, _, c in cases)), pots)
    return [_row(element, wafer, case, pots[element]) for element, wafer, case in cases]


def _emulated(s, pot, cfg: MdConfig, label: str) -> tuple[dict, object, object]:
    res = run_md(s, pot, cfg)
    e = np.array([r.etotal for r in res.thermo])
    report = res.report
    return (
        {
            "sample": label,
            "atoms": s.num_atoms,
            "steps": res.steps,
            "emulated_atom_steps_per_s": s.num_atoms * res.steps / res.loop_wall_s,
            "emulated_timesteps_per_s": res.steps / res.loop_wall_s,
            "nve_drift_eV_per_atom": float((e[-1] - e[0]) / s.num_atoms),
            "nve_max_deviation_eV_per_atom": float(np.abs(e - e[0]).max() / s.num_atoms),
            "grid": f"{res.grid[0]}x{res.grid[1]}",
            "tile": f"{res.tile[0]}x{res.tile[1]}",
            "window": f"{2 * res.window[0] + 1}x{2 * res.window[1] + 1}",
            "candidates": res.plan.caps[-1] if res.plan.caps else None,
            "compile_s": res.compile_s,
            "precision": "fp32",
            "list_builds": res.list_builds,
            "list_reruns": res.list_reruns,
            "predicted_wse3_timesteps_per_s": report.units_per_s,
        },
        res,
        report,
    )


def _measure(pot, quick: bool, seed: int) -> tuple[list[dict], object]:
    """The emulated NVE runs (a 256-atom cube; a 1,920-atom Cu slab 4 cells thick on 40 x 48
    PEs, tile 2 x 2) and the cube's per-PE figure (the atoms' PEs, the window of the middle
    PE that the marching multicast covers, the predicted WSE-3 cycles and words per link)."""
    from wse_core.trace.png import trace_figure

    steps, spec = (100 if quick else 1000), assumed_spec("wse3")
    cfg = MdConfig(
        steps=steps, temperature_K=600.0, thermo_every=max(steps // 10, 1), seed=seed, spec=spec
    )
    cube = perturbed("fcc", "Cu", pot.lattice_A[0], (4, 4, 4), 0.0, seed=seed)
    row, res, report = _emulated(cube, pot, cfg, "cube 4x4x4 cells")
    slab = perturbed("fcc", "Cu", pot.lattice_A[0], (12, 10, 4), 0.0, seed=seed)
    on_tiles = MdConfig(
        steps=steps // 2, temperature_K=600.0, thermo_every=max(steps // 20, 1), seed=seed,
        grid=(40, 48), tile=(2, 2), spec=spec,
    )  # fmt: skip
    slab_row = _emulated(slab, pot, on_tiles, "slab 12x10x4 cells")[0]
    figure = trace_figure(
        pe_trace(res, report),
        title=f"EAM Cu, {cube.num_atoms} atoms emulated: per PE (WSE-3 prediction), window",
    )
    return [row, slab_row], figure


def _figure(rows: list[PredictionRow]):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 4))
    elements = list(samples.KINDS)
    for k, (plan, wafer) in enumerate([(p, w) for p in ("published", "emulator") for w in WAFERS]):
        pts = [r for r in rows if r.params["case"] in {f"{plan} {e} {wafer}" for e in elements}]
        xs = np.arange(len(pts)) + 0.2 * k
        ax.bar(xs, [p.value for p in pts], width=0.19, label=f"{plan}, {wafer}")
    ax.set_xticks(np.arange(len(elements)) + 0.3, elements)
    ax.set(ylabel="predicted timesteps / s", title="801,792 atoms, one atom per PE (model)")
    ax.legend(fontsize=7)
    thick = [(samples.CELLS_Z, "published Cu wse3")]
    thick += [(n, f"cells_z={n} Cu wse3") for n in SWEEP_CELLS_Z]
    by_case = {r.params["case"]: r for r in rows}
    ax_x = [n for n, _ in thick]
    bx.plot(ax_x, [by_case[c].value for _, c in thick], "o-")
    bx.set_xticks(ax_x, [f"{n}\n({n * 3.615:.0f} A)" for n in ax_x])
    bx.set(
        xlabel="slab thickness (fcc cells along z)",
        ylabel="predicted timesteps / s",
        title="Cu on WSE-3: the unstated thickness",
    )
    fig.tight_layout()
    return fig


def run(*, quick: bool, seed: int) -> ExperimentResult:
    predictions = run_predictions(seed=0)  # the crystals are fixed: same either way
    pot = zhou04(["Cu"], knots=1000)
    measured, per_pe = _measure(pot, quick, seed)
    return ExperimentResult(
        experiment="santos24-md",
        seed=seed,
        config={
            "potential": "zhou04, 1000 knots",
            "published": f"(001) slab {samples.CELLS_Z} cells thick on {samples.GRID} PEs",
            "emulator": {e: f"{samples.KINDS[e]} {c} cells" for e, c in samples.CUBES.items()},
            "skin_A": SKIN_A,
            "temperature_K": TEMPERATURE_K,
            "dt_fs": DT_FS,
            "quick": quick,
        },
        measurements=measured,
        predictions=predictions,
        figure=_figure(predictions),
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
        MdConfig(
            steps=steps, temperature_K=600.0, thermo_every=steps // 5, spec=assumed_spec("wse3")
        ),
        on_thermo=lambda r: console.print(format_row(r)),
    )
    console.print(performance_line(res.steps, res.loop_wall_s, s.num_atoms, 1.0))
    rep = res.report
    path = write_xyz(Path(out_dir) / "md_cu.xyz", [res.structure])
    console.print(
        f"{res.grid[0]} x {res.grid[1]} PEs, window {2 * res.window[0] + 1} x "
        f"{2 * res.window[1] + 1}, {rep.extra['candidates']} candidates per PE; predicted on "
        f"WSE-3: {rep.units_per_s:.3g} timesteps/s ({rep.bound}-bound); wall "
        f"{time.perf_counter() - t0:.1f} s; wrote {path}"
    )
