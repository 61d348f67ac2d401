"""The PEs' numba kernels (`pe_kernels`) against NumPy, and the grouped product with them
against the same product with XLA dots and against the NumPy TLR-MVM."""

import dataclasses

import jax
import numpy as np
import pytest
from wse_core import preset
from wse_hpc.tlrmvm import TlrError, compress, pe_kernels, tlrmvm_numpy
from wse_hpc.tlrmvm.engine import TlrEngine
from wse_hpc.tlrmvm.grouped import resolve_kernel
from wse_hpc.tlrmvm.testing import random_vectors, smooth_kernel

# the PE kernels are numba on XLA:CPU's FFI: a CPU mesh as the default backend
pytestmark = [
    pytest.mark.skipif(not pe_kernels.available(), reason="numba is not installed"),
    pytest.mark.cpu_devices,
]
RTOL = 2e-5


def _rel(a, b):
    return np.linalg.norm(a - b) / np.linalg.norm(b)


def _complex(rng, shape, cplx):
    z = rng.standard_normal(shape) + (1j * rng.standard_normal(shape) if cplx else 0)
    return z.astype(np.complex64 if cplx else np.float32)


def _stored(rows, cplx):
    """Rows as the bases store them: complex as interleaved float32 (re, im) pairs."""
    if not cplx:
        return rows
    return np.stack([rows.real, rows.imag], -1).reshape(rows.shape[0], -1).astype(np.float32)


@pytest.mark.parametrize("parallel", [True, False])
@pytest.mark.parametrize("conj", [False, True])
@pytest.mark.parametrize("cplx", [True, False])
def test_rows_dot_is_each_row_times_its_piece(cplx, conj, parallel):
    rng = np.random.default_rng(1)
    rows_n, nb, pieces, batch = 13, 9, 4, 3  # an odd number of rows: the last one alone
    rows = _complex(rng, (rows_n, nb), cplx)
    p = _complex(rng, (pieces, nb, batch), cplx)
    sel = rng.integers(0, pieces, rows_n).astype(np.int32)
    e = pe_kernels.pair_vectors(jax.numpy.asarray(p), conj, cplx)
    fn = jax.jit(lambda a, e, s: pe_kernels.rows_dot(a, e, s, parallel=parallel))
    out = np.asarray(fn(_stored(rows, cplx), e, sel))
    want = np.einsum("rk,rkb->rb", rows.conj() if conj else rows, p[sel])
    got = out[:, 0] + 1j * out[:, 1] if cplx else out[:, 0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("parallel", [True, False])
@pytest.mark.parametrize("conj", [False, True])
@pytest.mark.parametrize("cplx", [True, False])
def test_sum_rows_adds_each_row_into_its_piece(cplx, conj, parallel):
    rng = np.random.default_rng(2)
    block_rows, per_row, nb, pieces, batch = 3, 7, 10, 2, 2
    rows = _complex(rng, (block_rows * per_row, nb), cplx)
    values = _complex(rng, (block_rows, per_row, batch), cplx)
    win = rng.integers(0, pieces, (block_rows, per_row)).astype(np.int32)
    parts = [values.real, values.imag] if cplx else [values]
    t = np.stack(parts, axis=2).astype(np.float32)  # (BR, RW, C, B)
    a = _stored(rows, cplx).reshape(block_rows, per_row, -1)
    fn = jax.jit(lambda a, t, w: pe_kernels.sum_rows(a, t, w, conj, pieces, parallel=parallel))
    out = np.asarray(fn(a, t, win))  # (BR, pieces, C, B, nb)
    r = (rows.conj() if conj else rows).reshape(block_rows, per_row, nb)
    want = np.zeros((block_rows, pieces, batch, nb), np.complex128)
    for g in range(block_rows):
        for k in range(per_row):
            want[g, win[g, k]] += values[g, k][:, None] * r[g, k][None, :]
    got = out[:, :, 0] + 1j * out[:, :, 1] if cplx else out[:, :, 0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_gather_rows_is_numpy_take():
    rng = np.random.default_rng(3)
    src = rng.standard_normal((11, 6)).astype(np.float32)
    at = rng.integers(0, 11, 17).astype(np.int32)  # repeats and misses, as the ring's picks
    got = np.asarray(jax.jit(pe_kernels.gather_rows)(src, at))
    np.testing.assert_array_equal(got, src[at])


@pytest.fixture(scope="module")
def op():
    return compress(smooth_kernel(70, 53), nb=12, threshold=1e-3)  # 6 x 5 tiles, edge tiles


@pytest.mark.parametrize(
    "mesh, rank_chunk, batch, cplx",
    [
        ((1, 1), None, 1, True),
        ((2, 4), 3, 2, True),
        ((4, 2), 2, 1, False),
        ((1, 1), 2, 3, False),
        ((1, 4), 2, 2, True),  # blocks side by side: each stores its PE rows packed
    ],
)
def test_grouped_pe_kernels_equal_xla_dots_and_numpy(op, mesh, rank_chunk, batch, cplx):
    if not cplx:
        op = compress(smooth_kernel(70, 53, complex_=False), nb=12, threshold=1e-3)
    engines = [
        TlrEngine.build(
            op, preset("small"), mesh_shape=mesh, rank_chunk=rank_chunk, batch=batch, kernel=k
        )
        for k in ("pe", "xla")
    ]
    assert [e.kernel for e in engines] == ["pe", "xla"]
    x = random_vectors(53, batch, op.dtype)
    y = random_vectors(70, batch, op.dtype, seed=2)
    pe, xla = engines
    assert _rel(pe.matvec(x), tlrmvm_numpy(op, x)) < RTOL
    assert _rel(pe.rmatvec(y), tlrmvm_numpy(op, y, adjoint=True)) < RTOL
    assert _rel(pe.matvec(x), xla.matvec(x)) < RTOL
    assert _rel(pe.rmatvec(y), xla.rmatvec(y)) < RTOL


@pytest.mark.parametrize("cplx", [True, False])
def test_packed_storage_gives_the_placed_orders_products_bit_for_bit(op, cplx):
    """Where phase 2 picks from the block itself (one block down the columns), the PE
    kernels read the bases packed (`grouped_storage`): each PE row's rows in their order,
    the empty slots after them. Same rows, same sums: bit for bit the products of a mesh
    split down the columns, which reads them as placed."""
    from wse_hpc.tlrmvm.grouped import row_lengths
    from wse_hpc.tlrmvm.wafer import place_plan

    if not cplx:
        op = compress(smooth_kernel(70, 53, complex_=False), nb=12, threshold=1e-3)
    packed, placed = (
        TlrEngine.build(op, preset("small"), mesh_shape=m, rank_chunk=2, batch=2)
        for m in ((1, 1), (2, 1))
    )
    assert packed.fns.store_fn is not None and placed.fns.store_fn is None
    x = random_vectors(53, 2, op.dtype)
    y = random_vectors(70, 2, op.dtype, seed=2)
    np.testing.assert_array_equal(packed.matvec(x), placed.matvec(x))
    np.testing.assert_array_equal(packed.rmatvec(y), placed.rmatvec(y))
    _, bases = place_plan(op, preset("small"), packed.plan, mesh_shape=(1, 1))
    lens = row_lengths(packed.plan, packed.wafer.padded_shape, 2 if cplx else 1)
    for got, want, le in zip(packed.bases, bases, lens, strict=True):
        got, want = (np.asarray(a).reshape(a.shape[0], -1, a.shape[-1]) for a in (got, want))
        rows = (le > 0).reshape(le.shape[0], -1)
        assert (rows.sum(1) < rows.shape[1]).any()  # the placement leaves empty slots
        for g in range(rows.shape[0]):  # each PE row: its rows first, in order, then zeros
            k = rows[g].sum()
            np.testing.assert_array_equal(got[g, :k], want[g, rows[g]])
            assert not got[g, k:].any()


def test_kernel_choice_and_clear_errors(op):
    eng = TlrEngine.build(op, preset("small"))
    assert eng.kernel == "pe"  # auto on a CPU mesh with numba
    with pytest.raises(TlrError, match="unknown kernel 'gpu'"):
        TlrEngine.build(op, preset("small"), kernel="gpu")
    plan64 = dataclasses.replace(eng.plan, dtype="complex128")  # the kernels are float32
    with pytest.raises(TlrError, match="float32"):
        resolve_kernel(eng.wafer, plan64, "pe")
    assert resolve_kernel(eng.wafer, plan64, "auto") == "xla"


def test_ledger_is_the_same_with_either_kernel(op):
    from wse_core import fabric

    counts = []
    for k in ("pe", "xla"):
        eng = TlrEngine.build(op, preset("small"), mesh_shape=(2, 4), kernel=k)
        x = jax.ShapeDtypeStruct((53, 1), op.dtype)
        counts.append(fabric.count(eng.wafer, eng.fns.matvec_fn, eng.bases, x))
    assert counts[0] == counts[1] and counts[0].words > 0


@pytest.mark.parametrize("parallel", [True, False])
def test_kernels_read_only_each_rows_length(parallel):
    """NaN past each row's length must not reach the result: what the kernels read is the
    rows' leading `lengths` floats (0: an empty row, out 0 / nothing added)."""
    rng = np.random.default_rng(3)
    rows_n, k, pieces, batch = 9, 16, 3, 2
    a = rng.standard_normal((rows_n, k)).astype(np.float32)
    lengths = rng.integers(0, k + 1, rows_n).astype(np.int32)
    lengths[0] = 0
    clean = np.where(np.arange(k) < lengths[:, None], a, 0).astype(np.float32)
    dirty = np.where(np.arange(k) < lengths[:, None], a, np.nan).astype(np.float32)
    e = rng.standard_normal((pieces, batch, 1, k)).astype(np.float32)
    sel = rng.integers(0, pieces, rows_n).astype(np.int32)
    dot = jax.jit(lambda a, le: pe_kernels.rows_dot(a, e, sel, le, parallel=parallel))
    want = np.einsum("rk,rbk->rb", clean, e[sel, :, 0])
    np.testing.assert_allclose(np.asarray(dot(dirty, lengths))[:, 0], want, rtol=1e-5, atol=1e-5)
    t = rng.standard_normal((1, rows_n, 1, batch)).astype(np.float32)
    win = sel.reshape(1, -1)
    add = jax.jit(
        lambda a, le: pe_kernels.sum_rows(a, t, win, False, pieces, le, parallel=parallel)
    )
    want = np.zeros((pieces, batch, k))
    for r in range(rows_n):
        want[sel[r]] += t[0, r, 0][:, None] * clean[r][None, :]
    got = np.asarray(add(dirty[None], lengths[None]))[0, :, 0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("parallel", [True, False])
def test_sum_rows_split_by_load_covers_every_block_row(parallel):
    """Block rows of very unequal loads (one holding most of the floats, one none): each
    block row's sums are the NumPy ones, whichever thread's run of block rows it falls in,
    and an empty block row comes back zeroed."""
    rng = np.random.default_rng(5)
    block_rows, rows_n, k, pieces = 7, 6, 8, 2
    a = rng.standard_normal((block_rows, rows_n, k)).astype(np.float32)
    lengths = np.zeros((block_rows, rows_n), np.int32)
    lengths[0] = k  # the heaviest first, as deal_groups orders the PE rows
    lengths[2, :2] = k // 2
    lengths[3:, 0] = 1
    lengths[5] = 0  # a PE row with no rows
    t = rng.standard_normal((block_rows, rows_n, 1, 1)).astype(np.float32)
    win = rng.integers(0, pieces, (block_rows, rows_n)).astype(np.int32)
    add = jax.jit(
        lambda a, le: pe_kernels.sum_rows(a, t, win, False, pieces, le, parallel=parallel)
    )
    clean = np.where(np.arange(k) < lengths[..., None], a, 0)
    want = np.zeros((block_rows, pieces, k))
    for g in range(block_rows):
        for r in range(rows_n):
            want[g, win[g, r]] += t[g, r, 0, 0] * clean[g, r]
    got = np.asarray(add(a, lengths))[:, :, 0, 0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert not got[5].any()


def test_row_lengths_cover_the_operators_bases_exactly(op):
    """The floats the grouped product's kernels read are the operator's own bases: the sum
    of the row lengths times 4 bytes is the bytes of its U and V (complex64 = 2 floats)."""
    from wse_hpc.tlrmvm.grouped import row_lengths

    eng = TlrEngine.build(op, preset("small"), rank_chunk=2)
    v_len, u_len = row_lengths(eng.plan, eng.wafer.padded_shape, 2)
    assert v_len.sum() * 4 == sum(v.nbytes for v in op.v_cols)
    assert u_len.sum() * 4 == sum(u.nbytes for u in op.u_rows)
    assert v_len.size * 2 * op.nb * 4 > v_len.sum() * 4  # the placement pads
