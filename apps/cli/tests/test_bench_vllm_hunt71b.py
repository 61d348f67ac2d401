"""Hunt 71: `wse infer bench --out b.json` saved none of vLLM's `--save-result` keys
(`d["mean_ttft_ms"]` a KeyError for a vLLM user's script) and ours in seconds where vLLM's
are in ms, and neither `--help` nor the file said so. Now the file carries both and --out's
help names the two schemas and their units.

Oracles: the saved file's own keys (vLLM's in ms equal to ours in s x 1000), the streams'
known pauses (every gap at least 20 ms), the run's settings, and the help text.
"""

from __future__ import annotations

import json

import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke
from wse_inference.testing import fake_openai_server

pytestmark = pytest.mark.timeout(60)
ROOT = typer.main.get_command(app)
MODELS = b'{"object": "list", "data": [{"id": "m"}]}'
GAP_S = 0.02
STREAM = [b'data: {"choices": [{"text": "a"}]}\n\n', GAP_S,
          b'data: {"choices": [{"text": "b"}]}\n\n', GAP_S,
          b'data: {"choices": [{"text": "c", "finish_reason": "length"}]}\n\n',
          b'data: {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3}}\n\n'
          b"data: [DONE]\n\n"]  # fmt: skip


def test_the_saved_json_carries_vllms_keys_in_ms_beside_ours(tmp_path):
    out = tmp_path / "b.json"
    with fake_openai_server(MODELS, STREAM) as url:
        args = ["infer", "bench", "--url", url, "-n", "4", "-c", "2", "--max-tokens", "3"]
        code, output = invoke(ROOT, [*args, "--out", out], env={"OPENAI_API_KEY": None})
    assert code == 0, output
    d = json.loads(out.read_text())
    assert (d["completed"], d["num_prompts"], d["max_concurrency"]) == (4, 4, 2)
    assert (d["total_input_tokens"], d["total_output_tokens"]) == (20, 12)
    assert d["duration"] == d["wall_s"] and d["request_throughput"] == 4 / d["wall_s"]
    assert d["output_throughput"] == 12 / d["wall_s"] == d["output_tokens_per_s"]
    assert d["total_token_throughput"] == 32 / d["wall_s"]
    for name, ours in (("ttft", "ttft_s"), ("tpot", "tpot_s"), ("itl", "itl_s"), ("e2el", "e2e_s")):
        assert d[f"mean_{name}_ms"] == d[ours]["mean"] * 1000, name
        assert d[f"median_{name}_ms"] == d[ours]["p50"] * 1000, name
        assert d[f"p99_{name}_ms"] == d[ours]["p99"] * 1000, name
        assert d[f"std_{name}_ms"] >= 0, name
    # the server pauses 20 ms between tokens: vLLM's ITL and TPOT in ms, not s
    assert d["median_itl_ms"] >= GAP_S * 1000 * 0.9 and d["itl_s"]["n"] == 8
    assert d["mean_tpot_ms"] >= GAP_S * 1000 * 0.9 and d["mean_e2el_ms"] > d["mean_ttft_ms"]


def test_outs_help_names_both_schemas_and_their_units():
    code, text = invoke(ROOT, ["infer", "bench", "--help"], env={"COLUMNS": "200"})
    assert code == 0
    flat = " ".join(text.split())
    assert "It carries both schemas: ours (ttft_s, tpot_s, itl_s, e2e_s as" in flat
    assert "in seconds" in flat and "vLLM's --save-result keys in its units" in flat
    assert "mean_ttft_ms, median_ttft_ms, std_ttft_ms, p99_ttft_ms" in flat and "in ms" in flat
