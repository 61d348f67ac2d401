"""The SRAM ledger decides the Z column; bad input is a clear error; the calibrated model."""

import numpy as np
import pytest
from wse_core import RunReport, SramBudgetError, WseError, preset
from wse_hpc.stencil import StencilError, grid_wafer, max_nz, place_grid
from wse_hpc.stencil.kernels import jacobi
from wse_hpc.stencil.perf import jacobi_phases
from wse_hpc.stencil.runs import StencilConfig, exact_solution, run_stencil
from wse_hpc.stencil.testing import small_grid


def test_ledger_gives_the_largest_z_column():
    spec = preset("small")
    w = grid_wafer(spec, (8, 8, 8), mesh_shape=(1, 1))
    fields = {"u": "fp32", "f": "fp16"}
    n = max_nz(w, fields)
    # 4 + 2 bytes per cell, in what the PE leaves data beside its code and stack (hunt 81)
    assert n == (spec.sram_bytes_per_pe - spec.code_stack_bytes_per_pe) // 6
    place_grid(w, (8, 8, n), fields)
    assert w.sram.free_bytes() < 6


def test_a_grid_that_does_not_fit_is_refused_with_the_largest_nz():
    w = grid_wafer(preset("small"), (8, 8, 8), mesh_shape=(1, 1))
    best = (preset("small").sram_bytes_per_pe - preset("small").code_stack_bytes_per_pe) // 8
    with pytest.raises(SramBudgetError, match=f"largest nz that fits is {best}"):
        place_grid(w, (8, 8, best + 1), {"u": "fp32", "f": "fp32"})
    assert w.sram.used_bytes() == 0  # nothing half-allocated


def test_bad_grids_and_values_are_errors():
    w = grid_wafer(preset("small"), (8, 8, 8), mesh_shape=(1, 1))
    with pytest.raises(StencilError, match="at least 5 points"):
        place_grid(w, (8, 8, 3), {"u": "fp32"}, radius=4)
    with pytest.raises(WseError, match="needs a 8 x 7 PE grid"):
        place_grid(w, (8, 7, 8), {"u": "fp32"})
    with pytest.raises(StencilError, match="three positive integers"):
        grid_wafer(preset("small"), (8, 0, 8))
    g = small_grid((8, 8, 8), mesh_shape=(1, 1))
    bad = np.zeros((8, 8, 8))
    bad[1, 2, 3] = np.nan
    with pytest.raises(StencilError, match="non-finite"):
        g.place(bad, "u")


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"tol": 0.0}, "tol must be"),
        ({"steps": -1}, "steps must be"),
        ({"kind": "jacobbi"}, "unknown kind"),
        ({"kind": "wave25", "dtype": "fp16"}, "dtype"),
    ],
)
def test_bad_run_settings_are_errors(changes, message):
    cfg = {"kind": "bicgstab", "grid": (8, 8, 8), "spec": preset("small"), "mesh_shape": (1, 1)}
    with pytest.raises(WseError, match=message):
        run_stencil(StencilConfig(**{**cfg, **changes}))


@pytest.mark.cpu_devices
def test_runs_report_measurements_and_predictions():
    result = run_stencil(
        StencilConfig(
            kind="jacobi",
            grid=(9, 11, 8),
            spec=preset("small"),
            steps=20,
            chunks=2,
            mesh_shape=(2, 4),
        )
    )
    run = result.report
    x = run.extra
    assert x["steps"] == 20 and len(x["history"]) == 3
    assert x["history"][-1][1] < x["history"][0][1]  # the residual falls
    assert x["measured_cells_per_s"] > 0 and run.measured_wall_s > 0
    # The prediction covers the same 20 sweeps, one priced phase repeated.
    assert run.predicted.leaf("jacobi").repeat == 20
    assert run.predicted_s == pytest.approx(20 * x["predicted_s_per_step"])
    d = run.to_dict()
    assert d["sram"]["used_bytes_per_pe"] == 3 * 8 * 4 + 4 * 4  # u, u_next, f; Z ghosts
    # The report is the run's own plan priced: the grid it returns (cells, SRAM ledger), its
    # 20 sweeps re-priced from that grid alone, and the field it returns is the one measured.
    grid = result.grid
    assert x["cells"] == grid.cells == 9 * 11 * 8 and run.sram == grid.wafer.sram.summary()
    again = RunReport.build("jacobi", grid.wafer.spec, jacobi_phases(grid, jacobi(grid), 20))
    assert run.predicted_s == again.predicted_s and run.phases == again.phases
    error = np.abs(grid.gather(result.field) - exact_solution(grid, "jacobi")).max()
    assert float(error) == x["final"]["max_error_vs_continuous_solution"]
