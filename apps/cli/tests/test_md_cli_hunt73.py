"""Hunt 73, a LAMMPS user's holes in `wse hpc md`:

1. atoms outside [0, L) of the periodic box (ASE writes pbc files unwrapped; a coordinate
   printed as exactly L) were refused; they are wrapped as LAMMPS's read_data remaps them,
   with a note saying how many (oracle: the run of the same file wrapped by NumPy first);
3. a funcfl file's atomic number 0 was refused; the structure's element names it;
4. `--potential Cu.eam Ni.eam` said "No such command 'Ni.eam'"; it says to repeat --potential;
and a file's masses column that is not the potential's is noted (the run keeps the
potential's, as LAMMPS's pair_coeff does).
"""

from __future__ import annotations

import numpy as np
import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke, refused_in_one_line
from wse_hpc.md.lattice import crystal
from wse_hpc.md.xyz import read_xyz

pytestmark = pytest.mark.timeout(300)
ROOT = typer.main.get_command(app)


def _xyz(path, symbols, x, box, columns=()) -> None:
    """An extended XYZ file; `columns`: (Properties entry, (N, k) values) after pos."""
    lattice = " ".join(repr(float(v)) for v in np.diag(box).ravel())
    props = "species:S:1:pos:R:3" + "".join(f":{c}" for c, _ in columns)
    values = np.hstack([x, *(np.reshape(v, (len(x), -1)) for _, v in columns)])
    rows = [
        " ".join([sym, *map(repr, map(float, v))]) for sym, v in zip(symbols, values, strict=True)
    ]
    head = f'Lattice="{lattice}" Properties={props} pbc="T T T"'
    path.write_text(f"{len(x)}\n{head}\n" + "\n".join(rows) + "\n")


def _run(structure, *potentials, out=None) -> tuple[int, str]:
    args = ["hpc", "md", "--structure", structure, "--steps", "0", "--precision", "fp64"]
    for p in potentials:
        args += ["--potential", p]
    return invoke(ROOT, args + (["--out", out] if out else []))


def test_atoms_outside_the_box_run_as_the_same_atoms_wrapped_by_numpy(tmp_path, cu):
    s = crystal("fcc", "Cu", 3.615, (4, 4, 4))
    rng = np.random.default_rng(1)
    x = s.positions_A + rng.normal(0, 0.05, s.positions_A.shape)  # ASE's rattle: some < 0
    x[5] += s.box_A * np.array([1, -2, 3])  # images far away
    x[7, 0] = s.box_A[0]  # printed as exactly L
    outside = int(np.any((x < 0) | (x >= s.box_A), axis=1).sum())
    wrapped = np.mod(x, s.box_A)
    wrapped[wrapped >= s.box_A] = 0.0
    _xyz(tmp_path / "r.xyz", s.symbols, x, s.box_A)
    _xyz(tmp_path / "w.xyz", s.symbols, wrapped, s.box_A)
    code, output = _run(tmp_path / "r.xyz", cu, out=tmp_path / "r_out.xyz")
    assert code == 0, output
    assert output.splitlines()[0] == (
        f"r.xyz: {outside} atoms outside the periodic box [0, L) wrapped to their images "
        "inside (as LAMMPS's read_data remaps them)"
    )
    code, output = _run(tmp_path / "w.xyz", cu, out=tmp_path / "w_out.xyz")
    assert code == 0 and "wrapped" not in output, output
    got, want = read_xyz(tmp_path / "r_out.xyz")[-1], read_xyz(tmp_path / "w_out.xyz")[-1]
    np.testing.assert_allclose(got.positions_A, wrapped, rtol=0, atol=1e-8)  # --out's digits
    np.testing.assert_array_equal(got.positions_A, want.positions_A)
    np.testing.assert_allclose(got.forces_eV_A, want.forces_eV_A, rtol=0, atol=1e-12)
    np.testing.assert_allclose(got.energies_eV, want.energies_eV, rtol=0, atol=1e-12)


def test_a_non_periodic_file_stays_refused(tmp_path, cu):
    s = crystal("fcc", "Cu", 3.615, (4, 4, 4))
    _xyz(tmp_path / "n.xyz", s.symbols, s.positions_A - 1.0, s.box_A)
    path = tmp_path / "n.xyz"
    path.write_text(path.read_text().replace('pbc="T T T"', 'pbc="F F F"'))
    refused_in_one_line(
        ROOT,
        ["hpc", "md", "--structure", path, "--potential", cu],
        'n.xyz line 2: pbc="F F F": only periodic boxes are supported',
    )


def _funcfl(path, number: int) -> None:
    """A funcfl file of Cu_u3.eam's size class with analytic tables (Cu_test.eam's forms)."""
    r, rho = np.arange(501) * 0.01, np.arange(501) * 0.08
    x = np.clip(5.0 - r, 0, None)
    sw = np.where(r < 5.0, x**4 / (1 + x**4), 0.0)

    def tab(v):
        return "\n".join(" ".join(f"{a:.16e}" for a in v[i : i + 5]) for i in range(0, len(v), 5))

    tables = [
        -2.0 * np.sqrt(rho) + 0.01 * rho**2,
        10 * np.exp(-r) * sw,
        np.exp(-2 * (r - 2.5)) * sw,
    ]
    head = f"funcfl\n{number} 63.546\n501 8.0e-02 501 1.0e-02 5.0\n"
    path.write_text(head + "\n".join(tab(t) for t in tables) + "\n")


def test_a_funcfl_file_of_atomic_number_0_is_the_structures_element(tmp_path):
    _funcfl(tmp_path / "z0.eam", 0)
    _funcfl(tmp_path / "cu.eam", 29)
    s = crystal("fcc", "Cu", 3.615, (4, 4, 4))
    _xyz(tmp_path / "c.xyz", s.symbols, s.positions_A, s.box_A)
    code, by_zero = _run(tmp_path / "c.xyz", tmp_path / "z0.eam")
    assert code == 0, by_zero
    code, by_29 = _run(tmp_path / "c.xyz", tmp_path / "cu.eam")
    assert code == 0, by_29
    row = [line for line in by_29.splitlines() if line.split()[:1] == ["0"]]
    assert row and row[0] in by_zero.splitlines()  # the same thermo row


def test_two_files_after_one_potential_say_to_repeat_it(tmp_path, cu):
    refused_in_one_line(
        ROOT,
        "hpc md --lattice fcc --element Cu --a 3.615 --cells 4 4 4 "
        "--potential Cu_test.eam Ni_test.eam".split(),
        "'Ni_test.eam' is no argument of `wse hpc md`: --potential takes one file; repeat "
        "--potential for each funcfl file (--potential a.eam --potential b.eam)",
    )
    code, output = invoke(ROOT, ["hpc", "md", "--help"])
    assert "repeat --potential for each funcfl file" in " ".join(output.split())


def test_a_masses_column_other_than_the_potentials_is_noted(tmp_path, cu):
    s = crystal("fcc", "Cu", 3.615, (4, 4, 4))
    masses = np.full(s.num_atoms, 60.0)
    momenta = np.random.default_rng(2).normal(0, 0.5, s.positions_A.shape)
    columns = [("masses:R:1", masses), ("momenta:R:3", momenta)]
    _xyz(tmp_path / "m.xyz", s.symbols, s.positions_A, s.box_A, columns)
    code, output = _run(tmp_path / "m.xyz", cu)
    assert code == 0, output
    assert output.splitlines()[0].startswith(
        "the structure's masses:R:1 differ from the potential's (Cu: 60 in the file, "
    )
    assert output.splitlines()[0].endswith(
        f"amu in Cu.eam.alloy; {s.num_atoms} atoms): the run uses the potential's, as LAMMPS's "
        "pair_coeff sets them; velocities from momenta:R:3 were read with the file's"
    )
