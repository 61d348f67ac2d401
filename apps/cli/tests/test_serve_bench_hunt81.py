"""Hunt 81 (serve81), hole H: vLLM's flags a vLLM user types. Before: `wse infer serve
--api-key k` was "No such option: --api-key" (no way to require a key at all), and `wse infer
bench --host/--port`, `--label` and `--metadata` were "No such option" (`--url` was required).

Oracles: vLLM's documented behaviour, written out here from its source: `vllm serve
--api-key` (one or more keys; else VLLM_API_KEY, here WSE_API_KEY by this stack's
convention) makes a guarded route need `Authorization: Bearer <key>`; `vllm bench serve`
builds its URL as `http://{join_host_port(host, port)}` (127.0.0.1:8000 by default) when no
--base-url is given, names its file `{label or backend}-{rate}qps...` and writes `label` and
each `--metadata KEY=VALUE` (split at the first "=", both sides stripped) into its JSON
(vllm/benchmarks/serve.py: main_async, compute_result_filename); the saved file read back.
"""

from __future__ import annotations

import json

import httpx
import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke, refused_in_one_line, serve_configs
from wse_inference.mock import MockEngine
from wse_inference.serve.app import ServeConfig, Server

pytestmark = pytest.mark.timeout(120)
ROOT = typer.main.get_command(app)
MOCK = ["infer", "serve", "--model-dir", "mock", "--port", "0", "--no-warmup"]
ENV = {"OPENAI_API_KEY": None, "WSE_API_KEY": None, "COLUMNS": "200"}


# -- serve --api-key ----------------------------------------------------------------------------
@pytest.fixture
def served(monkeypatch):
    return serve_configs(monkeypatch)


@pytest.mark.parametrize(
    "args, env, keys",
    [
        ([], {}, ()),
        (["--api-key", "k1"], {}, ("k1",)),
        (["--api-key", "k1", "--api-key", "k2"], {}, ("k1", "k2")),  # vLLM's list of keys
        ([], {"WSE_API_KEY": "k3"}, ("k3",)),  # vLLM's VLLM_API_KEY, this stack's spelling
        (["--api-key", "k1"], {"WSE_API_KEY": "k3"}, ("k1",)),  # the option wins, as vLLM's
        ([], {"WSE_API_KEY": ""}, ()),  # an empty variable is none, as vLLM's `if key`
    ],
)
def test_serve_takes_vllms_api_key(served, args, env, keys):
    code, out = invoke(ROOT, [*MOCK, *args], {**ENV, **env})
    assert code == 0, out
    assert served[-1].api_keys == keys
    assert all(k not in out for k in keys)  # never printed


@pytest.mark.parametrize(
    "key, words",
    [("", "--api-key (or WSE_API_KEY) is empty"),
     ("sk secret", "holds a character other than ASCII letters, digits and punctuation "
                   "(character 2)"),
     ("sk-é", "(character 3)")],
)  # fmt: skip
def test_a_key_no_client_can_send_is_refused_in_one_line_unshown(served, key, words):
    line = refused_in_one_line(ROOT, [*MOCK, "--api-key", key], words, ENV)
    assert not key or key not in line
    assert served == []  # nothing served


# -- bench against a keyed server: --host/--port, --api-key, --label, --metadata ---------------
@pytest.fixture(scope="module")
def keyed():
    config = ServeConfig(port=0, warmup=False, drain_s=2.0, api_keys=("k1",))
    server = Server(MockEngine(), config).start()
    try:
        yield server
    finally:
        server.close()


def _vllm_metadata(pairs: list[str]) -> dict[str, str]:
    """vLLM's --metadata: `kvstring = item.split("=", 1)`, each side stripped."""
    return dict((k.strip(), v.strip()) for k, v in (p.split("=", 1) for p in pairs))


def test_the_vllm_users_bench_command_line_runs_and_saves_label_and_metadata(keyed, tmp_path):
    host, port = keyed.http_url.removeprefix("http://").rsplit(":", 1)
    pairs = ["version=0.3.3", "tp=1", " note = a=b "]
    args = ["infer", "bench", "--host", host, "--port", port, "--api-key", "k1", "-n", "2",
            "--max-tokens", "2", "--label", "wafer", "--metadata", *pairs, "--save-result",
            "--result-dir", tmp_path]  # fmt: skip
    code, out = invoke(ROOT, args, ENV)
    assert code == 0, out
    (saved,) = tmp_path.iterdir()
    assert saved.name.startswith("wafer-inf")  # vLLM's `label or args.backend` prefix
    d = json.loads(saved.read_text())
    assert d["completed"] == 2 and d["url"] == keyed.http_url and d["label"] == "wafer"
    for key, value in _vllm_metadata(pairs).items():
        assert d[key] == value  # note: "a=b", split at the first "=" only
    assert "k1" not in saved.read_text() and "k1" not in out


def test_without_label_the_file_is_named_by_the_backend_and_label_is_null(keyed, tmp_path):
    args = ["infer", "bench", "--url", keyed.http_url, "--api-key", "k1", "-n", "1",
            "--max-tokens", "1", "--save-result", "--result-dir", tmp_path]  # fmt: skip
    code, out = invoke(ROOT, args, ENV)
    assert code == 0, out
    (saved,) = tmp_path.iterdir()
    assert saved.name.startswith("openai-inf") and json.loads(saved.read_text())["label"] is None


def test_bench_without_the_key_says_to_give_one(keyed):
    args = ["infer", "bench", "--url", keyed.http_url, "-n", "1"]
    line = refused_in_one_line(ROOT, args, "answered 401 Unauthorized", ENV)
    assert "give --api-key or set OPENAI_API_KEY" in line


@pytest.mark.parametrize(
    "args, url",
    [([], "http://127.0.0.1:8000"),  # vLLM's defaults
     (["--host", "::1", "--port", "9"], "http://[::1]:9"),  # join_host_port brackets IPv6
     (["--port", "8123"], "http://127.0.0.1:8123"),
     (["--url", "http://h:1"], "http://h:1")],
)  # fmt: skip
def test_bench_builds_its_url_from_host_and_port_as_vllm(monkeypatch, args, url):
    import wse_inference.demo.load_test

    asked = []

    def unreachable(cfg):
        asked.append(cfg.url)
        raise httpx.ConnectError("no server here")

    monkeypatch.setattr(wse_inference.demo.load_test, "run_load_test", unreachable)
    refused_in_one_line(ROOT, ["infer", "bench", *args, "-n", "1"], f"cannot reach {url}", ENV)
    assert asked == [url]


@pytest.mark.parametrize(
    "args, message",
    [(["--url", "http://h:1", "--host", "a"], "--url and --host each say where the server is"),
     (["--url", "http://h:1", "--port", "9"], "--url and --port each say where the server is"),
     (["--host", "a/b"], "--host 'a/b' must be a host name or address"),
     (["--port", "0"], "--port must be an integer in [1, 65535], got 0"),
     (["--label", "a/b"], "--label 'a/b' is the saved file's name prefix"),
     (["--label", ""], "--label '' is the saved file's name prefix"),
     (["--metadata", "version"], "--metadata 'version' is not KEY=VALUE"),
     (["--metadata", "=1"], "--metadata '=1' is not KEY=VALUE"),
     (["--metadata", "a=1", "a=2"], "--metadata 'a' is given twice ('1' and '2')"),
     (["--metadata", "completed=9"], "--metadata 'completed' is a key the summary holds"),
     (["--metadata", "label=x"], "--metadata 'label' is a key the summary holds"),
     (["--metadata", "a=1", "stray"], "unexpected argument 'stray'"),
     (["x=1"], "unexpected argument 'x=1': bench takes options, and --goodput's KEY:ms or "
               "--metadata's KEY=VALUE pairs after them")],
)  # fmt: skip
def test_bad_bench_flags_are_refused_in_one_line_before_any_request(args, message):
    refused_in_one_line(ROOT, ["infer", "bench", *args, "-n", "1"], message, ENV)


def test_goodput_and_metadata_pairs_after_either_option_are_told_apart(monkeypatch):
    import wse_inference.demo.load_test

    seen = []

    def unreachable(cfg):
        seen.append(cfg.goodput_ms)
        raise httpx.ConnectError("no server here")

    monkeypatch.setattr(wse_inference.demo.load_test, "run_load_test", unreachable)
    args = ["infer", "bench", "--url", "http://h:1", "--goodput", "ttft:5", "--metadata", "a=1",
            "tpot:6", "b=2", "-n", "1"]  # fmt: skip
    refused_in_one_line(ROOT, args, "cannot reach http://h:1", ENV)
    assert seen == [{"ttft": 5.0, "tpot": 6.0}]
