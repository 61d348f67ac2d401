"""Review 82, hole 9: `wse plan infer -m gpt2-124m --assume code_stack_bytes_per_pe=49151`
said "no number of wse3 wafers up to 12 holds the model", not that the assumed program
reserve left 1 B of each PE for data. Oracle: WSE-3's published 48 kB a PE (48 x 1024 B)
less the reserve, by hand; at the default 2 KiB reserve the same model plans on one wafer."""

from __future__ import annotations

import dataclasses

import pytest
import typer
import wse_models
from wse_cli.app import app
from wse_cli.testing import invoke, refused_in_one_line
from wse_core import preset
from wse_systems.pipeline import PipelinePlanError, min_wafers

ROOT = typer.main.get_command(app)
WSE3_SRAM_BYTES_PER_PE = 48 * 1024  # Cerebras' WSE-3: 48 kB of SRAM a PE
RESERVE = WSE3_SRAM_BYTES_PER_PE - 1  # the review's: 1 B a PE left for data


def test_the_refusal_names_the_reserve_that_leaves_1_byte():
    args = ["plan", "infer", "-m", "gpt2-124m", "--users", "1",
            "--assume", f"code_stack_bytes_per_pe={RESERVE}"]  # fmt: skip
    line = refused_in_one_line(ROOT, args, "no number of wse3 wafers up to 12 holds the model")
    data = WSE3_SRAM_BYTES_PER_PE - RESERVE
    assert line.endswith(
        f"holds the model with {data} B a PE for data (of the {WSE3_SRAM_BYTES_PER_PE} B a PE "
        f"holds, {RESERVE} B are its program's code and stack, assumed: "
        "code_stack_bytes_per_pe)"
    )
    code, out = invoke(ROOT, args[:6], {"COLUMNS": "200"})  # the default reserve: it plans
    assert code == 0, out


def test_the_pipelines_own_refusal_names_it_too():
    spec = dataclasses.replace(preset("wse3"), code_stack_bytes_per_pe=RESERVE)
    with pytest.raises(PipelinePlanError) as e:
        min_wafers(wse_models.preset_config("gpt2-124m"), spec)
    assert str(e.value).endswith(
        f"holds it with 1 B a PE for data (of the {WSE3_SRAM_BYTES_PER_PE} B a PE holds, "
        f"{RESERVE} B are its program's code and stack, assumed: code_stack_bytes_per_pe)"
    )
