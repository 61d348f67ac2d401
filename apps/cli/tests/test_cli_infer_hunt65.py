"""Hunt 65's `wse infer` option holes. Broken before: `wse infer generate --stages N` with
`--speculative-config` was silently ignored (1, 4 and even 9, which the pipelined engine
refuses, all ran the speculative engine, exit 0); `wse infer serve --model-dir mock
--speculative-config '{"model": "/nonexistent/draft", ...}'` served, the draft folder never
looked at (the mock drafts by itself), and a real model's `mock_accepted_tokens` was as
silently unread. Each now exits 2 with one line, before any model is read."""

from __future__ import annotations

import json

import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke, refused_in_one_line
from wse_inference.testing import save_tiny_model

pytestmark = pytest.mark.timeout(300)
ROOT = typer.main.get_command(app)
SPECULATIVE = "drop it with --speculative-config"


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    save_tiny_model(root / "target", n_layers=2)
    save_tiny_model(root / "draft", n_layers=1, seed=3)
    return root


def _generate(root, *extra):
    return ["infer", "generate", "--model-dir", root / "target", "--prompt-ids", "5,6,7",
            "--max-tokens", "4", "--temperature", "0", *extra]  # fmt: skip


@pytest.mark.parametrize("stages", ["1", "4", "9"])
def test_generate_refuses_stages_with_a_speculative_config(models, stages):
    spec = json.dumps({"model": str(models / "draft"), "num_speculative_tokens": 2})
    line = refused_in_one_line(
        ROOT, _generate(models, "--stages", stages, "--speculative-config", spec), SPECULATIVE
    )
    assert line == f"Error: --stages applies to the pipelined engine; {SPECULATIVE}"


def test_generate_stages_still_reaches_the_pipelined_engine(models):
    """The oracle of the refusal above: without speculation --stages is the pipeline's (9 is
    more stages than the 2 layers, refused by the engine as before)."""
    refused_in_one_line(
        ROOT, _generate(models, "--stages", "9"), "stages must be in 1..2 (the model's layers)"
    )


@pytest.mark.parametrize(
    ("model_dir", "config", "message"),
    [
        (
            "mock",
            {"model": "/nonexistent/draft", "num_speculative_tokens": 2},
            "--speculative-config's model applies to a real model; the mock engine drafts by "
            "itself (give num_speculative_tokens / mock_accepted_tokens only)",
        ),
        (
            "/nonexistent/model",
            {"model": "/nonexistent/draft", "mock_accepted_tokens": 1},
            "--speculative-config's mock_accepted_tokens applies to `wse infer serve "
            "--model-dir mock`; a real model's drafts are accepted by the target (leave the key "
            "out)",
        ),
    ],
)
def test_serve_refuses_speculative_keys_its_engine_does_not_read(model_dir, config, message):
    args = ["infer", "serve", "--model-dir", model_dir, "--port", "0", "--no-warmup",
            "--speculative-config", json.dumps(config)]  # fmt: skip
    assert refused_in_one_line(ROOT, args, message) == f"Error: {message}"


def test_the_mocks_own_speculation_is_still_taken():
    """`num_speculative_tokens` / `mock_accepted_tokens` are the mock's settings."""
    from wse_cli.commands import infer_serve
    from wse_inference.speculative.config import parse_speculative_config

    spec = parse_speculative_config('{"num_speculative_tokens": 3, "mock_accepted_tokens": 1}')
    infer_serve._speculation_for(spec, infer_serve.MOCK)  # no refusal
    mock = infer_serve._mock_engine(spec, 2, 64, 0.0)
    assert (mock.spec_tokens, mock.spec_accepted) == (3, 1)


def test_bench_moved_to_its_own_module_is_still_a_command():
    code, out = invoke(ROOT, ["infer", "--help"])
    assert code == 0 and "serve" in out and "bench" in out, out
    refused_in_one_line(ROOT, ["infer", "bench", "--url", "ftp://x"], "--url 'ftp://x' must be")
