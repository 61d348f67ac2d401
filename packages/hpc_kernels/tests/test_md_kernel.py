"""The wafer EAM kernel against the NumPy all-pairs oracle: meshes (2, 4) and (4, 2) on a
17 x 19 PE grid that neither divides, defects, the overflow test, forces = -grad E."""

import jax
import numpy as np
import pytest
from wse_core import preset
from wse_core.hw.wafer import build_wafer
from wse_hpc.md import mapping
from wse_hpc.md import neighbours as nlist
from wse_hpc.md.eam import EamPlan, eam, geometry, sram_plan
from wse_hpc.md.neighbour_plan import active_per_block, list_caps
from wse_hpc.md.neighbours import neighbour_fns
from wse_hpc.md.reference import eam_reference
from wse_hpc.md.state import Atoms
from wse_hpc.md.testing import perturbed
from wse_hpc.md.zhou04 import zhou04

POT = zhou04(["Cu", "Ni"], knots=500)


def _system(seed=0, cells=(4, 4, 5)):
    s = perturbed("fcc", "Cu", 3.6, cells, 0.1, seed=seed, symbols=("Cu", "Ni"))
    return s, s.species(POT.elements)


def _kernel(s, sp, *, mesh, window=None, defect_seed=None):
    """Forces, energies, virial and overflow of the wafer kernel, in atom order (float64)."""
    grid = mapping.choose_grid(s.num_atoms)
    wafer = build_wafer(preset("small"), grid=grid, mesh_shape=mesh, defect_seed=defect_seed)
    state = mapping.pack(
        mapping.initial_map(s.positions_A, grid, s.box_A), s.positions_A, sp, dtype=np.float64
    )
    kr, kc = window or mapping.window_needed(state, s.box_A, POT.cutoff_A)
    plan = EamPlan(kr, kc, tuple(s.box_A), "float64")
    sram_plan(wafer, POT, plan)
    out = jax.jit(eam(wafer, POT, plan).forces_fn)(Atoms.of(wafer.place(state)), geometry(wafer))
    at = mapping.unpack(state, s.num_atoms)["pe_flat_index"]
    return {
        "forces": wafer.gather(out.forces).reshape(-1, 3)[at],
        "energy": wafer.gather(out.energy).reshape(-1)[at],
        "virial": float(wafer.gather(out.virial).sum()),
        "overflow": bool(out.overflow),
        "window": (kr, kc),
        "traffic": wafer.traffic.total(),
    }


@pytest.mark.parametrize("mesh", [(2, 4), pytest.param((4, 2), marks=pytest.mark.slow)])
def test_kernel_matches_numpy_reference(mesh):
    s, sp = _system()
    ref = eam_reference(POT, s.positions_A, sp, s.box_A)
    with jax.enable_x64(True):
        got = _kernel(s, sp, mesh=mesh)
    assert not got["overflow"]
    np.testing.assert_allclose(got["forces"], ref.forces_eV_A, atol=1e-11)
    np.testing.assert_allclose(got["energy"], ref.energy_eV, atol=1e-12)
    assert got["virial"] == pytest.approx(ref.virial_eV, rel=1e-12)


@pytest.mark.parametrize(
    "shrink",
    [
        (1, 0),
        pytest.param((0, 1), marks=pytest.mark.slow),
        pytest.param((4, 4), marks=pytest.mark.slow),
    ],
)
@pytest.mark.cpu_devices
def test_a_window_too_small_is_reported_never_silently_wrong(shrink):
    s, sp = _system(seed=5)
    ref = eam_reference(POT, s.positions_A, sp, s.box_A)
    state = mapping.pack(
        mapping.initial_map(s.positions_A, mapping.choose_grid(s.num_atoms), s.box_A),
        s.positions_A,
        sp,
        dtype=np.float64,
    )
    kr, kc = mapping.window_needed(state, s.box_A, POT.cutoff_A)
    with jax.enable_x64(True):
        for window in ((kr - shrink[0], kc - shrink[1]),):
            small = _kernel(s, sp, mesh=(2, 4), window=window)
            wrong = np.abs(small["forces"] - ref.forces_eV_A).max() > 1e-9
            assert small["overflow"] or not wrong
            assert small["overflow"]  # here every smaller window does miss neighbours


@pytest.mark.smoke
def test_forces_are_minus_the_energy_gradient():
    s, sp = _system(seed=6, cells=(4, 4, 4))
    res = eam_reference(POT, s.positions_A, sp, s.box_A)
    h = 1e-5
    for atom, axis in ((0, 0), (17, 1), (101, 2)):
        plus, minus = s.positions_A.copy(), s.positions_A.copy()
        plus[atom, axis] += h
        minus[atom, axis] -= h
        e_p = eam_reference(POT, plus, sp, s.box_A).total_eV
        e_m = eam_reference(POT, minus, sp, s.box_A).total_eV
        # central difference: error ~ h^2 E''' ~ 1e-9 eV/A here
        assert -(e_p - e_m) / (2 * h) == pytest.approx(res.forces_eV_A[atom, axis], abs=1e-6)


@pytest.mark.cpu_devices
def test_window_is_counted_in_sram_and_fabric():
    s, sp = _system()
    with jax.enable_x64(True):
        got = _kernel(s, sp, mesh=(2, 4))
    assert got["traffic"].words > 0 and got["traffic"].count > 0


def _lists(
    s, sp, *, mesh, skin=1.0, caps=None, defect_seed=None, moved=None, margin=0.0, compact=True
):
    """The neighbour-list kernel: build, then forces (float64, atom order); the window is
    planned for cutoff + skin + `margin`; `compact`: evaluate only atom-holding PEs."""
    grid = mapping.choose_grid(s.num_atoms)
    wafer = build_wafer(preset("small"), grid=grid, mesh_shape=mesh, defect_seed=defect_seed)
    state = mapping.pack(
        mapping.initial_map(s.positions_A, grid, s.box_A), s.positions_A, sp, dtype=np.float64
    )
    reach = POT.cutoff_A + skin
    kr, kc = mapping.window_needed(state, s.box_A, reach + margin)
    caps = caps or list_caps(state, s.box_A, reach, kr, kc)
    active = active_per_block(state, wafer) if compact else 0
    plan = EamPlan(kr, kc, tuple(s.box_A), "float64", skin, caps, active)
    sram_plan(wafer, POT, plan)
    fns = neighbour_fns(wafer, POT, plan)
    placed, geo = Atoms.of(wafer.place(state)), geometry(wafer)
    nbrs, over = jax.jit(fns.build_fn)(placed, geo)
    if moved is not None:  # displace one atom after the build
        state = state.copy()
        held = np.argwhere(state[..., mapping.SPECIES] >= 0)[0]
        state[held[0], held[1], 0] += moved
        placed = Atoms.of(wafer.place(state))
    with wafer.traffic.scope() as entries:  # traced here: what one evaluation moves
        out = jax.jit(fns.forces_fn)(placed, geo, nbrs)
    at = mapping.unpack(state, s.num_atoms)["pe_flat_index"]
    return {
        "traffic": list(entries),
        "wafer": wafer,
        "plan": plan,
        "forces": wafer.gather(out.forces).reshape(-1, 3)[at],
        "energy": wafer.gather(out.energy).reshape(-1)[at],
        "virial": float(wafer.gather(out.virial).sum()),
        "overflow": bool(over),
        "moved": bool(fns.drift_fn(fns.track_fn(placed, nbrs)) > (0.5 * skin) ** 2),
        "caps": caps,
        "window_pes": plan.window_pes,
    }


@pytest.mark.parametrize("mesh", [(2, 4), pytest.param((1, 1), marks=pytest.mark.slow)])
def test_neighbour_lists_match_numpy_reference(mesh):
    s, sp = _system(seed=7)
    ref = eam_reference(POT, s.positions_A, sp, s.box_A)
    with jax.enable_x64(True):
        got = _lists(s, sp, mesh=mesh)
    assert not got["overflow"] and not got["moved"]
    # far fewer candidates than window slots: the point of the lists
    assert got["caps"][-1] < 0.5 * got["window_pes"]
    np.testing.assert_allclose(got["forces"], ref.forces_eV_A, atol=1e-11)
    np.testing.assert_allclose(got["energy"], ref.energy_eV, atol=1e-12)
    assert got["virial"] == pytest.approx(ref.virial_eV, rel=1e-12)


@pytest.mark.parametrize("mesh", [(2, 4), (1, 1)])
def test_neighbour_lists_skip_empty_pes(mesh):
    """Lists stored with each block's atom-holding PEs first, forces evaluated for those
    alone (`plan.active`), give what every PE's evaluation gives; the grid (17 x 17 for 256
    atoms) has 33 empty PEs and the 2 x 4 mesh padding ones."""
    s, sp = _system(seed=6, cells=(4, 4, 4))
    ref = eam_reference(POT, s.positions_A, sp, s.box_A)
    with jax.enable_x64(True):
        every = _lists(s, sp, mesh=mesh, compact=False)
        held = _lists(s, sp, mesh=mesh)
    wafer = held["wafer"]
    assert 0 < held["plan"].active < wafer.block_shape[0] * wafer.block_shape[1]
    assert not held["overflow"]
    np.testing.assert_allclose(held["forces"], every["forces"], atol=1e-12)
    np.testing.assert_allclose(held["energy"], every["energy"], atol=1e-13)
    np.testing.assert_allclose(held["forces"], ref.forces_eV_A, atol=1e-11)
    assert held["virial"] == pytest.approx(ref.virial_eV, rel=1e-12)


@pytest.mark.parametrize("chunk", [16, 100])
def test_neighbour_lists_by_chunks_of_pes(monkeypatch, chunk):
    """A block's PEs evaluated in several chunks (the last one overlapping the one before;
    phase 2 then looks the density slopes up again instead of keeping them) give the NumPy
    reference's forces, energies and virial."""
    monkeypatch.setattr(nlist, "CHUNK", chunk)
    s, sp = _system(seed=6, cells=(4, 4, 4))
    ref = eam_reference(POT, s.positions_A, sp, s.box_A)
    with jax.enable_x64(True):
        got = _lists(s, sp, mesh=(1, 1))
    assert got["plan"].active > chunk and not got["overflow"]
    np.testing.assert_allclose(got["forces"], ref.forces_eV_A, atol=1e-11)
    np.testing.assert_allclose(got["energy"], ref.energy_eV, atol=1e-12)
    assert got["virial"] == pytest.approx(ref.virial_eV, rel=1e-12)


@pytest.mark.cpu_devices
def test_neighbour_lists_in_a_window_wider_than_their_reach():
    """A window planned wider than cutoff + skin (a re-plan widens it) leaves the farthest
    row offsets without candidates; the padding entries must still read inside the forces'
    region (they once read past it: NaN forces)."""
    s, sp = _system(seed=7, cells=(6, 6, 6))
    ref = eam_reference(POT, s.positions_A, sp, s.box_A)
    with jax.enable_x64(True):
        got = _lists(s, sp, mesh=(2, 4), margin=1.0)
    assert got["caps"][0] == 0 and got["caps"][-2] == 0  # offsets +-k_rows hold none
    np.testing.assert_allclose(got["forces"], ref.forces_eV_A, atol=1e-11)
    np.testing.assert_allclose(got["energy"], ref.energy_eV, atol=1e-12)
    assert got["virial"] == pytest.approx(ref.virial_eV, rel=1e-12)


@pytest.mark.cpu_devices
def test_neighbour_list_overflow_and_motion_are_reported():
    s, sp = _system(seed=8)
    with jax.enable_x64(True):
        fits = _lists(s, sp, mesh=(2, 4))
        caps = fits["caps"]
        short = _lists(s, sp, mesh=(2, 4), caps=caps[:-1] + (caps[-1] // 2,))
        per_row = _lists(s, sp, mesh=(2, 4), caps=tuple(c // 3 for c in caps[:-1]) + caps[-1:])
        near = _lists(s, sp, mesh=(2, 4), skin=1.0, moved=0.49)
        far = _lists(s, sp, mesh=(2, 4), skin=1.0, moved=0.51)
    assert not fits["overflow"]
    assert short["overflow"] and per_row["overflow"]  # capacities too small: never dropped
    # each PE's own check, reduced once: an atom moved > skin / 2 makes the lists stale
    assert not near["moved"] and far["moved"]
    # within skin / 2 the lists are still exact
    ref = eam_reference(POT, s.positions_A + _shift(s, 0.49), sp, s.box_A)
    np.testing.assert_allclose(near["forces"], ref.forces_eV_A, atol=1e-11)


def _shift(s, dx):
    """The displacement `_lists(moved=dx)` applies: dx in x to the atom on the first PE."""
    grid = mapping.choose_grid(s.num_atoms)
    atom = mapping.initial_map(s.positions_A, grid, s.box_A).reshape(-1)
    atom = atom[atom >= 0][0]
    out = np.zeros_like(s.positions_A)
    out[atom, 0] = dx
    return out


@pytest.mark.cpu_devices
@pytest.mark.slow
@pytest.mark.parametrize("evaluate", [_kernel, _lists], ids=["full_window", "neighbour_lists"])
def test_same_results_with_and_without_defects(evaluate):
    s, sp = _system(seed=4)
    with jax.enable_x64(True):
        clean = evaluate(s, sp, mesh=(2, 4))
        broken = evaluate(s, sp, mesh=(2, 4), defect_seed=11)
    np.testing.assert_array_equal(clean["forces"], broken["forces"])
    np.testing.assert_array_equal(clean["energy"], broken["energy"])


@pytest.mark.cpu_devices
def test_filtered_window_equals_the_full_window_and_records_the_whole_multicast():
    """The list kernel reads only its candidates (`fabric.window_apply`), yet computes what
    the full-window kernel computes, and its ledger holds the whole marching multicast: per phase,
    the row windows E and W (k_cols PEs) and `depth` marching steps N and S of the
    (2 k_cols + 1)-wide row windows, of 3 words (positions) then 1 word (F')."""
    s, sp = _system(seed=9)
    with jax.enable_x64(True):
        got = _lists(s, sp, mesh=(2, 4), defect_seed=13)
        plan, wafer = got["plan"], got["wafer"]
        full = _kernel(s, sp, mesh=(2, 4), defect_seed=13, window=(plan.k_rows, plan.k_cols))
    assert not got["overflow"] and not full["overflow"]
    np.testing.assert_allclose(got["forces"], full["forces"], atol=1e-11)
    np.testing.assert_allclose(got["energy"], full["energy"], atol=1e-12)
    assert wafer.defects.num_dead > 0
    # the farthest row offset holding a candidate (caps are per offset -k_rows .. k_rows)
    kc, offsets = plan.k_cols, np.arange(-plan.k_rows, plan.k_rows + 1)
    depth = int(np.abs(offsets[np.asarray(plan.caps[:-1]) > 0]).max())
    width, n = 2 * kc + 1, wafer.rows * wafer.cols
    ns = wafer.remap.link_hops(0)[: wafer.rows - 1, : wafer.cols]
    ew = wafer.remap.link_hops(1)[: wafer.rows, : wafer.cols - 1]
    assert ew.mean() > 1 and ns.mean() > 1  # detours around dead PEs are paid
    # a row window's chain: the slowest kc consecutive E-W links of any row (session 73: was
    # kc x the longest link anywhere), each marching step one N-S link
    slowest_window = max(ew[r, c : c + kc].sum() for r in range(ew.shape[0])
                         for c in range(ew.shape[1] - kc + 1))  # fmt: skip
    expect_words = expect_hops = expect_busiest = expect_latency = 0.0
    word = np.dtype(plan.dtype).itemsize / 4  # 32-bit fabric words per value (float64: 2)
    for words in (3 * word, word):  # phase 1 positions, phase 2 F'
        expect_words += n * words * (2 + 2 * depth * width)
        expect_hops += 2 * n * words * (kc * ew.mean() + depth * width * ns.mean())
        expect_busiest += words * (2 * kc + 2 * depth * width)
        expect_latency += 2 * (slowest_window + depth * ns.max())
    t = got["traffic"]
    assert sum(e.words for e in t) == expect_words
    assert sum(e.word_hops for e in t) == pytest.approx(expect_hops, rel=1e-12)
    assert sum(e.max_words_per_pe for e in t) == expect_busiest
    assert sum(e.latency_hops for e in t) == pytest.approx(expect_latency, rel=1e-12)
