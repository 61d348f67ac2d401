"""`wse infer generate`: JSON output equals the plain decoder; bad input exits 2 with a line."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner
from wse_cli.app import app
from wse_cli.testing import NO_JAX_PROBE
from wse_core import preset
from wse_inference.decoding import PlainDecoder
from wse_inference.engine import SamplingParams
from wse_inference.testing import np_logprobs, save_tiny_model

runner = CliRunner()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    target = save_tiny_model(root / "target" / "hf", n_layers=2)  # a `wse train` model_dir
    save_tiny_model(root / "draft", n_layers=1, seed=3)
    save_tiny_model(root / "small_vocab", n_layers=1, vocab_size=100)
    return root, target


def _run(*args):
    return runner.invoke(app, ["--devices", "8", "infer", "generate", *map(str, args)])


def test_generate_json_equals_plain_decoder(model_dir):
    root, target = model_dir
    res = _run(
        "--model_dir",
        root / "target",
        "--prompt",
        "hi",
        "--max_tokens",
        6,
        "--temperature",
        0,
        "--stages",
        2,
        "--json",
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.output.strip().splitlines()[-1])
    ref = PlainDecoder(target.config, target.params, max_context=128).generate(
        list(b"hi"), SamplingParams(max_tokens=6, temperature=0.0)
    )
    assert out["token_ids"] == ref.tokens and out["finish_reason"] == "length"
    assert out["tokens_per_s"] > 0 and out["ttft_s"] > 0
    # The engine's RunReport: the wafer time of one token on its plan, beside the measured.
    pred = out["predicted"]
    assert pred["wafer"] == "wse3" and pred["regions"] == 3  # the head and 2 stages
    assert pred["tokens_per_s"] == pytest.approx(1 / pred["wafer_s_per_token"])
    assert pred["measured_s_per_token"] == pytest.approx(out["decode_s"] / 5)
    args = ["--model_dir", root / "target", "--prompt", "hi", "--max_tokens", 6]
    res = _run(*args, "--temperature", 0, "--repetition-penalty", 1.8, "--json")
    s = SamplingParams(max_tokens=6, temperature=0.0, repetition_penalty=1.8)
    ref = PlainDecoder(target.config, target.params, max_context=128).generate(list(b"hi"), s)
    assert json.loads(res.output.strip().splitlines()[-1])["token_ids"] == ref.tokens


@pytest.mark.parametrize("speculative", [False, True])
def test_generate_logprobs_json_and_terminal(model_dir, speculative):
    """--logprobs N: each token's raw logprob and N alternatives, equal to one forward's
    log_softmax (pipelined, and speculative through the serving engine's rounds); the
    terminal shows the mean logprob and perplexity."""
    root, target = model_dir
    extra = []
    if speculative:
        cfg = json.dumps({"model": str(root / "draft"), "num_speculative_tokens": 2})
        extra = ["--speculative-config", cfg]
    args = ["--model_dir", root / "target", "--prompt-ids", "5,6,7", "--max_tokens", 5]
    args += ["--seed", 1, "--logprobs", 2, *extra]
    res = _run(*args, "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output.strip().splitlines()[-1])
    ref = np_logprobs(target, [5, 6, 7], out["token_ids"])
    lps = out["logprobs"]
    assert [x["token_id"] for x in lps] == out["token_ids"]
    got = [x["logprob"] for x in lps]
    assert got == pytest.approx(ref[range(5), out["token_ids"]].tolist(), abs=2e-5)
    assert [[t for t, _ in x["top"]] for x in lps] == np.argsort(-ref)[:, :2].tolist()
    res = _run(*args)
    assert res.exit_code == 0, res.output
    assert "mean logprob" in res.output and "perplexity" in res.output


@pytest.mark.slow
def test_generate_speculative_terminal(model_dir):
    root, target = model_dir
    cfg = json.dumps({"model": str(root / "draft"), "num_speculative_tokens": 3})
    res = _run(
        "--model-dir",
        root / "target",
        "--prompt-ids",
        "1,2,3",
        "--max_tokens",
        8,
        "--temperature",
        0,
        "--speculative-config",
        cfg,
    )
    assert res.exit_code == 0, res.output
    assert "acceptance rate" in res.output and "tokens/s" in res.output


@pytest.mark.parametrize(
    "args, words",
    [
        (["--max_tokens", 0], "max-tokens"),
        (["--temperature", -1], "temperature"),
        (["--top_p", 0], "top-p"),
        (["--top_p", 1.5], "top-p"),
        (["--logprobs", 21], "--logprobs must be an integer in [0, 20]"),
        (["--presence-penalty", 3], "--presence-penalty must be a finite number in [-2, 2]"),
        (["--repetition-penalty", 0], "--repetition-penalty must be a finite number > 0"),
        (["--prompt-ids", ",".join(["1"] * 130)], "exceeds the context"),
        (["--prompt-ids", "1,999"], "outside the vocabulary"),
        (["--prompt-ids", "1,,2"], "comma-separated integers"),  # a typo, not a 2-id prompt
        (["--prompt-ids", "1,2,"], "comma-separated integers"),
    ],
)
def test_generate_bad_input_exits_2(model_dir, args, words):
    root, _ = model_dir
    base = ["--model_dir", root / "target"]
    if not any(str(a).startswith("--prompt") for a in args):
        base += ["--prompt", "x"]
    res = _run(*base, *args)
    assert res.exit_code == 2 and words in res.output, res.output


def test_generate_bad_checkpoints_exit_2(model_dir, tmp_path):
    root, _ = model_dir
    res = _run("--model_dir", tmp_path / "nope", "--prompt", "x")
    assert res.exit_code == 2 and "does not exist" in res.output
    res = _run("--model_dir", root / "small_vocab", "--prompt", "x")
    assert res.exit_code == 2 and "byte-level fallback" in res.output
    res = _run(
        "--model_dir", root / "small_vocab", "--prompt-ids", "1,2", "--max_tokens", 2, "--json"
    )
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["text"] == ""
    cfg = json.dumps({"model": str(root / "small_vocab"), "num_speculative_tokens": 2})
    res = _run("--model_dir", root / "target", "--prompt-ids", "1,2", "--speculative-config", cfg)
    assert res.exit_code == 2 and "mismatch" in res.output


def test_generate_and_serve_accept_the_same_speculative_file(model_dir, tmp_path):
    """One YAML file for --speculative-config: `generate` decodes with its draft and gamma
    (greedy speculative output equals the target's plain greedy output), and `serve` builds
    its engines from it (the real model's SpeculativeEngine, the mock's drafted/accepted)."""
    from wse_cli.commands import infer_serve
    from wse_inference.speculative.config import SpeculativeConfig, parse_speculative_config
    from wse_inference.speculative.engine import SpeculativeEngine

    root, target = model_dir
    path = tmp_path / "speculative.yaml"
    path.write_text(f"model: {root / 'draft'}\nnum_speculative_tokens: 2\n")
    res = _run("--model_dir", root / "target", "--prompt-ids", "5,6,7", "--max_tokens", 6,
               "--temperature", 0, "--speculative-config", path, "--json")  # fmt: skip
    assert res.exit_code == 0, res.output
    out = json.loads(res.output.strip().splitlines()[-1])
    ref = PlainDecoder(target.config, target.params, max_context=128).generate(
        [5, 6, 7], SamplingParams(max_tokens=6, temperature=0.0)
    )
    assert out["token_ids"] == ref.tokens and "gamma 2" in out["engine"]
    spec = parse_speculative_config(str(path))
    assert spec == SpeculativeConfig(model=str(root / "draft"), num_speculative_tokens=2)
    assert parse_speculative_config(json.dumps({"model": str(root / "draft"),
                                                "num_speculative_tokens": 2})) == spec  # fmt: skip
    wse2 = preset("wse2")
    engine = infer_serve._real_engine(str(root / "target"), spec, 2, wse2)
    assert isinstance(engine, SpeculativeEngine) and engine.gamma == 2
    assert engine.spec is wse2 and engine.report().wafer == "wse2"  # the wafer it was given
    assert engine.draft.config.n_layers == 1 and engine.max_slots == 2
    mock = infer_serve._mock_engine(spec, 2, 64, 0.0)
    assert (mock.spec_tokens, mock.spec_accepted) == (2, 2)


@pytest.mark.parametrize(
    "text, words",
    [
        ('{"num_speculative_tokens": 2}', 'needs {"model"'),
        ('{"model": "m", "num_speculative_tokens": 0}', "integer in [1, 64]"),
        ('{"model": "m", "num_speculative_tokens": 1000000000000}', "integer in [1, 64]"),
        ('{"model": "m", "draft": 1}', "unknown keys ['draft']"),
        ("[1, 2]", "must be an object"),
    ],
)
def test_generate_bad_speculative_config_exits_2(model_dir, text, words):
    root, _ = model_dir
    res = _run("--model_dir", root / "target", "--prompt-ids", "1,2", "--speculative-config", text)
    assert res.exit_code == 2 and words in res.output, res.output


def test_an_unreadable_tokenizer_is_refused_before_the_weights(model_dir, tmp_path):
    """A garbage tokenizer.json: one line, exit 2, from a check that imports no JAX (it ran
    after the weights loaded, ~5 s, before)."""
    import shutil

    from wse_core.testing import refused_without_jax

    root, _ = model_dir
    bad = tmp_path / "bad"
    shutil.copytree(root / "draft", bad)
    (bad / "tokenizer.json").write_text('{"model": {"vocab": {1: 2')
    res = _run("--model_dir", bad, "--prompt", "x")
    assert (
        res.exit_code == 2
        and "is not a readable tokenizer file" in res.output
        and "tokenizer.json" in res.output
    )
    got = refused_without_jax(
        "wse_inference.model_dir", f"check_tokenizer_file({str(bad)!r})", "ModelLoadError"
    )
    assert got == ["refused", "False"], got


def _spec(draft) -> str:
    return json.dumps({"model": str(draft), "num_speculative_tokens": 2})


# (command, whose weights are bad): generate and serve, the target's or the draft's
NON_FINITE_CASES = {
    "generate": lambda bad, good: ["infer", "generate", "--model-dir", bad, "--prompt", "x"],
    "generate-draft": lambda bad, good: [
        "infer",
        "generate",
        "--model-dir",
        good,
        "--prompt",
        "x",
        "--speculative-config",
        _spec(bad),
    ],  # fmt: skip
    "serve": lambda bad, good: ["infer", "serve", "--model-dir", bad, "--port", "0"],
    "serve-draft": lambda bad, good: [
        "infer",
        "serve",
        "--model-dir",
        good,
        "--port",
        "0",
        "--speculative-config",
        _spec(bad),
    ],  # fmt: skip
}


@pytest.mark.parametrize(
    ("bad", "case"),
    [(float("nan"), "generate"), (float("inf"), "generate")]
    + [(float("nan"), c) for c in ("generate-draft", "serve", "serve-draft")],
)
def test_non_finite_weights_are_refused_by_name_before_jax(model_dir, tmp_path, bad, case):
    """A model.safetensors with NaN (or Inf) in one tensor (issue 43: empty output, rc 0; then
    refused after JAX loaded the weights, 4.8 s), the target's or the speculative draft's,
    in `infer generate` or `infer serve`: one line naming the tensor and the count, exit 2,
    no JAX imported, nothing written."""
    import shutil
    import subprocess
    import sys

    from safetensors.numpy import load_file, save_file
    from wse_cli.testing import clean_env

    root, _ = model_dir
    bad_dir = tmp_path / "bad"
    shutil.copytree(root / "draft", bad_dir)
    (st,) = bad_dir.glob("*.safetensors")
    tensors = load_file(st)
    name = sorted(tensors)[len(tensors) // 2]
    tensors[name].flat[::3] = bad
    save_file(tensors, st)
    count = len(tensors[name].flat[::3])
    before = sorted(tmp_path.rglob("*"))
    args = NON_FINITE_CASES[case](str(bad_dir), str(root / "target"))
    r = subprocess.run([sys.executable, "-c", NO_JAX_PROBE, *args], capture_output=True,
                       text=True, timeout=120, cwd=tmp_path, env=clean_env())  # fmt: skip
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and r.stdout == "", r.stdout + r.stderr
    assert lines[0].startswith(f"Error: cannot load the model in {str(bad_dir)!r}"), r.stderr
    assert f"tensor {name!r}" in lines[0] and f"holds {count:,} NaN or infinite" in lines[0]
    assert lines[1:] == ["jax imported: False"], r.stderr
    assert sorted(tmp_path.rglob("*")) == before
