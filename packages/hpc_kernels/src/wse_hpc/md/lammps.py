"""Running LAMMPS (`lmp`, one rank) on a `Structure`, for the tests and the benchmark.

`lammps_available()` says whether `lmp` is on PATH. `lammps_eval` runs `run 0` and returns
per-atom energies, forces and the total energy and pressure as LAMMPS prints them;
`lammps_nve` runs N steps of NVE and returns the thermo rows and the measured
`Performance:` figures. Nothing here is used by the kernel itself.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from wse_hpc.md.lattice import Structure
from wse_hpc.md.potentials import EamPotential

__all__ = ["lammps_available", "lammps_eval", "lammps_nve", "pair_style_for"]


def lammps_available() -> bool:
    return shutil.which("lmp") is not None


def pair_style_for(pot: EamPotential, files: Sequence[str | Path], elements: Sequence[str]):
    """The `pair_style` and `pair_coeff` lines for a potential read from `files`."""
    if pot.kind == "funcfl":
        coeffs = [f"pair_coeff {i + 1} {i + 1} {Path(f).resolve()}" for i, f in enumerate(files)]
        return "pair_style eam", "\n".join(coeffs)
    style = "eam/alloy" if pot.kind == "setfl" else "eam/fs"
    return f"pair_style {style}", f"pair_coeff * * {Path(files[0]).resolve()} {' '.join(elements)}"


def _write_data(s: Structure, elements: Sequence[str], masses: Sequence[float], path: Path):
    sp = s.species(elements) + 1
    lines = ["wse-stack structure", "", f"{s.num_atoms} atoms", f"{len(elements)} atom types", ""]
    for k, ax in enumerate("xyz"):
        lines.append(f"0.0 {s.box_A[k]:.16g} {ax}lo {ax}hi")
    lines += ["", "Masses", ""] + [f"{i + 1} {m:.10g}" for i, m in enumerate(masses)]
    lines += ["", "Atoms # atomic", ""]
    lines += [
        f"{i + 1} {t} {x:.16g} {y:.16g} {z:.16g}"
        for i, (t, (x, y, z)) in enumerate(zip(sp, s.positions_A, strict=True))
    ]
    if s.velocities_A_ps is not None:
        lines += ["", "Velocities", ""]
        lines += [
            f"{i + 1} {a:.16g} {b:.16g} {c:.16g}" for i, (a, b, c) in enumerate(s.velocities_A_ps)
        ]
    path.write_text("\n".join(lines) + "\n")


def _run(script: str, folder: Path) -> str:
    (folder / "in.wse").write_text(script)
    out = subprocess.run(
        ["lmp", "-in", "in.wse", "-log", "log.lammps", "-screen", "none"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    log = (folder / "log.lammps").read_text() if (folder / "log.lammps").exists() else ""
    if out.returncode != 0:
        raise RuntimeError(f"lmp failed ({out.returncode}): {out.stderr[-2000:]}{log[-2000:]}")
    return log


def _head(s, pot, files, elements, folder: Path) -> str:
    _write_data(
        s, elements, [pot.masses_amu[pot.element_index(e)] for e in elements], folder / "data.wse"
    )
    style, coeff = pair_style_for(pot, files, elements)
    return (
        f"units metal\natom_style atomic\nboundary p p p\natom_modify map array\n"
        f"read_data data.wse\n{style}\n{coeff}\nneighbor 1.0 bin\n"
        "neigh_modify every 1 delay 0 check yes\n"
    )


def lammps_eval(s: Structure, pot: EamPotential, files, elements) -> dict:
    """`run 0`: per-atom energies (N,), forces (N, 3), total pe and pressure (bar)."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        script = _head(s, pot, files, elements, folder) + (
            "compute pe all pe/atom\n"
            "dump d all custom 1 dump.wse id c_pe fx fy fz\n"
            "dump_modify d sort id format float %.17g\n"
            "thermo_style custom step pe press\nthermo_modify format float %.17g\nrun 0\n"
        )
        log = _run(script, folder)
        rows = np.loadtxt(folder / "dump.wse", skiprows=9)
    step, pe, press = _thermo_rows(log, 3)[0]
    return {"energies": rows[:, 1], "forces": rows[:, 2:5], "pe": pe, "press": press}


def _thermo_rows(log: str, ncols: int) -> list[list[float]]:
    rows = []
    for line in log.splitlines():
        parts = line.split()
        if len(parts) == ncols and re.fullmatch(r"\d+", parts[0]):
            try:
                rows.append([float(p) for p in parts])
            except ValueError:
                continue
    return rows


def lammps_nve(
    s: Structure, pot, files, elements, *, steps: int, dt_fs: float = 1.0, thermo_every: int = 100
) -> dict:
    """NVE from the structure's velocities: thermo rows and LAMMPS's performance line."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        script = _head(s, pot, files, elements, folder) + (
            f"timestep {dt_fs / 1000}\nfix 1 all nve\n"
            "thermo_style custom step pe ke etotal temp press\n"
            f"thermo_modify format float %.12g\nthermo {thermo_every}\nrun {steps}\n"
        )
        log = _run(script, folder)
    tps = re.search(r"Performance:.*?([\d.eE+-]+) timesteps/s", log)
    loop = re.search(r"Loop time of ([\d.eE+-]+)", log)
    loop_s = float(loop.group(1)) if loop else None
    return {
        "thermo": _thermo_rows(log, 6),
        "timesteps_per_s": float(tps.group(1)) if tps else None,
        "atom_steps_per_s": s.num_atoms * steps / loop_s if loop_s else None,
        "loop_s": loop_s,
    }
