"""Graceful shutdown on SIGTERM, with the server in a subprocess: finish or tell, never hang."""

from __future__ import annotations

import json
import signal
import threading
import time

import grpc
import httpx
import pytest
from wse_inference.mock import ByteTokenizer, expected_continuation
from wse_inference.serve.proto import load_stubs
from wse_inference.serve.testing import serve_subprocess

pytestmark = pytest.mark.timeout(60)
TOK = ByteTokenizer()


class _GrpcReader(threading.Thread):
    """Streams one gRPC Generate; keeps the token ids and the final status code."""

    def __init__(self, target: str, prompt: str, max_tokens: int) -> None:
        super().__init__(daemon=True)
        self.target, self.prompt, self.max_tokens = target, prompt, max_tokens
        self.ids: list[int] = []
        self.code: grpc.StatusCode | None = None
        self.details = ""
        self.started = threading.Event()

    def run(self) -> None:
        pb2, pb2_grpc = load_stubs()
        req = pb2.GenerateRequest(text=self.prompt, max_tokens=self.max_tokens)
        with grpc.insecure_channel(self.target) as ch:
            try:
                for r in pb2_grpc.GenerationStub(ch).Generate(req, timeout=20):
                    self.ids += r.token_ids
                    self.started.set()
                self.code = grpc.StatusCode.OK
            except grpc.RpcError as e:
                self.code, self.details = e.code(), e.details()
        self.started.set()


class _Reader(threading.Thread):
    """Streams one completion and keeps its SSE data lines; `started` is set on the first."""

    def __init__(self, url: str, prompt: str, max_tokens: int) -> None:
        super().__init__(daemon=True)
        self.url, self.prompt, self.max_tokens = url, prompt, max_tokens
        self.lines: list[str] = []
        self.started = threading.Event()
        self.error: Exception | None = None

    def run(self) -> None:
        body = {
            "model": "mock",
            "prompt": self.prompt,
            "max_tokens": self.max_tokens,
            "stream": True,
        }
        try:
            with httpx.stream("POST", self.url + "/v1/completions", json=body, timeout=20) as r:
                for line in r.iter_lines():
                    if line.startswith("data: "):
                        self.lines.append(line[6:])
                        self.started.set()
        except httpx.HTTPError as e:
            self.error = e
        self.started.set()

    def text(self) -> str:
        chunks = [json.loads(x) for x in self.lines if x != "[DONE]"]
        return "".join(c["choices"][0]["text"] for c in chunks if c.get("choices"))


def test_sigterm_lets_requests_in_flight_finish_then_exits_0():
    engine = {"max_slots": 2, "step_delay_s": 0.01}
    with serve_subprocess(engine=engine, config={"drain_s": 10.0, "grpc_port": 0}) as served:
        proc, url, target = served
        readers = [_Reader(url, p, 40) for p in ("first", "second", "third")]
        rpc = _GrpcReader(target, "fourth", 40)
        for r in [*readers, rpc]:
            r.start()
        for r in [*readers, rpc]:
            assert r.started.wait(10)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
        rpc.join(5)
        assert rpc.code == grpc.StatusCode.OK
        assert rpc.ids == expected_continuation(TOK.encode("fourth"), 40)
        for r in readers:
            r.join(5)
            assert r.error is None and r.lines[-1] == "[DONE]"
            assert r.text() == TOK.decode(expected_continuation(TOK.encode(r.prompt), 40))
        with pytest.raises(httpx.ConnectError):
            httpx.get(url + "/health", timeout=2)


def test_sigterm_tells_requests_that_outlive_the_grace_period():
    engine = {"max_slots": 1, "step_delay_s": 0.01, "max_context": 2048}
    with serve_subprocess(engine=engine, config={"drain_s": 0.3, "grpc_port": 0}) as served:
        proc, url, target = served
        reader = _Reader(url, "long", 1000)  # ~10 s of decoding
        reader.start()
        assert reader.started.wait(10)
        rpc = _GrpcReader(target, "long", 1000)  # waits for the one slot: told while queued
        rpc.start()
        time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        rpc.join(5)
        assert rpc.code == grpc.StatusCode.UNAVAILABLE and "shutting down" in rpc.details
        reader.join(5)
        assert not reader.is_alive()
        assert reader.lines[-1] == "[DONE]"
        err = json.loads(reader.lines[-2])["error"]
        assert "shutting down" in err["message"]
        assert 0 < len(reader.text()) < 1000


def test_sigterm_lets_a_grpc_stream_alone_finish_within_drain_s():
    """With no HTTP connection to wait for, the gRPC stream still gets `drain_s` (it used to
    be aborted 0.1-0.2 s after SIGTERM)."""
    engine = {"max_slots": 1, "step_delay_s": 0.01}
    with serve_subprocess(engine=engine, config={"drain_s": 10.0, "grpc_port": 0}) as served:
        proc, _, target = served
        rpc = _GrpcReader(target, "alone", 150)  # ~1.5 s of decoding
        rpc.start()
        assert rpc.started.wait(10)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
        rpc.join(5)
        assert rpc.code == grpc.StatusCode.OK, rpc.details
        assert rpc.ids == expected_continuation(TOK.encode("alone"), 150)
