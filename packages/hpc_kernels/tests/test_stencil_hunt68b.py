"""Hunt 68 (fields), holes 1-3, in the API (`check_config`, before anything is placed).
Before the fix: a periodic jacobi / heat grid with a 2-point axis passed (2 2 2 then divided
by a zero ||f||; 2 8 8 "solved" an all-zero problem), and a BiCGSTAB tol at or below what
its fp32 residual certifies (2 x eps32) ran the whole solve before saying "out of reach".
"""

from __future__ import annotations

import numpy as np
import pytest
from wse_core import preset
from wse_hpc.stencil.config import StencilConfig, check_config
from wse_hpc.stencil.placement import StencilError
from wse_hpc.stencil.reach import least_tol
from wse_hpc.stencil.refine import CERTIFY_FLOOR

SPEC = preset("small")


@pytest.mark.parametrize("kind", ["jacobi", "heat"])
@pytest.mark.parametrize("grid", [(2, 2, 2), (2, 8, 8), (8, 8, 2)])
def test_periodic_two_point_axis_is_refused(kind, grid):
    # the oracle: on a 2-point periodic axis (x = 0, 1/2) sin(2 pi x) is zero to rounding
    assert np.abs(np.sin(2 * np.pi * np.arange(2) / 2)).max() < 1e-15
    cfg = StencilConfig(kind=kind, grid=grid, spec=SPEC, boundary="periodic")
    with pytest.raises(StencilError, match=r"^a periodic axis needs at least 3 points") as e:
        check_config(cfg)
    assert str(e.value).endswith(f"got --grid {' '.join(map(str, grid))}")


def test_three_points_and_dirichlet_and_wave25_pass():
    check_config(StencilConfig(kind="jacobi", grid=(3, 3, 3), spec=SPEC, boundary="periodic"))
    check_config(StencilConfig(kind="jacobi", grid=(2, 2, 2), spec=SPEC))
    check_config(StencilConfig(kind="wave25", grid=(8, 8, 2), spec=SPEC, boundary="periodic"))


def test_floor_is_twice_fp32_eps_and_reason_agrees():
    assert least_tol(CERTIFY_FLOOR) == 2 * float(np.finfo(np.float32).eps)


@pytest.mark.parametrize("dtype", ["fp32", "mixed"])
@pytest.mark.parametrize("tol", [1e-12, 1e-7, least_tol(CERTIFY_FLOOR)])
def test_tol_at_or_below_the_floor_is_refused(dtype, tol):
    cfg = StencilConfig(kind="bicgstab", grid=(9, 7, 5), spec=SPEC, dtype=dtype, tol=tol)
    with pytest.raises(StencilError, match=rf"^--tol {tol:g} is below what {dtype} BiCGSTAB"):
        check_config(cfg)


@pytest.mark.parametrize("tol", [2.4e-7, 1e-6])
def test_tol_above_the_floor_passes(tol):
    check_config(StencilConfig(kind="bicgstab", grid=(9, 7, 5), spec=SPEC, dtype="fp32", tol=tol))
