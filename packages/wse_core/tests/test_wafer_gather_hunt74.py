"""`Wafer.gather` (hunt 74): a NumPy array of the padded shape is read as a placed field
would be; an array of another shape is refused in one line (a (3, 3) array came back as
given, a NumPy array was an AttributeError). Oracle: NumPy slicing of the logical PEs."""

import jax.numpy as jnp
import numpy as np
import pytest
from wse_core.errors import WseError
from wse_core.hw.presets import preset
from wse_core.hw.wafer import build_wafer


@pytest.fixture(scope="module")
def wafer():
    return build_wafer(preset("wse3"), grid=(5, 7))


def test_a_placed_field_and_its_numpy_copy_gather_alike(wafer):
    x = np.arange(5 * 7 * 2, dtype=np.float32).reshape(5, 7, 2)
    placed = wafer.place(x)
    np.testing.assert_array_equal(wafer.gather(placed), x)
    np.testing.assert_array_equal(wafer.gather(np.asarray(placed)), x)


@pytest.mark.parametrize("bad", [jnp.zeros((3, 3)), np.zeros(4), [1.0, 2.0], 3.0])
def test_anything_else_is_refused_in_one_line(wafer, bad):
    with pytest.raises(WseError, match=r"gather takes a field placed on this wafer") as e:
        wafer.gather(bad)
    assert "\n" not in str(e.value)
