"""Test fixtures for the stencil kernels: small placed grids on the test presets.

Importable by any package's tests (never a test importing a test).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from wse_core import preset

from wse_hpc.stencil.placement import StencilGrid, grid_wafer, place_grid

__all__ = ["small_grid", "random_field"]


def small_grid(
    shape: tuple[int, int, int],
    fields: Mapping[str, object] | None = None,
    *,
    boundary: str = "dirichlet",
    mesh_shape: tuple[int, int] | None = (2, 4),
    defect_seed: int | None = None,
    radius: int = 1,
    spec: str = "small",
) -> StencilGrid:
    """A grid of `shape` on the `spec` preset over `mesh_shape` devices."""
    wafer = grid_wafer(preset(spec), shape, mesh_shape=mesh_shape, defect_seed=defect_seed)
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
