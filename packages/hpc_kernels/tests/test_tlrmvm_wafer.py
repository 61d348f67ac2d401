"""TLR-MVM on the wafer: NumPy TLR oracle, adjoint identity, meshes, defects, SRAM plans."""

import jax
import numpy as np
import pytest
from wse_core import preset
from wse_core.errors import PlacementError, SramBudgetError
from wse_hpc.tlrmvm import TlrError, compress, grouped_plan, tlrmvm_numpy
from wse_hpc.tlrmvm.engine import TlrEngine
from wse_hpc.tlrmvm.grouped_plan import colour_slices, deal_groups, plan_grouped
from wse_hpc.tlrmvm.packed import plan_packed
from wse_hpc.tlrmvm.perf import predict, product_s
from wse_hpc.tlrmvm.testing import random_vectors, smooth_kernel
from wse_hpc.tlrmvm.wafer import place_plan, plan_placement

# float32 GEMVs of length <= 64 accumulate rounding of a few 1e-7 relative.
RTOL = 2e-5


def _rel(a, b):
    return np.linalg.norm(a - b) / np.linalg.norm(b)


@pytest.fixture(scope="module")
def op():
    # 6 x 5 tiles, edge tiles; the tile rule's ranks make the grids the tests need
    return compress(smooth_kernel(70, 53), nb=12, threshold=1e-3, rule="tile")


@pytest.mark.parametrize("layout", ["banded", "packed", "grouped"])
@pytest.mark.parametrize(
    "mesh, rank_chunk, batch",
    [((2, 4), None, 1), ((4, 2), 2, 3), ((1, 1), 3, 2)],
)
def test_matvec_and_adjoint_match_numpy(monkeypatch, op, mesh, rank_chunk, batch, layout):
    if rank_chunk is not None and layout == "grouped":  # several pieces per PE (priced: s 1)
        monkeypatch.setattr(grouped_plan, "GROUP_SIZES", (2, 3, 4))
    eng = TlrEngine.build(
        op, preset("small"), mesh_shape=mesh, rank_chunk=rank_chunk, batch=batch, layout=layout
    )
    if rank_chunk is not None and layout == "banded":
        assert eng.plan.max_band > 1  # several rank slices per band: the band sum runs
    if rank_chunk is not None and layout == "packed":
        assert eng.plan.windows > 1  # PE rows mix tile rows: the per-row scatter runs
    if rank_chunk is not None and layout == "grouped":
        assert eng.plan.windows > 1  # PE rows serve several tile columns and rows
        assert _rows_that_travel(eng.plan) > 0  # U rows whose V sits on another PE row
        assert _pes_with_two_tile_rows(eng.plan) > 0  # phase 3 splits a PE's rows by piece
    x = random_vectors(53, batch, op.dtype)
    y = random_vectors(70, batch, op.dtype, seed=2)
    assert _rel(eng.matvec(x), tlrmvm_numpy(op, x)) < RTOL
    assert _rel(eng.rmatvec(y), tlrmvm_numpy(op, y, adjoint=True)) < RTOL


@pytest.mark.cpu_devices
@pytest.mark.parametrize("layout, rank_chunk", [("banded", 5), ("packed", 3), ("grouped", 3)])
def test_grid_not_divided_by_mesh(monkeypatch, op, layout, rank_chunk):
    monkeypatch.setattr(grouped_plan, "GROUP_SIZES", (2,))  # 3 x 15 PEs
    eng = TlrEngine.build(
        op, preset("small"), mesh_shape=(4, 2), rank_chunk=rank_chunk, layout=layout
    )
    rows, cols = eng.plan.grid
    assert rows % 4 and cols % 2  # padding PEs on both axes
    x = random_vectors(53, None, op.dtype)
    assert _rel(eng.matvec(x), tlrmvm_numpy(op, x)) < RTOL


@pytest.mark.cpu_devices
@pytest.mark.parametrize("layout", ["banded", "packed", "grouped"])
def test_adjoint_identity(op, layout):
    eng = TlrEngine.build(op, preset("small"), mesh_shape=(2, 4), layout=layout)
    x, y = random_vectors(53, None, op.dtype), random_vectors(70, None, op.dtype, seed=3)
    lhs = np.vdot(eng.matvec(x), y)  # <A x, y>
    rhs = np.vdot(x, eng.rmatvec(y))  # <x, A^H y>
    assert abs(lhs - rhs) <= RTOL * abs(lhs)


@pytest.mark.cpu_devices
def test_error_against_dense_within_threshold_bound():
    a = smooth_kernel(64, 64, seed=4)
    op = compress(a, nb=16, threshold=1e-3)
    eng = TlrEngine.build(op, preset("tiny"), mesh_shape=(2, 4))
    x = random_vectors(64, None, a.dtype)
    err = np.linalg.norm(eng.matvec(x) - a @ x)
    assert err <= 1e-3 * np.linalg.norm(a) * np.linalg.norm(x) * 1.01


@pytest.mark.cpu_devices
def test_real_operator():
    a = smooth_kernel(30, 40, complex_=False)
    op = compress(a, nb=8, threshold=1e-4)
    eng = TlrEngine.build(op, preset("tiny"), mesh_shape=(2, 4), rank_chunk=None)
    x = random_vectors(40, None, np.float32)
    assert eng.matvec(x).dtype == np.float32
    assert _rel(eng.matvec(x), tlrmvm_numpy(op, x)) < RTOL
    with pytest.raises(TlrError, match="complex"):
        eng.matvec(random_vectors(40, None, np.complex64))


@pytest.mark.cpu_devices
@pytest.mark.parametrize("layout", ["banded", "packed", "grouped"])
def test_defects_do_not_change_results(op, layout):
    clean = TlrEngine.build(op, preset("small"), mesh_shape=(2, 4), layout=layout)
    broken = TlrEngine.build(op, preset("small"), mesh_shape=(2, 4), defect_seed=5, layout=layout)
    assert broken.wafer.defects is not None and broken.wafer.defects.num_dead > 0
    x = random_vectors(53, None, op.dtype)
    np.testing.assert_array_equal(clean.matvec(x), broken.matvec(x))


@pytest.mark.cpu_devices
def test_wrong_vector_is_a_clear_error(op):
    eng = TlrEngine.build(op, preset("small"), mesh_shape=(2, 4))
    with pytest.raises(TlrError, match="length 53"):
        eng.matvec(np.ones(52, np.complex64))
    with pytest.raises(TlrError, match="planned batch"):
        eng.matvec(np.ones((53, 2), np.complex64))
    with pytest.raises(TlrError, match="NaN"):
        eng.matvec(np.full(53, np.nan, np.complex64))


def test_ledger_sizes_the_plan(op):
    big = plan_placement(op, preset("small"))
    assert big.rank_chunk == int(op.ranks.max()) and big.max_band == 1
    # hand-sized PEs: every byte data's (no code and stack reserve, hunt 81)
    cramped = preset("small").replace(sram_bytes_per_pe=2048, code_stack_bytes_per_pe=0)
    small = plan_placement(op, cramped)
    assert small.rank_chunk < big.rank_chunk and small.grid[0] > big.grid[0]
    assert sum(small.bytes_per_pe().values()) <= 2048


def test_plans_that_do_not_fit_are_refused(op):
    with pytest.raises(SramBudgetError, match="needs"):
        plan_placement(
            op, preset("small").replace(sram_bytes_per_pe=256, code_stack_bytes_per_pe=0)
        )
    with pytest.raises(PlacementError, match="PEs"):
        plan_placement(op, preset("tiny"), rank_chunk=1)


@pytest.mark.cpu_devices
def test_jit_does_not_retrace(op):
    eng = TlrEngine.build(op, preset("small"), mesh_shape=(2, 4))
    x = random_vectors(53, None, op.dtype)
    eng.matvec(x)
    before = eng._matvec._cache_size()
    eng.matvec(x * 2)
    assert eng._matvec._cache_size() == before
    assert isinstance(jax.devices()[0], jax.Device)


def test_explicit_rank_chunk_over_sram_is_refused(op):
    with pytest.raises(SramBudgetError, match="SRAM over budget: allocation .tlrmvm"):
        plan_placement(
            op,
            preset("small").replace(sram_bytes_per_pe=1024, code_stack_bytes_per_pe=0),
            rank_chunk=8,
        )


def test_packed_layout_needs_fewer_pes_than_banded(op):
    banded = plan_placement(op, preset("small"), rank_chunk=2)
    packed = plan_packed(op, preset("small"), rank_chunk=2)
    assert packed.grid[0] < banded.grid[0] and packed.grid[1] == banded.grid[1]
    assert packed.padded_bases_bytes < banded.padded_bases_bytes
    with pytest.raises(SramBudgetError):
        plan_packed(
            op,
            preset("small").replace(sram_bytes_per_pe=512, code_stack_bytes_per_pe=0),
            rank_chunk=8,
        )
    with pytest.raises(TlrError, match="layout"):
        TlrEngine.build(op, preset("small"), layout="diagonal")


def test_colouring_is_proper_with_the_largest_degree_colours():
    rng = np.random.default_rng(7)
    edges = np.stack([rng.integers(0, 5, 60), rng.integers(0, 8, 60)], axis=1)
    colour = colour_slices(edges, 5, 8)
    deg = max(np.bincount(edges[:, 0]).max(), np.bincount(edges[:, 1]).max())
    assert colour.min() == 0 and colour.max() == deg - 1  # Koenig: exactly the max degree
    for side in (0, 1):  # no two edges of a colour share a tile row, nor a tile column
        pairs = {(int(e), int(c)) for e, c in zip(edges[:, side], colour, strict=True)}
        assert len(pairs) == len(edges)


def _rows_that_travel(plan) -> int:
    """Rank rows whose U sits on another PE row than their V (the ring moves them)."""
    at = {tuple(e): g for (g, _, _), e in _placed(plan.v_rank)}
    return sum(at[tuple(e)] != g for (g, _, _), e in _placed(plan.u_rank))


def _pes_with_two_tile_rows(plan) -> int:
    """PEs whose U rows belong to more than one tile row (partial pieces of several y_i)."""
    i = plan.u_rank[..., 0]
    return sum(len(set(i[g, r][i[g, r] >= 0].tolist())) > 1 for g, r in np.ndindex(i.shape[:2]))


def _placed(field):
    return [(idx, field[idx]) for idx in zip(*np.nonzero(field[..., 0] >= 0), strict=True)]


@pytest.mark.parametrize("rank_chunk", [2, 5])
def test_grouped_plan_places_every_rank_row_once(op, rank_chunk):
    plan = plan_grouped(op, preset("small"), rank_chunk=rank_chunk, price=product_s)
    expect = sorted((i, j, q) for (i, j), k in np.ndenumerate(op.ranks) for q in range(k))
    v_at = {tuple(map(int, e)): idx for idx, e in _placed(plan.v_rank)}
    u_at = {tuple(map(int, e)): idx for idx, e in _placed(plan.u_rank)}
    assert sorted(v_at) == expect and sorted(u_at) == expect  # each rank row once, both sides
    for (i, j, _), (g, r, k) in v_at.items():
        assert j in plan.col_group[g]  # V rows sit on the PE row of their tile column's group
        gu, ru, ku = u_at[(i, j, _)]
        assert i in plan.row_group[gu]  # U rows on the PE row of their tile row's group
        assert (ru, ku) == (r, k)  # same PE column and row inside the PE: one colour
    loads = [op.ranks.sum(0)[g[g >= 0]].sum() for g in plan.col_group]
    loads += [op.ranks.sum(1)[g[g >= 0]].sum() for g in plan.row_group]
    koenig = -(-max(loads) // rank_chunk)  # PE columns of Koenig's D colours
    assert plan.grid == (len(plan.col_group), koenig)
    with pytest.raises(SramBudgetError):
        plan_grouped(
            op,
            preset("small").replace(sram_bytes_per_pe=512, code_stack_bytes_per_pe=0),
            rank_chunk=8,
            price=product_s,
        )
    with pytest.raises(PlacementError, match="PEs"):
        plan_grouped(op, preset("tiny"), rank_chunk=1, price=product_s)


def test_groups_are_balanced_and_capped():
    load = np.random.default_rng(3).integers(1, 50, 23)
    groups = deal_groups(load, 6, 4)
    members = groups[groups >= 0]
    assert sorted(members.tolist()) == list(range(23)) and (groups >= 0).sum(1).max() <= 4
    sums = np.where(groups >= 0, load[groups], 0).sum(1)
    assert sums.max() <= load.sum() / 6 + load.max()  # LPT: within one item of the mean


@pytest.fixture(scope="module")
def uneven():
    """12 x 12 tiles of 8, tile column j of rank 1 + j % 6."""
    rng = np.random.default_rng(5)
    cols = [
        rng.standard_normal((96, 1 + j % 6)) @ rng.standard_normal((1 + j % 6, 8))
        for j in range(12)
    ]
    op = compress(np.hstack(cols).astype(np.float32), nb=8, threshold=1e-4)
    assert (op.ranks == 1 + np.arange(12) % 6).all()
    return op


def _each_size(monkeypatch, op, price):
    """{s: the plan at group size s alone}, the sizes whose grid fits the wafer."""
    plans = {}
    for size in grouped_plan.GROUP_SIZES:
        with monkeypatch.context() as m:
            m.setattr(grouped_plan, "GROUP_SIZES", (size,))
            try:
                plans[size] = plan_grouped(op, preset("small"), rank_chunk=4, price=price)
            except PlacementError:  # wider than the wafer: the plan skips that size
                continue
    return plans


def test_grouped_plan_is_the_fastest_priced(monkeypatch, uneven):
    """Each size's plan priced by hand (its `predict` report on its own wafer): the planner
    takes the fastest, not the one padding least (here s = 2 pads least, s = 1 is faster)."""
    spec, x = preset("small"), random_vectors(96, None, np.float32)
    plans, by_hand = _each_size(monkeypatch, uneven, product_s), {}
    for size, plan in plans.items():
        wafer, _ = place_plan(uneven, spec, plan)
        by_hand[size] = predict(wafer, plan, uneven).predicted_s
        assert product_s(plan, spec) == pytest.approx(by_hand[size], rel=1e-12)
    eng = TlrEngine.build(uneven, spec, rank_chunk=4)
    assert eng.plan.windows == min(by_hand, key=by_hand.get)
    assert eng.report().predicted_s == pytest.approx(min(by_hand.values()), rel=1e-12)
    least = min(p.padded_bases_bytes for p in plans.values())
    assert eng.plan.padded_bases_bytes > least  # the price decided, not the padding
    assert _rel(eng.matvec(x), tlrmvm_numpy(uneven, x)) < RTOL


def test_grouped_plan_ties_go_to_least_padding(monkeypatch, uneven):
    """Under one price for every plan: the least padding, then the smaller s."""
    plan = plan_grouped(uneven, preset("small"), rank_chunk=4, price=lambda p, spec: 0.0)
    padded = {
        s: p.padded_bases_bytes for s, p in _each_size(monkeypatch, uneven, product_s).items()
    }
    assert 2 <= len(padded) < len(grouped_plan.GROUP_SIZES)  # one size too wide: skipped, no error
    assert plan.padded_bases_bytes == min(padded.values())
    assert plan.windows == min(s for s, b in padded.items() if b == min(padded.values()))
    assert padded[1] > 1.5 * plan.padded_bases_bytes  # one tile column per PE row pads more
    narrow = plan_grouped(uneven, preset("small"), rank_chunk=4, price=lambda p, _: p.windows)
    assert narrow.windows == 1  # the price decides before the padding


@pytest.mark.cpu_devices
@pytest.mark.parametrize("size", [1, 3])
@pytest.mark.parametrize("complex_", [True, False])
def test_grouped_wide_operator_and_batches(monkeypatch, size, complex_):
    monkeypatch.setattr(grouped_plan, "GROUP_SIZES", (size,))
    a = smooth_kernel(40, 75, seed=3, complex_=complex_)
    op = compress(a, nb=12, threshold=1e-3)  # 4 x 7 tiles, edge tiles on both sides
    eng = TlrEngine.build(op, preset("small"), mesh_shape=(2, 4), rank_chunk=2, batch=3)
    assert eng.plan.windows == size and eng.plan.grid[0] == -(-7 // size)
    x = random_vectors(75, 3, op.dtype)
    y = random_vectors(40, 3, op.dtype, seed=2)
    assert _rel(eng.matvec(x), tlrmvm_numpy(op, x)) < RTOL
    assert _rel(eng.rmatvec(y), tlrmvm_numpy(op, y, adjoint=True)) < RTOL
