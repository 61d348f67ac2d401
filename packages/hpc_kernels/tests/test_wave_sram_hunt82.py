"""Hunt 82 (H4): wave25's SRAM refusal names what overflows and advises a value that is then
accepted; `table_ii_block_z`'s stated basis agrees with the model's own ledger.

Broken before: `--grid 5 5 1000 --block-z 1000` said "a Z column of 1000 does not fit ...
the largest nz that fits is 618", though 64,064 of the 76,064 B were the Z block's 16 halo
buffers and `--block-z 547` fits at nz = 1000; following the advice, nz = 618 with the block
of 1000 was refused ("the Z block size must be in 1..nz=618"). The constant's source said
334 was "the largest block whose 16 halo buffers fit beside the column", where the ledger
fits any block up to 547.

Oracle: the bytes by hand (3 fp32 fields, 12 B a cell of the column; 16 halo values of 4 B
a cell of the block; 64 B of ghost planes) against 49,152 B less the 2,048 B reserve, and
each advised value placed and built again.
"""

import math
import re

import pytest
from wse_core import SramBudgetError, preset
from wse_core.cost.mechanisms import CONSTANTS
from wse_hpc.stencil import grid_wafer
from wse_hpc.stencil.problems import default_block_z, place_wave
from wse_hpc.stencil.wave import wave25
from wse_hpc.studies.stencil_bicgstab import TABLE_III_INPUTS

SPEC = preset("wse2")
FREE = SPEC.sram_bytes_per_pe - SPEC.code_stack_bytes_per_pe  # 47,104 B for data


def _need(nz: int, b: int) -> int:
    return 12 * nz + 64 * min(b, nz) + 64


def _place(nz: int, b: int | None):
    shape = (5, 5, nz)
    return place_wave(grid_wafer(SPEC, shape, mesh_shape=(1, 1)), shape, b)


def _refusal(nz: int, b: int | None) -> str:
    with pytest.raises(SramBudgetError) as e:
        _place(nz, b)
    return str(e.value)


def _accepted(nz: int, b: int | None) -> None:
    grid = _place(nz, b)  # placed, then the kernel's own block check
    wave25(grid, dt=1e-4, block_z=default_block_z(nz) if b is None else b)


def test_a_block_too_long_names_its_halo_buffers_and_the_block_that_fits():
    line = _refusal(1000, 1000)
    assert line.startswith(
        f"a Z block of 1000 does not fit beside a Z column of 1000: the 16 halo buffers of the "
        f"Z block need {64 * 1000 + 64} B per PE (64 B a cell of the block and 64 B of ghost "
        f"planes) and the 3 fields of the column {12 * 1000} B, {_need(1000, 1000)} B in all, "
        f"but {FREE} B are free on the wse2 PEs"
    )
    best = (FREE - 12 * 1000 - 64) // 64  # 547 by hand
    assert f"the largest Z block (--block-z) that fits at nz = 1000 is {best}" in line
    _accepted(1000, best)
    assert _need(1000, best + 1) > FREE and _refusal(1000, best + 1)


def test_a_column_too_long_advises_an_nz_its_block_allows():
    line = _refusal(5000, 1000)
    nz = int(re.search(r"the largest nz that fits is (\d+), with a Z block of at most", line)[1])
    # by hand: 12 n + 64 n + 64 <= 47,104 (the block shortened to the column)
    assert nz == (FREE - 64) // 76 and nz < 1000
    _accepted(nz, nz)
    line = _refusal(4000, 100)
    nz = int(re.search(r"the largest nz that fits with a Z block of 100 is (\d+)", line)[1])
    assert nz == (FREE - 64 - 6400) // 12  # 12 n + 6,464 <= 47,104
    _accepted(nz, 100)
    assert _need(nz + 1, 100) > FREE


def test_a_default_block_advises_an_nz_every_default_block_fits():
    line = _refusal(100_000, None)
    nz = int(re.search(r"every nz up to (\d+) fits with its default Z block", line)[1])
    assert nz == (FREE - 64 - 64 * 64) // 12  # a default block is at most 64 cells
    for n in (nz, nz - 1, nz - 7, 2 * 3 * 596):  # any default block at or below it
        _accepted(n, None)


def test_table_iii_blocks_and_the_stated_basis_of_334():
    # Table III's blocks: each column in the fewest equal blocks of at most 400 cells
    for nz, b in TABLE_III_INPUTS:
        assert b == math.ceil(nz / math.ceil(nz / 400)), (nz, b)
    # ... and not SRAM: the model's ledger fits 547 (579 with no reserve) beside nz = 1000
    assert max(b for b in range(1, 1001) if _need(1000, b) <= FREE) == 547
    assert max(b for b in range(1, 1001) if _need(1000, b) <= SPEC.sram_bytes_per_pe) == 579
    _accepted(1000, 547)
    source = CONSTANTS["table_ii_block_z"].source
    assert "at most 400 cells" in source and "547" in source and "579" in source
    assert "the largest block whose 16 halo buffers fit" not in source
