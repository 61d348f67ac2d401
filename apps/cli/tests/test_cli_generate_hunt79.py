"""Hunt 79 (serve79 L5): `wse infer generate --top-k -1` exited 2 ("must be an integer in [0,
...]") while `wse infer serve` (top_k -1) and `wse infer bench --top-k -1` take it, as vLLM's
SamplingParams does (-1: every token). Oracle: -1 is "off", so the same seed draws what
--top-k 0 draws."""

import json

import pytest
from typer.testing import CliRunner
from wse_cli.app import app
from wse_inference.testing import save_tiny_model

pytestmark = pytest.mark.timeout(300)
runner = CliRunner()


def test_top_k_minus_one_is_top_k_off(tmp_path):
    save_tiny_model(tmp_path / "m", n_layers=1)
    args = ["--devices", "8", "infer", "generate", "--model-dir", str(tmp_path / "m"),
            "--prompt-ids", "3,4", "--max-tokens", "5", "--temperature", "1", "--seed", "7",
            "--json"]  # fmt: skip
    outs = []
    for k in ("-1", "0"):
        res = runner.invoke(app, [*args, "--top-k", k])
        assert res.exit_code == 0, res.output
        outs.append(json.loads(res.output.strip().splitlines()[-1])["token_ids"])
    assert outs[0] == outs[1] and len(outs[0]) == 5
    res = runner.invoke(app, [*args, "--top-k", "-2"])
    assert res.exit_code == 2 and "--top-k" in res.output
