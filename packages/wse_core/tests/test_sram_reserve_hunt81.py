"""Hunt 81: a PE's SRAM holds its program too; the ledger offered all 48 kB to data.

Broken before: `SramLedger` started every PE at `sram_bytes_per_pe` free, so every planner
sized against the whole 48 kB (`wse hpc stencil --kind jacobi --grid 4 4 10000`: "49152 B
are free ... the largest nz that fits is 4094" = (49152 - 16) // 12), though the SDK says
each PE "has its own executable code in its memory". Now `code_stack_bytes_per_pe` (an
assumption, listed and swept like every constant) is taken off the budget, and the "largest
that fits" messages say so.

Oracles: the budget arithmetic by hand (49,152 B less the reserve, 12 B a cell for three
fp32 fields, 16 B of halo buffers), the ledger's refusal at one byte past it, and the
assumption's sweep ends repriced.
"""

import pytest
from wse_core import SramLedger, preset
from wse_core.cost.assumptions import assume, assumed_spec, resolve_spec
from wse_core.cost.mechanisms import CONSTANTS
from wse_core.cost.reads import recording
from wse_core.errors import SpecError, SramBudgetError

SRAM = 48 * 1024  # B a PE holds (REFERENCES.md)


def test_the_ledger_keeps_the_program_off_the_data_budget():
    spec = preset("wse2")
    reserve = spec.code_stack_bytes_per_pe
    assert reserve == CONSTANTS["code_stack_bytes_per_pe"].sweep[1] > 0  # the middle of 0..4K
    led = SramLedger.for_spec(spec, 4, 4)
    assert led.free_bytes() == SRAM - reserve == spec.data_bytes_per_pe
    led.allocate("column", SRAM - reserve)  # every data byte, exactly
    with pytest.raises(SramBudgetError, match=f"{reserve} B are its program's code and stack"):
        led.allocate("one more", 1)
    assert led.summary()["reserved_bytes_per_pe"] == reserve


@pytest.mark.parametrize("reserve", CONSTANTS["code_stack_bytes_per_pe"].sweep)
def test_the_assumption_moves_what_fits_over_its_sweep(reserve):
    with assume(code_stack_bytes_per_pe=reserve):
        spec = assumed_spec("wse2")
        with recording() as got:
            free = SramLedger.for_spec(spec, 2, 2).free_bytes()
    assert free == SRAM - reserve
    assert got.values["code_stack_bytes_per_pe"] == {float(reserve)}  # listed as read
    assert resolve_spec(name="wse2", assumptions={"code_stack_bytes_per_pe": reserve}) == spec


def test_a_reserve_that_leaves_no_data_is_refused():
    with pytest.raises(SpecError, match="sram_bytes_per_pe = 1,024 B leaves no byte .* "
                       "code_stack_bytes_per_pe"):  # fmt: skip
        preset("tiny").replace(sram_bytes_per_pe=1024)
    assert preset("tiny").replace(sram_bytes_per_pe=1024, code_stack_bytes_per_pe=0)
