"""Hunt 82 (jobs18 L3): the systems pricers count a 16-bit message in whole wavelets, as the
fabric carries it and as the emulator's traffic ledger counts it since hunt 81.

Before: `matvec` (and the decoder's moves, attention, MeshGEMV/GEMM, the training GEMM)
priced `values x bytes / 4` words: 25 fp16 values were 12.5 wavelets. Oracles: the ledger's
own count of one traced message (`wse_core.fabric.ledger.words_per_pe`) and hand counts.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from wse_core import preset
from wse_core.cost.collectives import broadcast_line, wavelets
from wse_core.fabric.ledger import words_per_pe
from wse_core.hw.sram import Region
from wse_systems.matvec import matvec_phases

SPEC = preset("small")


@pytest.mark.parametrize(("values", "dtype"), [(25, np.float16), (1, np.float16),
                                               (24, np.float16), (3, np.float32)])  # fmt: skip
def test_a_message_is_the_ledgers_whole_wavelets(values, dtype):
    one_pe = np.zeros((1, 1, values), dtype)  # a field's per-PE message of `values` values
    assert wavelets(values, np.dtype(dtype).itemsize) == words_per_pe(one_pe)


def test_an_sdk_matvec_moves_whole_wavelets():
    """A 50 x 10 product on 4 x 2 PEs in fp16: 25 inputs a column (13 wavelets, not 12.5),
    3 outputs a row (2, not 1.5), 5 a column northward (3, not 2.5), 2 each way (1)."""
    region = Region("r", 0, 0, 4, 2)
    parts = {p.name: p.work for p in matvec_phases(region, 50, 10, spec=SPEC).parts}
    rows_out, cols_in = math.ceil(10 / 4), math.ceil(50 / 2)
    assert parts["x_in"] == broadcast_line(4, 13)
    assert parts["move"].links["ramp"] == 2 == math.ceil(rows_out * 2 / 4)
    assert parts["move"].links["N"] == 3 and parts["move"].links["W"] == 1
    assert cols_in == 25
