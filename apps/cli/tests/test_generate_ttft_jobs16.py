"""Hunt jobs16 H3 (session 80): `wse infer generate` printed the measured first token (TTFT)
beside a prediction of the decode token alone, though the plan it ran prices the prompt too.
Now the report and `--json` give the request's predicted first token (`predicted.ttft_s`: the
prompt's pass in the engine's 32-token chunks, `predicted.request`) and its whole
(`predicted.request_s` = TTFT + (n - 1) tokens), from the engine's plan.

Oracle: a hand composition of the plan's element prices (`wse_systems.serving.blocks`): a
40-token prompt runs chunks 32 + 8, the last padded to 32 as the engine runs it
(`wse_inference.decoding._prefill`), so two 32-token blocks: the first through every element,
the second one bottleneck hold behind (one wafer: no pass between wafers, whose latency a hold
leaves out), and the head's logits once where the pipeline prices them once a prompt
(`logits_s`, prompt80's change); each token the pipeline's T1, which the engine's report
prices on its own (`price_token`).
"""

from __future__ import annotations

import json

import pytest
import typer
from wse_cli.app import app
from wse_cli.commands import infer_generate
from wse_cli.testing import invoke

pytestmark = pytest.mark.timeout(300)
ROOT = typer.main.get_command(app)
PROMPT = [i % 50 + 1 for i in range(40)]  # chunks 32 + 8
OUTPUT, CHUNK = 8, 32


@pytest.fixture(scope="module")
def run(tiny_model_dir) -> dict:
    code, output = invoke(ROOT, ["infer", "generate", "--model-dir", tiny_model_dir,
                                 "--prompt-ids", ",".join(map(str, PROMPT)), "--max-tokens",
                                 OUTPUT, "--temperature", 0, "--ignore-eos", "--json"])  # fmt: skip
    assert code == 0, output[-2000:]
    return json.loads(output[output.index("{") :])


def _hand(folder) -> tuple[float, float]:
    """(first token, token) composed by hand from the engine plan's element prices."""
    from wse_core import preset
    from wse_inference.model_dir import read_config
    from wse_inference.pipeline.plan import engine_plan
    from wse_systems.serving.blocks import price_pipeline

    cfg = read_config(folder)
    kv = len(PROMPT) + OUTPUT // 2  # the request's mean cache read (`Workload.kv_tokens`)
    plan = engine_plan(cfg, stages=1, max_context=len(PROMPT) + OUTPUT, spec=preset("wse3"),
                       kv_tokens=kv)  # fmt: skip
    assert plan.num_wafers == 1
    prompt = price_pipeline(cfg, plan, kv_tokens=len(PROMPT) // 2)
    held = getattr(prompt, "prompt_occupancy_s", prompt.occupancy_s)(CHUNK)
    once = sum(prompt.logits_s().values()) if hasattr(prompt, "logits_s") else 0.0
    first = sum(held.values()) + max(held.values()) + once  # two blocks of 32
    return first, price_pipeline(cfg, plan, kv_tokens=kv).token_s


def test_generate_predicts_the_request_it_measures(run, tiny_model_dir):
    pred = run["predicted"]
    first, token = _hand(tiny_model_dir)
    req = pred["request"]
    assert (req["prompt_tokens"], req["block_tokens"], req["blocks"], req["chunks"]) == (
        40, 32, 2, [32, 8])  # fmt: skip
    assert pred["ttft_s"] == pytest.approx(first, rel=1e-12)
    assert pred["wafer_s_per_token"] == pytest.approx(token, rel=1e-12)  # the report's own
    n = len(run["token_ids"])
    assert n == OUTPUT
    assert pred["request_s"] == pytest.approx(first + (n - 1) * token, rel=1e-12)
    assert pred["ttft_s"] > 2 * token  # a 40-token prompt is not one token


def test_the_report_prints_it_beside_the_measured_ttft(run, capsys):
    infer_generate._report(run, as_json=False)
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("predicted first"))
    pred = run["predicted"]
    assert f"{pred['ttft_s'] * 1e6:,.1f} us" in line
    assert "2 block(s) of 32 tokens, the engine's chunks 32 + 8" in line
    assert f"measured on this emulator {run['ttft_s'] * 1e3:.1f} ms" in line
    token, total = pred["wafer_s_per_token"] * 1e6, pred["request_s"] * 1e6
    assert f"+ 7 x {token:,.1f} us = {total:,.1f} us" in line
