"""Hunt 65 in wse_hpc's Python API (stencil runs, the TLR engine, MD runs), as a notebook uses it.

Broken before:
- `run_stencil` with `chunks=0` or `-1` ran 0 of 10 steps and reported it as the result;
  `tol` and `block_z` on a kind that does not use them were ignored; `tol=5` "converged" at
  iteration 0; `steps=10.5` / `10**30` failed inside JAX after compiling, `steps=True` ran
  one step, a NaN grid was `int(nan)`'s ValueError and `spec="tiny"` an AttributeError;
- `TlrEngine.matvec` of a finite float64 x of 1e39 returned NaN (x was checked for
  finiteness before JAX's fp32 cast); an int64 x of 2**40 + 1 was wrapped to 1 by JAX's
  int32 cast (a wrong product, no warning); a 0-column batch was a ZeroDivisionError inside
  JAX; `report(systems=-2)` priced -1.5e10 B/s, `systems=0` 0, and `measured_wall_s=-1`
  was printed as measured;
- `run_md(MdConfig(dtype="float64"))` ran in float32 (JAX truncated it with a warning) and
  priced fp32 fabric words; `steps=2.5` ran 3 steps; `temperature_K` NaN was int(nan), inf
  compiled and then blamed dt; `dtype="int32"` was an OverflowError, `seed=-1` NumPy's
  text; `crystal(cells=(4.9, 4, 4))` built 4 cells.
"""

from __future__ import annotations

import dataclasses
import time
import warnings

import jax
import numpy as np
import pytest
from wse_core import WseError
from wse_core.hw.spec import preset
from wse_hpc.md import MdConfig, crystal, run_md, zhou04
from wse_hpc.md import simulate as md_simulate
from wse_hpc.md.reference import eam_reference
from wse_hpc.md.testing import perturbed
from wse_hpc.stencil import runs
from wse_hpc.stencil.placement import StencilError
from wse_hpc.stencil.reference import jacobi_np
from wse_hpc.stencil.runs import StencilConfig, exact_solution, run_stencil
from wse_hpc.tlrmvm import TlrError, compress
from wse_hpc.tlrmvm.engine import TlrEngine

pytestmark = pytest.mark.timeout(300)


# -- stencil runs -------------------------------------------------------------------------
def _stencil(**changes) -> StencilConfig:
    return StencilConfig(**{"kind": "jacobi", "grid": (4, 4, 4), "spec": preset("tiny"), **changes})


@pytest.mark.parametrize(
    "changes, line",
    [
        ({"steps": 10, "chunks": 0}, "chunks must be an integer >= 1, got 0"),
        ({"steps": 10, "chunks": -1}, "chunks must be an integer >= 1, got -1"),
        ({"chunks": 2.5}, "chunks must be an integer >= 1, got 2.5"),
        ({"tol": 1e-9}, "tol applies to kind bicgstab only; use steps for the others"),
        ({"block_z": 7}, "block_z applies to kind wave25 only; leave it out for kind jacobi"),
        ({"kind": "bicgstab", "block_z": 2}, "block_z applies to kind wave25 only"),
        ({"kind": "wave25", "block_z": 0}, "block_z must be an integer >= 1, got 0"),
        ({"kind": "wave25", "block_z": 2.5}, "block_z must be an integer >= 1, got 2.5"),
        ({"kind": "bicgstab", "tol": 5.0}, "tol must be a number in (0, 1) (a relative residual"),
        ({"kind": "bicgstab", "tol": 1.0}, "tol must be a number in (0, 1)"),
        ({"kind": "bicgstab", "tol": float("nan")}, "tol must be a number in (0, 1)"),
        (
            {"kind": "bicgstab", "tol": "1e-3"},
            "tol must be a number in (0, 1) (a relative residual target), got '1e-3'",
        ),
        ({"steps": 10.5}, "steps must be an integer in 0..2147483647, got 10.5"),
        ({"steps": 10**30}, "steps must be an integer in 0..2147483647, got 1.000e+30"),
        ({"steps": 2**31}, "steps must be an integer in 0..2147483647, got 2147483648"),
        ({"steps": True}, "steps must be an integer in 0..2147483647, got True"),
        ({"steps": -1}, "steps must be an integer in 0..2147483647, got -1"),
        ({"spec": "tiny"}, "spec must be a WaferSpec (wse_core.preset(NAME) gives one), got str"),
        ({"kind": "jacobbi"}, "unknown kind 'jacobbi' (did you mean 'jacobi'?); use one of"),
    ],
)
def test_stencil_settings_are_refused_before_anything_is_placed(monkeypatch, changes, line):
    def placed(*args, **kwargs):
        raise AssertionError("the grid was placed (and the kernels compiled) first")

    monkeypatch.setattr(runs, "grid_wafer", placed)
    with pytest.raises(StencilError) as e:
        run_stencil(_stencil(**changes))
    assert str(e.value).startswith(line) and "\n" not in str(e.value)


@pytest.mark.parametrize("grid", [(float("nan"), 4, 4), (4.5, 4, 4), (True, 4, 4), 4])
def test_a_grid_that_is_not_three_counts_is_named(grid):
    with pytest.raises(StencilError, match="the grid must be three positive integers NX NY NZ"):
        run_stencil(_stencil(grid=grid, steps=1))


def test_chunks_past_the_steps_run_every_step_as_numpy_does():
    """10 Jacobi sweeps in 3 calls, or in 10**12 "chunks" (one call per step: a list of
    10**12 sizes before), against 10 sweeps of the NumPy reference from the same start."""
    for chunks, points in ((3, [0, 4, 7, 10]), (10**12, list(range(11)))):
        run = run_stencil(_stencil(steps=10, chunks=chunks))
        assert run.report.extra["steps"] == 10
        assert [h[0] for h in run.report.extra["history"]] == points
        grid = run.grid
        f = np.float32(3 * np.pi**2 * exact_solution(grid, "jacobi"))  # as `_run_jacobi`
        u = np.zeros(grid.shape)
        for _ in range(10):
            u = jacobi_np(u, f.astype(np.float64), grid.spacing)
        got = grid.gather(run.field)
        # fp32 sweeps against float64 ones: a few fp32 roundings of values of O(1)
        np.testing.assert_allclose(got, u, rtol=0, atol=2e-6 * np.abs(u).max())


def test_a_wave25_block_past_nz_is_still_named_by_the_kernel():
    with pytest.raises(StencilError, match=r"the Z block size must be in 1..nz=8; got 9"):
        run_stencil(_stencil(kind="wave25", grid=(12, 12, 8), spec=preset("small"), block_z=9))


# -- the TLR engine -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def tlr():
    n = 64
    s = np.linspace(0, 1, n)
    a = 1 / (1 + 10 * np.abs(s[:, None] - s[None, :]))  # the hunt's matrix
    op = compress(a, nb=16, threshold=1e-4, rule="tile")  # the whole within 1e-4
    return a, TlrEngine.build(op, preset("small"))


def test_x_past_fp32_is_refused_and_x_within_it_is_multiplied(tlr):
    a, eng = tlr
    x = np.random.default_rng(0).standard_normal(a.shape[1])
    with pytest.raises(TlrError, match=r"^x holds 2.33e\+39, beyond fp32's range \(\+-3.4e38\)$"):
        eng.matvec(x * 1e39)
    with pytest.raises(TlrError, match=r"^y holds"):
        eng.rmatvec(x * 1e39)
    big = x / np.abs(x).max() * 1e37  # finite in fp32: the product is A x, as NumPy's
    want = a @ big
    got = eng.matvec(big)
    assert np.isfinite(got).all()
    assert np.abs(got - want).max() / np.abs(want).max() < 1e-5  # threshold 1e-4 on a sum


@pytest.mark.parametrize("dtype", [np.int64, np.uint64, np.int32])
def test_integer_x_is_converted_not_wrapped(tlr, dtype):
    """int64 2**40 + 1 was wrapped to 1 by JAX's int32 cast; now it is rounded to fp32 on the
    host (as a float64 x is), so the product is A x to fp32's precision."""
    a, eng = tlr
    value = 2**40 + 1 if dtype != np.int32 else 2**30 + 1
    x = np.full(a.shape[1], value, dtype) - np.arange(a.shape[1], dtype=dtype)
    want = a @ x.astype(np.float64)
    got = eng.matvec(x)
    assert np.abs(got - want).max() / np.abs(want).max() < 1e-5


def test_an_empty_batch_is_refused_in_one_line(tlr):
    a, eng = tlr
    with pytest.raises(TlrError, match=r"^x must hold at least one vector, got shape \(64, 0\)$"):
        eng.matvec(np.zeros((64, 0)))
    with pytest.raises(TlrError, match=r"^y must hold at least one vector"):
        eng.rmatvec(np.zeros((64, 0)))


@pytest.mark.parametrize("systems", [0, -2, 1.5, True, "2", 10**7])
def test_report_systems_must_be_a_positive_count(tlr, systems):
    with pytest.raises(TlrError, match=r"^systems must be an integer in 1..1,000,000, got "):
        tlr[1].report(systems=systems)


@pytest.mark.parametrize("measured", [-1.0, float("nan"), float("inf"), "1"])
def test_report_measured_time_must_be_seconds(tlr, measured):
    with pytest.raises(TlrError, match=r"^measured_wall_s must be a finite number of seconds"):
        tlr[1].report(measured_wall_s=measured)


def test_report_bandwidth_grows_with_the_systems(tlr):
    eng = tlr[1]
    one = eng.report().extra["model_bytes_per_s"]
    assert eng.report(systems=4).extra["model_bytes_per_s"] == pytest.approx(4 * one)
    assert eng.report(measured_wall_s=0.0).measured_wall_s == 0.0


# -- MD runs ------------------------------------------------------------------------------
POT = zhou04(["Cu"], knots=200)


@pytest.mark.parametrize(
    "changes, line",
    [
        ({"steps": 2.5}, "steps must be an integer in 0..2147483647, got 2.5"),
        ({"steps": True}, "steps must be an integer in 0..2147483647, got True"),
        ({"thermo_every": 1.5}, "thermo_every must be an integer in 1..2147483647, got 1.5"),
        ({"rebuild_every": 0}, "rebuild_every must be an integer in 1..2147483647, got 0"),
        ({"temperature_K": float("nan")}, "temperature_K must be a number in 0..1e+05 K"),
        ({"temperature_K": float("inf")}, "temperature_K must be a number in 0..1e+05 K"),
        (
            {"temperature_K": "300"},
            "temperature_K must be a number in 0..1e+05 K (past it a run stops as blown up), "
            "got '300'",
        ),
        ({"dtype": "int32"}, "dtype must be 'float32' or 'float64', got 'int32'"),
        ({"dtype": np.float64}, "dtype must be 'float32' or 'float64', got"),
        ({"seed": -1}, "seed must be an integer in 0..9223372036854775807, got -1"),
        ({"seed": 2**64}, "seed must be an integer in 0..9223372036854775807, got 1.845e+19"),
        ({"dt_fs": float("inf")}, "the timestep must be positive and finite, got dt = inf fs"),
    ],
)
def test_md_settings_are_refused_before_the_run_starts(monkeypatch, changes, line):
    def started(*args, **kwargs):
        raise AssertionError("the run was prepared (and planned) first")

    monkeypatch.setattr(md_simulate, "prepare", started)
    s = crystal("fcc", "Cu", POT.lattice_A[0], (4, 4, 4))
    cfg = {"spec": preset("small"), "steps": 2, "thermo_every": 1, "temperature_K": 300.0}
    t0 = time.perf_counter()
    with pytest.raises(WseError) as e:
        run_md(s, POT, MdConfig(**{**cfg, **changes}))
    assert str(e.value).startswith(line) and "\n" not in str(e.value)
    assert time.perf_counter() - t0 < 1.0


@pytest.mark.parametrize("cells", [(4.9, 4, 4), (0, 4, 4), (float("nan"), 4, 4), (4, 4), 4])
def test_crystal_cells_must_be_three_whole_counts(cells):
    with pytest.raises(WseError, match=r"^cells must be three positive integers \(NX NY NZ\), got"):
        crystal("fcc", "Cu", 3.615, cells)


def test_crystal_takes_whole_counts_given_as_floats_or_numpy_integers():
    want = crystal("fcc", "Cu", 3.615, (4, 3, 2)).positions_A
    for cells in ((4.0, 3, 2), np.array([4, 3, 2])):
        np.testing.assert_array_equal(crystal("fcc", "Cu", 3.615, cells).positions_A, want)


def test_a_float64_run_is_float64_and_priced_as_float64():
    """The API's float64 run against the float64 NumPy all-pairs oracle: within 1e-10
    (fp32's run is ~1e-5 off, which is what a float64 config returned before), with no
    truncation warning, fp64 fabric words in its report (2 a value: twice the float32
    plan's) and JAX's 64-bit mode off again afterwards."""
    s = perturbed("fcc", "Cu", POT.lattice_A[0], (4, 4, 4), 0.05, seed=2)
    ref = eam_reference(POT, s.positions_A, np.zeros(s.num_atoms, int), s.box_A)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        res = run_md(s, POT, MdConfig(spec=preset("small"), steps=0, dtype="float64"))
        words = res.report.to_dict()["traffic"]["words"]
    assert not [w for w in seen if "truncated to dtype float32" in str(w.message)]
    assert not jax.config.jax_enable_x64
    np.testing.assert_allclose(res.structure.forces_eV_A, ref.forces_eV_A, rtol=0, atol=1e-10)
    np.testing.assert_allclose(res.structure.energies_eV, ref.energy_eV, rtol=0, atol=1e-10)
    assert res.thermo[0].pe == pytest.approx(ref.total_eV, rel=1e-13)
    from wse_hpc.md.perf import run_report

    fp32 = dataclasses.replace(res, plan=dataclasses.replace(res.plan, dtype="float32"))
    assert words == 2 * run_report(fp32).to_dict()["traffic"]["words"]
