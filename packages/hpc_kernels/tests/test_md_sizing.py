"""md.sizing counts the host arrays MD allocates: checked against tracemalloc's peak (NumPy
reports its allocations to it) on small crystals. The estimate may exceed the measured peak
(it counts every array as alive at once) but by at most 25%, and never falls below 90%."""

import tracemalloc

import numpy as np
import pytest
from wse_core import preset
from wse_hpc.md import crystal, mapping
from wse_hpc.md.sizing import crystal_atoms, crystal_bytes, state_bytes


def _peak(fn):
    tracemalloc.start()
    try:
        out = fn()
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(("kind", "cells"), [("fcc", (6, 6, 6)), ("bcc", (9, 10, 11))])
def test_crystal_and_state_estimates_match_what_is_allocated(kind, cells):
    s, peak = _peak(lambda: crystal(kind, "Cu", 3.6, cells))
    assert s.num_atoms == crystal_atoms(kind, cells)
    assert 0.9 <= crystal_bytes(kind, cells) / peak <= 1.25
    spec = preset("wse3")
    n = s.num_atoms

    def state():
        grid = mapping.choose_grid(n, spec.pe_rows, spec.pe_cols)
        vel, species = np.zeros_like(s.positions_A), np.zeros(n, np.int32)
        atom_of_pe = mapping.initial_map(s.positions_A, grid, s.box_A)
        packed = mapping.pack(atom_of_pe, s.positions_A, species, vel, dtype=np.float32)
        return packed.copy()  # the placed copy (CPU devices are host memory)

    _, peak = _peak(state)
    held = s.positions_A.nbytes + s.symbols.nbytes
    assert 0.9 <= state_bytes(n, "float32", preset("wse3")) / (peak + held) <= 1.25
