"""The synthetic operator's host estimate against tracemalloc's peak while it is built."""

import tracemalloc

import pytest
from wse_hpc.tlrmvm.seismic import green_operator, green_operator_bytes


@pytest.mark.parametrize(("n", "block"), [(300, 1024), (700, 256)])
def test_green_operator_bytes_is_its_peak(n, block):
    tracemalloc.start()
    try:
        a = green_operator(n=n, block=block)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert a.nbytes == 8 * n * n
    assert 0.9 <= green_operator_bytes(n, block) / peak <= 1.25
