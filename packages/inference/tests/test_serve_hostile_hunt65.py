"""Hunt 65 against a running mock server (HTTP and gRPC), each refusal checked word for word.
Broken before:

- tool_calls, function_call and tool_call_id in a chat history were type-checked and then
  dropped from the prompt (an assistant turn rendered empty); `function_call: "garbage"` was
  a 200. The server serves no tools: they are now a 400 naming the field;
- chat logprobs' `bytes` were the decoded text's (token 0x80 gave U+FFFD's [239, 191, 189]);
  completions' top_logprobs collapse tokens of the same text, and
  `return_tokens_as_token_ids` (vLLM's way to get all k) was refused;
- /tokenize ignored add_generation_prompt, continue_final_message, chat_template and tools,
  and took `messages: null` as present ("Give prompt or messages, not both.");
- gRPC kept the low 32 bits of a varint in an int32 field (max_tokens 2**32 + 3 ran as 3);
- h11's refusals read "illegal request line: bytearray(b'GET /health')";
- tools 0 / {} / "", functions false and suffix 0 / false / [] were taken as absent;
- an absolute-form target ("GET http://host/health") was a 404;
- minor: `content: []` was taken as "", `prompt: [true]` was "it holds True", and a long
  gRPC model name was cut at 80 characters with no closing quote and no length.
"""

from __future__ import annotations

import json
import socket

import grpc
import httpx
import pytest
from wse_inference.mock import expected_continuation, expected_logprob
from wse_inference.serve.proto import load_stubs
from wse_inference.serve.testing import running_server

pytestmark = pytest.mark.timeout(120)
pb2, pb2_grpc = load_stubs()
C, CHAT = "/v1/completions", "/v1/chat/completions"
HI = [{"role": "user", "content": "hi"}]
BASE = {
    C: {"model": "mock", "prompt": "abc", "max_tokens": 2},
    CHAT: {"model": "mock", "messages": HI, "max_tokens": 2},
}
CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
NO_TOOLS = "is not supported by this server (it serves no tools); leave it out."


@pytest.fixture(scope="module")
def server():
    with running_server(grpc=True, max_slots=2, max_context=256) as s:
        yield s


def _post(server, route: str, body: dict) -> httpx.Response:
    return httpx.post(server.http_url + route, json=body, timeout=30)


def _refused(server, route: str, body: dict) -> dict:
    r = _post(server, route, body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert "\n" not in err["message"] and err["type"] == "BadRequestError"
    return err


# --- 2: a history of tool calls ----------------------------------------------------------
@pytest.mark.parametrize("route", [CHAT, "/tokenize"])
@pytest.mark.parametrize(
    ("turn", "message"),
    [({"role": "assistant", "content": None, "tool_calls": [CALL]},
      f"messages[1].tool_calls {NO_TOOLS}"),
     ({"role": "assistant", "content": None, "function_call": "garbage"},
      f"messages[1].function_call {NO_TOOLS}"),
     ({"role": "user", "content": "x", "tool_call_id": "c1"},
      f"messages[1].tool_call_id {NO_TOOLS}"),
     ({"role": "tool", "content": "22C", "tool_call_id": "c1"},
      "messages[1] is a tool message (the result of the call 'c1'); this server serves no "
      "tools, so it takes no tool results; leave it out.")],
)  # fmt: skip
def test_tool_calls_in_a_history_are_refused_naming_the_field(server, route, turn, message):
    body = {**BASE[CHAT], "messages": [*HI, turn]}
    err = _refused(server, route, body)
    assert (err["message"], err["param"]) == (message, "messages")


def test_empty_or_null_tool_calls_hold_no_call_and_are_served(server):
    turns = [
        {"role": "assistant", "content": "ok", "tool_calls": []},
        {"role": "assistant", "content": "ok", "tool_calls": None, "function_call": None},
    ]
    for turn in turns:
        assert _post(server, CHAT, {**BASE[CHAT], "messages": [*HI, turn]}).status_code == 200


def test_an_empty_content_list_is_refused_as_openai_does(server):
    err = _refused(server, CHAT, {**BASE[CHAT], "messages": [{"role": "user", "content": []}]})
    assert err["message"] == (
        'messages[0].content is an empty list; give a string or at least one {"type": "text", '
        '"text": "..."} part.'
    )


# --- 3: bytes and token ids in logprobs --------------------------------------------------
def test_chat_logprob_bytes_are_each_tokens_own_byte(server):
    """The mock's tokens are known: after the prompt's last id, +1 each; a byte token's bytes
    are [id], also for 0x80..0xFF, which decode to U+FFFD alone."""
    body = {**BASE[CHAT], "max_tokens": 90, "logprobs": True, "top_logprobs": 3}
    prompt = _post(server, "/tokenize", {"messages": HI}).json()["tokens"]
    content = _post(server, CHAT, body).json()["choices"][0]["logprobs"]["content"]
    ids = expected_continuation(prompt, 90)
    assert max(ids) >= 0x80  # the tokens whose bytes were wrong
    assert [e["bytes"] for e in content] == [[t] for t in ids]
    for last, entry in zip([prompt[-1], *ids], content, strict=False):
        tops = [a for a, _ in expected_logprob(last, 3).top]
        assert [e["bytes"] for e in entry["top_logprobs"]] == [[a] for a in tops]


def test_return_tokens_as_token_ids_gives_all_k_alternatives(server):
    body = {"model": "mock", "prompt": "\u007f", "max_tokens": 3, "logprobs": 5,
            "return_tokens_as_token_ids": True}  # fmt: skip
    lp = _post(server, C, body).json()["choices"][0]["logprobs"]
    assert lp["tokens"] == ["token_id:128", "token_id:129", "token_id:130"]
    for last, top in zip([0x7F, 0x80, 0x81], lp["top_logprobs"], strict=True):
        want = expected_logprob(last, 5).top
        assert top == pytest.approx({f"token_id:{a}": lp for a, lp in want})
    chat = {**BASE[CHAT], "logprobs": True, "top_logprobs": 2, "return_tokens_as_token_ids": True}
    entry = _post(server, CHAT, chat).json()["choices"][0]["logprobs"]["content"][0]
    assert entry["token"] == "token_id:59" and entry["bytes"] == [59]  # after "assistant:"


# --- 4: /tokenize as vLLM's ----------------------------------------------------------------
def test_tokenize_honours_add_generation_prompt(server):
    def count(**extra: object) -> int:
        return _post(server, "/tokenize", {"messages": HI, **extra}).json()["count"]

    assert count() == len(b"user: hi\nassistant:")
    assert count(add_generation_prompt=True) == count(add_generation_prompt=None) == count()
    assert count(add_generation_prompt=False) == len(b"user: hi\n")  # was 19, as with it


@pytest.mark.parametrize(
    ("extra", "message"),
    [({"continue_final_message": True},
      "continue_final_message is not supported by this server; leave it out (or give false). "
      "Got true."),
     ({"chat_template": "{{ 1 }}"},
      "chat_template is not supported by this server; leave it out. Got '{{ 1 }}'."),
     ({"tools": [{"type": "function", "function": {"name": "f"}}]},
      "tools is not supported by this server; leave it out."),
     ({"add_generation_prompt": "no"}, "add_generation_prompt must be true or false, got 'no'.")],
)  # fmt: skip
def test_tokenize_refuses_what_chat_refuses(server, extra, message):
    assert _refused(server, "/tokenize", {"messages": HI, **extra})["message"] == message


def test_tokenize_reads_null_messages_as_absent(server):
    r = _post(server, "/tokenize", {"prompt": "hi", "messages": None})
    assert r.status_code == 200 and r.json()["tokens"] == [104, 105]


# --- 7: wrong-typed falsy tools, functions and suffix ---------------------------------------
@pytest.mark.parametrize(
    ("route", "field", "value", "message"),
    [(CHAT, "tools", 0, "tools must be a list of tools, got 0."),
     (CHAT, "tools", {}, "tools must be a list of tools, got {}."),
     (CHAT, "tools", "", "tools must be a list of tools, got ''."),
     (CHAT, "functions", False, "functions must be a list of functions, got false."),
     (C, "suffix", 0, "suffix must be a string, got 0."),
     (C, "suffix", False, "suffix must be a string, got false."),
     (C, "suffix", [], "suffix must be a string, got []."),
     (C, "prompt", [True], "prompt must be a string or one list of integer token ids; it "
      "holds true."),
     (C, "prompt", [1, None], "prompt must be a string or one list of integer token ids; it "
      "holds null.")],
)  # fmt: skip
def test_a_wrong_typed_field_is_named_with_its_json_value(server, route, field, value, message):
    err = _refused(server, route, {**BASE[route], field: value})
    assert (err["message"], err["param"]) == (message, field)


# --- 6 and 8: the HTTP layer ---------------------------------------------------------------
def _raw(server, request: bytes) -> tuple[int, dict]:
    port = int(server.http_url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(request)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
            head, _, body = answer.partition(b"\r\n\r\n")
            length = head.lower().partition(b"content-length:")[2].partition(b"\r\n")[0]
            if length.strip() and len(body) >= int(length):
                break
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


@pytest.mark.parametrize(
    ("request_bytes", "why"),
    [(b"GET /health\r\n\r\n", "the request line 'GET /health' is not \"METHOD /path HTTP/1.1\""),
     (b"GET /health HTTP/1.1\r\nHost x\r\n\r\n", "the header line 'Host x' has no colon"),
     (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n\r\n",
      "the chunk size line 'zz' is not a hexadecimal size"),
     ("GET /v1/models/é HTTP/1.1\r\nHost: x\r\n\r\n".encode(),
      "the request line 'GET /v1/models/é HTTP/1.1' is not ASCII; percent-encode the path (é "
      "is %C3%A9)")],
)  # fmt: skip
def test_an_unparseable_head_is_told_in_words(server, request_bytes, why):
    status, body = _raw(server, request_bytes)
    assert (status, body["error"]["message"]) == (400, f"Malformed HTTP request: {why}.")


def test_an_absolute_form_target_is_served_as_its_path(server):
    port = int(server.http_url.rsplit(":", 1)[1])
    status, body = _raw(server, f"GET http://127.0.0.1:{port}/health HTTP/1.1\r\nHost: "
                                f"127.0.0.1\r\n\r\n".encode())  # fmt: skip
    assert status == 200 and body["status"] == "ok"
    raw = json.dumps(BASE[C]).encode()
    status, body = _raw(server, b"POST HTTP://localhost/v1/completions?x=1 HTTP/1.1\r\nHost: h"
                        b"\r\nContent-Type: application/json\r\nContent-Length: "
                        + str(len(raw)).encode() + b"\r\n\r\n" + raw)  # fmt: skip
    assert status == 200 and body["choices"][0]["text"] == "de"


# --- 5 and the model name: gRPC -------------------------------------------------------------
def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = b""
    while n > 0x7F:
        out, n = out + bytes([n & 0x7F | 0x80]), n >> 7
    return out + bytes([n])


def _generate_raw(server, body: bytes) -> list:
    with grpc.insecure_channel(server.grpc_target) as channel:
        call = channel.unary_stream(
            "/wse.inference.v1.Generation/Generate",
            request_serializer=lambda b: b,
            response_deserializer=pb2.GenerateResponse.FromString,
        )
        return list(call(body, timeout=20))


TEXT = b"\x0a\x03abc"  # field 1 (text) = "abc"
PAST = "past int32 (-2147483648..2147483647); send a value in that range."


@pytest.mark.parametrize(
    ("body", "message"),
    [(TEXT + b"\x20" + _varint(2**32 + 3), f"field 4 (max_tokens) holds 4294967299, {PAST}"),
     (b"\x12\x07\x0a\x05" + _varint(2**32 + 65) + b"\x20\x02",
      f"field 2.1 (token_ids.ids) holds 4294967361, {PAST}"),
     (TEXT + b"\x20\x05\x50" + _varint(2**32 + 102),
      f"field 10 (stop_token_ids) holds 4294967398, {PAST}"),
     (TEXT + b"\x20\x02\x38" + _varint(2**32 + 1), f"field 7 (top_k) holds 4294967297, {PAST}"),
     (TEXT + b"\x20\x02\x58" + _varint(-(2**31) - 1),
      f"field 11 (logprobs) holds -2147483649, {PAST}")],
)  # fmt: skip
def test_grpc_refuses_a_varint_past_int32(server, body, message):
    with pytest.raises(grpc.RpcError) as info:
        _generate_raw(server, body)
    assert (info.value.code(), info.value.details()) == (grpc.StatusCode.INVALID_ARGUMENT, message)


def test_grpc_still_takes_int32_values_at_their_bounds(server):
    top_k_off = TEXT + b"\x20\x02\x38" + _varint(-1)  # -1 (off) as ten bytes, as int32 sends it
    assert "".join(r.text for r in _generate_raw(server, top_k_off)) == "de"
    huge = pb2.GenerateRequest(text="abc", max_tokens=2**31 - 1).SerializeToString()
    with pytest.raises(grpc.RpcError) as info:  # a context length refusal, not the int32 one
        _generate_raw(server, huge)
    assert "maximum context length" in info.value.details()


def test_grpc_cuts_a_long_model_name_with_its_quote_closed_and_its_length(server):
    req = pb2.GenerateRequest(text="abc", max_tokens=2, model="m" * 100_000)
    with pytest.raises(grpc.RpcError) as info:
        _generate_raw(server, req.SerializeToString())
    assert info.value.details() == (
        f"The model {'m' * 80!r}... (100,000 characters) does not exist; this server serves "
        "['mock']."
    )
