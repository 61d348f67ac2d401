"""Hunt 74 hole 2: `run_md` (the Python API) refused an atom just outside the periodic box
("atom 3 at [-0.0276911, ...] lies outside the box [0, L)") while `wse hpc md` wraps it
(`lattice.wrap_into_box`, hunt 73), as LAMMPS remaps atoms into a periodic box on read_data
and at each run's start. Now the API wraps too (`run_setup.in_box`, on a copy).

Oracle: NumPy's all-pairs EAM (`reference.eam_reference`) on the positions wrapped by
`np.mod`; the API's and the CLI's forces for the same outside-the-box file are both it.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import jax
import numpy as np
import pytest
from wse_core import preset
from wse_hpc.md import read_potential, write_setfl, zhou04
from wse_hpc.md.config import MdConfig
from wse_hpc.md.reference import eam_reference
from wse_hpc.md.simulate import run_md
from wse_hpc.md.testing import perturbed
from wse_hpc.md.xyz import read_xyz, write_xyz

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    """(outside.xyz, Cu.eam.alloy, the structure as read, the potential): a perturbed Cu
    crystal with atom 3 a box length to the left in x, atom 9 one up in every axis and
    the atom nearest the top in z just below 0."""
    tmp = tmp_path_factory.mktemp("wrap74")
    s = perturbed("fcc", "Cu", 3.615, (4, 4, 4), 0.05, seed=2)
    box = s.box_A
    near_top = int(np.argmax(s.positions_A[:, 2]))  # an atom at z ~ L, put just below 0
    assert near_top not in (3, 9)
    s.positions_A[near_top, 2] -= box[2]
    s.positions_A[3, 0] -= box[0]
    s.positions_A[9] += box
    path = write_xyz(tmp / "outside.xyz", [s])
    pot_path = tmp / "Cu.eam.alloy"
    write_setfl(zhou04(["Cu"], knots=1000), pot_path, ["hunt 74", "zhou04 Cu", "1000 knots"])
    s = read_xyz(path)[-1]  # as the CLI reads it (10 digits): the oracle's positions too
    assert np.any((s.positions_A < 0) | (s.positions_A >= s.box_A), axis=1).sum() == 3
    return path, pot_path, s, read_potential(pot_path, species=["Cu"])


def _oracle(s, pot) -> np.ndarray:
    wrapped = np.mod(s.positions_A, s.box_A)
    return eam_reference(pot, wrapped, s.species(pot.elements), s.box_A).forces_eV_A


def _api_forces(s, pot) -> tuple[np.ndarray, float]:
    cfg = MdConfig(steps=0, dtype="float64", spec=preset("small"))
    with jax.enable_x64(True):
        res = run_md(s, pot, cfg)
    return res.structure.forces_eV_A, res.thermo[0].pe


def test_the_api_wraps_an_outside_atom_as_numpy_modulo_does(case):
    _, _, s, pot = case
    before = s.positions_A.copy()
    forces, pe = _api_forces(s, pot)  # before: WseError "atom 3 at ... lies outside the box"
    np.testing.assert_array_equal(s.positions_A, before)  # the caller's structure as given
    want = _oracle(s, pot)
    # fp64 through LAMMPS's splines both: 1e-10 eV/A (test_md_potentials' tolerance)
    np.testing.assert_allclose(forces, want, rtol=0, atol=1e-10)
    inside = dataclasses.replace(s, positions_A=np.mod(s.positions_A, s.box_A))
    forces_in, pe_in = _api_forces(inside, pot)
    np.testing.assert_allclose(forces, forces_in, rtol=0, atol=1e-12)
    assert pe == pytest.approx(pe_in, rel=1e-13)


def test_the_cli_and_the_api_give_the_same_forces_for_the_same_file(case, tmp_path):
    path, pot_path, s, pot = case
    out = tmp_path / "f.xyz"
    args = ["hpc", "md", "--structure", str(path), "--potential", str(pot_path), "--steps",
            "0", "--precision", "fp64", "--preset", "small", "--out", str(out)]  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "wse_cli", *args], capture_output=True,
                          text=True, timeout=240, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stdout.splitlines()[0] == (
        "outside.xyz: 3 atoms outside the periodic box [0, L) wrapped to their images inside "
        "(as LAMMPS's read_data remaps them)"
    )
    cli = read_xyz(out)[-1].forces_eV_A
    api, _ = _api_forces(s, pot)
    # the CLI's --out prints 10 significant digits: forces of ~1 eV/A to ~1e-10
    np.testing.assert_allclose(cli, api, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(cli, _oracle(s, pot), rtol=1e-9, atol=1e-10)
