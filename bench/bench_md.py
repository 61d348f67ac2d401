"""Benchmark: EAM MD atom-steps/s of the wafer emulator vs jax-md's EAM and LAMMPS (one rank).

Cu fcc crystals of 256, 4,000 and 32,000 atoms (4^3, 10^3, 20^3 cells), 1600 K start, NVE, 1
fs, the same steps and the same potential for all three: LAMMPS's Cu_u3.eam (funcfl, Debian
lammps-data, used as local data only) when installed, else the Zhou 2004 Cu setfl we
generate. Each code is timed on its own loop (compile and set-up excluded) in the same
process run, side by side. jax-md gets the potential as setfl (its reader needs one), a
neighbour list with 0.5 A skin updated every step inside one jitted `fori_loop`; its
energies are not checked (see shared/PLATFORM.md). The emulator uses per-PE neighbour lists
with a 1.0 A skin (LAMMPS's `neighbor 1.0 bin` here); its rebuilds (`list_builds`) happen
inside the timed steps. Prints a table and writes bench/results/md.json.

Every contender runs its timed loop `--repeats` times (default 3), the three codes taking
turns (ours, jax-md, LAMMPS, ours, ...: `bench/rounds.py`) so that a burst of load on the
shared machine hits them alike; each reports the median of its rates (all samples are in
the JSON) and each ratio against a peer its median, spread and worst round (target >= 1x
LAMMPS, no round below). The emulator's repeats reuse its compiled runner (`run_md` keeps
it). The JSON records LAMMPS's version line, jax-md's version and the thread settings. A single
sample of a 256-atom loop (~0.05-0.1 s) moved by 10% from run to run; LAMMPS's (0.11-0.25 s)
is the noisiest: a run at load 0.6 had one LAMMPS round at 1.7x its other two (918k against
540-564k atom-steps/s) while ours ran 22% under its median, the only round below 1x (0.71x);
neither code's warm-up is timed (our compile, LAMMPS's set-up), and our first round was not
the slow one. `--sizes` runs some sizes alone (their rounds again).

`--cores N` pins the process (and the `lmp` it starts) to N CPUs before JAX starts threads,
so every code gets the same cores (LAMMPS runs one rank either way). The persistent compile
cache is off: every code compiles in the run, under its CPUs. XLA runs without
`--xla_llvm_disable_expensive_passes` (which `wse_core.host.runtime.configure` adds to halve
compile times): it slowed an earlier EAM kernel's gathers and splines 2-4x; the current
list kernel's force evaluation runs within 3% with and without it.

    python bench/bench_md.py [--quick] [--devices N] [--cores N] [--repeats N] [--sizes 256,...]

"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

from rounds import interleaved, ratio, ratio_line, record  # noqa: E402  (bench/rounds.py)
from wse_core import preset

SIZES = {256: (4, 4, 4), 4000: (10, 10, 10), 32000: (20, 20, 20)}
TARGETS = {"lammps_1rank": 1.0, "jax_md": 1.0}  # atom-steps/s against each peer (issue 44)


def _args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="256 and 4,000 atoms, fewer steps")
    p.add_argument("--devices", type=int, default=None, help="virtual CPU devices")
    p.add_argument("--cores", type=int, default=0, help="CPUs the process may use (0: all)")
    p.add_argument("--repeats", type=int, default=3, help="timed loops per code (median)")
    p.add_argument("--sizes", default="", help="atom counts, comma-separated (default: all)")
    return p.parse_args()


def potential_files(tmp: Path):
    import numpy as np
    from wse_hpc.md import read_potential, write_setfl, zhou04
    from wse_hpc.md.testing import lammps_potential

    path = lammps_potential("Cu_u3.eam")
    if path is None:
        pot = zhou04(["Cu"], knots=1000)
        path = write_setfl(pot, tmp / "Cu_zhou04.eam.alloy")
    pot = read_potential(path, ["Cu"])
    # jax-md's reader wants 'setfl' on line 1 and one value per line from line 7 on
    values = np.concatenate([pot.frho[0], pot.rhor[0, 0], pot.z2r[0, 0]])
    head = [
        "setfl copy for jax-md",
        "",
        "",
        "1 Cu",
        f"{pot.nrho} {pot.drho!r} {pot.nr} {pot.dr!r} {pot.cutoff_A!r}",
        f"29 {pot.masses_amu[0]} {pot.lattice_A[0]} fcc",
    ]
    setfl = tmp / "Cu.setfl"
    setfl.write_text("\n".join(head + [repr(float(v)) for v in values]) + "\n")
    return pot, path, setfl


RUNNERS: dict = {}  # the emulator's compiled runners, reused by its repeats (`run_md`)


def wafer_emulator_md(s, pot, steps: int) -> dict:
    from wse_hpc.md import MdConfig, run_md

    res = run_md(
        s, pot, MdConfig(steps=steps, thermo_every=steps, spec=preset("wse3")), runners=RUNNERS
    )
    return {
        "atom_steps_per_s": s.num_atoms * res.steps / res.loop_wall_s,
        "compile_s": res.compile_s,
        "window": [2 * k + 1 for k in res.window],
        # neighbour-list capacity (cutoff + skin); None: a re-plan fell back to the whole
        # window without lists (seen on an H200 at 256,000 atoms, 1600 K, 100 steps)
        "candidates_per_pe": res.plan.caps[-1] if res.plan.caps else None,
        "list_builds": res.list_builds,  # rebuilds inside the timed steps
        "replans": res.replans,
        "etotal_drift_eV_per_atom": (res.thermo[-1].etotal - res.thermo[0].etotal) / s.num_atoms,
    }


def jax_md_eam(s, setfl: Path, steps: int) -> dict:
    try:
        import jax
        import jax.numpy as jnp
        from jax_md import energy, simulate, space
    except ImportError as e:
        return {"error": f"jax-md not importable: {e}"}
    # jax-md asks for int64/float64 without x64 enabled; JAX truncates to 32 bits and warns
    warnings.filterwarnings("ignore", message="Explicitly requested dtype")
    box = float(s.box_A[0])
    disp, shift = space.periodic(box)
    with open(setfl) as f:
        charge_fn, embed_fn, pair_fn, cutoff = energy.load_lammps_eam_parameters(f)
    nbr_fn, e_fn = energy.eam_neighbor_list(
        disp,
        box,
        charge_fn,
        embed_fn,
        pair_fn,
        cutoff,
        dr_threshold=0.5,
        fractional_coordinates=False,
    )
    r0 = jnp.asarray(s.positions_A, jnp.float32)
    nbrs = nbr_fn.allocate(r0)
    init, apply = simulate.nve(e_fn, shift, dt=1e-3)
    mass = 63.546 * 1.0364269e-4  # amu -> eV ps^2 / A^2
    state = init(jax.random.key(0), r0, mass=mass, kT=8.617e-5 * 1600, neighbor=nbrs)

    @jax.jit
    def run(state, nbrs):
        def body(_, c):
            st, nb = c
            st = apply(st, neighbor=nb)
            return st, nb.update(st.position)

        return jax.lax.fori_loop(0, steps, body, (state, nbrs))

    t0 = time.perf_counter()
    jax.block_until_ready(run(state, nbrs))
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = jax.block_until_ready(run(state, nbrs))
    wall = time.perf_counter() - t0
    return {
        "atom_steps_per_s": s.num_atoms * steps / wall,
        "compile_s": compile_s,
        "neighbor_overflow": bool(out[1].did_buffer_overflow),
    }


def _lammps(s, pot, path: Path, steps: int) -> dict:
    from wse_hpc.md.lammps import lammps_available, lammps_nve

    if not lammps_available():
        return {"error": "lmp not installed (apt-get install lammps lammps-data)"}
    out = lammps_nve(s, pot, [path], ["Cu"], steps=steps, thermo_every=steps)
    return {"atom_steps_per_s": out["atom_steps_per_s"], "loop_s": out["loop_s"]}


def _rounds(s, pot, path: Path, setfl: Path, steps: int, repeats: int) -> dict:
    """The three codes' timed loops in interleaved rounds: each code's median sample and the
    emulator's ratios against each peer that ran (`rounds.ratio`, per atom-step)."""
    runs: dict[str, list[dict]] = {"wafer_emulator": [], "jax_md": [], "lammps_1rank": []}
    calls = {
        "wafer_emulator": lambda: wafer_emulator_md(s, pot, steps),
        "jax_md": lambda: jax_md_eam(s, setfl, steps),
        "lammps_1rank": lambda: _lammps(s, pot, path, steps),
    }

    def per_atom_step(name):  # seconds per atom-step of one timed loop (NaN: it did not run)
        def run() -> float:
            runs[name].append(calls[name]())
            rate = _rate(runs[name][-1])
            return 1.0 / rate if rate else float("nan")

        return run

    times = interleaved({k: per_atom_step(k) for k in calls}, max(1, repeats))
    out: dict = {name: _median(samples) for name, samples in runs.items()}
    out["ratios"] = {
        f"vs_{peer}": ratio(times["wafer_emulator"], times[peer], TARGETS[peer])
        for peer in ("lammps_1rank", "jax_md")
        if all(t == t for t in times[peer])  # the peer ran (no NaN)
    }
    return out


def _lammps_version() -> str | None:
    """The first line `lmp -h` prints (LAMMPS's version), or None without LAMMPS."""
    import shutil
    import subprocess

    lmp = shutil.which("lmp")
    if lmp is None:
        return None
    out = subprocess.run([lmp, "-h"], capture_output=True, text=True, timeout=60).stdout
    return next((line.strip() for line in out.splitlines() if "LAMMPS" in line), None)


def main() -> None:
    args = _args()
    cpus = sorted(os.sched_getaffinity(0))
    if args.cores > 0:  # before JAX starts threads: they (and lmp) inherit it
        cpus = cpus[-args.cores :]
        os.sched_setaffinity(0, cpus)
    from wse_core.host.runtime import configure, keep_freed_memory

    kept = keep_freed_memory()  # as `wse hpc md` runs (a 32,000-atom list build 1.9 -> 1.1 s)
    configure(args.devices, compile_cache=False)
    flags = os.environ.get("XLA_FLAGS", "").split()
    os.environ["XLA_FLAGS"] = " ".join(f for f in flags if "disable_expensive_passes" not in f)
    import jax

    # every code compiles here, under this run's CPUs: XLA:CPU splits fusions over the CPUs
    # the process had when it started, which the persistent cache's key leaves out (a
    # 256-atom chunk compiled under `--cores 1` and loaded from the cache by a process on 2
    # CPUs ran at ~0.20 ms per step, compiled there ~0.25)
    jax.config.update("jax_enable_compilation_cache", False)
    from wse_hpc.md import maxwell_boltzmann
    from wse_hpc.md.lattice import crystal

    load_start = os.getloadavg()
    sizes = [256, 4000] if args.quick else list(SIZES)
    if args.sizes:  # one size at a time, e.g. to rerun its rounds alone
        sizes = [int(n) for n in args.sizes.split(",")]
        if not set(sizes) <= set(SIZES):
            raise SystemExit(f"--sizes: each of {sorted(SIZES)}, got {args.sizes}")
    # enough steps that every code rebuilds its neighbour list inside the timed loop
    steps = {256: 100 if args.quick else 400, 4000: 40 if args.quick else 100, 32000: 40}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        pot, path, setfl = potential_files(Path(tmp))
        for n in sizes:
            s = crystal("fcc", "Cu", 3.615, SIZES[n])
            s.velocities_A_ps = maxwell_boltzmann([pot.masses_amu[0]] * s.num_atoms, 1600.0, seed=1)
            row = {"atoms": s.num_atoms, "steps": steps[n]}
            row.update(_rounds(s, pot, path, setfl, steps[n], args.repeats))
            rows.append(row)
            print(_line(row), flush=True)
    result = {
        "benchmark": "md",
        "potential": str(path.name),
        "devices": len(jax.devices()),
        "cpus": cpus,
        "keep_freed_memory": kept,
        "load_average_start": load_start,
        "load_average": os.getloadavg(),
        "repeats": max(1, args.repeats),
        "rows": rows,
    }
    result.update(record("jax-md", lammps=_lammps_version()))  # host, versions, threads
    for row in rows:
        for name, rr in row["ratios"].items():
            print(ratio_line(f"{row['atoms']} atoms {name}", rr))
    out = Path(__file__).parent / "results" / "md.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, default=float))
    print(f"load average {load_start[0]:.2f} at the start, {os.getloadavg()[0]:.2f} at the end")
    print(f"wrote {out}")


def _median(samples: list[dict]) -> dict:
    """The sample of median rate (its other fields with it) and every sample's rate."""
    rated = [d for d in samples if _rate(d)]
    if not rated:
        return samples[0]
    rates = [_rate(d) for d in rated]
    mid = sorted(rated, key=_rate)[(len(rated) - 1) // 2]
    out = dict(mid)
    out["atom_steps_per_s"] = statistics.median(rates)
    out["samples_atom_steps_per_s"] = rates
    return out


def _rate(d: dict) -> float | None:
    return d.get("atom_steps_per_s")


def _line(row: dict) -> str:
    ours, jm, lmp = (_rate(row[k]) for k in ("wafer_emulator", "jax_md", "lammps_1rank"))

    def fmt(v):
        return f"{v:>12.4g}" if v else f"{'n/a':>12}"

    ratio = lambda a, b: f"{a / b:>8.3f}" if a and b else f"{'n/a':>8}"
    if row["atoms"] == 256:
        print(
            f"{'atoms':>7} {'wafer emu':>12} {'jax-md':>12} {'LAMMPS':>12} "
            f"{'vs jaxmd':>8} {'vs lmp':>8}   atom-steps/s",
            file=sys.stdout,
        )
    return (
        f"{row['atoms']:>7} {fmt(ours)} {fmt(jm)} {fmt(lmp)} {ratio(ours, jm)} {ratio(ours, lmp)}"
    )


if __name__ == "__main__":
    main()
