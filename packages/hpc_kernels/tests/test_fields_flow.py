"""The Boussinesq projection step on the fabric against the same scheme in float64 NumPy
(`wse_hpc.fields.reference_flow`), on 1 and 8 devices, with and without dead PEs, on a grid
the meshes do not divide."""

import jax
import numpy as np
import pytest
from jax import lax
from wse_core import PRESETS
from wse_hpc.fields.convection import RbCase, rayleigh_benard
from wse_hpc.fields.flow import divergence_max
from wse_hpc.fields.reference_flow import rayleigh_benard_np

SHAPE = (18, 9, 1)  # 2 x 4 and 4 x 2 divide neither 18 x 9 both ways
STEPS = 20
# fp32 against float64 (the wafer's PCG to ||r|| / ||b|| <= 1e-6, NumPy's exact LU): measured
# 6e-8 .. 9e-8 of the largest value after 20 steps on 1 x 1; 1e-6 leaves room for the
# reduction order of other meshes.
RTOL = 1e-6


@pytest.mark.parametrize(
    "mesh, defects",
    [((1, 1), None), ((2, 4), 3), pytest.param((4, 2), None, marks=pytest.mark.slow)],
)
def test_rayleigh_benard_steps_match_numpy(mesh, defects):
    case = RbCase(ra=5e3, pr=0.71, amplitude=0.05, mesh_shape=mesh, defect_seed=defects)
    grid, flow, fns, s = rayleigh_benard(PRESETS["small"], SHAPE, case)
    u0, v0, th0 = (grid.gather(f).astype(np.float64) for f in (*s.velocity, s.T))
    out = jax.jit(lambda x: lax.fori_loop(0, STEPS, lambda i, y: fns.step_fn(y), x))(s)
    step, _ = rayleigh_benard_np(SHAPE[:2], flow.dt, ra=5e3, pr=0.71, aspect=2.0)
    u, v, th = u0, v0, th0
    for _ in range(STEPS):
        u, v, th = step(u, v, th)
    for got, want in zip((*out.velocity, out.T), (u, v, th), strict=True):
        err = np.abs(grid.gather(got) - want).max() / np.abs(want).max()
        assert err < RTOL, err
    assert float(divergence_max(out)) < 1e-4 * np.abs(v).max() / grid.spacing[1]
