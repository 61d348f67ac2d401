"""A DefectMap keeps its dead PEs as a read-only copy (stop 76 left: a caller's array written
after construction changed the map under a Remap built from it)."""

import numpy as np
import pytest
from wse_core.hw.defects import DefectMap


def test_defect_map_is_a_read_only_copy() -> None:
    dead = np.zeros((4, 5), dtype=bool)
    dead[1, 2] = True
    dm = DefectMap(dead=dead, seed=None, rate=0.05)
    dead[0, 0] = True  # the caller's array, written afterwards
    assert dm.num_dead == 1 and not dm.dead[0, 0]
    with pytest.raises(ValueError):
        dm.dead[2, 2] = True
    expected = np.zeros((4, 5), dtype=bool)
    expected[1, 2] = True
    assert dm == DefectMap(dead=expected, seed=None, rate=0.05)
