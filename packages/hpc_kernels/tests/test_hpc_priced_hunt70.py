"""Hunt 70: the hpc predictions price what the run does, from the plan the run used.

Broken before:
- `TlrEngine.report` at `batch=B` priced B passes over the bases (the PE programs' FMACs
  and SRAM reads scale with the vectors) but counted the bases once: `model_bytes_per_s`
  fell 4x at batch 4 (11.0 -> 2.75 GB/s) while the Cerebras accounting, which counts both
  per vector, stayed put;
- a periodic stencil was priced as on a torus: Jacobi 8 x 8 x 16 took 4.6725e-07 s a step
  and 4 hops under either boundary (the wafer's mesh has no wrap-around link);
- `run_swe` / `run_cfd` reports carried zero fabric traffic (words 0, links {}) beside the
  link words and hops they priced, and Domain Translation's shifts did not show;
- `run_cfd` priced the same seconds with 4 step files as with none: the fields each file
  copies off the wafer through the host I/O were not priced.

Oracles: counts by hand (words a shift moves, hops of a folded or wrapped ring, bytes of a
step file), the vendor's 1.2 Tb/s host I/O, and predictions repriced under `assume(...)`.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from wse_core import fabric, preset
from wse_core.cost.assumptions import assume, assumed_spec
from wse_core.cost.perf import PerfModel
from wse_core.cost.stencil import wave_step_phases
from wse_core.fabric import ledger
from wse_hpc.fields.grid import field_grid
from wse_hpc.fields.perf import traced_step
from wse_hpc.fields.runs import CfdConfig, run_cfd
from wse_hpc.fields.swe import SweConfig, run_swe, shallow_water, swe_state, translate
from wse_hpc.stencil import jacobi, perf
from wse_hpc.stencil.placement import grid_wafer
from wse_hpc.stencil.runs import StencilConfig, place_jacobi, place_wave, run_stencil
from wse_hpc.tlrmvm import compress
from wse_hpc.tlrmvm.engine import TlrEngine
from wse_hpc.tlrmvm.pe_programs import pe_tiles
from wse_hpc.tlrmvm.testing import smooth_kernel

WSE2 = preset("wse2")


# -- TLR-MVM: a product of B vectors ---------------------------------------------------------
@pytest.fixture(scope="module")
def tlr_op():
    return compress(smooth_kernel(70, 53), nb=12, threshold=1e-3)


def _fmacs(plan) -> float:
    """FMAC elements of every PE program's phases 1 and 3 (the tiles' passes)."""
    return sum(
        p.pes * op.count * op.length
        for p in pe_tiles(plan)
        for phase in (1, 3)
        for op in p.work(phase, plan.batch).ops
    )


def test_tlrmvm_bytes_count_every_vector_the_time_prices(tlr_op):
    reps = {}
    for b in (1, 4):
        eng = TlrEngine.build(tlr_op, WSE2, batch=b, layout="grouped")
        reps[b] = (eng.plan, eng.report())
    (p1, r1), (p4, r4) = reps[1], reps[4]
    # the PE programs run every tile once per vector: 4x the FMACs at batch 4
    assert _fmacs(p4) == 4 * _fmacs(p1)
    for b, (_, r) in reps.items():
        x = r.extra
        assert x["vectors_per_product"] == b == x["cerebras"]["vectors_per_product"]
        assert x["bases_bytes_moved"] == b * tlr_op.bases_bytes  # by hand: B reads
        assert x["model_bytes_per_s"] == pytest.approx(b * tlr_op.bases_bytes / x["on_wafer_s"])
        alt = x["phase1_alternative"]
        assert alt["model_bytes_per_s"] == pytest.approx(b * tlr_op.bases_bytes / alt["on_wafer_s"])
    # per vector the work is the same, so is the bandwidth (it was 4x lower at batch 4)
    per_vector = r4.extra["on_wafer_s"] / 4 / r1.extra["on_wafer_s"]
    assert per_vector == pytest.approx(1.0, rel=0.02)
    ratio = r4.extra["model_bytes_per_s"] / r1.extra["model_bytes_per_s"]
    assert ratio == pytest.approx(1 / per_vector)
    c1, c4 = r1.extra["cerebras"], r4.extra["cerebras"]
    assert c4["relative_bytes_per_s"] == pytest.approx(c1["relative_bytes_per_s"])
    assert "tlrmvm batch" in r4.assumptions


# -- a periodic stencil on the mesh ----------------------------------------------------------
def _jacobi(boundary: str):
    shape = (8, 8, 16)
    grid = place_jacobi(grid_wafer(WSE2, shape, mesh_shape=(1, 1)), shape, "fp32", boundary)
    return grid, perf.field_struct(grid, jnp.float32)


def test_ring_layout_takes_the_shorter_of_fold_and_wrap():
    assert ledger.ring_layout(8, 1) == ("fold", 2.0)  # 7 hops round the axis
    assert ledger.ring_layout(3, 1) == ("fold", 2.0)  # a tie: no axis-long chain
    assert ledger.ring_layout(6, 4) == ("wrap", 5.0)  # a 25-point fold's 8 is longer
    assert ledger.ring_layout(16, 4) == ("fold", 8.0)
    assert ledger.both_ways({"E": 3.0, "ramp": 2.0}) == {"E": 3.0, "W": 3.0, "ramp": 2.0}


def test_periodic_jacobi_counts_the_fold_by_hand_and_dirichlet_is_unchanged():
    traffic, seconds = {}, {}
    for b in ("dirichlet", "periodic"):
        grid, u = _jacobi(b)
        sweep = jacobi(grid)
        traffic[b] = perf.traced(grid, sweep, u, u)
        phases = perf.jacobi_phases(grid, sweep, 1)
        seconds[b] = PerfModel(WSE2).evaluate(phases).seconds
        with assume(hop_latency_cycles=2.0):
            seconds[b, 2] = PerfModel(assumed_spec("wse2")).evaluate(phases).seconds
    d, p = traffic["dirichlet"], traffic["periodic"]
    grid, u = _jacobi("dirichlet")
    assert d == fabric.count(grid.wafer, jacobi(grid), u, u)  # the ledger's, untouched
    # by hand: 4 one-PE shifts of the 16-word Z column, each from the 56 of 64 PEs with a
    # neighbour that way (hunt 82: the edge line, which sends nothing, was counted)
    assert (d.words, d.word_hops, d.latency_hops) == (4 * 56 * 16, 4 * 56 * 16, 4.0)
    assert dict(d.links) == {k: 16.0 for k in "NSWE"}
    # folded (8 PEs an axis: the wrap would be 7 hops): 2 hops a neighbour, each physical
    # link carries both directions' words
    assert (p.words, p.word_hops, p.latency_hops) == (4 * 64 * 16, 2 * 4 * 64 * 16, 8.0)
    assert dict(p.links) == {k: 32.0 for k in "NSWE"}
    # compute-bound: the 4 extra hops are what the step pays, at hop_latency_cycles each
    hop = WSE2.hop_latency_cycles / WSE2.clock_hz
    assert seconds["periodic"] - seconds["dirichlet"] == pytest.approx(4 * hop)
    extra_2 = seconds["periodic", 2] - seconds["dirichlet", 2]
    assert extra_2 == pytest.approx(8 * hop)


def _wave_halo(shape, boundary):
    grid = place_wave(grid_wafer(WSE2, shape, mesh_shape=(1, 1)), shape, 16, boundary)
    step = perf.wave25_phases(grid, 16, None, 1)
    (halo,) = [leaf for leaf, _ in step.leaves() if leaf.name == "halo_in"]
    return halo.work


@pytest.mark.parametrize("shape, chain", [((16, 16, 16), 8.0), ((6, 6, 16), 5.0)])
def test_periodic_wave25_halo_is_the_shorter_layout(shape, chain):
    # R = 4: folded, a neighbour 4 away is 8 hops; on 6 PEs the wrapped values cross 5
    d, p = _wave_halo(shape, "dirichlet"), _wave_halo(shape, "periodic")
    assert d == wave_step_phases(16, 16, radius=4).parts[1].parts[0].work  # as published
    assert d.latency_hops == 4.0 and p.latency_hops == chain
    assert {k: p.links[k] for k in "NSEW"} == {k: 2 * 4.0 * 16 for k in "NSEW"}
    assert p.links["ramp"] == d.links["ramp"]  # a PE receives the same values


def test_a_periodic_run_names_its_layout_and_reports_the_mesh_traffic():
    cfg = StencilConfig(kind="jacobi", grid=(8, 8, 16), spec=WSE2, steps=3,
                        boundary="periodic", mesh_shape=(1, 1))  # fmt: skip
    r = run_stencil(cfg).report
    assert r.traffic.latency_hops == 3 * 8.0 and r.traffic.links["E"] == 3 * 32.0
    line = r.assumptions["periodic on the mesh"]
    assert "X (8 PEs) folded" in line and "2 physical hops" in line
    dirichlet = run_stencil(StencilConfig(kind="jacobi", grid=(8, 8, 16), spec=WSE2, steps=3,
                                          mesh_shape=(1, 1))).report  # fmt: skip
    assert "periodic on the mesh" not in dirichlet.assumptions
    assert r.predicted_s > dirichlet.predicted_s


# -- swe and cfd: the traffic they price -----------------------------------------------------
def _swe_traffic(n: int, translated: bool):
    """One step's traced traffic, abstractly (no run)."""
    grid = field_grid(WSE2, (n, n, 1), periodic=(True, True, True), mesh_shape=(1, 1))
    zero = np.zeros((n, n, 1))
    s0 = swe_state(grid, zero + 1.0, zero, zero)
    step = shallow_water(grid, dt=1e-3)
    return traced_step(grid, (lambda s: translate(step(s))) if translated else step, s0)


def test_swe_reports_the_words_its_shifts_move_and_translation_adds_its_own():
    n, steps = 3, 2
    r = run_swe(WSE2, SweConfig(n=n, steps=steps, translate_domain=True)).report
    t = r.traffic
    assert t == _swe_traffic(n, True)[1].scaled(steps) and t.words > 0
    assert dict(t.links) == dict(r.phases.total_work().links)  # what the step prices
    # every PE sends its one-word (2D) value on each shift, two physical hops: both axes
    # folded on the mesh, each link carrying both directions' words (test_periodic_mesh_hunt70)
    assert 2 * t.words == t.word_hops == n * n * sum(t.links.values())
    # by hand: Domain Translation shifts h, u and v one PE east each step
    plain, moved = _swe_traffic(n, False)[1], _swe_traffic(n, True)[1]
    assert moved.words - plain.words == 3 * n * n
    assert moved.links["E"] - plain.links["E"] == 3 and moved.count - plain.count == 3


def _cfd(tmp_path, name, every, spec=WSE2):
    return run_cfd(CfdConfig(case="rayleigh-benard", grid=(16, 8, 1), spec=spec, steps=4,
                             out_dir=tmp_path / name, output_every=every))  # fmt: skip


def test_cfd_reports_traffic_and_prices_its_step_files(tmp_path):
    none = run_cfd(CfdConfig(case="rayleigh-benard", grid=(16, 8, 1), spec=WSE2, steps=4))
    one, four = _cfd(tmp_path, "a", 0), _cfd(tmp_path, "b", 1)
    assert none.report.traffic.words > 0
    assert none.report.traffic == one.report.traffic == four.report.traffic
    assert (len(none.written), len(one.written), len(four.written)) == (0, 2, 8)  # npz + vtk
    # by hand: u, v, p and T of 16 x 8 cells, fp32, at the vendor's 1.2 Tb/s
    per_file = 4 * 16 * 8 * 4
    assert WSE2.host_io_bytes_per_s == 1.2e12 / 8
    assert four.report.extra["step_file_wafer_bytes"] == 4 * per_file
    s0, s1, s4 = (r.report.predicted_s for r in (none, one, four))
    assert s1 - s0 == pytest.approx(per_file / WSE2.host_io_bytes_per_s)
    assert s4 - s0 == pytest.approx(4 * per_file / WSE2.host_io_bytes_per_s)
    assert one.report.extra["predicted_s_per_step"] == none.report.extra["predicted_s_per_step"]
    assert "host_io_bytes_per_s" in four.report.assumptions["cfd step files"]
    with assume(host_io_bytes_per_s=1.5e10):  # a tenth of the link: ten times the copies
        slow = _cfd(tmp_path, "c", 1, assumed_spec("wse2")).report
    assert "host_io_bytes_per_s" in {e.key for e in slow.assumed}
    assert slow.predicted_s - s0 == pytest.approx(10 * (s4 - s0))
