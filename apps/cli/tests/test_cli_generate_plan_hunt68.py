"""Hunt 68's two prices of one model folder. Broken before:

- `wse infer generate --stages 2`'s predicted line and `wse plan infer -m DIR` priced the same
  2-layer float32 folder 4.5% apart (23.04 against 22.06 us a token on wse3; 26.47 against
  25.92 on wse2): the engine's plan held the folder's 4-byte weights (what it emulates) in
  banded regions, `plan infer` 16-bit weights in the faster layout (compact), and neither
  output said which. Now the engine's plan takes the faster layout too, placed for the
  request's mean cache read (`Workload.kv_tokens`, which its report reads as well: it read one
  token less), and `plan infer --wafer-dtype auto` prices a model folder in its own dtype:
  both give the same token, to the cycle, and both name the precision and the layout.

Oracles: each surface's own JSON against the other's, and the dtype table
(`wse_core.hw.dtypes`).
"""

from __future__ import annotations

import json

import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke, refused_in_one_line
from wse_core import preset

ROOT = typer.main.get_command(app)
PROMPT, OUTPUT = [3, 1, 4, 1, 5, 9, 2, 6], 8


def _json(args) -> dict:
    code, output = invoke(ROOT, args)
    assert code == 0, output[-2000:]
    return json.loads(output[output.index("{") :])  # generate's line; plan's indented


def _generate(folder, wafer: str) -> dict:
    ids = ",".join(map(str, PROMPT))
    return _json(["infer", "generate", "--model-dir", folder, "--prompt-ids", ids,
                  "--max-tokens", OUTPUT, "--temperature", 0, "--ignore-eos", "--stages", 2,
                  "--preset", wafer, "--json"])  # fmt: skip


def _plan(folder, wafer: str, *extra) -> dict:
    return _json(["plan", "infer", "-m", folder, "--users", 2, "--prompt-tokens", len(PROMPT),
                  "--output-tokens", OUTPUT, "--wafer", wafer, *extra, "--json"])  # fmt: skip


@pytest.mark.parametrize("wafer", ["wse3", "wse2"])
def test_generate_and_plan_infer_price_one_folder_alike(tiny_model_dir, wafer):
    """2 stages, 2 slots (the engine's: one per stage; `--users 2`), the context prompt +
    output (generate's reservation), the mean cache read prompt + output // 2 on both."""
    gen = _generate(tiny_model_dir, wafer)
    assert len(gen["token_ids"]) == OUTPUT
    pred = gen["predicted"]
    plan = _plan(tiny_model_dir, wafer)
    layout = plan["wafer"]["point"]["layout"]
    # session 73: plan infer places the head for the whole request at its load (prompt blocks
    # in the free SRAM), the engine for the fastest token; on wse2 the plan's head is slower by
    # a token (26.97 against 26.47 us) and serves the request as well (a tie within 1%, the sooner
    # first token). Hunt jobs17 (session 81): both weigh footprints of fewer PE rows, and on wse3
    # the plan takes 32 rows where the engine's fastest token takes 16 (10.22 against 10.13 us
    # a token), 139.6k output tokens/s against 137.6k there and a sooner first token (38.9
    # against 40.4 us); both choose the same candidates, so the engine's token is never slower
    cycles = preset(wafer).clock_hz * (layout["token_s"] - pred["wafer_s_per_token"])
    assert cycles > -1.0, (pred["wafer_s_per_token"], layout["token_s"])  # the fastest token
    # both name what they priced: the folder's float32, 4 bytes, in the same layout
    assert (pred["weights"], pred["bytes_per_param"]) == ("fp32", 4)
    assert (plan["inputs"]["wafer_dtype"], plan["inputs"]["wafer_bytes_per_param"]) == ("fp32", 4)
    assert pred["layout"] == layout["layout"]
    assert any("fp32 weights and KV (4 bytes a value" in note for note in plan["assumptions"])


def test_the_generate_line_names_its_precision_and_layout(tiny_model_dir):
    ids = ",".join(map(str, PROMPT))
    code, output = invoke(ROOT, ["infer", "generate", "--model-dir", tiny_model_dir,
                                 "--prompt-ids", ids, "--max-tokens", 4, "--temperature", 0,
                                 "--stages", 2])  # fmt: skip
    assert code == 0, output
    line = next(x for x in output.splitlines() if x.startswith("predicted on"))
    assert "1 wse3 wafer(s), fp32 weights and KV, " in line
    assert any(f", {lay} regions: " in line for lay in ("banded", "compact")), line


def test_wafer_dtype_asked_prices_that_precision(tiny_model_dir):
    folder = _plan(tiny_model_dir, "wse3")
    half = _plan(tiny_model_dir, "wse3", "--wafer-dtype", "bfloat16")
    assert (half["inputs"]["wafer_dtype"], half["inputs"]["wafer_bytes_per_param"]) == ("bf16", 2)
    token = lambda p: p["wafer"]["point"]["layout"]["token_s"]  # noqa: E731
    assert token(half) < token(folder)  # half the bytes to stream and to hold
    # a preset is 16-bit unless asked (the seeds'); the table row says which
    preset_plan = _plan("gpt2-124m", "wse3")
    assert preset_plan["inputs"]["wafer_bytes_per_param"] == 2
    code, output = invoke(ROOT, ["plan", "infer", "-m", tiny_model_dir, "--users", 1,
                                 "--prompt-tokens", 8, "--output-tokens", 8])  # fmt: skip
    assert code == 0, output
    assert any("weights and KV" in x and "fp32" in x and "bf16" in x for x in output.splitlines())


@pytest.mark.parametrize("dtype", ["int8", "float64", "fp8"])
def test_a_dtype_the_wafer_does_not_price_is_refused(dtype):
    refused_in_one_line(
        ROOT, ["plan", "infer", "-m", "gpt2-124m", "--wafer-dtype", dtype],
        f"--wafer-dtype '{dtype}': the wafer prices float32, bfloat16 or float16 weights and KV",
    )  # fmt: skip
