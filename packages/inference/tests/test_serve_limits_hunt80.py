"""Hunt 80 (review of session 79): WSE_LIMIT_SERVE_STOP_STRINGS was read by `check_sampling`
at every request, after the server had started. A bad value (`abc`) started the server and
turned every HTTP and gRPC request into a 500 (InternalServerError, a traceback in the log),
stop strings or none. Now the limit is read once, when `RequestLimits` (and so
`ServeConfig`) is built, and `Server` checks every `WSE_LIMIT_*` variable as the `wse` root
does: a bad value is the one-line `WseError` at start.

Oracle: the variable's own value (the count a request may give is the one set when the
server was built, whatever the environment says later)."""

from __future__ import annotations

import grpc
import httpx
import pytest
from wse_core.errors import WseError
from wse_inference.engine import SamplingParams
from wse_inference.mock import MockEngine
from wse_inference.serve.admission import InvalidRequestError, RequestLimits, check_sampling
from wse_inference.serve.app import ServeConfig, Server
from wse_inference.serve.proto import load_stubs
from wse_inference.serve.testing import running_server

pytestmark = pytest.mark.timeout(120)

VAR = "WSE_LIMIT_SERVE_STOP_STRINGS"
ONE_LINE = f"{VAR} must be a positive integer of at most 64 bits, got 'abc'"
PROMPT = {"model": "mock", "prompt": "hi", "max_tokens": 2}


@pytest.mark.parametrize(
    "build",
    [RequestLimits, lambda: ServeConfig(port=0), lambda: Server(MockEngine(max_slots=2))],
    ids=["RequestLimits", "ServeConfig", "Server"],
)
def test_a_bad_stop_limit_is_refused_when_the_server_is_built(monkeypatch, build):
    monkeypatch.setenv(VAR, "abc")
    with pytest.raises(WseError) as info:
        build()
    assert str(info.value) == ONE_LINE and "\n" not in str(info.value)


def test_a_config_built_before_the_variable_went_bad_is_refused_by_the_server(monkeypatch):
    """The server checks every WSE_LIMIT_* variable, as the `wse` root does."""
    config = ServeConfig(port=0)
    monkeypatch.setenv(VAR, "abc")
    with pytest.raises(WseError, match=ONE_LINE):
        Server(MockEngine(max_slots=2), config)
    monkeypatch.setenv(VAR, "2")
    monkeypatch.setenv("WSE_LIMIT_TEMPLATE_OPZ", "5")  # a misspelt limit lifts nothing
    with pytest.raises(WseError, match="WSE_LIMIT_TEMPLATE_OPZ is no limit"):
        Server(MockEngine(max_slots=2), config)


def test_the_limit_in_force_at_start_holds_on_both_apis(monkeypatch):
    """Started with 2, the server answers by 2 whatever the variable says later (it was read
    at every request: `abc` after the start was a 500 on both APIs)."""
    pb2, pb2_grpc = load_stubs()
    monkeypatch.setenv(VAR, "2")
    with running_server(grpc=True, max_slots=2) as server:
        monkeypatch.setenv(VAR, "abc")
        url = server.http_url + "/v1/completions"
        assert httpx.post(url, json=PROMPT, timeout=10).status_code == 200
        assert httpx.post(url, json={**PROMPT, "stop": ["x", "y"]}, timeout=10).status_code == 200
        r = httpx.post(url, json={**PROMPT, "stop": ["x", "y", "z"]}, timeout=10)
        assert r.status_code == 400 and r.json()["error"]["param"] == "stop"
        assert f"at most 2 strings, got 3 (set {VAR} to lift it)" in r.json()["error"]["message"]
        with grpc.insecure_channel(server.grpc_target) as channel:
            stub = pb2_grpc.GenerationStub(channel)
            ok = list(stub.Generate(pb2.GenerateRequest(text="hi", max_tokens=2), timeout=10))
            assert ok[-1].finish_reason == "length"
            with pytest.raises(grpc.RpcError) as info:
                three = pb2.GenerateRequest(text="hi", stop=["x", "y", "z"])
                list(stub.Generate(three, timeout=10))
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "at most 2 strings, got 3" in info.value.details()


def test_a_given_count_is_not_the_variables(monkeypatch):
    """RequestLimits(max_stop=3) is a count of the caller's: the variable neither moves it nor
    is named as what lifts it."""
    monkeypatch.setenv(VAR, "abc")
    limits = RequestLimits(max_stop=3)
    assert limits.stop_strings == 3
    with pytest.raises(InvalidRequestError) as info:
        check_sampling(SamplingParams(stop=("a", "b", "c", "d")), limits=limits)
    assert str(info.value) == "stop must be a string or a list of at most 3 strings, got 4."


def test_the_proto_and_the_limit_say_the_stop_limit_moves_and_what_it_bounds():
    """Review 80 (hole 8): generation.proto said "more than 64 stop strings" is refused, and
    the limit's own words named HTTP and gRPC only, where `wse infer generate --stop` is
    bounded by it too (hunt 59's test and the hostile bench's review 80 case). The proto's
    comments are not in its generated stubs (the descriptor holds no comments)."""
    from wse_core.host.limits import LIMITS
    from wse_inference.serve.proto import PROTO_PATH

    lim = LIMITS["serve_stop_strings"]
    text = " ".join(line.removeprefix("//").strip() for line in PROTO_PATH.read_text().splitlines())
    assert "more than 64 stop strings" not in text  # before: the count alone
    assert f"more stop strings than the server's limit ({lim.value()} unless {lim.env}" in text
    assert "--stop" in lim.what and "gRPC stop" in lim.what
    pb2, _ = load_stubs()
    assert "WSE_LIMIT" not in str(pb2.DESCRIPTOR.serialized_pb)  # comments: no regeneration
