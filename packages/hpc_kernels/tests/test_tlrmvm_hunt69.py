"""Hunt 69's TLR-MVM holes (notes/s69/hunt69_tlr.md), in the kernel. Broken before:
- a threshold below fp32's reach (1e-9) was compressed and its operator claimed to meet it;
- `error_fro` was the SVDs' dropped tail, 0 at full rank where the stored operator is ~1e-7
  off, and no check ever compared it with the threshold on load (0.5 beside 1e-3 ran; a
  zero operator's "8.3e-04"; -0 printed as -0.00e+00; a complex threshold was Python's
  TypeError; a `format` of 1.5 or '1' read as 1);
- `describe()` gave NaN for an older file, which `json.dumps` wrote as the invalid `NaN`;
- any tile count was accepted, and the planner's edge colouring took 48 s for 65,536 rank
  rows (a 256 x 256 operator of nb 1);
- `tlrmvm_numpy` cut an over-long x to the operator's width without a word;
- the SRAM refusals named the ledger's allocation ('tlrmvm.vectors'), not the batch or rank
  chunk, nor the largest that fits;
- a bfloat16 `.npy` (bare |V2 values) was "must hold real or complex numbers, got |V2".
Oracles: NumPy (the dense rebuild in float64, A @ x), brute force (least nb, a proper
colouring), the planner run at the value the refusal names.
"""

from __future__ import annotations

import json
import math
import time

import numpy as np
import pytest
from wse_core import preset
from wse_core.errors import SramBudgetError
from wse_core.host.limits import limit
from wse_hpc.tlrmvm import TlrError, compress, load_operator, save_operator, tlrmvm_numpy
from wse_hpc.tlrmvm.compress import LEAST_THRESHOLD, achieved_error, least_nb
from wse_hpc.tlrmvm.engine import as_batch
from wse_hpc.tlrmvm.grouped_plan import colour_slices, plan_grouped
from wse_hpc.tlrmvm.packed import plan_packed
from wse_hpc.tlrmvm.perf import product_s
from wse_hpc.tlrmvm.seismic import load_matrix
from wse_hpc.tlrmvm.testing import smooth_kernel


def _random(n: int = 100, seed: int = 0) -> np.ndarray:
    r = np.random.default_rng(seed)
    return (r.standard_normal((n, n)) + 1j * r.standard_normal((n, n))).astype(np.complex64)


def _numpy_error(op, a) -> float:
    """The oracle: A_tlr rebuilt densely by NumPy, against A, in float64."""
    wide = a.astype(np.complex128)
    return float(np.linalg.norm(op.dense().astype(np.complex128) - wide) / np.linalg.norm(wide))


# -- threshold floor and the achieved error -----------------------------------------------
def test_a_threshold_below_fp32s_reach_is_refused():
    message = (
        "threshold 1e-09 is below 2e-06, the least an fp32 operator can certify (rounding its "
        "tiles to fp32 alone costs up to 9.5e-07 of ||A||_F): give threshold 2e-06 or more"
    )
    with pytest.raises(TlrError) as e:
        compress(_random(48), nb=16, threshold=1e-9)
    assert str(e.value) == message


@pytest.mark.parametrize("make", [_random, lambda: smooth_kernel(90, 70)])
def test_the_recorded_error_is_the_achieved_one_and_meets_the_least_threshold(make, tmp_path):
    a = make()
    op = compress(a, nb=16, threshold=LEAST_THRESHOLD, rule="tile")  # the whole within it
    truth = _numpy_error(op, a)
    assert truth <= LEAST_THRESHOLD  # certified against NumPy's own rebuild
    assert op.error_fro == pytest.approx(truth, rel=1e-3)  # before: 0.0 at full rank
    assert achieved_error(op, a) == op.error_fro  # measured the one way, bit for bit
    back = load_operator(save_operator(op, tmp_path / "op.npz"))
    assert back.error_fro == op.error_fro
    np.testing.assert_array_equal(back.dense(), op.dense())


def test_an_unknown_error_is_null_in_json(tmp_path):
    op = compress(smooth_kernel(40, 40), nb=16, threshold=1e-3)
    path = save_operator(op, tmp_path / "op.npz")
    with np.load(path) as f:
        data = {k: f[k] for k in f.files if k != "error_fro"}
    np.savez(tmp_path / "old.npz", **data)
    described = load_operator(tmp_path / "old.npz").describe()
    assert described["error_fro"] is None
    json.dumps(described, allow_nan=False)  # strict JSON


# -- the loader checks what compress writes -------------------------------------------------
@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    folder = tmp_path_factory.mktemp("op")
    op = compress(smooth_kernel(64, 64), nb=16, threshold=1e-3, rule="tile")
    path = save_operator(op, folder / "o.npz")
    with np.load(path) as f:
        return folder, {k: f[k] for k in f.files}


def _forged(saved, name, **change):
    folder, data = saved
    np.savez(folder / name, **{**data, **change})
    return folder / name


@pytest.mark.parametrize(
    ("change", "why"),
    [({"error_fro": np.float64(0.5)},
      "its recorded error 0.5 is above its threshold 0.001 (compress never writes that)"),
     ({"threshold": np.float64(5e-324)},
      "threshold 5e-324 is below 2e-06, the least an fp32 operator can certify (compress "
      "never writes that)"),
     ({"threshold": np.complex128(1e-3)}, "threshold must be one real number, got complex128"),
     ({"error_fro": np.array([1e-4, 1e-4])},
      "error_fro must be one real number, got float64 of shape (2,)")],
    ids=["error above threshold", "threshold 5e-324", "complex threshold", "two errors"],
)  # fmt: skip
def test_the_loader_refuses_figures_compress_never_writes(saved, change, why):
    path = _forged(saved, "bad.npz", **change)
    with pytest.raises(TlrError) as e:
        load_operator(path)
    assert str(e.value) == f"TLR operator file {str(path)!r} is corrupt: {why}"


def test_a_zero_operator_and_a_rank_above_its_tile_are_refused(saved):
    _, data = saved
    zero = _forged(saved, "zero.npz", ranks=np.zeros_like(data["ranks"]),
                   u=np.zeros(0, data["u"].dtype), v=np.zeros(0, data["v"].dtype))  # fmt: skip
    with pytest.raises(TlrError, match=r"is corrupt: the operator is zero \(all its ranks are 0\)"):
        load_operator(zero)
    zeroed = _forged(saved, "zb.npz", u=np.zeros_like(data["u"]))
    with pytest.raises(TlrError, match=r"the operator is zero \(a basis is all zero\)"):
        load_operator(zeroed)
    # 70 x 40 in tiles of 32: the last tile row is 6 tall, so rank 7 is no SVD's
    op = compress(smooth_kernel(70, 40), nb=32, threshold=1e-3)
    ranks = op.ranks.copy()
    ranks[2, 0] = 7
    folder = saved[0]
    path = save_operator(op, folder / "r.npz")
    with np.load(path) as f:
        data = {k: f[k] for k in f.files}
    rows = [u.copy() for u in op.u_rows]
    rows[2] = np.hstack([np.ones((6, 7), op.dtype), rows[2][:, op.ranks[2, 0] :]])
    cols = [v.copy() for v in op.v_cols]
    k0 = int(op.ranks[:2, 0].sum())
    cols[0] = np.hstack([cols[0][:, :k0], np.ones((32, 7), op.dtype)])
    data.update(ranks=ranks, u=np.concatenate([r.ravel() for r in rows]),
                v=np.concatenate([c.ravel() for c in cols]))  # fmt: skip
    np.savez(folder / "r7.npz", **data)
    with pytest.raises(TlrError, match=r"tile \(2, 0\) has rank 7, more than its 6 x 32 size"):
        load_operator(folder / "r7.npz")


def test_a_negative_zero_error_is_read_as_zero(saved):
    op = load_operator(_forged(saved, "nz.npz", error_fro=np.float64(-0.0)))
    assert op.error_fro == 0 and math.copysign(1, op.error_fro) == 1


@pytest.mark.parametrize("fmt", [np.float64(1.5), np.array("1"), np.array([1])])
def test_a_format_that_is_not_the_integer_1_is_no_operator_file(saved, fmt):
    path = _forged(saved, "fmt.npz", format=fmt)
    with pytest.raises(TlrError) as e:
        load_operator(path)
    assert str(e.value) == (
        f"{str(path)!r} is not a TLR operator file (use `wse hpc tlrmvm compress`)"
    )


# -- tiles ----------------------------------------------------------------------------------
def _tile_count(shape, nb):
    return -(-shape[0] // nb) * -(-shape[1] // nb)


def test_least_nb_is_the_least_tile_size_within_the_limit():
    most = limit("tlr_tiles")
    for shape in [(1024, 1024), (9801, 9801), (316, 317), (5, 10**6)]:  # brute force
        want = next(b for b in range(1, max(shape) + 1) if _tile_count(shape, b) <= most)
        assert least_nb(shape) == want, shape


def test_too_many_tiles_are_refused_up_front():
    t0 = time.perf_counter()
    with pytest.raises(TlrError) as e:
        compress(np.ones((1024, 1024), np.float32), nb=1, threshold=1e-3)
    assert time.perf_counter() - t0 < 5
    assert str(e.value) == (
        "nb 1 cuts the 1024 x 1024 operator into 1,048,576 tiles, over the limit of 100,000 (an "
        "SVD each; set WSE_LIMIT_TLR_TILES to lift it): give nb 4 or more"
    )


def test_the_tile_limit_is_lifted_by_its_variable(monkeypatch):
    a = smooth_kernel(64, 64)
    monkeypatch.setenv("WSE_LIMIT_TLR_TILES", "15")
    with pytest.raises(TlrError, match="into 16 tiles, over the limit of 15 .*give nb 22 or more"):
        compress(a, nb=16, threshold=1e-3)
    monkeypatch.setenv("WSE_LIMIT_TLR_TILES", "16")
    assert compress(a, nb=16, threshold=1e-3).tiles == (4, 4)


def test_a_file_of_too_many_tiles_is_refused_before_its_bases_are_read(saved):
    ranks = np.ones((400, 400), np.int64)  # 160,000 tiles of nb 1; bases that match
    path = _forged(saved, "many.npz", shape=np.array([400, 400]), nb=np.int64(1), ranks=ranks,
                   u=np.ones(160_000, np.complex64), v=np.ones(160_000, np.complex64))  # fmt: skip
    with pytest.raises(TlrError) as e:
        load_operator(path)
    assert str(e.value) == (
        f"TLR operator file {str(path)!r} has 160,000 tiles (400 x 400 in tiles of 1), over the "
        "limit of 100,000 (set WSE_LIMIT_TLR_TILES to lift it); compress it again with --nb 2 "
        "or more"
    )


def test_the_colouring_of_a_dense_tile_grid_is_proper_and_quick():
    """K_{256,256}: the rank rows of a 256 x 256 operator of nb 1 (48 s before, per size)."""
    edges = np.stack(np.nonzero(np.ones((256, 256))), axis=1)
    t0 = time.perf_counter()
    colour = colour_slices(edges, 256, 256)
    assert time.perf_counter() - t0 < 5
    assert colour.min() == 0 and colour.max() == 255  # Koenig: the largest degree
    for side in (0, 1):  # no two edges of one colour share a tile row, nor a column
        assert len({(int(e), int(c)) for e, c in zip(edges[:, side], colour, strict=True)}) == len(
            edges
        )


# -- the NumPy TLR-MVM checks x -------------------------------------------------------------
def test_tlrmvm_numpy_checks_the_vectors_length_in_the_engines_words():
    a = np.random.default_rng(0).standard_normal((48, 40)).astype(np.float32)
    op = compress(a, nb=16, threshold=1e-3)
    x = np.random.default_rng(1).standard_normal(40).astype(np.float32)
    y = tlrmvm_numpy(op, x)
    assert np.linalg.norm(y - a @ x) <= 1e-3 * np.linalg.norm(a) * np.linalg.norm(x)
    for bad, adjoint, n in [(np.ones(60), False, 40), (np.ones(41), False, 40),
                            (np.ones((40, 2, 1)), False, 40), (np.ones(40), True, 48)]:  # fmt: skip
        what = "y" if adjoint else "x"
        with pytest.raises(TlrError) as e:
            tlrmvm_numpy(op, bad, adjoint=adjoint)
        with pytest.raises(TlrError) as engine:
            as_batch(bad, n, False, what)
        assert (
            str(e.value)
            == str(engine.value)
            == (f"{what} must have length {n} (shape ({n},) or ({n}, b)), got {bad.shape}")
        )


# -- SRAM refusals name the option and what fits --------------------------------------------
@pytest.fixture(scope="module")
def op64():
    return compress(smooth_kernel(64, 64), nb=16, threshold=1e-3)


_CODE = preset("wse2").code_stack_bytes_per_pe  # hunt 81: the program's, not data's
_DATA = 49152 - _CODE


def _grouped(op, **kw):
    return plan_grouped(op, preset("wse2"), price=product_s, **kw)


def test_a_batch_over_sram_names_batch_and_the_largest_that_fits(op64):
    with pytest.raises(SramBudgetError) as e:
        _grouped(op64, batch=200)
    best = int(str(e.value).rsplit("at most --batch ", 1)[1].split()[0])
    assert str(e.value) == (
        f"--batch 200 needs 59,456 B of SRAM per PE for its vectors and the bases but a wse2 PE "
        f"has {_DATA:,} B (of the 49152 B a PE holds, {_CODE} B are its program's code and "
        f"stack, assumed: code_stack_bytes_per_pe): at most --batch {best} fits"
    )
    assert _grouped(op64, batch=best).batch == best  # the named value fits ...
    with pytest.raises(SramBudgetError):
        _grouped(op64, batch=best + 1)  # ... and is the largest
    with pytest.raises(SramBudgetError, match=r"^--batch 200 needs .* at most --batch \d+ fits$"):
        plan_packed(op64, preset("wse2"), batch=200)


def test_a_rank_chunk_over_sram_names_it_and_the_largest_that_fits(op64):
    with pytest.raises(SramBudgetError) as e:
        _grouped(op64, rank_chunk=10**9)
    line = str(e.value)
    best = int(line.rsplit("at most --rank-chunk ", 1)[1].split()[0])
    assert line.startswith("--rank-chunk 1000000000 needs 272,000,001,024 B of SRAM per PE but")
    assert _grouped(op64, rank_chunk=best).rank_chunk == best
    with pytest.raises(SramBudgetError, match=f"at most --rank-chunk {best} fits$"):
        _grouped(op64, rank_chunk=best + 1)


def test_tiles_no_option_fits_are_named_with_the_tile_size():
    op = compress(smooth_kernel(70, 53), nb=12, threshold=1e-3)
    small = preset("small")
    with pytest.raises(SramBudgetError) as e:
        # hand-sized PEs: every byte data's (no code and stack reserve, hunt 81)
        _grouped_on(op, small.replace(sram_bytes_per_pe=256, code_stack_bytes_per_pe=0))
    need = int(str(e.value).split(" needs ")[1].split()[0].replace(",", ""))
    assert str(e.value) == (
        f"one rank row of tiles of 12 needs {need:,} B of SRAM per PE (at --rank-chunk 1 and "
        "--batch 1) but a small PE has 256 B: compress with a smaller --nb or use a larger wafer"
    )
    assert (
        _grouped_on(op, small.replace(sram_bytes_per_pe=need, code_stack_bytes_per_pe=0)).rank_chunk
        == 1
    )  # it fits
    with pytest.raises(SramBudgetError):
        _grouped_on(op, small.replace(sram_bytes_per_pe=need - 1, code_stack_bytes_per_pe=0))


def _grouped_on(op, spec):
    return plan_grouped(op, spec, price=product_s)


# -- bfloat16 ---------------------------------------------------------------------------------
def test_a_bfloat16_npy_is_named_and_float32_suggested(tmp_path):
    np.save(tmp_path / "bf.npy", np.zeros((16, 16), "V2"))  # what ml_dtypes' bfloat16 saves as
    with pytest.raises(TlrError) as e:
        load_matrix(tmp_path / "bf.npy")
    assert str(e.value) == (
        f"cannot read matrix {str(tmp_path / 'bf.npy')!r}: it holds bare 2-byte values (dtype "
        "|V2), as NumPy saves a bfloat16 array (JAX, ml_dtypes); save it as float32 "
        "(np.save(path, x.astype(np.float32)))"
    )
