"""The host-side plan of an MD run (window and list capacities) is what its definition says,
however it is computed: the list capacities against an all-pairs NumPy count, the same with
pairs found once by atom id for several grids (santos24-md plans one crystal on two
wafers), and the coverage test's periodic sliding extremes against the direct slices."""

import numpy as np
import pytest
from scipy.ndimage import maximum_filter1d, minimum_filter1d
from wse_hpc.md import mapping
from wse_hpc.md.mapping import _periodic_sliding
from wse_hpc.md.neighbour_plan import HEADROOM, TOTAL_HEADROOM, Margins, list_caps, reach_pairs
from wse_hpc.md.testing import perturbed

REACH_A = 6.72  # Cu's 5.72 A cutoff + 1 A skin


def _state(s, grid):
    atom_of_pe = mapping.initial_map(s.positions_A, grid, s.box_A)
    return mapping.pack(atom_of_pe, s.positions_A, np.zeros(s.num_atoms, np.int32))


def _caps_by_all_pairs(state, box, reach, k_rows, k_cols, spare=0):
    """list_caps' contract by brute force: every pair's minimum-image distance in float64."""
    held = state[..., mapping.SPECIES] >= 0
    rr, _ = np.nonzero(held)
    pos = state[held][:, :3].astype(np.float64)
    d = pos[:, None] - pos[None]
    d -= box * np.round(d / box)
    near = (np.sqrt((d * d).sum(-1)) <= reach) & ~np.eye(len(pos), dtype=bool)
    rows = state.shape[0]
    off = (rr[None] - rr[:, None] + rows // 2) % rows - rows // 2
    counts = np.stack([(near & (off == o)).sum(1) for o in range(-k_rows, k_rows + 1)], 1)
    most = counts.max(0)
    caps = np.minimum(np.ceil(most * HEADROOM).astype(int) + 2, 2 * k_cols + 1)
    used = np.abs(np.nonzero(most)[0] - k_rows).max() + spare  # the spare row offsets
    caps[np.abs(np.arange(2 * k_rows + 1) - k_rows) > used] = 0
    total = int(np.ceil(counts.sum(1).max() * TOTAL_HEADROOM)) + 2
    return tuple(int(c) for c in caps) + (min(total, int(caps.sum())),)


@pytest.mark.parametrize("grid", [(19, 17), (16, 21)])  # odd rows, and even rows
def test_list_caps_count_every_pair_as_the_all_pairs_oracle(grid):
    s = perturbed("fcc", "Cu", 3.6, (4, 4, 5), 0.1, seed=3)
    state = _state(s, grid)
    kr, kc = mapping.window_needed(state, s.box_A, REACH_A + 0.5)
    for k_rows in (kr, max(kr - 2, 0)):  # and pairs beyond the window's rows
        got = list_caps(state, s.box_A, REACH_A, k_rows, kc)
        assert got == _caps_by_all_pairs(state, s.box_A, REACH_A, k_rows, kc)
        spare = list_caps(state, s.box_A, REACH_A, k_rows, kc, Margins(spare_rows=1))
        assert spare == _caps_by_all_pairs(state, s.box_A, REACH_A, k_rows, kc, spare=1)


def test_list_caps_hold_the_counts_of_the_states_a_run_reached():
    """`Margins.seen`: each capacity holds the most the plan's state or any state seen
    counts there (each on its own map), with the same headroom: a crystal's sites and the
    same crystal displaced (the hot run a re-plan measured)."""
    grid = (19, 17)
    sites = _state(perturbed("fcc", "Cu", 3.6, (4, 4, 5), 0.0, seed=3), grid)
    hot_s = perturbed("fcc", "Cu", 3.6, (4, 4, 5), 0.25, seed=4)
    hot, box = _state(hot_s, grid), hot_s.box_A
    kr, kc = mapping.window_needed(hot, box, REACH_A + 0.5)
    got = list_caps(sites, box, REACH_A, kr, kc, Margins(seen=(hot,)))
    each = [_caps_by_all_pairs(st, box, REACH_A, kr, kc) for st in (sites, hot)]
    assert got[:-1] == tuple(max(a, b) for a, b in zip(*each, strict=True))[:-1]
    assert got[-1] == min(max(each[0][-1], each[1][-1]), sum(got[:-1]))
    assert each[1][-1] > each[0][-1]  # the displaced crystal counts more than its sites


def test_pairs_found_once_plan_every_grid_alike():
    """`reach_pairs` of the float32 positions by atom id, given to list_caps, gives the caps
    it finds on its own, on two grids of one crystal (the map differs, the pairs do not)."""
    s = perturbed("bcc", "W", 3.16, (6, 5, 4), 0.07, seed=1)
    pairs = reach_pairs(s.positions_A.astype(np.float32), s.box_A, REACH_A)
    for grid in ((15, 17), (13, 19)):
        state = _state(s, grid)
        kr, kc = mapping.window_needed(state, s.box_A, REACH_A + 0.5)
        alone = list_caps(state, s.box_A, REACH_A, kr, kc)
        assert list_caps(state, s.box_A, REACH_A, kr, kc, pairs=pairs) == alone
        assert alone[-1] > 0


@pytest.mark.parametrize("n", [1, 2, 5, 8, 31])
def test_periodic_sliding_extremes_equal_the_direct_slices(n):
    rng = np.random.default_rng(n)
    lo = rng.normal(size=(n, 4)) * 10
    lo[rng.random((n, 4)) < 0.25] = np.inf  # empty lines
    hi = np.where(np.isinf(lo), -np.inf, lo)
    unrolled = np.concatenate([lo, lo + 20.0]), np.concatenate([hi, hi + 20.0])
    for width in range(1, n + 1):
        want_lo = np.stack([unrolled[0][s : s + width].min(0) for s in range(n)])
        want_hi = np.stack([unrolled[1][s : s + width].max(0) for s in range(n)])
        assert np.array_equal(_periodic_sliding(lo, width, minimum_filter1d, 20.0), want_lo)
        assert np.array_equal(_periodic_sliding(hi, width, maximum_filter1d, 20.0), want_hi)


def test_rewrap_starts_each_axis_in_its_widest_gap():
    """A crystal whose boundary plane straddles 0 (half its atoms wrapped to ~L) comes back
    as one plane: each axis then spans less than a lattice spacing more than its planes,
    and every position is the same modulo the box."""
    s = perturbed("fcc", "Cu", 3.615, (5, 4, 4), 0.05, seed=4)
    assert (s.positions_A > s.box_A - 0.3).any()  # some of plane 0 wrapped around
    pos = mapping.rewrap(s.positions_A, s.box_A)
    np.testing.assert_allclose(np.mod(pos - s.positions_A + 1e-9, s.box_A), 1e-9, atol=1e-8)
    span = pos.max(0) - pos.min(0)
    assert (span < s.box_A - 3.615 / 2 + 0.5).all()  # one plane's spread, not the box


def test_tile_map_lays_an_aligned_slab_site_by_site():
    """A Cu (001) slab 4 cells thick on 2 PE rows and columns per site line: every 2 x 2
    tile holds the 4 atoms above one projected lattice site, tiles step a / 2 in x along
    rows and in y down columns, each tile's atoms go up in z along its serpentine, and the
    window the coverage test needs is the reach over the PE spacing (a / 4), rounded up."""
    a, (nx, ny, nz) = 3.615, (12, 10, 4)
    s = perturbed("fcc", "Cu", a, (nx, ny, nz), 0.05, seed=2)
    grid = (4 * ny, 4 * nx)
    pos = mapping.rewrap(s.positions_A, s.box_A)
    m = mapping.initial_map(pos, grid, s.box_A, (2, 2))
    assert np.array_equal(np.sort(m.ravel()), np.arange(s.num_atoms))  # no empty PE
    p = pos[m].reshape(2 * ny, 2, 2 * nx, 2, 3).transpose(0, 2, 1, 3, 4)  # tile, tile, 2, 2
    spread = p[..., :2].max(axis=(2, 3)) - p[..., :2].min(axis=(2, 3))
    assert spread.max() < 0.5  # thermal displacements, not a site spacing (1.8 A)
    centre = p[..., :2].mean(axis=(2, 3))  # +- 0.05 A noise each: differences within 0.3
    np.testing.assert_allclose(np.diff(centre[..., 0], axis=1), a / 2, atol=0.3)
    np.testing.assert_allclose(np.diff(centre[..., 1], axis=0), a / 2, atol=0.3)
    z = p[..., 2]
    serpentine = np.stack([z[..., 0, 0], z[..., 0, 1], z[..., 1, 1], z[..., 1, 0]], -1)
    assert (np.diff(serpentine, axis=-1) > 0).all()
    state = mapping.pack(m, pos, np.zeros(s.num_atoms, np.int32))
    kr, kc = mapping.window_needed(state, s.box_A, REACH_A)
    ideal = int(np.ceil(REACH_A / (a / 4)))
    assert kr <= ideal + 1 and kc <= ideal + 1


@pytest.mark.parametrize("n_atoms", [1_000, 801_792])
def test_ballistic_cadence_is_the_fastest_atoms_time_to_cross_half_the_skin(n_atoms):
    """The Maxwell speed distribution (scipy.stats.maxwell) puts one atom in N above the
    speed the cadence assumes; at that speed skin / 2 takes the cadence's steps."""
    from scipy import stats
    from wse_hpc.md.integrate import BOLTZ_EV_K, MVV2E
    from wse_hpc.md.pe_program import ballistic_every

    skin, t, m, dt = 1.0, 300.0, 63.546, 1.0
    every = ballistic_every(skin, t, m, n_atoms, dt)
    sigma = np.sqrt(BOLTZ_EV_K * t / (m * MVV2E))  # A/ps
    # the speed that crosses skin / 2 in `every` and in `every + 1` steps of dt fs
    slow, fast = 0.5 * skin / ((every + 1) * dt * 1e-3), 0.5 * skin / (every * dt * 1e-3)
    assert stats.maxwell.sf(slow / sigma) > 1 / n_atoms >= stats.maxwell.sf(fast / sigma)


def test_a_run_starts_rebuilding_when_its_fastest_atom_could_cross_half_the_skin():
    """`initial_every`: 0.5 A at the fastest atom's 10 A/ps (a (6, 8, 0) A/ps velocity)
    takes 50 steps of 1 fs; at rest, the longest cadence; never below 1 step."""
    from wse_hpc.md.simulate import MAX_REBUILD_EVERY, initial_every

    v = np.array([[1.0, 0.0, 0.0], [6.0, 8.0, 0.0], [0.0, -3.0, 4.0]])
    assert initial_every(v, 1.0, 1.0) == 50
    assert initial_every(v, 1.0, 2.0) == 25
    assert initial_every(np.zeros((4, 3)), 1.0, 1.0) == MAX_REBUILD_EVERY
    assert initial_every(1e6 * v, 1.0, 1.0) == 1
