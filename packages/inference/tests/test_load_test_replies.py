"""`wse infer bench`'s client (`demo.load_test`) against a server whose answers are not
OpenAI's (hostile or not an OpenAI server at all): before hunt 58b, a /v1/models that was
HTML or listed no model, and a stream chunk that was a list, had "choices": "abc", text 5,
usage "x" or completion_tokens NaN, crashed the client with a traceback (or summed NaN
tokens); a stream cut before `data: [DONE]` was counted as completed. And the client's own
size: it made one task per request up front (1.5 GB for -n 1,000,000)."""

from __future__ import annotations

import contextlib
import http.server
import threading
import time

import pytest
from wse_inference.demo.load_test import LoadTestConfig, ServerReplyError, run_load_test
from wse_inference.testing import fake_openai_server as fake_server

pytestmark = pytest.mark.timeout(60)

GOOD_MODELS = b'{"object": "list", "data": [{"id": "m"}]}'
GOOD_STREAM = b'data: {"choices": [{"text": "a"}]}\n\ndata: [DONE]\n\n'


def _run(url: str) -> dict:
    return run_load_test(LoadTestConfig(url=url, num_requests=2, concurrency=1, timeout_s=10))


@pytest.mark.parametrize(
    "models", [b"<html>hi</html>", b'{"data": []}', b"[1, 2]", b'{"data": [{"id": 5}]}']
)
def test_a_models_list_without_a_model_id_is_one_clear_error(models):
    with fake_server(models, GOOD_STREAM) as url, pytest.raises(ServerReplyError) as e:
        _run(url)
    assert "GET /v1/models" in str(e.value) and "--model" in str(e.value)


@pytest.mark.parametrize(
    "chunk, words",
    [
        (b"[1]", "not a JSON object"),
        (b'{"error": "boom"}', "boom"),
        (b'{"error": {"message": "too long"}}', "too long"),
        (b'{"choices": "abc"}', "choices"),
        (b'{"choices": [5]}', "choices"),
        (b'{"choices": [{"text": 5}]}', "choices"),
        (b'{"choices": [], "usage": "x"}', "usage"),
        (b'{"choices": [], "usage": {"completion_tokens": NaN}}', "usage"),
        (b'{"choices": [], "usage": {"completion_tokens": "7"}}', "usage"),
        (b"{not json", "Expecting"),
    ],
)
def test_a_chunk_that_is_not_openais_fails_that_request_saying_why(chunk, words):
    stream = b"data: " + chunk + b"\n\ndata: [DONE]\n\n"
    with fake_server(GOOD_MODELS, stream) as url:
        summary = _run(url)
    assert (summary["completed"], summary["failed"]) == (0, 2)
    assert words in summary["errors"][0]


def test_a_stream_cut_before_done_is_a_failed_request():
    with fake_server(GOOD_MODELS, b'data: {"choices": [{"text": "a"}]}\n\n') as url:
        summary = _run(url)
    assert summary["failed"] == 2 and "[DONE]" in summary["errors"][0]


def test_an_openai_stream_still_completes():
    usage = b'data: {"choices": [], "usage": {"completion_tokens": 3}}\n\n'
    stream = (
        b'data: {"choices": [{"text": "abc"}], "usage": null}\n\n' + usage + b"data: [DONE]\n\n"
    )
    with fake_server(GOOD_MODELS, stream) as url:
        summary = _run(url)
    assert (summary["completed"], summary["output_tokens"]) == (2, 6)


def test_a_stream_that_never_ends_is_cut_off_at_the_timeout():
    class Endless(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200)
            self.send_header("content-length", str(len(GOOD_MODELS)))
            self.end_headers()
            self.wfile.write(GOOD_MODELS)

        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers.get("content-length", 0)))
            self.send_response(200)
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            data = b'data: {"choices": [{"text": "a"}]}\n\n'
            with contextlib.suppress(OSError):
                while True:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                    time.sleep(0.01)

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Endless)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}"
    t0 = time.monotonic()
    summary = run_load_test(LoadTestConfig(url=url, num_requests=1, concurrency=1, timeout_s=1))
    srv.shutdown()
    assert time.monotonic() - t0 < 10  # was: held forever
    assert summary["failed"] == 1 and "within 1 s" in summary["errors"][0]


def test_requests_run_on_concurrency_tasks_not_one_task_each(monkeypatch):
    import asyncio

    import wse_inference.demo.load_test as lt

    alive: list[int] = []

    async def one(client, cfg, model, req, origin):  # a request: counts the tasks alive
        alive.append(len(asyncio.all_tasks()))
        await asyncio.sleep(0)
        return lt.RequestResult(True, 0.1, 0.2, 2, "ab")

    monkeypatch.setattr(lt, "_one", one)
    cfg = LoadTestConfig(url="http://127.0.0.1:9", model="m", num_requests=2000, concurrency=4)
    summary = run_load_test(cfg)
    assert summary["completed"] == 2000 and summary["output_tokens"] == 4000
    assert max(alive) <= 4 + 1, max(alive)  # the workers and the main task (was 2,001)


def test_sse_data_without_its_optional_space_is_read():
    stream = b'data:{"choices": [{"text": "ab"}]}\n\ndata:[DONE]\n\n'  # valid SSE
    with fake_server(GOOD_MODELS, stream) as url:
        summary = _run(url)
    assert (summary["completed"], summary["output_tokens"]) == (2, 2)
