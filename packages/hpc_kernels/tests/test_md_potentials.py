"""EAM potential files: LAMMPS's splines, parsing and writing, the Zhou 2004 generator,
and the NumPy reference against ASE's EAM calculator and (when installed) LAMMPS."""

import numpy as np
import pytest
from wse_hpc.md.lammps import lammps_available, lammps_eval
from wse_hpc.md.potentials import PotentialError, read_potential, spline_coeffs, write_setfl
from wse_hpc.md.reference import eam_reference, spline_slope, spline_value
from wse_hpc.md.testing import (
    POTENTIALS_ENV,
    lammps_potential,
    lammps_potentials_dir,
    lammps_potentials_missing,
    perturbed,
)
from wse_hpc.md.zhou04 import zhou04


def test_splines_interpolate_the_knots_with_a_continuous_slope():
    x = np.linspace(0, 3, 40)
    f = np.sin(x) * np.exp(-x)
    s = spline_coeffs(f, x[1] - x[0])
    # value at p = 0 is the knot, at p = 1 the next knot; slopes agree across each knot
    np.testing.assert_allclose(spline_value(s[:-1], 0.0), f[:-1], rtol=0, atol=1e-15)
    np.testing.assert_allclose(spline_value(s[:-1], 1.0), f[1:], rtol=0, atol=1e-14)
    np.testing.assert_allclose(spline_slope(s[:-2], 1.0), spline_slope(s[1:-1], 0.0), atol=1e-13)


def test_splines_are_fourth_order_inside():
    errors = []
    for n in (40, 80):
        x = np.linspace(0, 3, n)
        s = spline_coeffs(np.sin(x) * np.exp(-x), x[1] - x[0])
        xm = x[:-1] + 0.5 * (x[1] - x[0])
        err = np.abs(spline_value(s[:-1], 0.5) - np.sin(xm) * np.exp(-xm))
        errors.append(err[2:-2].max())  # the end intervals use one-sided slopes (1st order)
    assert np.log2(errors[0] / errors[1]) > 3.5


def test_zhou04_setfl_round_trip(tmp_path):
    pot = zhou04(["Cu", "Ni"], knots=500)
    back = read_potential(write_setfl(pot, tmp_path / "CuNi.eam.alloy"))
    assert back.elements == ("Cu", "Ni") and back.nr == 500
    for name in ("frho", "rhor", "z2r"):
        np.testing.assert_allclose(getattr(back, name), getattr(pot, name), rtol=1e-15)
    assert back.cutoff_A == pytest.approx(pot.cutoff_A, rel=1e-15)


def test_zhou04_cu_cohesive_energy_and_lattice():
    pot = zhou04(["Cu"], knots=2000)
    s = perturbed("fcc", "Cu", pot.lattice_A[0], (4, 4, 4), 0.0, 0)
    res = eam_reference(pot, s.positions_A, s.species(pot.elements), s.box_A)
    # Zhou et al. (2004), Table: E_c(Cu) = 3.54 eV, a = sqrt(2) r_e = 3.615 A; forces vanish
    # up to the fifth neighbour shell, which sits exactly at the cutoff sqrt(10)/2 a (where
    # the functions are ~1e-6 of their peak), so rounding puts some of it in and some out.
    assert res.total_eV / s.num_atoms == pytest.approx(-3.54, abs=0.005)
    assert np.abs(res.forces_eV_A).max() < 1e-4


@pytest.mark.parametrize(
    "text, message",
    [
        ("c\nc\nc\n1 Cu\n100 0.1 100 0.05 4.0\n29 63.5 3.6 fcc\n1.0 x 3.0\n", "line 7 field 2"),
        ("c\nc\nc\n2 Cu\n100 0.1 100 0.05 4.0\n", "says 2 elements but names 1"),
        ("c\nc\nc\n1 Cu\n100 0.1 100 0.05 4.0\n29 63.5 3.6 fcc\n1 2 3\n", "file ends early"),
        ("c\nc\nc\n1 Cu\n100 0.1 100 0.05 -4.0\n", "cutoff = -4.0 must be positive"),
    ],
)
def test_malformed_setfl_names_line_and_field(tmp_path, text, message):
    path = tmp_path / "bad.eam.alloy"
    path.write_text(text)
    with pytest.raises(PotentialError, match=message):
        read_potential(path)


def test_unknown_zhou04_element_is_an_error():
    with pytest.raises(PotentialError, match="no parameters for Xx"):
        zhou04(["Cu", "Xx"])


def test_reference_matches_ase_eam_on_a_generated_setfl(tmp_path):
    from ase import Atoms
    from ase.calculators.eam import EAM

    path = write_setfl(zhou04(["Cu", "Ni"], knots=2000), tmp_path / "CuNi.eam.alloy")
    pot = read_potential(path)
    s = perturbed("fcc", "Cu", 3.58, (4, 4, 4), 0.08, seed=3, symbols=("Cu", "Ni"))
    ours = eam_reference(pot, s.positions_A, s.species(pot.elements), s.box_A)
    atoms = Atoms(symbols=list(s.symbols), positions=s.positions_A, cell=s.box_A, pbc=True)
    atoms.calc = EAM(potential=str(path))
    # ASE interpolates the same tables with scipy's cubic splines instead of LAMMPS's
    # 5-point Hermite rule: on 2000 knots the two differ by ~1e-7 relative in the energy.
    assert ours.total_eV == pytest.approx(atoms.get_potential_energy(), rel=1e-6)
    np.testing.assert_allclose(ours.forces_eV_A, atoms.get_forces(), atol=2e-5)


needs_lammps = pytest.mark.skipif(
    not lammps_available() or lammps_potential("Cu_u3.eam") is None,
    reason="needs lmp (apt-get install lammps) and its potentials: "
    + (lammps_potentials_missing("Cu_u3.eam") or "found"),
)


def test_potential_directory_comes_from_the_environment_first(tmp_path, monkeypatch):
    (tmp_path / "Cu_u3.eam").write_text("stand-in")
    monkeypatch.setenv(POTENTIALS_ENV, str(tmp_path))
    lammps_potentials_dir.cache_clear()
    try:
        assert lammps_potential("Cu_u3.eam") == tmp_path / "Cu_u3.eam"
        assert lammps_potentials_missing("Cu_u3.eam") is None
        reason = lammps_potentials_missing("Zr.eam")
        assert f"{tmp_path} has no Zr.eam" in reason and POTENTIALS_ENV in reason
    finally:
        monkeypatch.delenv(POTENTIALS_ENV)
        lammps_potentials_dir.cache_clear()


@needs_lammps
@pytest.mark.parametrize(
    "name, elements, kind, a, cells",
    [
        ("Cu_u3.eam", ("Cu",), "fcc", 3.615, (4, 4, 4)),
        ("CuNi.eam.alloy", ("Cu", "Ni"), "fcc", 3.56, (4, 4, 4)),
        ("AlFe_mm.eam.fs", ("Al", "Fe"), "bcc", 2.9, (5, 5, 5)),
    ],
)
def test_reference_matches_lammps(name, elements, kind, a, cells):
    path = lammps_potential(name)
    pot = read_potential(path)
    s = perturbed(kind, elements[0], a, cells, 0.1, seed=1, symbols=elements)
    ours = eam_reference(pot, s.positions_A, s.species(pot.elements), s.box_A)
    ref = lammps_eval(s, pot, [path], list(elements))
    assert ours.total_eV == pytest.approx(ref["pe"], rel=1e-10)
    np.testing.assert_allclose(ours.energy_eV, ref["energies"], atol=1e-10)
    np.testing.assert_allclose(ours.forces_eV_A, ref["forces"], atol=1e-9)


@needs_lammps
def test_lammps_reads_our_zhou04_file(tmp_path):
    path = write_setfl(zhou04(["Cu", "Ni"], knots=1000), tmp_path / "CuNi.eam.alloy")
    pot = read_potential(path)
    s = perturbed("fcc", "Cu", 3.58, (4, 4, 4), 0.1, seed=2, symbols=("Cu", "Ni"))
    ours = eam_reference(pot, s.positions_A, s.species(pot.elements), s.box_A)
    ref = lammps_eval(s, pot, [path], ["Cu", "Ni"])
    assert ours.total_eV == pytest.approx(ref["pe"], rel=1e-10)
    np.testing.assert_allclose(ours.forces_eV_A, ref["forces"], atol=1e-9)
