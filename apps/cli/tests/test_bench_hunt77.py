"""Hunt 77: a vLLM user's `vllm bench serve` command lines against `wse infer bench`. Before:
`--goodput ttft:500 tpot:50` was "No such option: --goodput (Possible options: --out)";
`--request-rate inf` (vLLM's default) "must be a finite number"; `--percentile-metrics`,
`--metric-percentiles`, `--result-dir`, `--result-filename`, `--backend openai-chat`,
`--endpoint /v1/chat/completions`, `--temperature`, `--top-p`, `--top-k` and `--num-warmups`
were "No such option"; every run replaced ./wse_bench.json without a word; the JSON had no
`date`, `backend`, `endpoint_type`, `tokenizer_id`, `request_goodput`,
`max_output_tokens_per_s` nor `max_concurrent_requests`, and `request_rate` was null where
vLLM writes "inf".

Oracles: a server whose replies' times the test sets and which records each request (its
path and body: what vLLM's client sends, benchmarks/lib/endpoint_request_func.py), vLLM's
documented meaning of each option (vllm/benchmarks/serve.py: goodput's SLO test, the
--save-result file name, the chat stream's first chunk as TTFT), and the saved file read back.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import re
import threading
import time

import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke, refused_in_one_line

pytestmark = pytest.mark.timeout(60)
ROOT = typer.main.get_command(app)
ENV = {"OPENAI_API_KEY": None, "COLUMNS": "200"}
GAP_S = 0.05
SLOW_S = 0.2  # a chunk's gap where a figure is compared to an SLO: client jitter is far below
MODELS = b'{"object": "list", "data": [{"id": "org/m"}]}'
TEXT = [b'data: {"choices": [{"text": "a"}]}\n\n', GAP_S,
        b'data: {"choices": [{"text": "b"}]}\n\n', GAP_S,
        b'data: {"choices": [{"text": "c", "finish_reason": "length"}]}\n\n'
        b'data: {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3}}\n\n'
        b"data: [DONE]\n\n"]  # fmt: skip
SLOW = [piece if isinstance(piece, bytes) else SLOW_S for piece in TEXT]
# vLLM's server opens a chat stream with a role chunk of no content, here 2 gaps before text;
# with OpenAI's closing chunk, 4 chunks with a choice for 2 tokens
CHAT = [b'data: {"choices": [{"delta": {"role": "assistant", "content": ""}}]}\n\n', SLOW_S,
        b'data: {"choices": [{"delta": {"content": "a"}}]}\n\n', SLOW_S,
        b'data: {"choices": [{"delta": {"content": "b"}}]}\n\n'
        b'data: {"choices": [{"delta": {}, "finish_reason": "length"}]}\n\n'  # OpenAI's close
        b'data: {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}}\n\n'
        b"data: [DONE]\n\n"]  # fmt: skip


@contextlib.contextmanager
def recording_server(stream: list):
    """A server answering GET with MODELS and POST with `stream` (floats: pauses); yields
    (base URL, the (path, JSON body) of each POST)."""
    posts: list[tuple[str, dict]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200)
            self.send_header("content-length", str(len(MODELS)))
            self.end_headers()
            self.wfile.write(MODELS)

        def do_POST(self) -> None:  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            posts.append((self.path, body))
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.end_headers()
            for piece in stream:
                if isinstance(piece, float):
                    time.sleep(piece)
                else:
                    self.wfile.write(piece)
                    self.wfile.flush()

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", posts
    finally:
        srv.shutdown()
        srv.server_close()


def _bench(url: str, *args) -> tuple[int, str]:
    return invoke(ROOT, ["infer", "bench", "--url", url, *map(str, args)], ENV)


def _saved(url: str, tmp_path, *args) -> tuple[dict, str]:
    out = tmp_path / "b.json"
    code, text = _bench(url, "-n", "4", "-c", "4", "--max-tokens", "3", *args, "--out", out)
    assert code == 0, text
    return json.loads(out.read_text()), text


# --- 1: goodput -----------------------------------------------------------------------
def test_the_testers_goodput_command_line_runs(tmp_path):
    with recording_server(SLOW) as (url, _):
        d, text = _saved(url, tmp_path, "--goodput", "ttft:500", "tpot:50")
    # each request: TTFT a few ms, TPOT (2 gaps of 200 ms) / 2 = 200 ms: over 50 ms
    assert d["std_tpot_ms"] < 50 < d["mean_tpot_ms"] - 50 and d["p99_ttft_ms"] < 500
    assert d["good_requests"] == 0 and d["request_goodput"] == 0.0  # every TPOT over 50 ms
    assert "request goodput" in text and "0 of 4 within ttft 500, tpot 50 ms" in text


def test_goodput_counts_the_requests_within_every_slo(tmp_path):
    with recording_server(TEXT) as (url, _):
        d, _ = _saved(url, tmp_path, "--goodput", "ttft:5000", "--goodput", "tpot:1000",
                      "e2el:5000")  # fmt: skip
    # vLLM's test: every SLO / 1000 >= its figure; every request is (its e2e < 1 s)
    assert d["p99_e2el_ms"] < 1000 and d["good_requests"] == 4
    assert d["request_goodput"] == 4 / d["duration"]
    assert d["goodput_slos"] == {"ttft_ms": 5000.0, "tpot_ms": 1000.0, "e2el_ms": 5000.0}


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--goodput", "itl:5"], "--goodput 'itl:5' is not KEY:ms; e.g. --goodput ttft:500"),
     (["--goodput", "ttft=5"], "--goodput 'ttft=5' is not KEY:ms"),
     (["--goodput", "ttft:-1"], "--goodput 'ttft:-1': an SLO is a finite number of ms >= 0"),
     (["--goodput", "ttft:nan"], "an SLO is a finite number of ms >= 0"),
     (["--goodput", "ttft:5", "ttft:6"], "--goodput ttft is given twice (5 and 6 ms)"),
     (["stray"], "unexpected argument 'stray': bench takes options, and --goodput's")],
)  # fmt: skip
def test_a_bad_goodput_is_refused_in_one_line(args, message):
    refused_in_one_line(ROOT, ["infer", "bench", "--url", "http://127.0.0.1:9", *args], message)


# --- 2: --request-rate inf --------------------------------------------------------------
def test_request_rate_inf_sends_all_at_once_and_is_saved_as_vllm_writes_it(tmp_path):
    with recording_server(TEXT) as (url, posts):
        d, text = _saved(url, tmp_path, "--request-rate", "inf")
        left_out, _ = _saved(url, tmp_path)
    assert d["request_rate"] == left_out["request_rate"] == "inf"  # was null
    assert d["completed"] == 4 and d["duration"] < 2 * 2 * GAP_S + 0.5  # all at once
    assert "inf (all at once)" in text


def test_request_rate_is_refused_with_inf_named():
    refused_in_one_line(ROOT, ["infer", "bench", "--url", "http://127.0.0.1:9", "--request-rate",
                               "0"], "Error: --request-rate must be inf (all at once) or a "
                        "finite number in (0, 1000000.0] (requests/s), got 0")  # fmt: skip
    refused_in_one_line(ROOT, ["infer", "bench", "--url", "http://127.0.0.1:9", "--request-rate",
                               "inf", "--burstiness", "0.5"],
                        "of --request-rate; give a finite --request-rate")  # fmt: skip


# --- 3: vLLM's reporting options and the chat endpoint ------------------------------------
def test_percentile_options_choose_vllms_keys(tmp_path):
    with recording_server(TEXT) as (url, _):
        d, text = _saved(url, tmp_path, "--percentile-metrics", "ttft,tpot,itl,e2el",
                         "--metric-percentiles", "50,90,99")  # fmt: skip
        some, _ = _saved(url, tmp_path, "--percentile-metrics", "e2el,ttft",
                         "--metric-percentiles", "99.9")  # fmt: skip
    for name in ("ttft", "tpot", "itl", "e2el"):
        assert d[f"p50_{name}_ms"] == d[f"median_{name}_ms"], name  # the same percentile
        assert d[f"p90_{name}_ms"] == pytest.approx(d[_ours(name)]["p90"] * 1000, rel=1e-12)
    assert "TTFT ms (mean / median / p50 / p90 / p99)" in text
    assert {k for k in some if k.startswith("p99")} == {"p99.9_ttft_ms", "p99.9_e2el_ms"}
    assert not [k for k in some if k.endswith(("_tpot_ms", "_itl_ms"))]


def _ours(name: str) -> str:
    return {"ttft": "ttft_s", "tpot": "tpot_s", "itl": "itl_s", "e2el": "e2e_s"}[name]


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--percentile-metrics", "ttft,foo"], "--percentile-metrics names 'foo'; the metrics "
      "are ttft,tpot,itl,e2el"),
     (["--metric-percentiles", "50,101"], "'101' is not a percentile; give numbers in [0, 100]"),
     (["--metric-percentiles", "50,,99"], "--metric-percentiles '50,,99' has an empty item"),
     (["--backend", "tgi"], "--backend must be openai or vllm (POST /v1/completions) or "
      "openai-chat"),
     (["--endpoint", "/generate"], "--endpoint must be /v1/completions or /v1/chat/completions"),
     (["--backend", "openai", "--endpoint", "/v1/chat/completions"], "--backend openai posts "
      "to /v1/completions, not --endpoint /v1/chat/completions; give --backend openai-chat"),
     (["--save-detailed"], "--save-detailed: vLLM's per-request lists are not kept"),
     (["--out", "a.json", "--result-dir", "r"], "--out and --result-dir / --result-filename "
      "each say where the summary goes")],
)  # fmt: skip
def test_a_bad_reporting_or_endpoint_option_is_refused_in_one_line(args, message, tmp_path):
    refused_in_one_line(ROOT, ["infer", "bench", "--url", "http://127.0.0.1:9", *args], message)


@pytest.mark.parametrize("args", [["--backend", "openai-chat"],
                                  ["--endpoint", "/v1/chat/completions"],
                                  ["--backend", "openai-chat", "--endpoint",
                                   "/v1/chat/completions"]])  # fmt: skip
def test_the_chat_endpoint_is_loaded_as_vllm_loads_it(args, tmp_path):
    with recording_server(CHAT) as (url, posts):
        out = tmp_path / "c.json"
        code, text = _bench(url, "-n", "2", "-c", "2", "--max-tokens", "2", *args, "--out", out)
    assert code == 0, text
    d = json.loads(out.read_text())
    assert {p for p, _ in posts} == {"/v1/chat/completions"}
    body = posts[0][1]
    assert body["messages"] == [{"role": "user", "content": [
        {"type": "text", "text": "The wafer-scale engine"}]}]  # fmt: skip
    assert body["max_completion_tokens"] == 2 and "prompt" not in body
    # vLLM's chat client: the role chunk is the first token's time; 2 gaps of 200 ms after it
    assert d["completed"] == 2 and d["output_tokens"] == 4 and d["itl_s"]["n"] == 2 * 3
    assert d["mean_ttft_ms"] < SLOW_S * 1000 / 2 < d["median_itl_ms"]
    assert d["mean_tpot_ms"] > 2 * SLOW_S * 1000 * 0.75  # (e2e - ttft) / (2 - 1)
    assert (d["backend"], d["endpoint_type"], d["endpoint"]) == (
        "openai-chat", "openai-chat", "/v1/chat/completions")  # fmt: skip


def test_a_chats_role_chunk_is_no_token_where_no_usage_counts_them(tmp_path):
    usage = b'data: {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}}\n\n'
    no_usage = [p.replace(usage, b"") if isinstance(p, bytes) else p for p in CHAT]
    assert no_usage != CHAT
    with recording_server(no_usage) as (url, _):
        d, _ = _saved(url, tmp_path, "--backend", "openai-chat")  # max_tokens 3
    assert d["completed"] == 4 and d["output_tokens"] == 4 * 2  # "a" and "b", not the role


# --- 4: saving only when asked ----------------------------------------------------------------
def test_nothing_is_saved_unless_asked(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with recording_server(TEXT) as (url, _):
        code, text = _bench(url, "-n", "1")
    assert code == 0 and list(tmp_path.iterdir()) == []  # was ./wse_bench.json, every run
    assert text.strip().splitlines()[-1].startswith("not saved: give --out FILE, or vLLM's")


def test_save_result_writes_vllms_file_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with recording_server(TEXT) as (url, _):
        code, text = _bench(url, "-n", "2", "-c", "2", "--save-result")
        assert code == 0, text
        code, _ = _bench(url, "-n", "1", "--result-dir", "r", "--result-filename", "x.json")
        assert code == 0
        code, _ = _bench(url, "-n", "1", "--request-rate", "50", "--result-dir", "rr")
    assert code == 0
    (saved,) = tmp_path.glob("*.json")
    d = json.loads(saved.read_text())
    # vLLM's f"{label}-{request_rate}qps-concurrency{c}-{model's last part}-{date}.json"
    assert saved.name == f"openai-infqps-concurrency2-m-{d['date']}.json"
    assert re.fullmatch(r"\d{8}-\d{6}", d["date"]) and text.strip().endswith(saved.name)
    assert json.loads((tmp_path / "r" / "x.json").read_text())["completed"] == 1
    (paced,) = (tmp_path / "rr").iterdir()
    assert paced.name.startswith("openai-50.0qps-concurrency8-m-")


def test_a_file_replaced_is_said(tmp_path):
    out = tmp_path / "b.json"
    out.write_text("{}")
    with recording_server(TEXT) as (url, _):
        code, text = _bench(url, "-n", "1", "--out", out)
    assert code == 0 and text.strip().endswith(f"saved {out} (it replaced the file there)")


# --- 5: vLLM's fields, sampling ---------------------------------------------------------------
def test_the_json_carries_vllms_fields(tmp_path):
    with recording_server(TEXT) as (url, _):
        d, text = _saved(url, tmp_path)
    assert (d["backend"], d["endpoint_type"], d["model_id"], d["tokenizer_id"]) == (
        "openai", "openai", "org/m", "org/m")  # fmt: skip
    # vLLM's per-second buckets: 4 requests sent at once, their 3 chunks each within 0.2 s
    assert d["duration"] < 0.9
    assert (d["max_output_tokens_per_s"], d["max_concurrent_requests"]) == (12.0, 4)
    for row in ("benchmark duration", "maximum request concurrency", "peak output tokens/s",
                "peak concurrent requests"):  # fmt: skip
        assert row in text, row


def test_sampling_flags_are_sent_only_when_given(tmp_path):
    with recording_server(TEXT) as (url, posts):
        _saved(url, tmp_path)
        plain = posts[-1][1]
        _saved(url, tmp_path, "--temperature", "0.7", "--top-p", "0.9", "--top-k", "5")
        given = posts[-1][1]
    assert plain["temperature"] == 0.0 and "top_p" not in plain and "top_k" not in plain
    assert (given["temperature"], given["top_p"], given["top_k"]) == (0.7, 0.9, 5)


# --- 6: warm-ups ---------------------------------------------------------------------------------
def test_warmups_are_sent_first_and_not_counted(tmp_path):
    with recording_server(TEXT) as (url, posts):
        d, text = _saved(url, tmp_path, "--num-warmups", "3")
    assert len(posts) == 3 + 4 and d["num_prompts"] == d["completed"] == 4
    assert d["num_warmups"] == 3 and "3 (not counted)" in text
    assert all(body == posts[0][1] for _, body in posts)  # the first request, as vLLM's
