"""Hunt 76: a second SIGTERM ends what is left with the drain's error, not a cancelled handler;
grpc.health.v1 answers NOT_SERVING while the drain runs (it was "Connection refused").

The oracle of the error a second signal gives is the error a timed-out drain gives (one
signal, a short `drain_s`), read from a server of its own; the health statuses are the
grpc.health.v1 protocol's (grpc_health's enum, Kubernetes' readiness probe reads them).
"""

from __future__ import annotations

import json
import re
import signal
import threading
import time

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from wse_inference.mock import ByteTokenizer, expected_continuation
from wse_inference.serve.proto import load_stubs
from wse_inference.serve.testing import serve_subprocess, wait_until

pytestmark = pytest.mark.timeout(60)
TOK = ByteTokenizer()
# ~100 s of decoding at 0.05 s a step: only a drain ends it within the tests' time
SLOW = {"max_slots": 1, "step_delay_s": 0.05, "max_context": 4096}
BODY = {"model": "mock", "prompt": "long", "max_tokens": 2000}


class _Request(threading.Thread):
    """One completion; keeps the status and the body (whole) or the SSE data lines (stream)."""

    def __init__(self, url: str, *, stream: bool) -> None:
        super().__init__(daemon=True)
        self.url, self.stream = url, stream
        self.status: int | None = None
        self.body: dict | None = None
        self.lines: list[str] = []
        self.started = threading.Event()  # stream: the first data line came

    def run(self) -> None:
        url = self.url + "/v1/completions"
        if not self.stream:
            r = httpx.post(url, json=BODY, timeout=30)
            self.status = r.status_code
            self.body = (
                json.loads(r.text)
                if r.headers.get("content-type") == "application/json"
                else {"raw": r.text}
            )
            return
        with httpx.stream("POST", url, json={**BODY, "stream": True}, timeout=30) as r:
            self.status = r.status_code
            for line in r.iter_lines():
                if line.startswith("data: "):
                    self.lines.append(line[6:])
                    self.started.set()


def _running(url: str) -> int:
    text = httpx.get(url + "/metrics", timeout=5).text
    m = re.search(r"^wse_num_requests_running(?:\{[^}]*\})? (\S+)$", text, re.MULTILINE)
    return int(float(m.group(1))) if m else 0


def _ended_by(*, signals: int, stream: bool) -> tuple[_Request, str, float]:
    """A request cut by the drain: one signal and a 0.3 s drain (the oracle), or two signals
    within a 60 s drain. The request, the server's output, and seconds from the last signal
    to the exit."""
    drain_s = 0.3 if signals == 1 else 60.0
    with serve_subprocess(engine=SLOW, config={"drain_s": drain_s}) as served:
        req = _Request(served.http_url, stream=stream)
        req.start()
        if stream:
            assert req.started.wait(10)
        else:
            assert wait_until(lambda: _running(served.http_url) == 1, 10)
        served.proc.send_signal(signal.SIGTERM)
        if signals == 2:
            time.sleep(0.5)
            assert served.proc.poll() is None  # the first signal drains: the request goes on
            served.proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        assert served.proc.wait(timeout=15) == 0
        exit_s = time.monotonic() - t0
        req.join(10)
        assert not req.is_alive()
        assert served.proc.stdout is not None
        return req, served.proc.stdout.read(), exit_s


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_a_second_signal_ends_a_request_with_the_drains_error(stream):
    told, _, _ = _ended_by(signals=1, stream=stream)
    cut, output, exit_s = _ended_by(signals=2, stream=stream)
    assert exit_s < 5  # not the 60 s drain
    assert "Traceback" not in output and "Exception in ASGI" not in output, output
    assert cut.status == told.status
    if not stream:
        assert told.status == 503
        assert cut.body == told.body
        assert "shutting down" in cut.body["error"]["message"]
        return
    assert cut.lines[-1] == told.lines[-1] == "[DONE]"
    assert json.loads(cut.lines[-2]) == json.loads(told.lines[-2])
    assert "shutting down" in json.loads(cut.lines[-2])["error"]["message"]
    made = [json.loads(x) for x in cut.lines[:-2]]
    assert made and all("choices" in c for c in made)  # tokens came before the error


def _check(target: str, service: str = "") -> str:
    with grpc.insecure_channel(target) as ch:
        req = health_pb2.HealthCheckRequest(service=service)
        status = health_pb2_grpc.HealthStub(ch).Check(req, timeout=2).status
    return health_pb2.HealthCheckResponse.ServingStatus.Name(status)


def test_a_health_check_during_the_drain_answers_not_serving():
    pb2, pb2_grpc = load_stubs()
    engine = {"max_slots": 1, "step_delay_s": 0.01, "max_context": 1024}
    generation = pb2.DESCRIPTOR.services_by_name["Generation"].full_name
    with serve_subprocess(engine=engine, config={"drain_s": 20.0, "grpc_port": 0}) as served:
        target = served.grpc_target
        ids: list[int] = []
        codes: list[grpc.StatusCode] = []
        started = threading.Event()

        def stream() -> None:  # ~3 s of decoding, within the drain
            req = pb2.GenerateRequest(text="drain", max_tokens=300)
            with grpc.insecure_channel(target) as ch:
                for r in pb2_grpc.GenerationStub(ch).Generate(req, timeout=30):
                    ids.extend(r.token_ids)
                    started.set()
            codes.append(grpc.StatusCode.OK)

        reader = threading.Thread(target=stream, daemon=True)
        reader.start()
        assert started.wait(10)
        assert _check(target) == _check(target, generation) == "SERVING"
        served.proc.send_signal(signal.SIGTERM)
        assert wait_until(lambda: _check(target) == "NOT_SERVING", 2, interval_s=0.05)
        assert _check(target, generation) == "NOT_SERVING"
        assert reader.is_alive()  # seen during the drain, not after it
        with grpc.insecure_channel(target) as ch, pytest.raises(grpc.RpcError) as refused:
            new = pb2.GenerateRequest(text="new", max_tokens=4)
            list(pb2_grpc.GenerationStub(ch).Generate(new, timeout=5))
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "shutting down" in refused.value.details()
        assert served.proc.wait(timeout=20) == 0
        reader.join(5)
        assert codes == [grpc.StatusCode.OK]
        assert ids == expected_continuation(TOK.encode("drain"), 300)


def test_a_second_signal_tells_a_grpc_stream_why():
    """As HTTP's: UNAVAILABLE with the drain's message (a forced stop cancelled it before)."""
    pb2, pb2_grpc = load_stubs()
    with serve_subprocess(engine=SLOW, config={"drain_s": 60.0, "grpc_port": 0}) as served:
        errors: list[grpc.RpcError] = []
        started = threading.Event()

        def stream() -> None:
            req = pb2.GenerateRequest(text="long", max_tokens=2000)
            with grpc.insecure_channel(served.grpc_target) as ch:
                try:
                    for _ in pb2_grpc.GenerationStub(ch).Generate(req, timeout=30):
                        started.set()
                except grpc.RpcError as e:
                    errors.append(e)

        reader = threading.Thread(target=stream, daemon=True)
        reader.start()
        assert started.wait(10)
        served.proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        served.proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        assert served.proc.wait(timeout=15) == 0
        assert time.monotonic() - t0 < 5
        reader.join(5)
        assert len(errors) == 1
        assert errors[0].code() == grpc.StatusCode.UNAVAILABLE
        assert "shutting down" in errors[0].details()
