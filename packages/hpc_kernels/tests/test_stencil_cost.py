"""The stencil cost model: counts checked by hand, the 25-point step equal to the
calibration case, and predictions that move with the plan they price."""

import math

import jax.numpy as jnp
import pytest
from wse_core import preset
from wse_core.calibration import wave25_work as calibration_wave25_work
from wse_core.perf import Op, PerfModel
from wse_hpc.stencil import jacobi, perf
from wse_hpc.stencil.placement import grid_wafer
from wse_hpc.stencil.runs import (
    bicgstab_spmv,
    place_bicgstab,
    place_jacobi,
    place_wave,
    wave_block_fn,
)


def _wave(shape, b):
    grid = place_wave(grid_wafer(preset("wse2"), shape, mesh_shape=(1, 1)), shape, b)
    return grid, perf.wave25_work(grid, b, wave_block_fn(grid))


@pytest.mark.parametrize("nz, b", [(16, 4), (20, 7), (40, 40)])
def test_wave25_step_equals_the_calibration_case(nz, b):
    # The kernel's own count (its radius, Z blocks, traced multicasts) is the published mix
    # the calibration was fitted on: the same Work, field for field (20 / 7: a short block).
    _, work = _wave((9, 10, nz), b)
    assert work == calibration_wave25_work(nz, b)


def test_wave25_prediction_moves_with_the_z_block_and_the_grid():
    model = PerfModel(preset("wse2"))
    _, small_blocks = _wave((9, 10, 48), 4)
    _, big_blocks = _wave((9, 10, 48), 48)
    # 12 blocks instead of 1: 11 more issue overheads per instruction and 16 hops per block.
    assert small_blocks.latency_hops == 16 * 12 and big_blocks.latency_hops == 16
    assert model.seconds(small_blocks) > model.seconds(big_blocks)
    _, deeper = _wave((9, 10, 96), 48)
    assert model.seconds(deeper) > 1.9 * model.seconds(big_blocks)


@pytest.mark.parametrize("dtype, words", [("fp32", 1.0), ("fp16", 0.5)])
def test_jacobi_sweep_counted_by_hand(dtype, words):
    nz = 10
    shape = (8, 8, nz)
    grid = place_jacobi(grid_wafer(preset("wse2"), shape, mesh_shape=(1, 1)), shape, dtype)
    phases = perf.jacobi_phases(grid, jacobi(grid), steps=3)
    work = phases.total_work()
    # Per sweep and cell: 6 adds and 4 muls (kernels.jacobi), 3 sweeps.
    assert work.ops_by_kind() == {f"add.{dtype}": 3 * 6 * nz, f"mul.{dtype}": 3 * 4 * nz}
    # One halo word per cell per direction in fp32, half a word in fp16 (two per wavelet).
    assert dict(work.links) == {d: 3 * words * nz for d in "NSEW"}
    spec = preset("wse2").replace(dsd_issue_cycles=0)
    w16 = 4 if dtype == "fp16" else 2
    w_mul = 4 if dtype == "fp16" else 1
    by_hand = 3 * (6 * math.ceil(nz / w16) + 4 * math.ceil(nz / w_mul))
    assert sum(op.cycles(spec) for op in work.ops) == by_hand


def test_fp16_axpy_and_a_bad_stride_priced_from_the_spec():
    spec = preset("wse2").replace(dsd_issue_cycles=0)
    n = 1001
    assert Op("fmac", "fp16", n).cycles(spec) == math.ceil(n / 4)
    assert Op("fmac", "fp16", n, stride=8).cycles(spec) == n  # stride % 8 == 0: width 1


def test_bicgstab_allreduce_grows_with_the_grid_through_the_same_plan():
    def iteration(shape):
        wafer = grid_wafer(preset("wse2"), shape, mesh_shape=(1, 1))
        grid = place_bicgstab(wafer, shape, "mixed", pair=False)
        return perf.bicgstab_iteration(grid, "mixed", bicgstab_spmv(grid))

    small, large = iteration((8, 8, 16)), iteration((64, 32, 16))
    model = PerfModel(preset("wse2"))
    lat = lambda p: model.evaluate(p).leaf("allreduce_1").cost.latency_cycles
    # Reduce to the centre and back: the diameter in hops (7 + 7 vs 63 + 31), x 1.1.
    cal = model._cal().fabric
    assert lat(small) == pytest.approx(14 / cal + 0.1 * 14)
    assert lat(large) == pytest.approx(94 / cal + 0.1 * 94)
    assert model.seconds(large) > model.seconds(small)
    ops = small.total_work().ops_by_kind()
    # 5 dots as mixed FMACs over the Z column of 16, fp16 stencil and AXPYs.
    assert ops["fmac_mixed.fp16"] == 5 * 16 and ops["sub.fp16"] == (2 * 6 + 3) * 16


def test_mixed_bicgstab_is_cheaper_than_fp32_per_iteration():
    shape = (8, 8, 64)
    model = PerfModel(preset("wse2"))
    secs = {}
    for p in ("mixed", "fp32"):
        grid = place_bicgstab(
            grid_wafer(preset("wse2"), shape, mesh_shape=(1, 1)), shape, p, pair=False
        )
        secs[p] = model.seconds(perf.bicgstab_iteration(grid, p, bicgstab_spmv(grid)))
    assert secs["mixed"] < secs["fp32"]
    assert jnp.dtype(grid.dtype("r")) == jnp.float32  # the last plan: fp32 vectors
