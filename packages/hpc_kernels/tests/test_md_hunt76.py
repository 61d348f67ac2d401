"""Hunt 76, MD: santos24-md's crystals planned once and kept on disk (the counts that plan
them equal to the NumPy versions they replace), --potential-knots measured where the forces
do not vanish by symmetry, and image flags in every frame (unwrapped positions, MSD)."""

import io
import subprocess
import sys

import numpy as np
import pytest
from wse_core import preset
from wse_core.cost.assumptions import assumed_spec
from wse_hpc.md import exec_cache, mapping, samples
from wse_hpc.md.config import MdConfig
from wse_hpc.md.integrate import BOLTZ_EV_K, MVV2E
from wse_hpc.md.lattice import crystal, wrap_into_box
from wse_hpc.md.neighbour_plan import _offset_counts, reach_pairs
from wse_hpc.md.reference import eam_reference
from wse_hpc.md.resample import resample, resample_cost, thermal_copy, thermal_sigma_A
from wse_hpc.md.simulate import run_md
from wse_hpc.md.testing import perturbed
from wse_hpc.md.xyz import XyzError, read_xyz, write_xyz
from wse_hpc.md.zhou04 import zhou04
from wse_hpc.studies import santos24_md

POT = zhou04(["Cu"], knots=1000)


# -- hole 1: the counts, as the NumPy code before them -----------------------------------------
def _offset_counts_numpy(row_of, pairs, rows, k_rows):
    """`neighbour_plan._offset_counts` before hunt 76, verbatim: a bincount of flat indices."""
    n, n_off = row_of.size, 2 * k_rows + 1
    idx_t = np.int32 if (n + 1) * n_off < 2**31 else np.int64
    row = row_of.astype(np.int32)
    ra, rb = row[pairs[:, 0]], row[pairs[:, 1]]
    flat = []
    half = rows // 2
    for atom, d in ((pairs[:, 0], rb - ra), (pairs[:, 1], ra - rb)):
        d = d - np.int32(rows) * (d > rows - 1 - half) + np.int32(rows) * (d < -half)
        spare = n * n_off
        at = atom.astype(idx_t) * idx_t(n_off) + (d + k_rows).astype(idx_t)
        flat.append(np.where(np.abs(d) <= k_rows, at, idx_t(spare)))
    counts = np.bincount(np.concatenate(flat), minlength=n * n_off + 1)[:-1]
    return counts.reshape(n, n_off)


def _max_hits_numpy(sample, cutoff_A, chunk=1 << 22):
    """`samples.max_hits` before hunt 76, verbatim (its per-atom counts)."""
    s = sample.structure
    box = np.asarray(s.box_A, dtype=np.float64)
    pos = np.mod(np.asarray(s.positions_A, dtype=np.float64), box)
    counts = np.zeros(s.num_atoms, np.int64)
    for lo in range(0, len(sample.pairs), chunk):
        p = sample.pairs[lo : lo + chunk]
        d = pos[p[:, 0]] - pos[p[:, 1]]
        d -= box * np.round(d / box)
        inside = p[np.einsum("ij,ij->i", d, d) < cutoff_A**2]
        counts += np.bincount(inside.ravel(), minlength=s.num_atoms)
    return counts


def test_offset_counts_are_the_numpy_bincounts_on_a_crystal_and_on_odd_inputs():
    s = perturbed("fcc", "Cu", 3.615, (6, 6, 6), 0.1, seed=1)
    pairs = reach_pairs(s.positions_A, s.box_A, POT.cutoff_A + 1.0)
    for grid in ((29, 30), (30, 29)):  # odd and even rows (rows // 2 wraps to itself)
        atom_of_pe = mapping.initial_map(mapping.rewrap(s.positions_A, s.box_A), grid, s.box_A)
        row_of = np.empty(s.num_atoms, np.int64)
        row_of[atom_of_pe[atom_of_pe >= 0]] = np.nonzero(atom_of_pe >= 0)[0]
        for k in (0, 1, 4, grid[0] // 2, grid[0]):
            got = _offset_counts(row_of, pairs, grid[0], k)
            assert got.dtype == np.int64
            np.testing.assert_array_equal(got, _offset_counts_numpy(row_of, pairs, grid[0], k))
    rng = np.random.default_rng(2)
    for rows in (1, 2, 3, 4, 7):
        row_of = rng.integers(0, rows, 50)
        pairs = np.sort(rng.integers(0, 50, (400, 2)), axis=1)
        for k in (0, 1, 3):
            want = _offset_counts_numpy(row_of, pairs, rows, k)
            np.testing.assert_array_equal(_offset_counts(row_of, pairs, rows, k), want)
    empty = np.zeros((0, 2), np.int64)
    np.testing.assert_array_equal(_offset_counts(np.zeros(5, np.int64), empty, 3, 1), 0)


def test_max_hits_is_the_numpy_count_and_the_all_pairs_count():
    s = perturbed("bcc", "W", 3.165, (6, 6, 6), 0.2, seed=3)
    pairs = reach_pairs(s.positions_A, s.box_A, 6.13 + 1.5)
    sample = samples.Sample("W", "cube", s, pairs, None, (1, 1))
    counts = _max_hits_numpy(sample, 6.13)
    assert samples.max_hits(sample, 6.13) == counts.max()
    d = s.positions_A[:, None] - s.positions_A[None]  # the definition, all pairs
    d -= s.box_A * np.round(d / s.box_A)
    r2 = (d * d).sum(-1)
    assert counts.max() == ((r2 < 6.13**2).sum(1) - 1).max()


# -- hole 1: each crystal planned once, on disk ------------------------------------------------
@pytest.fixture
def small_crystals(monkeypatch, tmp_path):
    """Santos et al.'s crystals at 768 atoms (a 24 x 32 grid: the slab 8 x 6 x 4 fcc cells,
    2 x 2 tiles; the cube the same cells), santos24-md's memory empty, a cache directory."""
    monkeypatch.setattr(samples, "ATOMS", 768)
    monkeypatch.setattr(samples, "GRID", (24, 32))
    monkeypatch.setattr(samples, "CUBES", {"Cu": (8, 6, 4)})
    monkeypatch.setattr(santos24_md, "_CRYSTALS", {})
    monkeypatch.setattr(santos24_md, "_PLANS", {})
    monkeypatch.setattr(exec_cache, "_root", lambda: str(tmp_path))
    built = []
    for name in ("slab", "cube"):
        make = getattr(samples, name)
        monkeypatch.setattr(samples, name, lambda *a, _m=make, **k: built.append(1) or _m(*a, **k))
    return built


@pytest.mark.parametrize("geometry", ["cube", "slab 4 cells"])
def test_a_crystal_is_built_once_for_both_wafers_and_stored_as_planned_uncached(
    small_crystals, monkeypatch, geometry
):
    got = santos24_md._crystal("Cu", geometry, 1.0, POT)
    assert len(small_crystals) == 1  # before: the cube built (and its pairs found) per wafer
    # the oracle: the crystal planned without any cache, wafer by wafer, as before hunt 76
    root = exec_cache._root()
    monkeypatch.setattr(exec_cache, "_root", lambda: None)
    sample = (samples.cube if geometry == "cube" else samples.slab)("Cu", POT, skin_A=1.0)
    cfg = MdConfig(skin_A=1.0, spec=assumed_spec("wse3"))
    for wafer in santos24_md.WAFERS:
        p = samples.plan(sample, assumed_spec(wafer), POT, cfg)
        assert got.plans[(p.wafer.rows, p.wafer.cols)] == p.plan
        planned, hits = santos24_md._planned("Cu", geometry, wafer, 1.0, POT)
        assert (planned.plan, planned.fits, hits) == (p.plan, p.fits, got.hits)
    assert got.hits == _max_hits_numpy(sample, POT.cutoff_A).max()
    # a later process: loaded from disk, nothing built, the same plans
    monkeypatch.setattr(exec_cache, "_root", lambda: root)
    key = santos24_md._crystal_key("Cu", geometry, 1.0, POT)
    assert santos24_md._stored(key)
    monkeypatch.setattr(santos24_md, "_CRYSTALS", {})
    small_crystals.clear()
    assert santos24_md._crystal("Cu", geometry, 1.0, POT) == got
    assert not small_crystals
    # another skin is another crystal (its pairs reach further): planned, not loaded
    assert santos24_md._crystal_key("Cu", geometry, 1.5, POT) != key


def test_each_crystal_planned_says_so_on_a_terminal_and_nothing_elsewhere(
    small_crystals, monkeypatch
):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    crystals = [("Cu", "slab 4 cells", 1.0), ("Cu", "cube", 1.0)]
    monkeypatch.setattr(sys, "stderr", Terminal())
    santos24_md._plan_crystals(crystals, {"Cu": POT})
    lines = sys.stderr.getvalue().splitlines()
    assert len(lines) == 3, lines
    assert lines[0] == "santos24-md: planning 2 crystals of 768 atoms, 5-30 s each; kept on disk"
    assert lines[2].startswith("santos24-md: crystal 2/2 (Cu, cube, skin 1 A) planned in ")
    monkeypatch.setattr(sys, "stderr", Terminal())  # all planned: nothing to say
    santos24_md._plan_crystals(crystals, {"Cu": POT})
    assert sys.stderr.getvalue() == ""
    monkeypatch.setattr(santos24_md, "_CRYSTALS", {})  # on disk only: loaded, not planned
    santos24_md._plan_crystals(crystals, {"Cu": POT})
    assert sys.stderr.getvalue() == "" and len(small_crystals) == 2
    monkeypatch.setattr(exec_cache, "_root", lambda: None)  # to plan again, into a log
    monkeypatch.setattr(santos24_md, "_CRYSTALS", {})
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    santos24_md._plan_crystals(crystals[:1], {"Cu": POT})
    assert sys.stderr.getvalue() == "" and len(small_crystals) == 3


# -- hole 2: --potential-knots on a perfect lattice --------------------------------------------
def test_knots_cost_on_a_lattice_is_measured_on_a_copy_displaced_as_at_the_run_temperature():
    new = resample(POT, 50)
    s = crystal("fcc", "Cu", 3.615, (4, 4, 4))
    a = eam_reference(POT, s.positions_A, s.species(POT.elements), s.box_A)
    assert np.abs(a.forces_eV_A).max() < 1e-9  # the lattice: forces vanish by symmetry
    cost = resample_cost(POT, new, s, temperature_K=300.0, seed=4)
    copy = thermal_copy(s, 300.0, 4)
    old_f, new_f = (
        eam_reference(p, copy.positions_A, copy.species(p.elements), copy.box_A).forces_eV_A
        for p in (POT, new)
    )
    assert cost.force_eV_A == pytest.approx(np.abs(new_f - old_f).max(), rel=1e-6)
    assert cost.force_eV_A > 1e-4  # before: 1.6e-15 eV/A, the lattice's
    assert "on a copy displaced 0.07 A rms per axis as at ~300 K, seed 4: on the structure " \
        "as given the forces vanish by symmetry" in cost.line()  # fmt: skip
    d = copy.positions_A - s.positions_A  # the copy: displaced by the thermal amplitude
    d -= s.box_A * np.round(d / s.box_A)
    assert np.sqrt((d**2).mean()) == pytest.approx(thermal_sigma_A(300.0), rel=0.06)  # 768 draws
    assert thermal_sigma_A(1200.0) == pytest.approx(2 * thermal_sigma_A(300.0))  # sqrt(T)


def test_knots_cost_takes_the_velocities_temperature_and_keeps_a_thermal_structure_as_given():
    new = resample(POT, 50)
    s = crystal("fcc", "Cu", 3.615, (4, 4, 4))
    rng = np.random.default_rng(5)
    s.velocities_A_ps = rng.normal(0.0, 4.0, (s.num_atoms, 3))
    m = POT.masses_amu[0]
    t = MVV2E * m * (s.velocities_A_ps**2).sum() / ((3 * s.num_atoms - 3) * BOLTZ_EV_K)
    assert f"as at ~{t:.0f} K, seed 0" in resample_cost(POT, new, s).line()
    hot = perturbed("fcc", "Cu", 3.615, (4, 4, 4), 0.08, seed=6)  # not symmetric: as given
    cost = resample_cost(POT, new, hot, temperature_K=300.0)
    old_f, new_f = (
        eam_reference(p, hot.positions_A, hot.species(p.elements), hot.box_A).forces_eV_A
        for p in (POT, new)
    )
    assert cost.force_eV_A == pytest.approx(np.abs(new_f - old_f).max(), rel=1e-6)
    assert "(on the structure as given)" in cost.line()


# -- hole 3: image flags -----------------------------------------------------------------------
def _unwrapped(frame):
    return frame.positions_A + frame.images * frame.box_A


def _unwrapped_by_steps(frames):
    """The oracle: wrapped positions unwrapped frame by frame, each move by minimum image
    (frames a few steps apart: an atom moves far less than half the box between them)."""
    out = [frames[0].positions_A]
    for a, b in zip(frames, frames[1:], strict=False):
        d = b.positions_A - a.positions_A
        out.append(out[-1] + d - a.box_A * np.round(d / a.box_A))
    return out


def _run_frames(s, cfg):
    frames = []
    res = run_md(s, POT, cfg, on_frame=lambda step, f: frames.append(f))
    return res, frames


def test_msd_from_the_image_flags_is_the_msd_of_the_trajectory():
    s = crystal("fcc", "Cu", 3.615, (4, 4, 4))
    cfg = MdConfig(steps=60, thermo_every=2, temperature_K=1500.0, seed=1, spec=preset("wse3"))
    res, frames = _run_frames(s, cfg)
    assert len(frames) == 31 and all(f.images.dtype == np.int64 for f in frames)
    assert any((f.images != 0).any() for f in frames)  # atoms crossed the box's faces
    assert all(np.all((f.positions_A >= 0) & (f.positions_A < f.box_A)) for f in frames)
    # frame 0's unwrapped positions are the structure's (the run's own re-wrap undone)
    np.testing.assert_allclose(_unwrapped(frames[0]), s.positions_A, atol=1e-5)
    oracle = _unwrapped_by_steps(frames)
    for f, u in zip(frames, oracle, strict=True):
        np.testing.assert_allclose(_unwrapped(f) - _unwrapped(frames[0]), u - oracle[0], atol=1e-9)
    msd = [((_unwrapped(f) - _unwrapped(frames[0])) ** 2).sum(1).mean() for f in frames]
    msd_oracle = [((u - oracle[0]) ** 2).sum(1).mean() for u in oracle]
    np.testing.assert_allclose(msd, msd_oracle, rtol=1e-9, atol=1e-12)
    assert msd[-1] > 0.01  # A^2: a 1500 K crystal's atoms, ~0.1 A each way
    np.testing.assert_array_equal(res.structure.images, frames[-1].images)


def test_a_remap_that_moves_the_positions_by_a_box_keeps_the_unwrapped_trajectory(monkeypatch):
    """A re-plan re-maps the atoms at positions `rewrap` moves by whole boxes; forced here to
    move them a box further along x at each call (the same configuration: the kernel keeps
    positions unwrapped) and a re-plan at the start (the first lists starved)."""
    import wse_hpc.md.neighbour_plan as nplan

    caps, rewrap, calls = nplan.list_caps, mapping.rewrap, {"caps": 0, "rewrap": 0}

    def starved(*args, **kw):
        calls["caps"] += 1
        out = caps(*args, **kw)
        return tuple(min(c, 3) for c in out) if calls["caps"] == 1 else out

    def further(positions, box):
        out = rewrap(positions, box)
        out[:, 0] += calls["rewrap"] * np.asarray(box)[0]
        calls["rewrap"] += 1
        return out

    monkeypatch.setattr(nplan, "list_caps", starved)
    monkeypatch.setattr(mapping, "rewrap", further)
    s = perturbed("fcc", "Cu", 3.615, (4, 4, 4), 0.05, seed=2)
    cfg = MdConfig(steps=4, thermo_every=2, temperature_K=300.0, spec=preset("wse3"))
    res, frames = _run_frames(s, cfg)
    assert res.replans >= 1 and calls["rewrap"] >= 2
    np.testing.assert_allclose(_unwrapped(frames[0]), s.positions_A, atol=1e-4)
    oracle = _unwrapped_by_steps(frames)
    for f, u in zip(frames, oracle, strict=True):
        np.testing.assert_allclose(_unwrapped(f) - s.positions_A, u - oracle[0], atol=1e-4)


def test_a_run_continued_from_a_frame_counts_on_from_its_image_flags(tmp_path):
    s = crystal("fcc", "Cu", 3.615, (4, 4, 4))
    cfg = MdConfig(steps=20, thermo_every=10, temperature_K=1500.0, seed=3, spec=preset("wse3"))
    first, frames = _run_frames(s, cfg)
    path = write_xyz(tmp_path / "a.xyz", frames)
    last = read_xyz(path)[-1]
    np.testing.assert_array_equal(last.images, first.structure.images)
    more = MdConfig(steps=10, thermo_every=10, spec=preset("wse3"))
    _, again = _run_frames(last, more)
    np.testing.assert_allclose(_unwrapped(again[0]), _unwrapped(last), atol=1e-4)  # fp32


def test_image_flags_round_trip_through_wse_ase_and_ase_convert(tmp_path):
    s = perturbed("fcc", "Cu", 3.615, (4, 4, 4), 0.05, seed=7)
    rng = np.random.default_rng(7)
    s.images = rng.integers(-3, 4, (s.num_atoms, 3))
    s.velocities_A_ps = rng.normal(0.0, 3.0, (s.num_atoms, 3))
    path = write_xyz(tmp_path / "a.xyz", [s])
    assert ":map_shift:I:3 " in path.read_text().splitlines()[1]
    np.testing.assert_array_equal(read_xyz(path)[0].images, s.images)
    ase_io = pytest.importorskip("ase.io")
    atoms = ase_io.read(path)  # OVITO reads map_shift as its Periodic Image; ASE keeps it
    np.testing.assert_array_equal(atoms.arrays["map_shift"], s.images)
    ase = [sys.executable, "-m", "ase", "convert"]
    subprocess.run([*ase, str(path), str(tmp_path / "b.xyz")], check=True, capture_output=True)
    np.testing.assert_array_equal(read_xyz(tmp_path / "b.xyz")[0].images, s.images)
    data = tmp_path / "a.data"  # the --out advice's conversion still works
    args = ["-n", "-1", "-o", "lammps-data", str(path), str(data)]
    subprocess.run([*ase, *args, "--write-args", "velocities=True"], check=True)
    assert "Velocities" in data.read_text()


def test_wrapping_into_the_box_counts_the_boxes_crossed():
    s = perturbed("fcc", "Cu", 3.615, (4, 4, 4), 0.05, seed=8)
    rng = np.random.default_rng(8)
    given = s.positions_A + rng.integers(-2, 3, (s.num_atoms, 3)) * s.box_A
    s.positions_A = given.copy()
    wrap_into_box(s)
    assert np.all((s.positions_A >= 0) & (s.positions_A < s.box_A))
    np.testing.assert_allclose(s.positions_A + s.images * s.box_A, given, atol=1e-9)


def test_image_flags_that_are_not_whole_numbers_are_refused_in_one_line(tmp_path):
    s = perturbed("fcc", "Cu", 3.615, (2, 2, 2), 0.0, seed=0)
    s.images = np.zeros((s.num_atoms, 3), np.int64)
    lines = write_xyz(tmp_path / "a.xyz", [s]).read_text().splitlines()
    lines[5] = lines[5].rsplit(" ", 1)[0] + " 0.5"
    (tmp_path / "b.xyz").write_text("\n".join(lines) + "\n")
    with pytest.raises(
        XyzError, match=r"^b\.xyz line 6: map_shift \[0\.0, 0\.0, 0\.5\] must be 3 "
    ):
        read_xyz(tmp_path / "b.xyz")
