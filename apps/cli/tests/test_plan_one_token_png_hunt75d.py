"""Hunt 75d: `wse plan infer --output-tokens 1 --png` draws its chart (before: a traceback,
matplotlib's "Data cannot be log-scaled because all values are <= 0": no point of one output
token has a per-user speed), output tokens/s in all against the time to first token; and
`--gpus 3` on GPT-2 (12 heads) serves tp 3, which vLLM's rule allows. Oracles: the PNG's
signature and size read back, the JSON's own layout against vLLM's rule by hand."""

from __future__ import annotations

import json

from typer.testing import CliRunner
from wse_cli.app import app

runner = CliRunner()


def test_one_output_token_png(tmp_path):
    png = tmp_path / "o1.png"
    args = ["plan", "infer", "-m", "llama3-1b", "--prompt-tokens", "256", "--output-tokens", "1"]
    r = runner.invoke(app, [*args, "--png", str(png)])
    assert r.exit_code == 0, r.output
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    d = json.loads(runner.invoke(app, [*args, "--json"]).output)
    for side in ("wafer", "gpu"):  # the knee: no frontier point beats it on output and TTFT
        point = d[side]["point"]
        front = d["frontiers"][side]["points"]
        assert front
        out, first = point["aggregate_tokens_per_s"], point["ttft_s"]
        assert not [f for f in front if f["aggregate_tokens_per_s"] > out and f["ttft_s"] < first]
        assert point["ttft_s"] > 0 and point["aggregate_tokens_per_s"] > 0


def test_gpt2_on_three_gpus_serves_a_tp_vllm_allows():
    args = ["plan", "infer", "-m", "gpt2-124m", "--gpus", "3", "--users", "1",
            "--prompt-tokens", "256"]  # fmt: skip
    r = runner.invoke(app, [*args, "--json"])
    assert r.exit_code == 0, r.output
    lay = json.loads(r.output)["gpu"]["point"]["layout"]
    tp, replicas = lay["tp"], lay["replicas"]
    assert 12 % tp == 0 and tp * lay["pp"] * replicas <= 3  # vLLM's rule on 12 heads
    text = " ".join(runner.invoke(app, args, env={"COLUMNS": "400"}).output.split())
    idle = 3 - tp * lay["pp"] * replicas
    if idle:  # the note says why, and no longer that tp 3 is refused
        assert f"tp 3 runs (vLLM's rule), but this load is served as {replicas} x tp {tp}" in text
    assert "must divide the model's 12 attention heads" not in text
