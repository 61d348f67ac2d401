"""Hunt 65's `wse_hpc.fields` holes (the API as a notebook uses it). Broken before:
- `field_grid(spec, (8, 8, 10**9))` was accepted after 10-23 s and 8 GB (the grid's Z index
  built whole); only the first `grid.field` refused the column;
- `grid.field` kept the real part of complex values (NumPy's ComplexWarning only) and turned
  1e300 into inf (NaN was refused, since the check ran in float64 before the fp32 cast);
- `periodic=(1, 0, "no")` read as (True, False, True), and two entries were accepted, after
  which every field blamed its boundary conditions, which were never given;
- `run_cfd(restart=True)` with no step file in `out_dir` (or no `out_dir`) started from
  step 0 without a word, and a run that did restart did not say from where.
"""

from __future__ import annotations

import re
import time

import numpy as np
import pytest
from wse_core import PRESETS, SramBudgetError
from wse_hpc.fields import FieldError, field_grid

SPEC = PRESETS["small"]
FP32_MAX = float(np.finfo(np.float32).max)


def _grid(shape=(8, 8, 4), periodic=(True, True, True)):
    return field_grid(SPEC, shape, periodic=periodic, mesh_shape=(1, 1))


# --- the Z column against SRAM, before anything is built -----------------------------------
def test_a_z_column_past_sram_is_refused_at_once():
    # the oracle: one fp32 field's column, 4 B a cell, in the bytes the PE leaves data beside
    # its code and stack (hunt 81)
    data = SPEC.sram_bytes_per_pe - SPEC.code_stack_bytes_per_pe
    cells = data // 4
    message = (
        "a Z column of 1,000,000,000 cells needs 4,000,000,000 B per PE (one fp32 field); "
        f"the small PEs have {data:,} B for data ({SPEC.code_stack_bytes_per_pe:,} B of their "
        f"{SPEC.sram_bytes_per_pe:,} are code and stack, assumed): at most {cells:,} cells"
    )
    start = time.perf_counter()
    with pytest.raises(SramBudgetError, match=f"^{re.escape(message)}$"):
        _grid((8, 8, 10**9))
    assert time.perf_counter() - start < 1.0  # was 10-23 s and 8 GB
    with pytest.raises(SramBudgetError, match=f"column of {cells + 1:,} cells"):
        _grid((3, 3, cells + 1))
    g = _grid((3, 3, cells))  # exactly one field's column fits, and the field places
    assert g.gather(g.field("u", 1.5)).shape == (3, 3, cells)
    assert g.wafer.sram.free_bytes() == 0


# --- values of a field -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("values", "message"),
    [(np.ones((8, 8, 4)) * (1 + 2j), "field 'u' holds complex values; fields are real fp32"),
     (1 + 2j, "field 'u' holds complex values; fields are real fp32"),
     (np.complex64(3), "field 'u' holds complex values; fields are real fp32"),
     (np.full((8, 8, 4), 1e300), "field 'u' holds values past fp32 (largest 1e+300); fields "
      f"are fp32, give magnitudes up to {FP32_MAX:.3g}"),
     (-1e300, "field 'u' holds values past fp32 (largest 1e+300)"),
     (np.full((8, 8, 4), "a"), "field 'u' holds <U1 values; fields are real fp32")],
    ids=["complex array", "complex scalar", "complex64 scalar", "1e300 array", "-1e300",
         "text"],
)  # fmt: skip
def test_field_values_that_are_no_real_fp32_numbers_are_refused(values, message):
    g = _grid()
    with pytest.raises(FieldError, match=f"^{re.escape(message)}"):
        g.field("u", values)
    assert not g.wafer.sram.allocations  # nothing declared for a refused field


def test_field_values_up_to_fp32_max_are_placed_exactly():
    g = _grid()
    v = np.random.default_rng(0).uniform(-1, 1, (8, 8, 4)) * FP32_MAX
    np.testing.assert_array_equal(g.gather(g.field("u", v)), v.astype(np.float32))
    np.testing.assert_array_equal(g.gather(g.field("s", -FP32_MAX)), np.float32(-FP32_MAX))
    ints = np.arange(256).reshape(8, 8, 4)  # integer data is numbers too
    np.testing.assert_array_equal(g.gather(g.field("i", ints)), ints.astype(np.float32))


# --- periodic ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "periodic",
    [(1, 0, "no"), (True, True), (True, True, True, True), "TTT", None, True],
    ids=["ints and text", "two", "four", "a string", "None", "one bool"],
)
def test_periodic_must_be_three_booleans(periodic):
    message = f"periodic must be three booleans (X, Y, Z), got {periodic!r}"
    with pytest.raises(FieldError, match=f"^{re.escape(message)}$"):
        _grid(periodic=periodic)


def test_periodic_as_a_list_or_numpy_booleans_is_read_as_given():
    g = _grid(periodic=[True, np.bool_(False), np.True_])
    assert g.periodic == (True, False, True)
    assert all(type(p) is bool for p in g.periodic)


# --- run_cfd's restart -----------------------------------------------------------------------
def _cfd(**kw):
    from wse_hpc.fields.runs import CfdConfig, run_cfd

    cfg = CfdConfig(case="cavity", grid=(8, 8, 1), spec=PRESETS["tiny"], steps=2, **kw)
    return run_cfd(cfg)


def test_run_cfd_restart_needs_a_step_file_and_says_which_it_used(tmp_path):
    with pytest.raises(FieldError, match=r"^restart needs out_dir \(the folder holding"):
        _cfd(restart=True)
    message = (
        f"restart: out_dir {tmp_path} holds no step_<n>.npz to continue from; give "
        "restart=False to start a run"
    )
    with pytest.raises(FieldError, match=f"^{re.escape(message)}$"):
        _cfd(restart=True, out_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []
    first = _cfd(out_dir=tmp_path).report.extra
    assert first["restarted_from_step"] is None and first["restarted_from"] is None
    again = _cfd(out_dir=tmp_path, restart=True)
    x = again.report.extra
    assert x["restarted_from_step"] == 2
    assert x["restarted_from"] == str(tmp_path / "step_0000002.npz")
    assert again.history[-1][0] == 4  # continued from step 2, not started again
    assert sorted(p.name for p in tmp_path.glob("*.npz")) == [
        "step_0000002.npz",
        "step_0000004.npz",
    ]
