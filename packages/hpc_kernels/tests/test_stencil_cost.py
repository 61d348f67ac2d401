"""The stencil cost model: counts checked by hand (a step's fixed cost, an allreduce), the
25-point step's traced halo equal to the published step's, SC20's published kernel, and
predictions that move with the plan they price."""

import math

import jax.numpy as jnp
import pytest
from wse_core import preset
from wse_core.cost.calibration import UNCALIBRATED
from wse_core.cost.perf import Op, PerfModel
from wse_core.cost.stencil import step_terms, wave_step_phases
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
    return grid, perf.wave25_phases(grid, b, wave_block_fn(grid), 1).total_work()


@pytest.mark.parametrize("nz, b", [(16, 4), (20, 7), (40, 40)])
def test_wave25_traced_halo_is_the_published_steps(nz, b):
    # The kernel's own multicasts (its radius, Z blocks; 20 / 7: a short block) move the
    # words the published step prices: R = 4 values per cell on each link direction.
    grid, work = _wave((9, 10, nz), b)
    traced = perf.wave25_halo_words(grid, b, wave_block_fn(grid))
    assert traced == {d: work.links[d] for d in "NSEW"} == {d: 4.0 * nz for d in "NSEW"}
    assert work == wave_step_phases(nz, b, radius=4).total_work()


def test_wave25_step_fixed_costs_counted_by_hand():
    spec = preset("wse2").replace(
        dsd_issue_cycles=7.0, task_activation_cycles=3.0, ramp_latency_cycles=2.0
    )
    model = PerfModel(spec, UNCALIBRATED)
    nz, b = 48, 20  # blocks of 20, 20, 8
    timing = model.evaluate(wave_step_phases(nz, b, radius=4))
    terms = step_terms(timing, 3)
    # Per step: one task activation (the step's start).
    assert terms["per_step"] == 3.0
    # Per block: 43 DSDs, 4 + 1 task activations, 4 hops, one relay of 2 T_R + 1 = 5.
    assert terms["per_block"] == 3 * (43 * 7.0 + 5 * 3.0 + 4 * 1.0 + 5.0)
    # Per cell: 17 + 8 one-wide mul/FMA, 17 + 1 add/sub (one-wide: wave25_add_width), the
    # 16 halo words down the ramp (serial with the update).
    assert terms["per_cell"] == nz * (17 + 8 + 18 + 16)
    assert terms["cycles"] == pytest.approx(timing.seconds * spec.clock_hz)


def test_wave25_prediction_moves_with_the_z_block_and_the_grid():
    model = PerfModel(preset("wse2"))
    _, small_blocks = _wave((9, 10, 48), 4)
    _, big_blocks = _wave((9, 10, 48), 48)
    # 12 blocks instead of 1: 12 x 43 DSDs, and 4 hops and one relay per block.
    assert small_blocks.instructions == 12 * 43 and big_blocks.instructions == 43
    assert small_blocks.latency_hops == 4 * 12 and small_blocks.relay_stages == 12
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


def test_bicgstab_allreduce_counted_by_hand_grows_with_the_grid():
    def iteration(shape):
        wafer = grid_wafer(preset("wse2"), shape, mesh_shape=(1, 1))
        grid = place_bicgstab(wafer, shape, "mixed", pair=False)
        return perf.bicgstab_iteration(grid, "mixed", bicgstab_spmv(grid))

    small, large = iteration((8, 8, 16)), iteration((64, 32, 16))
    model = PerfModel(preset("wse2"), UNCALIBRATED)  # hop 1 cycle, T_R 2: relay 5 cycles
    cyc = lambda p: model.evaluate(p).leaf("allreduce_1").cost.cycles
    # 8 x 8, one word. Each half row (4 PEs) by the best of Luczynski et al.'s line
    # reduces: star C = 3 words, L = 3 hops, D = 1 relay: 3 + 3 + 5 = 11 cycles (chain
    # 1 + 3 + 15, tree 2 + 3 + 10, two-phase 2 + 3 + 10); one more word, hop (the far half
    # ends next to the centre PE 3: PE 7 -> 3 is 4 hops) and relay to join the halves; the
    # same along the centre column; a flood back over 4 + 4 hops, 1 relay.
    c, hops, relays = 2 * (3 + 1) + 1, 2 * 4 + 8, 2 * (1 + 1) + 1
    assert cyc(small) == c + hops + 5 * relays == 50
    assert cyc(large) > 3 * cyc(small)  # 64 x 32: the diameter grows 94 / 14 times
    assert model.seconds(large) > model.seconds(small)
    ops = small.total_work().ops_by_kind()
    # 5 dots as mixed FMACs over the Z column of 16, fp16 stencil and AXPYs.
    assert ops["fmac_mixed.fp16"] == 5 * 16 and ops["sub.fp16"] == (2 * 6 + 3) * 16


def test_sc20_published_kernel_counted_by_hand():
    shape = (8, 8, 32)
    grid = place_bicgstab(
        grid_wafer(preset("wse1"), shape, mesh_shape=(1, 1)), shape, "mixed", pair=False
    )
    work = perf.bicgstab_sc20_iteration(grid).total_work()
    ops = work.ops_by_kind()
    # Two SpMVs of 1 mul + 6 FMAC (4 from the fabric), 6 AXPY FMACs, 5 mixed dots, all fp16.
    assert ops == {
        "mul.fp16": 2 * 32,
        "fmac.fp16": (2 * 6 + 6) * 32,
        "fmac_mixed.fp16": 5 * 32,
        "div.fp32": 3,
        "sqrt.fp32": 1,
    }
    assert work.fabric_in_elements == 2 * 4 * 32
    # fp16 x to the four neighbours, two values per wavelet, per SpMV.
    assert work.links["N"] == 2 * 32 / 2
    assert work.flops() == 32 * (2 * 13 + 6 * 2 + 5 * 2) + 4


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


def test_reliable_update_and_start_counted_by_hand():
    shape = (8, 8, 16)
    grid = place_bicgstab(
        grid_wafer(preset("wse2"), shape, mesh_shape=(1, 1)), shape, "mixed", pair=True
    )
    n = shape[2]
    ops = perf.update_work(grid, "mixed", True, bicgstab_spmv(grid)).ops_by_kind()
    # x += d / sigma: a mul and a TwoSum (6 adds/subs) plus x_lo += err; d = 0; two fp32
    # SpMVs (6 sub, 5 add, 3 mul each) and the two subs of r = (b - A x_hi) - A x_lo; ||r||;
    # r scaled (mul) and converted to fp16; p, v rescaled (2 fp16 muls); (r^, r), (r, r).
    assert ops == {
        "mul.fp32": (1 + 2 * 3 + 1) * n,
        "add.fp32": (7 + 2 * 5) * n,
        "sub.fp32": (2 * 6 + 2) * n,
        "move.fp32": n,
        "fmac.fp32": n,
        "convert.fp32": n,
        "mul.fp16": 2 * n,
        "fmac_mixed.fp16": 2 * n,
        "div.fp32": 2,
        "sqrt.fp32": 2,
    }
    start = perf.start_work(grid, "mixed").ops_by_kind()
    # ||b||, r = sigma D^-1 b (mul, convert), r^ = r (a move), (r, r).
    assert start == {
        "fmac.fp32": n,
        "mul.fp32": n,
        "convert.fp32": n,
        "move.fp16": n,
        "fmac_mixed.fp16": n,
        "div.fp32": 1,
        "sqrt.fp32": 2,
    }
    phases = perf.bicgstab_phases(
        grid, "mixed", bicgstab_spmv(grid), iterations=40, updates=5, restarts=3,
        breakdowns=1, pair=True,
    )  # fmt: skip
    model = PerfModel(preset("wse2"))
    timing = model.evaluate(phases)
    reps = {n: timing.leaf(n).repeat for n in ("start", "reliable_update", "restart")}
    assert reps == {"start": 1, "reliable_update": 5, "restart": 2}
    assert timing.leaf("breakdown_restart").repeat == 1
    one = model.seconds(perf.bicgstab_iteration(grid, "mixed", bicgstab_spmv(grid)))
    assert timing.seconds > 40 * one
