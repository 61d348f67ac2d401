"""Hunt 75, `wse infer serve`: vLLM's --max-model-len, and IPv6 --host."""

from __future__ import annotations

import re
import signal
import subprocess
import sys

import httpx
import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke
from wse_inference.serve.testing import ipv6_loopback

pytestmark = pytest.mark.timeout(120)
ROOT = typer.main.get_command(app)


def _served(*args: str) -> tuple[subprocess.Popen, str]:
    cmd = [sys.executable, "-c", "from wse_cli.app import main; main()", "infer", "serve",
           "--model-dir", "mock", "--port", "0", "--no-warmup", *args]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    line = proc.stdout.readline()
    found = re.search(r"http://(\[[\da-f:]+\]|[\d.]+):\d+", line)
    assert found, line + proc.stdout.read() if proc.poll() is not None else line
    return proc, found.group(0)


def _stop(proc: subprocess.Popen) -> int:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_max_model_len_sets_the_context_served_and_reported():
    proc, url = _served("--max-model-len", "40")
    try:
        models = httpx.get(url + "/v1/models", timeout=10).json()["data"]
        assert models[0]["max_model_len"] == 40
        body = {"model": "mock", "prompt": "x" * 39, "max_tokens": 2}  # 41 > 40 tokens
        r = httpx.post(url + "/v1/completions", json=body, timeout=10)
        assert r.status_code == 400, r.text
    finally:
        assert _stop(proc) == 0


def test_max_model_len_past_the_models_context_is_one_line(tiny_model_dir):
    from wse_inference.model_dir import read_config

    top = read_config(tiny_model_dir).max_seq_len
    args = ["infer", "serve", "--model-dir", tiny_model_dir, "--port", "0", "--no-warmup"]
    code, out = invoke(ROOT, [*args, "--max-model-len", top + 1])
    assert code == 2, out
    lines = out.strip().splitlines()
    assert len(lines) == 1 and "--max-model-len" in lines[0] and f"at most {top:,}" in lines[0]


def test_max_model_len_reaches_the_loader_and_the_memory_check(tiny_model_dir, monkeypatch):
    import wse_inference.load
    from wse_cli.commands import infer_serve
    from wse_models import sdpa_cpu

    got = {}
    monkeypatch.setattr(sdpa_cpu, "compile_early", lambda *a, **k: None)
    monkeypatch.setattr(wse_inference.load, "load_engine", lambda *a, **k: got.update(k))
    infer_serve._real_engine(str(tiny_model_dir), None, 2, None, 64)
    assert got["max_context"] == 64


def test_the_memory_refusal_names_the_options_that_set_slots_and_context(
    tiny_model_dir, monkeypatch
):
    """Room for the weights (429,408 B) but not for them and the KV cache (558,336 B)."""
    import wse_core.host.memory

    monkeypatch.setattr(wse_core.host.memory, "available_bytes", lambda *a, **k: 500_000)
    args = ["infer", "serve", "--model-dir", tiny_model_dir, "--port", "0", "--no-warmup"]
    code, out = invoke(ROOT, args)
    assert code == 2, out
    assert "--max-num-seqs" in out and "--max-model-len" in out, out
    assert len(out.strip().splitlines()) == 1
    # the context it suggests, given as --max-model-len, passes the check
    import wse_inference.load
    from wse_cli.commands import infer_serve
    from wse_models import sdpa_cpu

    context = int(re.search(r"context (\d+) with", out).group(1))
    monkeypatch.setattr(sdpa_cpu, "compile_early", lambda *a, **k: None)
    monkeypatch.setattr(wse_inference.load, "load_engine", lambda *a, **k: k["max_context"])
    assert infer_serve._real_engine(str(tiny_model_dir), None, 2, None, context) == context


@pytest.mark.skipif(not ipv6_loopback(), reason="this machine cannot bind ::1")
def test_an_ipv6_host_is_served_with_its_address_bracketed():
    proc, url = _served("--host", "::1", "--grpc-port", "0")
    try:
        assert url.startswith("http://[::1]:")  # RFC 3986
        assert httpx.get(url + "/health", timeout=10).status_code == 200
    finally:
        assert _stop(proc) == 0


def test_serve_says_what_its_wafer_predicts_after_its_address(tiny_model_dir):
    """`--preset` names the wafer the tokens are predicted on; serve now prints that figure
    (hunt 75: nothing showed it), after its address. Oracle: `wse infer generate --json`'s
    predicted token for the same folder, wafer and stages, which holds a cache of 1 token
    where serve's line holds half the context: no faster, and within 5% on this tiny model."""
    import json

    cmd = [sys.executable, "-c", "from wse_cli.app import main; main()", "infer", "serve",
           "--model-dir", str(tiny_model_dir), "--port", "0", "--no-warmup",
           "--preset", "wse2"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        first, notes = "", ""
        while not re.search(r"http://[\d.]+:\d+", first):  # after any notes
            notes, first = notes + first, proc.stdout.readline()
            assert first, "the server stopped before its address"
        second = proc.stdout.readline()
    finally:
        _stop(proc)
    got = re.search(r"predicted on wse2: ([\d,.]+) us a decode token of one user with", second)
    assert got, second
    stages = re.search(r"(\d+) pipeline stages", notes)
    code, out = invoke(ROOT, ["infer", "generate", "--model-dir", tiny_model_dir, "--preset",
                              "wse2", "--prompt-ids", "1", "--max-tokens", "1", "--stages",
                              stages.group(1) if stages else "1", "--json"])  # fmt: skip
    assert code == 0, out
    want = json.loads(out)["predicted"]["wafer_s_per_token"] * 1e6
    said = float(got.group(1).replace(",", ""))
    assert want <= said <= 1.05 * want
