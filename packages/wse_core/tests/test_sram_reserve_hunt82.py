"""Hunt 82 (H3, L2, L3), the program reserve as an assumption.

Broken before: `SramLedger.for_spec` evaluated `spec.data_bytes_per_pe`, which notes
`code_stack_bytes_per_pe` as read, so every `build_wafer` inside a recording listed the
reserve (fabric-collectives named it on every row, though no fabric op reads SRAM) and a
stencil whose fit it decides, placed before its report's block, did not; "SRAM per PE:
39904 of 49152 B" set the data against the whole PE; the wafer view's SRAM layer showed no
capacity; `--set sram_bytes_per_pe=1000` named only the reserve the user had not set.

Oracles: the reserve's read recorded or not, by where a fit is asked (a ledger built and
allocated within budget: none; `fits`, `largest`, `free_bytes` and a refused allocation:
one each); the budget arithmetic by hand (49,152 B a WSE-2 PE less 2,048 B of program).
"""

import pytest
from wse_core.cost.assumptions import assumed_spec
from wse_core.cost.reads import recording
from wse_core.errors import SpecError, SramBudgetError
from wse_core.hw.spec import preset
from wse_core.hw.sram import SramLedger, describe_use
from wse_core.hw.wafer import build_wafer

KEY = "code_stack_bytes_per_pe"
SRAM = 48 * 1024  # B a WSE-2 PE holds (REFERENCES.md)


def test_building_a_wafer_reads_no_reserve():
    spec = assumed_spec("wse2")
    with recording() as got:
        wafer = build_wafer(spec, grid=(4, 4))
        wafer.sram.allocate("u", 100)  # within budget: the reserve decides nothing
        ledger = SramLedger.for_spec(spec, 2, 2)
    assert KEY not in got.values
    assert ledger.sized_reads() is None and wafer.sram.sized_reads() is None


@pytest.mark.parametrize(
    "ask",
    [
        lambda led: led.fits(10),
        lambda led: led.largest(lambda n: 12 * n),
        lambda led: led.free_bytes(),
    ],
    ids=["fits", "largest", "free_bytes"],
)
def test_sizing_against_the_budget_reads_the_reserve(ask):
    reserve = preset("wse2").code_stack_bytes_per_pe
    ledger = SramLedger.for_spec(assumed_spec("wse2"), 2, 2)
    with recording() as got:
        ask(ledger)
    assert got.values[KEY] == {float(reserve)}
    reads = ledger.sized_reads()  # for a report built outside that block
    assert reads is not None and reads.values[KEY] == {float(reserve)}


def test_a_refused_allocation_reads_the_reserve():
    ledger = SramLedger.for_spec(assumed_spec("wse2"), 2, 2)
    with recording() as got, pytest.raises(SramBudgetError):
        ledger.allocate("u", SRAM)
    assert KEY in got.values


def test_a_plain_ledger_has_no_assumed_reserve():
    ledger = SramLedger(2, 2, 1000, 100)  # a number given, no spec's assumption
    with recording() as got:
        assert ledger.free_bytes() == 900
    assert KEY not in got.values and ledger.sized_reads() is None


def test_use_is_data_against_data():
    reserve = preset("wse2").code_stack_bytes_per_pe
    ledger = SramLedger.for_spec(assumed_spec("wse2"), 2, 2)
    ledger.allocate("u", 39_904)
    summary = ledger.summary()
    assert summary["data_bytes_per_pe"] == SRAM - reserve
    assert describe_use(summary) == (
        f"39,904 of the {SRAM - reserve:,} B a PE holds for data (its {SRAM:,} B less "
        f"{reserve:,} B of program, assumed: code_stack_bytes_per_pe)"
    )
    assert describe_use(SramLedger(1, 1, 1000).summary()) == "0 of the 1,000 B a PE holds"


def test_no_data_left_names_the_sram_and_the_reserve():
    with pytest.raises(SpecError) as e:
        preset("tiny").replace(sram_bytes_per_pe=1000)
    reserve = preset("tiny").code_stack_bytes_per_pe
    assert str(e.value) == (
        f"sram_bytes_per_pe = 1,000 B leaves no byte for data beside the program's "
        f"code_stack_bytes_per_pe = {reserve:,} B (code and stack, assumed), which every PE "
        f"holds first; give sram_bytes_per_pe above {reserve:,} B, or set "
        "code_stack_bytes_per_pe below 1,000 B too"
    )
