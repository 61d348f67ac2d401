"""Hunt 76: `wse_hpc.fields.max_abs` of a field holding a NaN read as a finite number on every
multi-device mesh (`fabric.reduce`'s "max" dropped NaN there, XLA:CPU's all-reduce max does),
so a diverged flow's divergence check passed; NumPy's `np.abs(x).max()` is the oracle. A field
is refused NaN data (`grid.field`), so the NaN comes as in a run: 0 / 0 in its arithmetic."""

import numpy as np
import pytest
from wse_core import preset
from wse_hpc.fields import field_grid, max_abs

SHAPE = (5, 7, 3)


@pytest.mark.parametrize("mesh", [(1, 1), (1, 2), (2, 1), (2, 4)])
def test_max_abs_is_numpys_with_and_without_a_nan(mesh):
    grid = field_grid(preset("small"), SHAPE, mesh_shape=mesh)
    x = np.random.default_rng(0).normal(size=SHAPE).astype(np.float32)
    assert float(max_abs(grid.field("u", x))) == np.abs(x).max()
    for at in [(0, 0, 0), (4, 6, 2), (2, 3, 1)]:  # on the first, the last, a middle device
        y = x.copy()
        y[at] = 0.0
        with np.errstate(invalid="ignore"):
            want = np.abs(y / y).max()
        assert np.isnan(want)
        f = grid.field("u", y)
        assert np.isnan(float(max_abs(f / f))), at
