"""`wse hpc md`'s potential and structure inputs of hunt 68, end to end. Before the fixes:
LAMMPS's Fe_mm.eam.fs (10,000-knot tables) was refused with `use at most 3996 knots (e.g.
`wse hpc md potential --knots 3996`)`, which writes Zhou's 2004 potential, not the user's
file resampled (and 3996 did not fit either: the neighbour lists come after the tables);
NiAlH_jea on pure Ni was refused for the SRAM of Al's and H's tables; OVITO's
`Origin="-7.23 -7.23 -7.23"` was ignored and the atoms it places were "outside the box
[0, L)"; Cu_u3.eam with Cu_u6.eam ran Cu_u6 alone; a setfl after a funcfl was "read as
funcfl" and told to be named *.eam.alloy; a LAMMPS dump got no conversion hint."""

from __future__ import annotations

import re

import numpy as np
import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke, refused_in_one_line
from wse_hpc.md.lammps import lammps_available, lammps_eval
from wse_hpc.md.potentials import read_potential, write_setfl
from wse_hpc.md.reference import eam_reference
from wse_hpc.md.testing import lammps_potential, perturbed
from wse_hpc.md.xyz import read_xyz, write_xyz
from wse_hpc.md.zhou04 import zhou04

pytestmark = pytest.mark.timeout(300)
ROOT = typer.main.get_command(app)


def _md(structure, *potentials, extra=()) -> list:
    pots = [a for p in potentials for a in ("--potential", p)]
    return ["hpc", "md", "--structure", structure, *pots, "--preset", "small", *extra]


def _structure(tmp_path, seed: int = 7):
    path = write_xyz(tmp_path / "s.xyz", [perturbed("fcc", "Cu", 3.615, (4, 4, 4), 0.12, seed)])
    return read_xyz(path)[-1], path  # as written (10 digits): the oracles' positions too


def _resampled_run(tmp_path, structure, potential) -> tuple[float, np.ndarray]:
    """The advice's knots, run with them in fp64: (the reported force error, the forces)."""
    args = _md(structure, potential, extra=["--steps", "0"])
    line = refused_in_one_line(ROOT, args, " (the most that fit: each table is cut to that many")
    assert "wse hpc md potential" not in line  # hunt 68: it wrote a different potential
    knots = re.search(r"--potential-knots (\d+) ", line).group(1)
    out = tmp_path / "f.xyz"
    extra = ["--potential-knots", knots, "--precision", "fp64", "--steps", "0", "--out", out]
    code, output = invoke(ROOT, _md(structure, potential, extra=extra))
    assert code == 0, output[-3000:]
    first = output.splitlines()[0]
    assert first.startswith(f"{potential.name}: tables resampled from ") and (
        f"to {knots} x {knots} knots (rho x r) with LAMMPS's splines; max abs change on 256 "
        "atoms: force " in first
    ), first
    reported = float(re.search(r"force ([0-9.e+-]+) eV/A", first).group(1))
    return reported, read_xyz(out)[-1].forces_eV_A


def test_a_file_too_big_for_sram_runs_resampled_within_the_error_it_reports(tmp_path):
    s, structure = _structure(tmp_path)
    path = write_setfl(zhou04(["Cu"], knots=10_000), tmp_path / "Cu10k.eam.alloy")
    reported, forces = _resampled_run(tmp_path, structure, path)
    pot = read_potential(path)  # the oracle: the file's own splines, NumPy's all-pairs EAM
    ref = eam_reference(pot, s.positions_A, s.species(pot.elements), s.box_A).forces_eV_A
    # the line prints 2 digits: the error is within the rounding of what it says
    assert 0 < np.abs(forces - ref).max() <= reported * 1.05 + 1e-12


@pytest.mark.skipif(
    not lammps_available() or lammps_potential("Cu_mishin1.eam.alloy") is None,
    reason="needs lmp and LAMMPS's Cu_mishin1.eam.alloy",
)
def test_lammps_own_file_resampled_gives_lammps_forces_within_the_reported_error(tmp_path):
    s, structure = _structure(tmp_path, seed=8)
    path = lammps_potential("Cu_mishin1.eam.alloy")
    reported, forces = _resampled_run(tmp_path, structure, path)
    ref = lammps_eval(s, read_potential(path), [path], ["Cu"])["forces"]
    assert np.abs(forces - ref).max() <= reported * 1.05 + 1e-10


def test_unused_elements_take_no_sram_and_an_origin_shifts_the_box(tmp_path):
    s, _ = _structure(tmp_path, seed=9)
    three = zhou04(["Cu", "Ni", "Al"], knots=2000)  # 96,000 B of tables; Cu's alone 24,000
    path = write_setfl(three, tmp_path / "CuNiAl.eam.alloy")
    lines = (tmp_path / "s.xyz").read_text().splitlines()  # as OVITO writes a -L/2..L/2 box
    lines[1] = 'Origin="-7.23 -7.23 -7.23" ' + lines[1]
    lines[2:] = [
        " ".join([f[0], *(repr(float(v) - 7.23) for v in f[1:4]), *f[4:]])
        for f in (ln.split() for ln in lines[2:])
    ]
    (tmp_path / "o.xyz").write_text("\n".join(lines) + "\n")
    code, output = invoke(ROOT, _md(tmp_path / "o.xyz", path, extra=["--precision", "fp64"]))
    assert code == 0, output[-3000:]
    assert output.splitlines()[0] == (
        "o.xyz: positions shifted by -Origin (-7.23, -7.23, -7.23) A into the box [0, L), "
        "where the run and --out keep them"
    )
    assert output.splitlines()[1].startswith("256 atoms, Cu (setfl)")
    row = next(ln.split() for ln in output.splitlines() if ln.split()[:1] == ["0"])
    ref = eam_reference(three, s.positions_A, s.species(three.elements), s.box_A)
    assert float(row[1]) == pytest.approx(ref.total_eV, abs=1e-7)  # 8 decimals printed


def test_potential_files_that_do_not_go_together_are_refused(tmp_path, cu):
    _, structure = _structure(tmp_path)
    funcfl = tmp_path / "Cu_u3.eam"
    funcfl.write_text(
        "made-up\n29 63.546 3.615 fcc\n5 0.1 5 1.0 4.0\n0 -1 -1.4 -1.7 -2\n" + "1 1 1 1 1\n" * 2
    )
    refused_in_one_line(ROOT, _md(structure, funcfl, cu),
                        "Cu.eam.alloy is a setfl (eam/alloy), which holds every element of its "
                        "potential: give it alone, not with funcfl files (Cu_u3.eam)")  # fmt: skip
    (tmp_path / "Cu_u6.eam").write_bytes(funcfl.read_bytes())
    refused_in_one_line(ROOT, _md(structure, funcfl, tmp_path / "Cu_u6.eam"),
                        "Cu_u3.eam and Cu_u6.eam are both for Cu (atomic number 29); give one "
                        "funcfl file per element")  # fmt: skip


def test_a_lammps_dump_as_structure_is_told_how_to_convert_it(tmp_path, cu):
    dump = tmp_path / "d.dump"
    dump.write_text(
        "ITEM: TIMESTEP\n0\nITEM: NUMBER OF ATOMS\n1\nITEM: BOX BOUNDS pp pp pp\n0 20\n0 20\n"
        "0 20\nITEM: ATOMS id type x y z\n1 1 1 1 1\n"
    )
    refused_in_one_line(ROOT, _md(dump, cu), "it looks like a LAMMPS dump file (dump "
                        "atom/custom); --structure reads extended XYZ: convert it, e.g. `ase "
                        "convert -i lammps-dump-text d.dump d.xyz`")  # fmt: skip
