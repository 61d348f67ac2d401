"""Hunt 75, `wse plan infer` at one output token: the prompt's pass emits it, so there is no
time from the first token to the last and no per-user speed (vLLM's TPOT n/a). Before: 323 us
"first token to last" on a CS-3 and 1.94 ms on 8 x H100 (a decode step priced past the last
token), 3,092 and 516.7 tokens/s per user. The oracle: each side's own first token, and
1 / first token a second a user (its whole request), from the same JSON."""

from __future__ import annotations

import json

from typer.testing import CliRunner
from wse_cli.app import app

runner = CliRunner()
WIDE = {"COLUMNS": "400"}  # one table row a line
ARGS = ["plan", "infer", "-m", "llama3-1b", "--users", "1", "--prompt-tokens", "256",
        "--output-tokens", "1"]  # fmt: skip


def _run(args: list[str]) -> str:
    r = runner.invoke(app, args, env=WIDE)
    assert r.exit_code == 0, r.output
    return r.output


def _row(out: str, label: str) -> list[str]:
    line = next(line for line in out.splitlines() if line.lstrip("│ ").startswith(label))
    return [c.strip() for c in line.split("│")[2:4]]


def test_one_output_token_has_no_window_and_no_per_user_speed():
    d = json.loads(_run([*ARGS, "--json"]))
    for side in ("wafer", "gpu"):
        f = d[side]
        assert f["tokens_per_s_per_user"] is None and f["tpot_s"] is None
        assert f["point"]["user_tokens_per_s"] is None
        layout = f["point"]["layout"]
        assert layout["decode_s"] == 0.0
        # the request is its first token: one token a user each first token
        assert layout["request_period_s"] == f["ttft_s"]
        assert abs(f["tokens_per_s"] * f["ttft_s"] - 1.0) < 1e-12
    out = _run(ARGS)
    assert _row(out, "tokens/s per user") == ["n/a", "n/a"]
    assert all(c.startswith("none (one output token") for c in _row(out, "first token to last"))
