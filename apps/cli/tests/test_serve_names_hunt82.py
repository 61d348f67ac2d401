"""Hunt 82 #5: `wse infer serve --served-model-name a b` was refused ("Got unexpected extra
argument(s) (b)"); vLLM's option is nargs="+": "If multiple names are provided, the server will
respond to any of the provided names. The model name in the model field of a response will be
the first name in this list" (vllm/engine/arg_utils.py). Oracle: vLLM's rule as it states it,
the ServeConfig the command builds (the server's side: packages/inference/tests/
test_serve_hunt82.py), and the one-line refusals (`refused_in_one_line`)."""

from __future__ import annotations

import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke, refused_in_one_line

ROOT = typer.main.get_command(app)
SERVE = ["infer", "serve", "--model-dir", "mock", "--port", "0", "--no-warmup"]


@pytest.fixture
def configs(monkeypatch):
    """The ServeConfig each `wse infer serve` would serve with (nothing is served)."""
    import wse_inference.serve.app

    seen: list = []
    monkeypatch.setattr(
        wse_inference.serve.app, "serve", lambda e, config, **_: seen.append(config)
    )
    return seen


@pytest.mark.parametrize(
    "args, names",
    [(["--served-model-name", "a", "b"], ("a", "b")),  # vLLM's spelling (before: refused)
     (["--served-model-name", "a", "--served-model-name", "b"], ("a", "b")),  # repeated
     (["--served-model-name", "gpt-x", "real/model", "--max-queued", "4"], ("gpt-x", "real/model")),
     (["--served-model-name", "a", "b", "a"], ("a", "b")),  # each once, the first first
     (["--served-model-name", "only"], ("only",)),
     ([], ())],  # the engine's own name (ServeConfig's default)
)  # fmt: skip
def test_several_names_reach_the_server_in_order(configs, args, names):
    code, out = invoke(ROOT, [*SERVE, *args])
    assert code == 0, out
    assert configs[-1].model_names == names


@pytest.mark.parametrize(
    "args, message",
    [(["stray"], "unexpected argument 'stray': serve takes options, and more "
                 "--served-model-name names after it, e.g. --served-model-name a b"),
     (["--served-model-name", "a", " b"], "--served-model-name ' b' has leading or trailing"),
     (["--served-model-name", "a", ""], "--served-model-name must not be empty"),
     (["--served-model-name", "a", "x" * 300], "is longer than 256 characters")],
)  # fmt: skip
def test_a_bad_name_or_a_stray_argument_is_one_line(configs, args, message):
    refused_in_one_line(ROOT, [*SERVE, *args], message)
    assert not configs  # refused before anything is served
