"""A field step priced from its recorded program: the links agree with the fabric's own
traffic ledger, the instruction count with a hand count, and CG iterations scale it."""

import jax
import pytest
from wse_core import PRESETS, RunReport, fabric
from wse_hpc.fields import field_grid, laplacian, neumann, periodic
from wse_hpc.fields.convection import RbCase, rayleigh_benard
from wse_hpc.fields.grid import program, traced_program
from wse_hpc.fields.perf import program_phases, program_work, traced_step

BCS = (periodic(), neumann(), neumann())


@pytest.mark.cpu_devices  # a 2 x 4 mesh of CPU devices
def test_laplacian_links_match_the_fabric_ledger_and_a_hand_count():
    g = field_grid(PRESETS["small"], (9, 11, 6), periodic=(True, False, False), mesh_shape=(2, 4))
    f = g.field("u", 0.0, bc=BCS)
    with program() as prog:
        jax.eval_shape(laplacian, f)
    work = program_work(g, prog, "")
    traffic = fabric.count(g.wafer, lambda x: laplacian(x), f)
    assert dict(traffic.links) == {d: 6.0 for d in "NSWE"}  # the ledger's torus count
    # X is periodic, folded on the mesh: each N-S link carries both directions' 6 words
    # (hunt 70: priced as on the torus); Y is bounded, as it was
    assert dict(work.links) == {"N": 12.0, "S": 12.0, "W": 6.0, "E": 6.0}
    mesh = traced_step(g, laplacian, f)[1]  # the ledger's entries re-counted for the mesh
    assert {d: v for d, v in mesh.links.items() if v} == dict(work.links)
    # per axis: 2 neighbour moves, 2 adds / subs and 2 muls (2 f, / h^2); 2 adds summing
    # the three axes
    count = {k: sum(op.count for op in work.ops if op.kind == k) for k in ("move", "add", "mul")}
    assert count == {"move": 6, "add": 8, "mul": 6}


def test_cg_iterations_scale_the_predicted_step():
    case = RbCase(ra=5e3, pr=1.0, mesh_shape=(1, 1))
    g, flow, fns, s = rayleigh_benard(PRESETS["small"], (16, 8, 1), case)
    spec = g.wafer.spec
    t = [RunReport.build("cfd", spec, program_phases(g, fns.step_fn, s,
                                                     repeats={"cg_iteration": k})).predicted_s
         for k in (0, 10, 20)]  # fmt: skip
    assert 0 < t[0] < t[1] < t[2]
    assert abs((t[2] - t[1]) - (t[1] - t[0])) < 1e-9 * t[2]  # linear in the iterations


def test_the_gpu_alternative_by_hand():
    """The Laplacian on one H100 (`fields.alternative`): the unfused program's bytes and
    kernels counted by hand from the ops above; the fused bound one pass over the fields."""
    from wse_hpc.fields.alternative import KERNEL_OVERHEAD_S, gpu_step, wafer_energy_j
    from wse_systems.economics import system_power_w
    from wse_systems.gpu import H100

    g = field_grid(PRESETS["small"], (9, 11, 6), periodic=(True, False, False), mesh_shape=(1, 1))
    f = g.field("u", 0.0, bc=BCS)
    cells = 10**8
    step = gpu_step(g, traced_program(laplacian, f), cells=cells, gpu=H100, fields=2)
    # 20 instructions (6 moves, 8 adds, 6 muls) over each cell, 12 B each (2 read, 1 written)
    assert step.kernels == 20
    assert step.hbm_bytes == cells * 20 * 12
    hand = cells * 240 / H100.hbm_bytes_per_s + 20 * KERNEL_OVERHEAD_S
    assert step.seconds == pytest.approx(hand, rel=1e-12)
    assert step.joules == pytest.approx(hand * 10200 / 8, rel=1e-12)  # DGX H100 / 8 GPUs
    # fused: one pass reading and writing both arrays once (16 B a cell), one kernel
    fused = cells * 16 / H100.hbm_bytes_per_s + KERNEL_OVERHEAD_S
    assert step.fused_seconds == pytest.approx(fused, rel=1e-12)
    assert (
        wafer_energy_j(PRESETS["wse2"], 2.0)
        == 2.0 * 23e3
        == 2.0 * system_power_w(PRESETS["wse2"])[0]
    )
    with pytest.raises(ValueError, match="GiB"):  # 10 fields of 3e9 cells: 112 GiB > 80
        gpu_step(g, traced_program(laplacian, f), cells=3 * 10**9, gpu=H100, fields=10)
