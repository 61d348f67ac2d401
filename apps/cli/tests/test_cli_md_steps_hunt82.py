"""Hunt 82 A and E through `wse hpc md`: a LAMMPS `dump extxyz` frame's velocities read in
A/ps (its Timestep= key) and said so, and a continued run's Step column going on from the
frame's step, or from --reset-timestep N (LAMMPS's reset_timestep).

Before: the LAMMPS frame was refused as 3e8 K with "give velocities in A/ps (LAMMPS metal
units)", which it held; a run continued from a step=400 frame printed Steps 0, 100, 200.
Oracles: the velocities' own temperature (3N - 3 degrees of freedom, the potential's mass),
computed here; LAMMPS's rule for thermo rows (the multiples of thermo, first and last), by hand.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke

ROOT = typer.main.get_command(app)


def _frame(path, header: str, cu_mass: float):
    """A 4 x 4 x 4 Cu crystal at ~300 K as a LAMMPS dump extxyz frame (dump_extxyz.cpp's
    comment line and %g columns, vel in A/ps) with `header` keys first; its temperature."""
    from wse_hpc.md import crystal
    from wse_hpc.md.integrate import maxwell_boltzmann
    from wse_hpc.md.units import kinetic

    s = crystal("fcc", "Cu", 3.615, (4, 4, 4))
    v = maxwell_boltzmann(np.full(s.num_atoms, cu_mass), 300.0, 3)
    v = np.array([[float(f"{x:g}") for x in row] for row in v])  # as LAMMPS prints them
    temp = kinetic(np.full(s.num_atoms, cu_mass), v)[1]
    lx = s.box_A[0]
    lines = [
        str(s.num_atoms),
        f'{header} Time=0.400000 pbc="T T T" Lattice="{lx:g} 0 0 0 {lx:g} 0 0 0 {lx:g}" '
        f"Temperature={temp!r} Properties=species:S:1:pos:R:3:vel:R:3",
        *(f"Cu {p[0]:g} {p[1]:g} {p[2]:g} {w[0]:g} {w[1]:g} {w[2]:g}"
          for p, w in zip(s.positions_A, v, strict=True)),
    ]  # fmt: skip
    path.write_text("\n".join(lines) + "\n")
    return temp


def _run(args):
    code, output = invoke(ROOT, ["hpc", "md", *map(str, args), "--preset", "small"])
    assert code == 0, output
    return output


def test_lammps_dump_continues_its_steps(tmp_path, cu):
    from wse_hpc.md import read_potential

    mass = read_potential(cu).masses_amu[0]
    temp = _frame(tmp_path / "d.xyz", "Timestep=400", mass)
    base = ["--structure", tmp_path / "d.xyz", "--potential", cu, "--steps", "150"]
    out = _run([*base, "--thermo-every", "100"])
    assert "d.xyz: a LAMMPS dump extxyz (its Timestep= key): vel:R:3 read in A/ps" in out
    assert f"velocities from d.xyz ({temp:.1f} K); steps from 400, d.xyz's step" in out
    steps = [int(ln.split()[0]) for ln in out.splitlines() if ln.split()[:1] and
             ln.split()[0].isdigit() and len(ln.split()) == 6]  # fmt: skip
    assert steps == [400, 500, 550]  # LAMMPS: the multiples of 100 and the last step
    row = json.loads(_run([*base, "--thermo-every", "100", "--json"]).splitlines()[-1])
    assert row["thermo"][0]["temp"] == pytest.approx(temp, rel=1e-6)
    reset = json.loads(
        _run([*base, "--thermo-every", "100", "--json", "--reset-timestep", "0"]).splitlines()[-1]
    )
    assert [r["step"] for r in reset["thermo"]] == [0, 100, 150]
    assert "steps from 0 (reset_timestep 0)" in reset["velocities"]
    assert [r["etotal"] for r in reset["thermo"]][0] == row["thermo"][0]["etotal"]
