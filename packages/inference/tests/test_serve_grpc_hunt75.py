"""Hunt 75, the gRPC front end: top_k as HTTP's and vLLM's, admission by the scheduler alone
under a burst, grpc.health.v1, refusals in /metrics, stop_reason, IPv6, model_name labels."""

from __future__ import annotations

import threading

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families
from wse_inference.mock import ByteTokenizer, MockEngine, expected_continuation
from wse_inference.serve.app import ServeConfig, Server
from wse_inference.serve.grpc_server import sampling_from_request
from wse_inference.serve.openai_request import parse_request
from wse_inference.serve.proto import load_stubs
from wse_inference.serve.testing import ipv6_loopback, running_server

pytestmark = pytest.mark.timeout(90)
pb2, pb2_grpc = load_stubs()
TOK = ByteTokenizer()
GENERATION = "wse.inference.v1.Generation"


def _stub(server) -> tuple[grpc.Channel, object]:
    ch = grpc.insecure_channel(server.grpc_target)
    return ch, pb2_grpc.GenerationStub(ch)


def _metric(server, name: str, **labels: str) -> float:
    text = httpx.get(server.http_url + "/metrics", timeout=10).text
    for f in text_string_to_metric_families(text):
        for s in f.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    return 0.0


# -- hole 3: top_k 0 is off, unset the model's default, as HTTP's --------------------------------
@pytest.mark.parametrize(
    ("grpc_top_k", "body_top_k", "want"),
    [(None, None, 7), (0, 0, 0), (-1, -1, 0), (3, 3, 3)],  # 7: generation_config.json's
)
def test_top_k_reads_as_the_http_api_reads_it(grpc_top_k, body_top_k, want):
    """vLLM's SamplingParams: top_k 0 and -1 both disable top-k; the HTTP parser is the
    oracle for gRPC (the same request, the same settings)."""
    defaults = {"top_k": 7, "temperature": 0.6}
    req = pb2.GenerateRequest(text="ab", max_tokens=4)
    if grpc_top_k is not None:
        req.top_k = grpc_top_k
    got = sampling_from_request(req, prompt_len=2, max_context=64, defaults=defaults)
    body = {"model": "m", "prompt": "ab", "max_tokens": 4}
    if body_top_k is not None:
        body["top_k"] = body_top_k
    http = parse_request(body, kind="completion", tokenizer=TOK, model_names=["m"],
                         max_context=64, sampling_defaults=defaults)  # fmt: skip
    assert got.top_k == http.sampling.top_k == want
    assert got.temperature == http.sampling.temperature == 0.6  # unset: the file's


def test_the_proto_says_what_unset_fields_take():
    from wse_inference.serve.proto import PROTO_PATH

    text = PROTO_PATH.read_text()
    assert pb2.GenerateRequest.DESCRIPTOR.fields_by_name["top_k"].has_presence
    assert "unset: 1.0" not in text and "unset: the rest of the context window" not in text
    assert "generation_config.json" in text


# -- hole 4: a burst is refused by the scheduler's queue; health checks are answered ------------
def test_a_burst_is_refused_by_the_scheduler_with_retry_after_and_health_answers():
    n_calls, slots, queued = 40, 1, 2
    with running_server(grpc=True, max_slots=slots, max_queued=queued, step_delay_s=0.02) as srv:
        ch, stub = _stub(srv)
        checks = health_pb2_grpc.HealthStub(ch)
        start = threading.Barrier(n_calls + 2)
        results: list[tuple[str, str | None]] = []
        answered: list[int] = []

        def generate() -> None:
            start.wait()
            try:
                list(stub.Generate(pb2.GenerateRequest(text="hi", max_tokens=20), timeout=30))
                results.append(("OK", None))
            except grpc.RpcError as e:
                meta = dict(e.trailing_metadata() or ())
                results.append((e.code().name, meta.get("retry-after")))

        def health() -> None:
            start.wait()
            for _ in range(10):
                own = stub.HealthCheck(pb2.HealthCheckRequest(), timeout=5)
                std = checks.Check(health_pb2.HealthCheckRequest(), timeout=5)
                serving = health_pb2.HealthCheckResponse.SERVING
                answered.append(own.status == pb2.HealthCheckResponse.SERVING
                                and std.status == serving)  # fmt: skip

        threads = [threading.Thread(target=generate) for _ in range(n_calls)]
        threads += [threading.Thread(target=health) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        ch.close()
        refused = [r for r in results if r[0] != "OK"]
        assert len(results) == n_calls
        # each refusal is the scheduler's queue_full, told when to retry (never gRPC's own
        # "Concurrent RPC limit exceeded!")
        assert refused and all(code == "RESOURCE_EXHAUSTED" and after for code, after in refused)
        assert len(results) - len(refused) >= slots + queued
        assert answered == [True] * 20
        # hole 7: gRPC's refusals are counted as HTTP's are
        assert _metric(srv, "wse_request_rejected_total", reason="queue_full") == len(refused)


def test_invalid_grpc_requests_are_counted_in_metrics():
    with running_server(grpc=True) as srv:
        ch, stub = _stub(srv)
        for req in (pb2.GenerateRequest(text="a", max_tokens=0), pb2.GenerateRequest(text="")):
            with pytest.raises(grpc.RpcError) as e:
                list(stub.Generate(req, timeout=10))
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        raw = ch.unary_stream(f"/{GENERATION}/Generate")
        with pytest.raises(grpc.RpcError):
            list(raw(b"\xff\xff\xff", timeout=10))  # not a GenerateRequest
        ch.close()
        assert _metric(srv, "wse_request_rejected_total", reason="invalid") == 3


# -- hole 5: grpc.health.v1 ----------------------------------------------------------------------
def test_the_standard_health_service_serves_and_says_when_draining():
    with running_server(grpc=True) as srv:
        ch = grpc.insecure_channel(srv.grpc_target)
        checks = health_pb2_grpc.HealthStub(ch)
        for service in ("", GENERATION):
            got = checks.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
            assert got.status == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.RpcError) as e:  # grpc.health.v1: an unknown service
            checks.Check(health_pb2.HealthCheckRequest(service="nope"), timeout=5)
        assert e.value.code() == grpc.StatusCode.NOT_FOUND
        watch = checks.Watch(health_pb2.HealthCheckRequest(service=GENERATION), timeout=20)
        assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
        srv.begin_drain()
        # a watcher is told (a new call is refused: the server stops taking calls as it drains)
        assert next(watch).status == health_pb2.HealthCheckResponse.NOT_SERVING
        watch.cancel()
        ch.close()


# -- hole 10: stop_reason on the final response, as HTTP's ---------------------------------------
@pytest.mark.parametrize(
    ("fields", "want"),
    [({"stop": ["efg"]}, ("stop_string", "efg")),
     ({"stop_token_ids": [100]}, ("stop_token_id", 100)),
     ({}, (None, None))],
)  # fmt: skip
def test_the_final_response_carries_vllms_stop_reason(fields, want):
    with running_server(grpc=True) as srv:
        ch, stub = _stub(srv)
        rs = list(stub.Generate(pb2.GenerateRequest(text="a", max_tokens=10, **fields), timeout=10))
        ch.close()
        body = {"model": srv.model_names[0], "prompt": "a", "max_tokens": 10, **fields}
        http = httpx.post(srv.http_url + "/v1/completions", json=body, timeout=10).json()
        choice = http["choices"][0]
        kind = rs[-1].WhichOneof("stop_reason")
        assert (kind, getattr(rs[-1], kind) if kind else None) == want
        assert choice["stop_reason"] == want[1]  # HTTP says the same (vLLM's field)
        assert all(r.WhichOneof("stop_reason") is None for r in rs[:-1])


# -- hole 6: IPv6 --------------------------------------------------------------------------------
@pytest.mark.skipif(not ipv6_loopback(), reason="this machine cannot bind ::1")
def test_an_ipv6_host_is_served_on_http_and_grpc():
    engine = MockEngine()
    server = Server(engine, ServeConfig(host="::1", port=0, grpc_port=0, drain_s=1.0)).start()
    try:
        port = server._sock.getsockname()[1]
        assert server.http_url == f"http://[::1]:{port}"  # RFC 3986's brackets
        assert server.grpc_target.startswith("[::1]:")
        assert httpx.get(server.http_url + "/health", timeout=5).status_code == 200
        with grpc.insecure_channel(server.grpc_target) as ch:
            rs = list(pb2_grpc.GenerationStub(ch).Generate(
                pb2.GenerateRequest(text="ab", max_tokens=3), timeout=10))  # fmt: skip
        assert [t for r in rs for t in r.token_ids] == expected_continuation(TOK.encode("ab"), 3)
    finally:
        server.close()


# -- hole 11: vLLM's model_name label ------------------------------------------------------------
def test_every_metrics_series_is_labelled_with_the_served_model_name():
    engine = MockEngine()
    cfg = ServeConfig(port=0, drain_s=1.0, model_names=("served-name",))
    server = Server(engine, cfg).start()
    try:
        httpx.post(server.http_url + "/v1/completions", timeout=10,
                   json={"model": "served-name", "prompt": "a", "max_tokens": 2})  # fmt: skip
        httpx.post(server.http_url + "/v1/completions", json={"model": 5}, timeout=10)  # refused
        text = httpx.get(server.http_url + "/metrics", timeout=10).text
        ours = [s for f in text_string_to_metric_families(text) for s in f.samples
                if s.name.startswith("wse_")]  # fmt: skip
        names = {s.name for s in ours}
        assert {"wse_time_to_first_token_seconds_count", "wse_num_requests_running",
                "wse_request_success_total", "wse_request_rejected_total"} <= names  # fmt: skip
        assert all(s.labels.get("model_name") == "served-name" for s in ours), [
            s for s in ours if s.labels.get("model_name") != "served-name"
        ]
    finally:
        server.close()


def test_with_no_generation_config_unset_fields_take_the_openai_defaults():
    """`sampling_from_request` with no defaults: OpenAI's and vLLM's (top_k off)."""
    got = sampling_from_request(pb2.GenerateRequest(text="a"), prompt_len=1, max_context=10)
    assert (got.top_k, got.temperature, got.top_p, got.max_tokens) == (0, 1.0, 1.0, 9)
