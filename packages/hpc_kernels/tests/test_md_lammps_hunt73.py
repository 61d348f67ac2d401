"""Hunt 73, a LAMMPS user's holes in the MD library, each against an oracle of its own:

1. atoms outside [0, L) of the periodic box were refused; `wrap_into_box` puts them at their
   images as LAMMPS's read_data does (oracle: NumPy's `np.mod`, an exact L put at 0);
2. an element line of only "atomic number, mass" was refused (LAMMPS's pair_eam and
   pair_eam_alloy read `next_values(2)`); and "the file was read as funcfl ... by its name"
   followed every funcfl error, real funcfl files' too (oracle: the same file with the full
   line reads to the same tables);
3. a funcfl atomic number outside 1 .. 83 (0, U's 92) was refused; LAMMPS ignores it;
5. funcfl's F extended linearly from the common table's end, where LAMMPS's `file2array`
   keeps rhomax = the files' largest (Nrho - 1) * drho after nrho = rhomax / drho (oracle: a
   NumPy port of pair_eam.cpp's file2array, interpolate and compute, below).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from wse_hpc.md.lattice import Structure, check_box, wrap_into_box
from wse_hpc.md.potentials import PotentialError, read_potential, write_setfl

CUT = 5.0


# -- funcfl files of analytic functions ----------------------------------------------------------
def _tab(v: np.ndarray) -> str:
    return "\n".join(" ".join(f"{x:.16e}" for x in v[i : i + 5]) for i in range(0, len(v), 5))


def _funcfl(path, element_line: str, *, nrho=501, drho=0.08, nr=501, dr=0.01, k=1.0, a=1.0):
    """F = -2 sqrt(rho) + 0.01 rho^2, rho(r) = a exp(-2 (r - 2.5)), Z(r) = 10 exp(-k r), each
    cut smoothly at 5 A (Cu_test.eam's forms)."""
    r, rho = np.arange(nr) * dr, np.arange(nrho) * drho
    x = np.clip(CUT - r, 0, None)
    sw = np.where(r < CUT, x**4 / (1 + x**4), 0.0)
    text = [
        "funcfl test",
        element_line,
        f"{nrho} {drho:.16e} {nr} {dr:.16e} {CUT}",
        _tab(-2.0 * np.sqrt(rho) + 0.01 * rho**2),
        _tab(10.0 * np.exp(-k * r) * sw),
        _tab(a * np.exp(-2.0 * (r - 2.5)) * sw),
    ]
    path.write_text("\n".join(text) + "\n")
    return path


# -- the oracle: LAMMPS's pair_eam.cpp in NumPy, 1-based as it is ---------------------------------
def _interpolate(f: np.ndarray, delta: float) -> np.ndarray:
    """PairEAM::interpolate."""
    n = len(f)
    s = np.zeros((n + 1, 7))
    s[1:, 6] = f
    s[1, 5] = s[2, 6] - s[1, 6]
    s[2, 5] = 0.5 * (s[3, 6] - s[1, 6])
    s[n - 1, 5] = 0.5 * (s[n, 6] - s[n - 2, 6])
    s[n, 5] = s[n, 6] - s[n - 1, 6]
    for m in range(3, n - 1):
        s[m, 5] = ((s[m - 2, 6] - s[m + 2, 6]) + 8.0 * (s[m + 1, 6] - s[m - 1, 6])) / 12.0
    for m in range(1, n):
        s[m, 4] = 3.0 * (s[m + 1, 6] - s[m, 6]) - 2.0 * s[m, 5] - s[m + 1, 5]
        s[m, 3] = s[m, 5] + s[m + 1, 5] - 2.0 * (s[m + 1, 6] - s[m, 6])
    s[n, 3:5] = 0.0
    s[:, 2] = s[:, 5] / delta
    s[:, 1] = 2.0 * s[:, 4] / delta
    s[:, 0] = 3.0 * s[:, 3] / delta
    return s


def _at(s: np.ndarray, x: float, delta: float, n: int) -> tuple[float, float]:
    """PairEAM::compute's lookup: (value, derivative)."""
    p = x / delta + 1.0
    m = max(1, min(int(p), n - 1))
    p = min(p - m, 1.0)
    c = s[m]
    return ((c[3] * p + c[4]) * p + c[5]) * p + c[6], (c[0] * p + c[1]) * p + c[2]


def _file2array(paths) -> dict:
    """PairEAM::read_file + file2array for funcfl files, one type per file."""
    files = []
    for path in paths:
        lines = path.read_text().split("\n")
        g = lines[2].split()
        nrho, drho, nr, dr = int(g[0]), float(g[1]), int(g[2]), float(g[3])
        t = np.array(" ".join(lines[3:]).split(), float)
        files.append((nrho, drho, nr, dr, t[:nrho], t[nrho : nrho + nr], t[nrho + nr :]))
    dr = max(f[3] for f in files)
    drho = max(f[1] for f in files)
    rmax = max((f[2] - 1) * f[3] for f in files)
    rhomax = max((f[0] - 1) * f[1] for f in files)
    nr, nrho = int(rmax / dr + 0.5), int(rhomax / drho + 0.5)

    def lagrange(values, step, n_new, new_step):
        f1, n, out = np.concatenate([[0.0], values]), len(values), np.zeros(n_new)
        for m in range(1, n_new + 1):
            p = (m - 1) * new_step / step + 1.0
            k = max(min(int(p), n - 2), 2)
            p = min(p - k, 2.0)
            c = (-p * (p - 1) * (p - 2) / 6, 0.5 * (p * p - 1) * (p - 2),
                 -0.5 * p * (p + 1) * (p - 2), p * (p * p - 1) / 6)  # fmt: skip
            out[m - 1] = c[0] * f1[k - 1] + c[1] * f1[k] + c[2] * f1[k + 1] + c[3] * f1[k + 2]
        return out

    frho = [lagrange(f[4], f[1], nrho, drho) for f in files]
    zr = [lagrange(f[5], f[3], nr, dr) for f in files]
    rho = [lagrange(f[6], f[3], nr, dr) for f in files]
    z2r = {
        (a, b): 27.2 * 0.529 * zr[a] * zr[b] for a in range(len(files)) for b in range(len(files))
    }
    return dict(nrho=nrho, drho=drho, nr=nr, dr=dr, rhomax=rhomax, frho=frho, rho=rho, z2r=z2r)


def _lammps_energy(P: dict, x: np.ndarray, types: np.ndarray, box: np.ndarray) -> float:
    """PairEAM::compute's energy (eng_vdwl), every pair under minimum image."""
    sf = [_interpolate(f, P["drho"]) for f in P["frho"]]
    sr = [_interpolate(f, P["dr"]) for f in P["rho"]]
    sz = {k: _interpolate(v, P["dr"]) for k, v in P["z2r"].items()}
    d = x[:, None] - x[None]
    d -= box * np.round(d / box)
    r = np.sqrt((d**2).sum(-1))
    n, energy, rho = len(x), 0.0, np.zeros(len(x))
    pairs = [(i, j) for i in range(n) for j in range(n) if i != j and r[i, j] < CUT]
    for i, j in pairs:
        rho[i] += _at(sr[types[j]], r[i, j], P["dr"], P["nr"])[0]
        if i < j:
            energy += _at(sz[types[i], types[j]], r[i, j], P["dr"], P["nr"])[0] / r[i, j]
    for i in range(n):
        phi, fp = _at(sf[types[i]], rho[i], P["drho"], P["nrho"])
        if rho[i] > P["rhomax"]:
            phi += fp * (rho[i] - P["rhomax"])
        energy += phi
    return energy


# -- 1: atoms outside the periodic box ----------------------------------------------------------
def test_atoms_outside_the_box_are_wrapped_as_numpy_mod_wraps_them():
    box = np.array([10.0, 12.0, 14.0])
    rng = np.random.default_rng(3)
    x = rng.uniform(-25, 40, (200, 3))
    x[0] = [10.0, 0.0, 0.0]  # a coordinate printed as exactly L
    x[1] = [-1e-17, 5.0, 5.0]  # mod rounds it to L
    x[2] = [1.0, 2.0, 3.0]  # inside
    s = Structure(np.array(["Cu"] * len(x)), x.copy(), box)
    want = np.mod(x, box)
    want[want >= box] = 0.0
    inside = np.all((x >= 0) & (x < box), axis=1)
    assert wrap_into_box(s) == int((~inside).sum())
    np.testing.assert_array_equal(s.positions_A, want)
    assert np.all((s.positions_A >= 0) & (s.positions_A < box))
    check_box(s)  # takes them now
    assert s.positions_A[0, 0] == 0.0 and s.positions_A[1, 0] == 0.0


@pytest.mark.parametrize(
    ("far", "message"),
    [
        (np.nan, "atom 0 has position"),
        (2e6, "atom 0 at [2000000.0, 0.0, 0.0] lies outside"),
        (-1e308, "farther, a position's place in the box"),
    ],
)
def test_a_non_finite_or_far_position_is_still_refused_after_the_wrap(far, message):
    """Past 1e6 A a double's spacing nears the box (1e308 mod 5 is rounding noise)."""
    s = Structure(np.array(["Cu", "Cu"]), np.array([[far, 0, 0], [-1.0, 0, 0]]), np.ones(3) * 5)
    assert wrap_into_box(s) == 1 and s.positions_A[1, 0] == 4.0
    with pytest.raises(Exception, match=re.escape(message)):
        check_box(s)


# -- 2: an element line of two fields; the setfl hint only for a setfl ----------------------------
def test_an_element_line_of_atomic_number_and_mass_reads_as_the_full_line(tmp_path):
    full = read_potential(_funcfl(tmp_path / "full.eam", "29 63.546 3.615 fcc"))
    two = read_potential(_funcfl(tmp_path / "two.eam", "29 63.546"))
    assert two.elements == ("Cu",) and two.masses_amu == (63.546,)
    for name in ("frho", "rhor", "z2r"):
        np.testing.assert_array_equal(getattr(two, name), getattr(full, name))
    setfl = write_setfl(full, tmp_path / "full.eam.alloy")
    lines = setfl.read_text().split("\n")
    assert lines[5].split()[:2] == ["29", "63.546"]
    lines[5] = "29 63.546"
    (tmp_path / "two.eam.alloy").write_text("\n".join(lines))
    back = read_potential(tmp_path / "two.eam.alloy")
    np.testing.assert_array_equal(back.frho, read_potential(setfl).frho)
    np.testing.assert_array_equal(back.z2r, read_potential(setfl).z2r)


def test_an_element_line_of_one_field_is_refused(tmp_path):
    with pytest.raises(PotentialError) as e:
        read_potential(_funcfl(tmp_path / "one.eam", "29"))
    assert str(e.value) == (
        "one.eam line 2: expected at least 2 fields (atomic number, mass, lattice constant, "
        "lattice), found 1"
    )


def test_a_funcfl_files_own_error_has_no_setfl_naming_hint(tmp_path):
    path = _funcfl(tmp_path / "bad.eam", "29 63.546 3.615 fcc")
    lines = path.read_text().split("\n")
    lines[3] = "oops " + lines[3]
    path.write_text("\n".join(lines))
    with pytest.raises(PotentialError) as e:
        read_potential(path)
    assert str(e.value) == "bad.eam line 4 field 1: 'oops' is not a number (reading F(rho))"


# -- 3: atomic numbers LAMMPS ignores ------------------------------------------------------------
def test_a_funcfl_atomic_number_of_0_takes_the_structures_element(tmp_path):
    cu = read_potential(_funcfl(tmp_path / "cu.eam", "29 63.546"))
    z0 = read_potential(_funcfl(tmp_path / "z0.eam", "0 63.546"), species=["Cu"])
    assert z0.elements == ("Cu",) and z0.numbers == (0,)
    np.testing.assert_array_equal(z0.frho, cu.frho)
    ni = _funcfl(tmp_path / "ni.eam", "28 58.69", k=0.9, a=1.3)
    both = read_potential([tmp_path / "z0.eam", ni], species=["Ni", "Cu"])
    assert both.elements == ("Cu", "Ni")


def test_uranium_92_is_an_element(tmp_path):
    assert read_potential(_funcfl(tmp_path / "u.eam", "92 238.03")).elements == ("U",)


@pytest.mark.parametrize(
    ("species", "those"), [((), ""), (("Cu", "Ni"), " (the structure's Cu, Ni)")]
)
def test_an_atomic_number_that_names_no_element_says_what_to_set(tmp_path, species, those):
    path = _funcfl(tmp_path / "z0.eam", "0 63.546")
    with pytest.raises(PotentialError) as e:
        read_potential(path, species=species)
    assert str(e.value) == (
        "z0.eam line 2 field 1: atomic number 0 names no element: wse names a funcfl file's "
        f"element by it; set it to the atomic number of the element the file is for{those}, "
        "e.g. 29 for Cu"
    )


# -- 5: F's linear extension from LAMMPS's funcfl rhomax ------------------------------------------
def test_funcfl_energy_past_the_table_is_lammps_file2arrays(tmp_path):
    """An alloy compressed to a = 2.75 A (densities 45-60, past both tables' 40 and 35):
    the float64 run's energy is the oracle's, and the tables' own end is 8 eV off."""
    from wse_core.hw.presets import preset
    from wse_hpc.md import MdConfig, run_md
    from wse_hpc.md.lattice import crystal
    from wse_hpc.md.reference import eam_reference

    cu = _funcfl(tmp_path / "cu.eam", "29 63.546", nrho=501, drho=0.08)  # rho to 40
    ni = _funcfl(tmp_path / "ni.eam", "28 58.69", nrho=701, drho=0.05, k=0.9, a=1.3)  # to 35
    pot = read_potential([cu, ni])
    s = crystal("fcc", "Cu", 2.75, (4, 4, 4))
    s.symbols = np.where(np.random.default_rng(5).random(s.num_atoms) < 0.5, "Cu", "Ni")
    s.positions_A += np.random.default_rng(6).normal(0, 0.03, s.positions_A.shape)
    wrap_into_box(s)
    types = s.species(pot.elements)
    P = _file2array([cu, ni])
    want = _lammps_energy(P, s.positions_A, types, s.box_A)
    assert pot.rhomax == P["rhomax"] == 40.0 and pot.nrho == P["nrho"] == 500
    ref = eam_reference(pot, s.positions_A, types, s.box_A)
    assert ref.rho.min() > 40.0
    assert ref.total_eV == pytest.approx(want, rel=1e-11)
    res = run_md(s, pot, MdConfig(spec=preset("small"), steps=0, dtype="float64"))
    assert res.thermo[0].pe == pytest.approx(want, rel=1e-11)
    end = dict(P, rhomax=(P["nrho"] - 1) * P["drho"])  # what wse did before
    assert abs(_lammps_energy(end, s.positions_A, types, s.box_A) - want) > 1.0
