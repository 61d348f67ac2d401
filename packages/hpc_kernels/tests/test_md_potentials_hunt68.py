"""EAM potential and structure readers against LAMMPS, hunt 68. Before the fixes:

- a blank line after the grid line, or a whole-line `# comment` before a table, was refused
  (`line 6: expected 3 fields ...`, `'#' is not a number`) while LAMMPS reads both;
- two funcfl files for one element: the last was used and the first dropped without a word;
- a setfl given after a funcfl was read as funcfl and told to be named *.eam.alloy (it was);
- a gzipped funcfl file was told to gunzip it and to rename it as a setfl;
- tables that do not fit a PE were refused with advice (`wse hpc md potential --knots N`)
  that writes Zhou's 2004 potential, not the user's file resampled, and the most knots it
  named did not fit (the neighbour lists come after the tables); elements no atom uses
  counted against the SRAM;
- OVITO's `Origin="x y z"` was ignored, so atoms inside the declared box were refused;
- a LAMMPS dump given as a structure got no conversion hint.
"""

import gzip

import jax
import numpy as np
import pytest
from wse_core import preset
from wse_core.hw.wafer import build_wafer
from wse_hpc.md.eam import EamPlan, knots_that_fit, sram_plan, table_bytes
from wse_hpc.md.lammps import lammps_available, lammps_eval
from wse_hpc.md.potential_format import table_text
from wse_hpc.md.potentials import PotentialError, read_potential, write_setfl
from wse_hpc.md.reference import eam_reference
from wse_hpc.md.resample import resample, resample_cost
from wse_hpc.md.testing import lammps_potential, perturbed
from wse_hpc.md.xyz import XyzError, read_frames, read_xyz, write_xyz
from wse_hpc.md.zhou04 import zhou04


def _funcfl(path, scale=1.0, number=29):
    """A funcfl file (LAMMPS pair_style eam) of smooth made-up tables, `scale` apart."""
    rho, r = np.arange(500) * 0.01, np.arange(500) * 0.01
    text = (
        f"made-up funcfl\n{number} 63.546 3.615 fcc\n500 0.01 500 0.01 4.99\n"
        + table_text(-np.sqrt(rho) * scale)
        + table_text(5.0 * np.exp(-r) * scale)
        + table_text(np.exp(-r))
    )
    path.write_text(text)
    return path


def _edited(path, out, after_line: int, text: str):
    """`path` with `text` inserted after its line `after_line` (1-based), as `out`."""
    lines = path.read_text().splitlines()
    lines.insert(after_line, text)
    out.write_text("\n".join(lines) + "\n")
    return out


def _same(a, b):
    for name in ("frho", "rhor", "z2r"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))


# -- hole 5: blank and comment lines, as LAMMPS's PotentialFileReader reads them -----------------
@pytest.mark.parametrize("line, text", [(5, ""), (6, "# F(rho) of Cu"), (4, "   # the grid")])
def test_blank_and_comment_lines_in_a_setfl_are_read_as_lammps_reads_them(tmp_path, line, text):
    clean = write_setfl(zhou04(["Cu"], knots=200), tmp_path / "Cu.eam.alloy")
    _same(
        read_potential(_edited(clean, tmp_path / "x.eam.alloy", line, text)), read_potential(clean)
    )


def test_a_comment_after_table_values_is_dropped_and_funcfl_skips_blank_lines(tmp_path):
    clean = _funcfl(tmp_path / "Cu.eam")
    lines = clean.read_text().splitlines()
    lines[3] += " # the first F values"
    lines.insert(3, "")
    (tmp_path / "x.eam").write_text("\n".join(lines) + "\n")
    _same(read_potential(tmp_path / "x.eam"), read_potential(clean))


@pytest.mark.parametrize(
    "text, message",
    [  # no more lenient than LAMMPS: its 3 comment lines are any 3 lines, blank or not
        ("c\n\nc\nc\n1 Cu\n", "line 4 field 1: 'c' is not an element count"),
        ("c\nc\nc\n1 Cu Ni\n", "line 4: says 1 elements but names 2"),  # LAMMPS refuses it
    ],
)
def test_what_lammps_refuses_is_still_refused(tmp_path, text, message):
    path = tmp_path / "bad.eam.alloy"
    path.write_text(text + "100 0.1 100 0.05 4.0\n")
    with pytest.raises(PotentialError) as e:
        read_potential(path)
    assert str(e.value) == (
        f"bad.eam.alloy {message} (setfl line 4 is 'N el1 ... elN')"
        if "count" in message
        else f"bad.eam.alloy {message}"
    )


@pytest.mark.skipif(
    not lammps_available() or lammps_potential("Cu_u3.eam") is None,
    reason="needs lmp and LAMMPS's Cu_u3.eam",
)
def test_lammps_and_wse_read_a_commented_funcfl_alike(tmp_path):
    path = _edited(lammps_potential("Cu_u3.eam"), tmp_path / "Cu_c.eam", 3, "")
    path = _edited(path, tmp_path / "Cu_cc.eam", 5, "# F(rho) of Cu")
    pot = read_potential(path)
    s = perturbed("fcc", "Cu", 3.615, (4, 4, 4), 0.1, seed=2)
    ours = eam_reference(pot, s.positions_A, s.species(pot.elements), s.box_A)
    ref = lammps_eval(s, pot, [path], ["Cu"])
    assert ours.total_eV == pytest.approx(ref["pe"], rel=1e-10)
    np.testing.assert_allclose(ours.forces_eV_A, ref["forces"], atol=1e-9)


# -- holes 4, 7, 10: which files go together ------------------------------------------------------
def test_two_funcfl_files_for_one_element_are_refused(tmp_path):
    a, b = _funcfl(tmp_path / "Cu_a.eam"), _funcfl(tmp_path / "Cu_b.eam", scale=1.1)
    with pytest.raises(PotentialError) as e:
        read_potential([a, b])
    assert str(e.value) == (
        "Cu_a.eam and Cu_b.eam are both for Cu (atomic number 29); give one funcfl file per element"
    )
    with pytest.raises(PotentialError, match="^Cu_a.eam is given twice; give one funcfl"):
        read_potential([a, a])
    ni = _funcfl(tmp_path / "Ni.eam", scale=0.9, number=28)
    assert read_potential([a, ni]).elements == ("Cu", "Ni")  # one file per element: read


@pytest.mark.parametrize("setfl_first", [False, True])
def test_a_setfl_with_a_funcfl_is_refused_as_a_setfl(tmp_path, setfl_first):
    setfl = write_setfl(zhou04(["Cu", "Ni"], knots=200), tmp_path / "CuNi.eam.alloy")
    paths = [setfl, _funcfl(tmp_path / "Cu_u3.eam")]
    with pytest.raises(PotentialError) as e:
        read_potential(paths if setfl_first else paths[::-1])
    assert str(e.value) == (
        "CuNi.eam.alloy is a setfl (eam/alloy), which holds every element of its potential: "
        "give it alone, not with funcfl files (Cu_u3.eam); LAMMPS's pair_style eam reads "
        "funcfl files only"
    )


def test_a_gzipped_funcfl_is_told_only_to_unpack_it(tmp_path):
    path = tmp_path / "Cu_u3.eam.gz"
    path.write_bytes(gzip.compress(_funcfl(tmp_path / "Cu_u3.eam").read_bytes()))
    with pytest.raises(PotentialError) as e:
        read_potential(path)
    assert str(e.value) == (
        f"potential file {str(path)!r} is not a text file (it is gzip-compressed: unpack it "
        "with gunzip first)"
    )


# -- hole 3: the tables a PE holds ---------------------------------------------------------------
def test_unused_elements_are_not_loaded_and_change_nothing():
    pot = zhou04(["Cu", "Ni", "Al"], knots=300)
    cu = pot.restricted({"Cu"})
    assert cu.elements == ("Cu",) and table_bytes(cu) * 4 == table_bytes(pot)  # 12 N vs 48 N
    s = perturbed("fcc", "Cu", 3.615, (4, 4, 4), 0.1, seed=4)
    full = eam_reference(pot, s.positions_A, s.species(pot.elements), s.box_A)
    only = eam_reference(cu, s.positions_A, s.species(cu.elements), s.box_A)
    np.testing.assert_array_equal(only.forces_eV_A, full.forces_eV_A)
    assert only.total_eV == full.total_eV


def test_the_advice_names_the_most_knots_that_fit_with_the_lists():
    pot = zhou04(["Cu"], knots=10_000)
    wafer = build_wafer(preset("small"), grid=(8, 8), devices=jax.devices("cpu")[:1])
    plan = EamPlan(k_rows=3, k_cols=3, box_A=(30.0, 30.0, 30.0), caps=(8, 8, 8, 40))
    with pytest.raises(Exception, match=r"--potential-knots (\d+) \(the most that fit") as e:
        sram_plan(wafer, pot, plan)
    fit = int(str(e.value).split("--potential-knots ")[1].split()[0])
    assert fit == knots_that_fit(pot, table_bytes(pot, fit) + 11)  # 12 B a knot
    sram_plan(wafer, resample(pot, fit), plan)  # fits, with the lists after it
    with pytest.raises(Exception, match=f"--potential-knots {fit} "):
        sram_plan(wafer, resample(pot, fit + 1), plan)


def test_resampled_tables_are_the_old_splines_at_the_new_knots():
    pot = zhou04(["Cu", "Ni"], knots=3001)
    new = resample(pot, 1001)  # 3000 / 1000: every new knot is every third old knot
    assert (new.nrho, new.nr) == (1001, 1001) and new.cutoff_A == pot.cutoff_A
    assert (new.nr - 1) * new.dr == pytest.approx((pot.nr - 1) * pot.dr, rel=1e-15)
    for name in ("frho", "rhor", "z2r"):
        old = getattr(pot, name)
        np.testing.assert_allclose(getattr(new, name), old[..., ::3], rtol=1e-12, atol=1e-12)
    odd = resample(pot, 1500)  # knots between old ones: the old cubic there, by hand
    x = np.arange(1500) * odd.dr
    k = np.minimum((x / pot.dr).astype(int), pot.nr - 2)
    p = x / pot.dr - k
    c = pot.splines()[2][0, 0, k]  # LAMMPS's cubic of each interval, as the kernels read it
    by_hand = ((c[:, 3] * p + c[:, 4]) * p + c[:, 5]) * p + c[:, 6]
    np.testing.assert_allclose(odd.z2r[0, 0], by_hand, rtol=1e-12, atol=1e-12)
    assert resample(pot, 3001) is pot  # nothing to cut, and the line says so
    s = perturbed("fcc", "Cu", 3.615, (4, 4, 4), 0.1, seed=3)
    assert resample_cost(pot, pot, s).line() == (
        "the potential: its tables have 3001 x 3001 knots (rho x r), none more than asked: "
        "kept as they are"
    )


def test_the_reported_cost_is_what_the_all_pairs_oracle_measures():
    pot = zhou04(["Cu"], knots=10_000)
    new = resample(pot, 1500)
    s = perturbed("fcc", "Cu", 3.615, (4, 4, 4), 0.15, seed=5)
    cost = resample_cost(pot, new, s)
    a, b = (eam_reference(p, s.positions_A, s.species(p.elements), s.box_A) for p in (pot, new))
    assert cost.atoms == cost.of_atoms == 256
    assert cost.force_eV_A == pytest.approx(np.abs(b.forces_eV_A - a.forces_eV_A).max(), rel=1e-6)
    assert cost.energy_eV == pytest.approx(np.abs(b.energy_eV - a.energy_eV).max(), rel=1e-6)
    press = abs(b.virial_eV - a.virial_eV) / (3 * np.prod(s.box_A)) * 1.6021765e6  # LAMMPS metal
    assert cost.press_bar == pytest.approx(press, rel=1e-6)
    assert 0 < cost.force_eV_A < 1e-3  # 1500 knots of a smooth table: small, and not nothing
    assert cost.line().startswith(
        "the potential: tables resampled from 10000 x 10000 to 1500 x 1500 knots (rho x r) "
        "with LAMMPS's splines; max abs change on 256 atoms: force "
    )


# -- hole 8: OVITO's Origin; hole 10: a LAMMPS dump ------------------------------------------------
def test_an_origin_shifts_the_positions_into_the_box(tmp_path):
    s = perturbed("fcc", "Cu", 3.615, (4, 4, 4), 0.1, seed=6)
    write_xyz(tmp_path / "a.xyz", [s])
    lines = (tmp_path / "a.xyz").read_text().splitlines()
    lines[1] = 'Origin="-7.23 -7.23 -7.23" ' + lines[1]
    lines[2:] = [
        " ".join([f[0], *(f"{float(v) - 7.23!r}" for v in f[1:4]), *f[4:]])
        for f in (ln.split() for ln in lines[2:])
    ]
    (tmp_path / "o.xyz").write_text("\n".join(lines) + "\n")
    (frame,) = read_frames(tmp_path / "o.xyz")
    np.testing.assert_array_equal(frame.origin_A, [-7.23] * 3)
    np.testing.assert_allclose(
        frame.structure.positions_A, read_xyz(tmp_path / "a.xyz")[0].positions_A, atol=1e-12
    )
    assert (frame.structure.positions_A >= 0).all()
    (tmp_path / "b.xyz").write_text(
        "\n".join([lines[0], lines[1].replace("-7.23 -7.23 -7.23", "1 2"), *lines[2:]]) + "\n"
    )
    with pytest.raises(XyzError, match="b.xyz line 2: Origin must hold 3 finite numbers"):
        read_xyz(tmp_path / "b.xyz")


def test_a_lammps_dump_gets_a_conversion_hint(tmp_path):
    path = tmp_path / "d.dump"
    path.write_text(
        "ITEM: TIMESTEP\n0\nITEM: NUMBER OF ATOMS\n1\nITEM: BOX BOUNDS pp pp pp\n0 20\n0 20\n"
        "0 20\nITEM: ATOMS id type x y z\n1 1 1 1 1\n"
    )
    with pytest.raises(XyzError) as e:
        read_xyz(path)
    assert str(e.value) == (
        "d.dump line 1: expected the atom count, got 'ITEM: TIMESTEP': it looks like a LAMMPS "
        "dump file (dump atom/custom); --structure reads extended XYZ: convert it, e.g. `ase "
        "convert -i lammps-dump-text d.dump d.xyz` or with OVITO (ASE makes type 1 H, type 2 "
        "He, ... unless the dump has an element column: dump_modify element)"
    )
