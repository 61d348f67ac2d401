"""The gRPC server on loopback: streaming Generate, HealthCheck, status codes, cancellation."""

from __future__ import annotations

import grpc
import pytest
from wse_inference.mock import ByteTokenizer, expected_continuation
from wse_inference.serve.proto import PROTO_PATH, load_stubs
from wse_inference.serve.testing import running_server, wait_until

pytestmark = pytest.mark.timeout(60)
pb2, pb2_grpc = load_stubs()
TOK = ByteTokenizer()


@pytest.fixture(scope="module")
def shared():
    with running_server(grpc=True, max_slots=1) as s:
        yield s


def stub(server):
    channel = grpc.insecure_channel(server.grpc_target)
    return channel, pb2_grpc.GenerationStub(channel)


def test_stubs_are_generated_next_to_the_proto_and_ignored_by_git():
    gen = PROTO_PATH.with_name("generation_pb2_grpc.py")
    assert gen.is_file()
    assert "from wse_inference.serve.proto import generation_pb2" in gen.read_text()
    ignored = PROTO_PATH.with_name(".gitignore").read_text()
    assert "*_pb2.py" in ignored and "*_pb2_grpc.py" in ignored


@pytest.mark.smoke
def test_generate_streams_the_oracle_and_health():
    with running_server(grpc=True, max_slots=2, step_delay_s=0.001) as s:
        channel, st = stub(s)
        with channel:
            responses = list(
                st.Generate(pb2.GenerateRequest(text="hello", max_tokens=6), timeout=10)
            )
            ids = [t for r in responses for t in r.token_ids]
            assert ids == expected_continuation(TOK.encode("hello"), 6)
            assert "".join(r.text for r in responses) == TOK.decode(ids)
            last = responses[-1]
            assert last.finish_reason == "length"
            assert (last.usage.prompt_tokens, last.usage.completion_tokens) == (5, 6)
            assert last.time_info.total_time >= last.time_info.completion_time >= 0
            ids_req = pb2.GenerateRequest(
                token_ids=pb2.TokenIds(ids=[7, 8]), max_tokens=3, stop_token_ids=[11]
            )
            out = list(st.Generate(ids_req, timeout=10))
            assert [t for r in out for t in r.token_ids] == [9, 10, 11]
            assert out[-1].finish_reason == "stop"
            h = st.HealthCheck(pb2.HealthCheckRequest(), timeout=5)
            assert h.status == pb2.HealthCheckResponse.SERVING and list(h.models) == ["mock"]


@pytest.mark.parametrize(
    "req",
    [
        pb2.GenerateRequest(text="", max_tokens=3),
        pb2.GenerateRequest(text="a", max_tokens=0),
        pb2.GenerateRequest(text="a", max_tokens=1000),
        pb2.GenerateRequest(text="a", top_p=0.0),
        pb2.GenerateRequest(text="a", temperature=-1.0),
    ],  # a model not served is NOT_FOUND (hunt 81: test_serve_hunt81)
)
def test_bad_requests_get_invalid_argument(shared, req):
    channel, st = stub(shared)
    with channel, pytest.raises(grpc.RpcError) as info:
        list(st.Generate(req, timeout=10))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details()


def test_queue_full_is_resource_exhausted_and_cancel_frees_the_slot():
    with running_server(grpc=True, max_slots=1, max_queued=0, step_delay_s=0.005) as s:
        channel, st = stub(s)
        with channel:
            call = st.Generate(pb2.GenerateRequest(text="a", max_tokens=200), timeout=20)
            next(call)
            with pytest.raises(grpc.RpcError) as info:
                list(st.Generate(pb2.GenerateRequest(text="b", max_tokens=3), timeout=10))
            assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert s.engine.metrics()["slots_in_use"] == 1
            call.cancel()
            assert wait_until(lambda: s.engine.metrics()["kv_cache_tokens"] == 0, 1.0)
            assert call.code() == grpc.StatusCode.CANCELLED


def test_stub_generation_from_the_proto(tmp_path):
    from wse_inference.serve import proto

    proto._generate(tmp_path)
    assert proto._fresh(tmp_path)
    code = (tmp_path / "generation_pb2_grpc.py").read_text()
    assert "from wse_inference.serve.proto import generation_pb2" in code
    assert "GenerationStub" in code and "HealthCheck" in code


@pytest.mark.parametrize(("stop", "words"), [([""] * 100, "at most 64"), (["x", ""], "empty")])
def test_empty_stop_strings_are_counted_then_refused(shared, stop, words):
    """Hunt 55: 100 empty stop strings passed (dropped before the count of at most 4)."""
    channel, st = stub(shared)
    with channel, pytest.raises(grpc.RpcError) as info:
        list(st.Generate(pb2.GenerateRequest(text="hi", max_tokens=2, stop=stop), timeout=10))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert words in info.value.details(), info.value.details()


def test_stop_token_ids_are_bounded_as_stop_strings_are(shared):
    """Hunt 56: the stop token ids had no bound (stop strings: at most 4); hunt 81: the bound
    counts distinct ids (65 of them here)."""
    channel, st = stub(shared)
    req = pb2.GenerateRequest(text="hi", max_tokens=2, stop_token_ids=list(range(65)))
    with channel, pytest.raises(grpc.RpcError) as info:
        list(st.Generate(req, timeout=10))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "at most 64 distinct token ids" in info.value.details(), info.value.details()


def test_a_field_with_the_wrong_wire_type_is_invalid_argument(shared):
    """Hunt 56: max_tokens sent as bytes was kept as an unknown field and the request ran with
    max_tokens unset (the rest of the context); top_k -1 (vLLM's off) was refused here only."""
    channel, _ = stub(shared)
    with channel:
        raw = channel.unary_stream(
            "/wse.inference.v1.Generation/Generate",
            request_serializer=lambda b: b,
            response_deserializer=pb2.GenerateResponse.FromString,
        )
        with pytest.raises(grpc.RpcError) as info:
            list(raw(b"\x0a\x01a\x22\x01a", timeout=10))  # text "a", field 4 as bytes
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "field 4 (max_tokens)" in info.value.details(), info.value.details()
        unknown = pb2.GenerateRequest(text="a", max_tokens=1).SerializeToString() + b"\x98\x06\x01"
        assert len(list(raw(unknown, timeout=10))) == 1  # field 99: a newer client's, ignored
        st = pb2_grpc.GenerationStub(channel)
        out = list(st.Generate(pb2.GenerateRequest(text="a", max_tokens=1, top_k=-1), timeout=10))
        assert out[-1].finish_reason == "length"
