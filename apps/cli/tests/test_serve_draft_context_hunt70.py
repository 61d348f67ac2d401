"""Hunt 70 (sampling, hole 6): `wse infer serve` with a speculative draft of a shorter context
than the target's served the draft's context without a word (a 64-token draft of a 128-token
target: /v1/models said max_model_len 64, and a request past it was refused naming "the
context of 64 tokens" as if it were the model's). Now serve says at start which context it
serves and whose it is. Oracle: the two configs' max_seq_len as saved."""

from __future__ import annotations

import json

from wse_cli.commands.infer_serve import _real_engine
from wse_core.hw.presets import preset
from wse_inference.speculative.config import parse_speculative_config
from wse_inference.testing import save_tiny_model


def _serve_start(tmp_path, capsys, draft_context: int):
    save_tiny_model(tmp_path / "target", n_layers=1, max_seq_len=128)
    save_tiny_model(tmp_path / "draft", n_layers=1, max_seq_len=draft_context, seed=1)
    spec = parse_speculative_config(
        json.dumps({"model": str(tmp_path / "draft"), "num_speculative_tokens": 2})
    )
    engine = _real_engine(str(tmp_path / "target"), spec, 2, preset("wse3"))
    return engine, capsys.readouterr().out


def test_a_draft_of_a_shorter_context_is_said_at_start(tmp_path, capsys):
    engine, out = _serve_start(tmp_path, capsys, draft_context=64)
    assert engine.max_context == 64
    assert out.strip().splitlines()[-1] == (
        "serving a context of 64 tokens, the draft's (its config's max_seq_len); the target's "
        "is 128: a draft of that context serves it whole"
    )


def test_a_draft_of_the_targets_context_says_nothing(tmp_path, capsys):
    engine, out = _serve_start(tmp_path, capsys, draft_context=128)
    assert engine.max_context == 128
    assert "serving a context" not in out
