"""`wse infer serve` and `wse infer bench`: user errors, a bench run, a served process."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys

import httpx
import pytest
import typer
from typer.testing import CliRunner
from wse_cli.app import app

pytestmark = pytest.mark.timeout(60)
runner = CliRunner()


def test_infer_group_lists_serve_and_bench():
    r = runner.invoke(app, ["infer", "--help"])
    assert r.exit_code == 0 and "serve" in r.output and "bench" in r.output


@pytest.mark.parametrize(
    "args",
    [
        ["--model_dir", "/no/such/model"],
        ["--model_dir", "mock", "--speculative-config", "{not json"],
        ["--model_dir", "mock", "--speculative-config", "[1, 2]"],
        ["--model_dir", "mock", "--chat-template", "/no/such/template.jinja"],
        ["--model_dir", "mock", "--chat-template", "{% for m in messages %}{{ m.content }}"],
    ],
)
def test_serve_user_errors_exit_2(args):
    r = runner.invoke(app, ["infer", "serve", *args, "--port", "0"])
    assert r.exit_code == 2, r.output
    assert "Error:" in r.output


def test_serve_a_folder_that_holds_no_model_is_a_clear_error(tmp_path):
    (tmp_path / "notes.txt").write_text("not a checkpoint")
    r = runner.invoke(app, ["infer", "serve", "--model_dir", str(tmp_path), "--port", "0"])
    assert r.exit_code == 2, r.output
    assert "neither an HF-format directory" in r.output and "Traceback" not in r.output
    assert (tmp_path / "notes.txt").read_text() == "not a checkpoint"  # nothing touched


@pytest.mark.parametrize("suffix", ["", "/v1/"])  # hunt 62: OpenAI's base URL has /v1
def test_bench_against_a_mock_server_saves_json(tmp_path, suffix):
    from wse_inference.serve.testing import running_server

    out = tmp_path / "bench.json"
    with running_server(max_slots=4, step_delay_s=0.001) as s:
        r = runner.invoke(
            app,
            [
                "infer",
                "bench",
                "--url",
                s.http_url + suffix,
                "-n",
                "12",
                "-c",
                "4",
                "--max-tokens",
                "5",
                "--out",
                str(out),
            ],
        )
    assert r.exit_code == 0, r.output
    summary = json.loads(out.read_text())
    assert (summary["completed"], summary["failed"], summary["output_tokens"]) == (12, 0, 60)
    assert summary["ttft_s"]["p50"] <= summary["e2e_s"]["p50"]
    assert summary["output_tokens_per_s"] == pytest.approx(60 / summary["wall_s"])
    assert "TTFT" in r.output and "output tokens/s" in r.output


def test_bench_unreachable_server_exits_2(tmp_path):
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    r = runner.invoke(
        app,
        [
            "infer",
            "bench",
            "--url",
            f"http://127.0.0.1:{port}",
            "--out",
            str(tmp_path / "x.json"),
            "--timeout-s",
            "2",
        ],
    )
    assert r.exit_code == 2 and "cannot reach" in r.output


def test_wse_infer_serve_mock_process_answers_and_stops_on_sigterm():
    cmd = [
        sys.executable,
        "-c",
        "from wse_cli.app import main; main()",
        "infer",
        "serve",
        "--model_dir",
        "mock",
        "--port",
        "0",
        "--grpc-port",
        "0",
        "--mock-step-delay-ms",
        "1",
        "--speculative-config",
        '{"num_speculative_tokens": 3}',
        "--chat-template",
        "{% for m in messages %}<{{ m.content }}>{% endfor %}",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = proc.stdout.readline()
        url = re.search(r"http://[\d.]+:\d+", line).group(0)
        assert "gRPC 127.0.0.1:" in line
        body = {"model": "mock", "prompt": "AB", "max_tokens": 8}
        r = httpx.post(url + "/v1/completions", json=body, timeout=10)
        assert r.json()["choices"][0]["text"] == "CDEFGHIJ"
        body = {"model": "mock", "messages": [{"role": "user", "content": "AB"}], "max_tokens": 3}
        r = httpx.post(url + "/v1/chat/completions", json=body, timeout=10)
        assert r.json()["choices"][0]["message"]["content"] == "?@A"  # after "<AB>"
        assert r.json()["usage"]["prompt_tokens"] == 4
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_wse_infer_serve_a_model_folder_with_the_loader(tmp_path):
    """`serve --model_dir DIR` with the real loader: greedy output equals plain decoding."""
    import importlib.util

    if importlib.util.find_spec("wse_inference.load") is None:
        pytest.skip("wse_inference.load (load_engine) is not installed yet")
    import wse_models
    from wse_inference.decoding import PlainDecoder
    from wse_inference.engine import SamplingParams
    from wse_inference.testing import tiny_model

    model = tiny_model()
    wse_models.save_params(model.config, model.params, tmp_path / "model")
    plain = PlainDecoder(model.config, model.params, tokenizer=model.tokenizer, max_context=64)
    want = plain.generate(
        model.tokenizer.encode("wafer"), SamplingParams(max_tokens=5, temperature=0.0)
    )
    cmd = [
        sys.executable,
        "-c",
        "from wse_cli.app import main; main()",
        "infer",
        "serve",
        "--model_dir",
        str(tmp_path / "model"),
        "--port",
        "0",
        "--max-num-seqs",
        "2",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = ""
        while "serving" not in line:  # after the warm-up compile
            line = proc.stdout.readline()
            assert line or proc.poll() is None, "server exited before announcing"
        url = re.search(r"http://[\d.]+:\d+", line).group(0)
        name = httpx.get(url + "/v1/models", timeout=10).json()["data"][0]["id"]
        body = {
            "model": name,
            "prompt": "wafer",
            "max_tokens": 5,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        with httpx.stream("POST", url + "/v1/completions", json=body, timeout=120) as r:
            chunks = [json.loads(x[6:]) for x in r.iter_lines() if x.startswith("data: {")]
        assert chunks[-1]["usage"]["completion_tokens"] == len(want.tokens) == 5
        text = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
        if "\ufffd" not in want.text:
            assert text == want.text
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def test_bench_prompt_of_bytes_that_are_not_utf8_is_one_line(tmp_path):
    # the shell's bytes b"a\xff" arrive as "a\udcff" (surrogateescape): was a traceback
    out = tmp_path / "x.json"
    args = ["infer", "bench", "--url", "http://127.0.0.1:9", "--out", str(out)]
    r = runner.invoke(app, [*args, "--prompt", "a\udcff"])
    assert r.exit_code == 2 and "--prompt holds bytes that are not UTF-8" in r.output
    assert "Traceback" not in r.output and not out.exists()


def test_serve_starts_the_attention_compile_before_the_weights_load(tiny_model_dir, monkeypatch):
    """As `wse infer generate` does: the CPU attention's helper (`sdpa_cpu.compile_early`,
    the forward only, at the model's head dim and load_model's float32) is started before
    `load_engine`, so that numba compiles while the weights load."""
    import wse_inference.load
    from wse_cli.commands import infer_serve
    from wse_inference.model_dir import read_config
    from wse_models import sdpa_cpu

    calls = []
    monkeypatch.setattr(
        sdpa_cpu,
        "compile_early",
        lambda hd, dtype, *, backward: calls.append((hd, dtype, backward)),
    )
    monkeypatch.setattr(wse_inference.load, "load_engine", lambda *a, **k: calls.append("load"))
    infer_serve._real_engine(str(tiny_model_dir), None, 2, None)
    assert calls == [(read_config(tiny_model_dir).hd, "float32", False), "load"]


def _hf_tokenizer_folder(folder, template: str):
    """tokenizer.json (a byte-level BPE) and a tokenizer_config.json holding `template`."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=280, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(["hello world"] * 5, trainer)
    folder.mkdir()
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": template}))
    return folder


@pytest.mark.parametrize(
    ("where", "template", "message"),
    [
        ("option", "{% include 'x.jinja' %}{{ messages }}",
         "--chat-template cannot render a sample chat (one user message, 'Hi'): TypeError: "
         "no loader for this environment specified"),
        ("option", "{{ messages[0].content ** 2 }}",
         "--chat-template cannot render a sample chat (one user message, 'Hi'): TypeError"),
        ("folder", "{% for m in messages %}{{ m.content }}",
         "tokenizer_config.json' cannot render a sample chat (one user message, 'Hi'): "
         "Unexpected end of template"),
        ("option", "{% for m in messages %}{{ m.role }}: {{ m.content }}{% endfor %}", None),
        ("folder", "{% for m in messages %}{{ m.role }}: {{ m.content }}{% endfor %}", None),
        ("folder", None, None),  # no template: the plain lines, nothing rendered at start
    ],
)  # fmt: skip
def test_serve_test_renders_its_chat_template_at_startup(tmp_path, monkeypatch, where, template,
                                                         message):  # fmt: skip
    """Hunt 62: a template that compiles but cannot render (the option's, or the model
    folder's) started the server, then every chat got a 400 blaming the client."""
    import wse_inference.serve.app
    from wse_cli.commands import infer_serve
    from wse_cli.testing import refused_in_one_line
    from wse_inference.model_dir import HFTokenizer

    served = []
    monkeypatch.setattr(
        wse_inference.serve.app, "serve", lambda engine, config, **_: served.append(config)
    )
    args = ["infer", "serve", "--model-dir", "mock", "--port", "0"]
    if where == "option":
        args += ["--chat-template", template]
    else:  # the model folder's: its tokenizer, as the loaded engine holds it
        folder = _hf_tokenizer_folder(tmp_path / "model", template or "")
        tokenizer = HFTokenizer(folder / "tokenizer.json")
        assert tokenizer.chat_template == (template or None)
        engine = type("Engine", (), {"tokenizer": tokenizer})()
        monkeypatch.setattr(infer_serve, "_real_engine", lambda *a, **k: engine)
        args[3] = str(folder)
    root = typer.main.get_command(app)
    if message is None:  # a template that renders, or none: the server is started
        r = runner.invoke(app, args)
        assert r.exit_code == 0 and len(served) == 1, r.output
        return
    line = refused_in_one_line(root, args, message)
    assert not served and (where == "option" or str(folder) in line), line
