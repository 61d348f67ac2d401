"""Test fixtures for the stencil kernels: small placed grids on the test presets.

Importable by any package's tests (never a test importing a test).
"""

from __future__ import annotations

from collections.abc import Mapping

import jax
import numpy as np
from wse_core import PRESETS, WaferSpec

from wse_hpc.stencil.placement import StencilGrid, grid_wafer, place_grid

__all__ = ["small_grid", "random_field"]


def small_grid(
    shape: tuple[int, int, int],
    fields: Mapping[str, object] | None = None,
    *,
    boundary: str = "dirichlet",
    mesh_shape: tuple[int, int] | None = None,
    defect_seed: int | None = None,
    radius: int = 1,
    spec: WaferSpec = PRESETS["small"],
) -> StencilGrid:
    """A grid of `shape` on a wafer of `spec` over `mesh_shape` devices; by default 2 x 4
    where JAX's default backend has 8 devices or more (the test suite's CPU devices), else
    1 x 1 (a one-GPU host), so the same tests run on either."""
    if mesh_shape is None:
        mesh_shape = (2, 4) if len(jax.devices()) >= 8 else (1, 1)
    wafer = grid_wafer(spec, shape, mesh_shape=mesh_shape, defect_seed=defect_seed)
    return place_grid(
        wafer,
        shape,
        fields or {"u": "fp32"},
        boundary=boundary,  # type: ignore[arg-type]
        radius=radius,
    )


def random_field(shape: tuple[int, int, int], seed: int = 0) -> np.ndarray:
    """Uniform [-1, 1) fp64 values."""
    return np.random.default_rng(seed).uniform(-1, 1, shape)
