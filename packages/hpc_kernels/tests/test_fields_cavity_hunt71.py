"""The cavity's explicit (forward Euler) step against the von Neumann bound of the 3D diffusion.

Before hunt 71, `wse_hpc.fields.cavity.stable_dt` took the diffusion limit h^2 / (4 nu) in 2D
and 3D alike. Forward Euler on the 7-point Laplacian is stable only for dt <= h^2 / (6 nu), so
the 3D default 0.8 h^2 / (4 nu) = 0.2 h^2 / nu grew the checkerboard mode by |1 - 12 * 0.2|
= 1.4 a step: `wse hpc cfd --case cavity --grid 16 16 16 --re 1 --steps 300` (all defaults)
blew up at step 100 and told the user to give a smaller --dt, and the --dt refusal printed
the 2D figure 0.0009766 under the formula h^2 / 2 d nu (which gives 0.000651 in 3D).
The oracle is the amplification factor of the scheme's Fourier modes, written out here.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from wse_core import PRESETS
from wse_hpc.fields.cavity import SAFETY, stable_dt
from wse_hpc.fields.grid import FieldError
from wse_hpc.fields.runs import CfdConfig, check_dt, run_cfd

SPEC = PRESETS["small"]


def _worst_amplification(dt: float, h: float, nu: float, d: int) -> float:
    """max |g| of forward Euler on the (2d + 1)-point Laplacian over the grid's Fourier modes:
    g = 1 - 4 nu dt / h^2 sum_i sin^2(theta_i / 2); theta = pi (the checkerboard) included."""
    thetas = np.linspace(0.0, math.pi, 17)
    s2 = np.sin(thetas / 2) ** 2
    return max(abs(1 - 4 * nu * dt / h**2 * sum(c)) for c in itertools.product(s2, repeat=d))


@pytest.mark.parametrize(("n", "re"), [(8, 1.0), (16, 1.0), (16, 10.0), (64, 100.0)])
@pytest.mark.parametrize("d", [2, 3])
def test_default_euler_step_obeys_the_von_neumann_bound(n, re, d):
    shape = (n, n, n if d == 3 else 1)
    h, nu = 1.0 / n, 1.0 / re
    dt = stable_dt(shape, re)
    assert dt <= SAFETY * h * h / (2 * d * nu) * (1 + 1e-12)
    assert _worst_amplification(dt, h, nu, d) <= 1.0
    # the bound is sharp: just past h^2 / (2 d nu) the checkerboard grows
    assert _worst_amplification(1.001 * h * h / (2 * d * nu), h, nu, d) > 1.0


def test_3d_default_at_16_cubed_re_1_is_0_8_of_h2_over_6_nu():
    # was 0.8 * h^2 / (4 nu) = 0.00078125, above the limit 0.000651
    assert stable_dt((16, 16, 16), 1.0) == pytest.approx(0.8 / 256 / 6, rel=1e-15)


@pytest.mark.parametrize(("n", "re"), [(16, 1.0), (32, 100.0), (130, 1000.0), (48, 3.7)])
def test_2d_defaults_are_bit_identical_to_before(n, re):
    h, nu = 1.0 / n, 1.0 / re
    before = SAFETY * min(0.25 * h * h / nu, h / 1.0, 2 * nu / 1.0**2)
    assert stable_dt((n, n, 1), re) == before


def test_the_refusal_prints_the_3d_limit_its_formula_gives():
    cfg = CfdConfig(case="cavity", grid=(16, 16, 16), spec=SPEC, re=1.0)
    limit = (1 / 16) ** 2 / (2 * 3 * 1.0)  # h^2 / (2 d nu), d = 3
    with pytest.raises(FieldError) as e:
        check_dt(cfg, 0.002)
    msg = str(e.value)
    assert "\n" not in msg
    assert f"limit {limit:.4g} (diffusion h^2 / (2 d nu)" in msg and "d = 3" in msg
    assert f"use --dt {SAFETY * limit:.4g} (the cavity default, 0.8 of the limit)" in msg
    check_dt(cfg, 0.0006)  # below h^2 / (6 nu): accepted


def _run_default(n: int):
    return run_cfd(CfdConfig(case="cavity", grid=(n, n, n), spec=SPEC, re=1.0, steps=300))


def test_3d_default_at_8_cubed_re_1_runs_300_steps():
    # before: 0.003125 = 0.8 h^2 / (4 nu) gave kinetic energy nan by step 300
    step, time, _, ke = _run_default(8).history[-1]
    assert step == 300 and time == pytest.approx(300 * 0.8 / 64 / 6)
    assert math.isfinite(ke) and 0 < ke < 0.05


@pytest.mark.slow  # 11 s on 2 cores: the report's own case
def test_3d_default_at_16_cubed_re_1_runs_300_steps():
    # before: "the run blew up at step 100 (kinetic energy nan) with the default step"
    step, time, _, ke = _run_default(16).history[-1]
    assert step == 300 and time == pytest.approx(300 * 0.8 / 256 / 6)
    assert math.isfinite(ke) and 0 < ke < 0.05  # the report's run at --dt 0.0006: KE 0.0239
