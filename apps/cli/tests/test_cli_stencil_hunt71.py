"""`wse hpc stencil`'s "exact" says which exact (hunt 71).

Before: `--kind heat` printed "max |u - exact decay|" and `amplitude` against the forward
Euler scheme's own mode decay (1 - dt lambda_h)^n: 3e-12 "from exact" while the heat
equation's amplitude at t = 50 x 0.002 = 0.1 (8 x 6 x 5 periodic) is exp(-3 (2 pi)^2 0.1) =
7.18e-6 and the run's 5.17e-6, 28% below; nothing printed the time. jacobi's
`max_error_vs_exact` was against the continuous sin sin sin, bicgstab's against the discrete
system's solution. Now heat prints the scheme's amplitude, the heat equation's and the time,
and every final figure names its reference.
Oracles: the amplitudes written out by hand (the 7-point Laplacian's eigenvalue of the mode
and the continuous 3 (m pi)^2), NumPy's max error against the solutions.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke

ROOT = typer.main.get_command(app)
ENV = {"WSE_DEVICES": "8"}  # the test process has 8 CPU devices (conftest.py)
BASE = ["hpc", "stencil", "--preset", "small", "--grid", "8", "6", "5"]


def _final(output: str) -> dict[str, float]:
    """The `  key: value` lines the run prints after its table."""
    return {k: float(v) for k, v in re.findall(r"^  (\w+): (\S+)$", output, flags=re.M)}


@pytest.mark.parametrize(("boundary", "m"), [("periodic", 2), ("dirichlet", 1)])
def test_heat_prints_the_heat_equations_amplitude_at_the_time_it_prints(boundary, m):
    code, out = invoke(ROOT, [*BASE, "--kind", "heat", "--boundary", boundary, "--steps", 50],
                       ENV)  # fmt: skip
    assert code == 0, out
    final = _final(out)
    assert set(final) == {"max_deviation_from_scheme_decay", "scheme_amplitude",
                          "heat_equation_amplitude", "time", "dt"}  # fmt: skip
    assert "exact" not in out.split("measured")[0]  # no figure calls either decay "exact"
    dt, t = final["dt"], final["time"]
    assert t == pytest.approx(50 * dt, rel=1e-5)  # both printed to 6 digits
    # u_t = lap u on the unit cube, u0 = prod sin(m pi x_i): the amplitude exp(-3 (m pi)^2 t)
    assert final["heat_equation_amplitude"] == pytest.approx(
        math.exp(-3 * (m * math.pi) ** 2 * t), rel=1e-5
    )
    # forward Euler on the 7-point Laplacian: (1 - dt sum_i 4 / h_i^2 sin^2(m pi h_i / 2))^n
    hs = [1 / n for n in (8, 6, 5)] if boundary == "periodic" else [1 / (n + 1) for n in (8, 6, 5)]
    lam_h = sum(4 / h**2 * math.sin(m * math.pi * h / 2) ** 2 for h in hs)
    assert final["scheme_amplitude"] == pytest.approx((1 - dt * lam_h) ** 50, rel=1e-5)
    assert final["max_deviation_from_scheme_decay"] < 1e-6  # the kernel follows the scheme
    if boundary == "periodic":  # the hunt's figures: 5.17e-6 against 7.18e-6 at t = 0.1
        assert (t, dt) == (pytest.approx(0.1), pytest.approx(0.002))
        assert final["scheme_amplitude"] / final["heat_equation_amplitude"] < 0.75


def test_jacobi_and_bicgstab_name_the_solution_they_compare_with():
    from wse_core import preset
    from wse_hpc.stencil.runs import StencilConfig, run_stencil

    run = run_stencil(StencilConfig(kind="jacobi", grid=(8, 6, 5), steps=50, spec=preset("small")))
    final = run.report.extra["final"]
    assert set(final) == {"max_error_vs_continuous_solution"}
    # against sin(pi x) sin(pi y) sin(pi z) itself at the nodes i / (n + 1): the
    # discretisation error is in it
    sines = [np.sin(np.pi * (np.arange(n) + 1) / (n + 1)) for n in (8, 6, 5)]
    continuous = np.einsum("i,j,k->ijk", *sines)
    error = float(np.abs(run.grid.gather(run.field) - continuous).max())
    assert final["max_error_vs_continuous_solution"] == error and error > 1e-3  # 6e-3
    code, out = invoke(ROOT, [*BASE[:4], "--grid", "9", "7", "5", "--kind", "bicgstab"], ENV)
    assert code == 0, out
    final = _final(out)
    assert "max_error_vs_discrete_solution" in final and "max_error_vs_exact" not in out
    assert final["max_error_vs_discrete_solution"] < 1e-2
