"""Review 82, hole 8: `wse train llama3_8b --validate-only` printed "SRAM per PE in use 40728 of
49152 B", the whole PE's bytes as the budget, where 2,048 B are the program's (code and stack,
assumed): 47,104 B are data's and 6,376 B free, not 8,424. Oracle: WSE-3's published 48 kB a PE
(Cerebras: 48 x 1024 B) less the 2 KiB reserve the assumption's default names, by hand."""

from __future__ import annotations

import re

import typer
from wse_cli.app import app
from wse_cli.testing import invoke
from wse_core.hw.sram import SramLedger, describe_use

ROOT = typer.main.get_command(app)
WSE3_SRAM_BYTES_PER_PE = 48 * 1024  # Cerebras' WSE-3: 48 kB of SRAM a PE
RESERVE_BYTES_PER_PE = 2 * 1024  # code_stack_bytes_per_pe's default, 2 KiB


def test_validate_only_prints_use_against_the_data_budget():
    code, out = invoke(ROOT, ["train", "llama3_8b", "--validate-only"], {"COLUMNS": "4000"})
    assert code == 0, out
    [line] = [ln for ln in out.splitlines() if ln.startswith("streaming:")]
    data = WSE3_SRAM_BYTES_PER_PE - RESERVE_BYTES_PER_PE
    got = re.search(
        r"SRAM per PE in use ([\d,]+) of the ([\d,]+) B a PE holds for data \((.*)\)$", line
    )
    assert got is not None, line
    used, budget = (int(got.group(k).replace(",", "")) for k in (1, 2))
    assert budget == data == 47_104  # not 49,152
    # free for data: 6,376 (40,728 in use) since hunt 85: CS-3's fitted DSD issue (2.14
    # cycles, not WSE-2's 11.49) makes the larger chunk the faster, no longer a tie; 24,361
    # (22,743 in use) from hunt 82 jobs18 H1 (the chunk searched with the stride, ties to the
    # smaller buffers); 6,376 before it
    assert data - used == 6_376
    assert got.group(3) == (
        f"its {WSE3_SRAM_BYTES_PER_PE:,} B less {RESERVE_BYTES_PER_PE:,} B of program, "
        "assumed: code_stack_bytes_per_pe"
    )


def test_a_ledger_without_a_reserve_says_no_reserve():
    ledger = SramLedger(2, 2, 1000)
    ledger.allocate("a", 300, ledger.grid)
    assert describe_use(ledger.summary()) == "300 of the 1,000 B a PE holds"
    held = SramLedger(2, 2, 1000, 100)
    held.allocate("a", 300, held.grid)
    assert describe_use(held.summary()) == (
        "300 of the 900 B a PE holds for data (its 1,000 B less 100 B of program, assumed: "
        "code_stack_bytes_per_pe)"
    )
