"""Hunt 78's inference edges.

`wse infer bench`: an SSE chunk that is not JSON was reported in json's own words ("Expecting
value: line 1 column 1 (char 0)"), and one that is not UTF-8 the same (its bad byte read as
U+FFFD); now each is a line of the form of the client's other chunk errors. Oracle: Python's
own decoders (`bytes.decode("utf-8")`, as vLLM's bench client decodes a chunk, and
`json.loads`) say which chunks are bad; a chunk both accept still completes.
"""

from __future__ import annotations

import json

import pytest
from wse_inference.demo.load_test import LoadTestConfig, run_load_test
from wse_inference.testing import fake_openai_server as fake_server

pytestmark = pytest.mark.timeout(60)

GOOD_MODELS = b'{"object": "list", "data": [{"id": "m"}]}'


def _bench(chunk: bytes) -> dict:
    stream = b"data: " + chunk + b"\n\ndata: [DONE]\n\n"
    with fake_server(GOOD_MODELS, stream) as url:
        cfg = LoadTestConfig(url=url, num_requests=2, concurrency=1, timeout_s=10)
        return run_load_test(cfg)


def _decodes(chunk: bytes) -> bool:
    try:
        json.loads(chunk.decode("utf-8"))
    except ValueError:
        return False
    return True


@pytest.mark.parametrize(
    ("chunk", "want"),
    [
        (b"not json at all", "a chunk that is not JSON (Expecting value at character 0): "
                             "'not json at all'"),
        (b"x" * 200, f"a chunk that is not JSON (Expecting value at character 0): "
                     f"{'x' * 80!r}"),
        (b'{"choices": [{"text": "a"}]', "a chunk that is not JSON (Expecting ',' delimiter "
                                         "at character 27): '{\"choices\": [{\"text\": \"a\"}]'"),
    ],
)  # fmt: skip
def test_a_chunk_that_is_not_json_fails_in_one_line(chunk, want):
    assert not _decodes(chunk)
    summary = _bench(chunk)
    assert (summary["completed"], summary["failed"]) == (0, 2)
    assert summary["errors"][0] == want


@pytest.mark.parametrize(
    "chunk", [b"\xff", b'{"choices": [{"text": "\xc3"}]}', b"\x80" + b"a" * 100, b"ok \xed\xa0\x80"]
)
def test_a_chunk_that_is_not_utf8_fails_in_one_line(chunk):
    with pytest.raises(UnicodeDecodeError) as bad:  # vLLM's client: chunk_bytes.decode("utf-8")
        chunk.decode("utf-8")
    at, byte = bad.value.start, chunk[bad.value.start]  # ASCII before it: byte = character
    shown = chunk.decode("utf-8", "replace")[:80]
    summary = _bench(chunk)
    assert (summary["completed"], summary["failed"]) == (0, 2)
    want = f"a chunk that is not UTF-8 (byte 0x{byte:02x} at character {at}): {shown!r}"
    assert summary["errors"][0] == want


@pytest.mark.parametrize("text", ["a", "é", "\ufffd", "日本"])
def test_a_chunk_python_decodes_still_completes(text):
    chunk = json.dumps({"choices": [{"text": text}]}, ensure_ascii=False).encode()
    assert _decodes(chunk)
    assert _bench(chunk)["completed"] == 2


# --- the server: vLLM's request_id and priority ------------------------------------------
# Oracle: vLLM's protocol and engine. `request_id: str = Field(default_factory=random_uuid)`
# (pydantic: an int is "Input should be a valid string", a 400), and `priority: int = 0`
# with AsyncLLMEngine.add_request's "Got priority {priority} but Priority scheduling is not
# enabled." (a 400) unless --scheduling-policy priority, which this server never runs.
def _refused(body: dict) -> dict | None:
    import httpx
    from wse_inference.serve.testing import running_server

    with running_server(max_slots=2, max_context=64) as s:
        r = httpx.post(f"{s.http_url}/v1/completions", timeout=10,
                       json={"model": "mock", "prompt": "hi", "max_tokens": 2, **body})  # fmt: skip
    return None if r.status_code == 200 else {"status": r.status_code, **r.json()["error"]}


def _parse(body: dict):
    from wse_inference.mock import ByteTokenizer
    from wse_inference.serve.openai_request import parse_request

    return parse_request({"model": "m", "prompt": "hi", **body}, kind="completion",
                         tokenizer=ByteTokenizer(), model_names=["m"], max_context=64)  # fmt: skip


@pytest.mark.parametrize("rid", [5, 1.5, True, ["a"], {"a": 1}])
def test_a_request_id_that_is_not_a_string_is_a_400_naming_it(rid):
    from wse_inference.serve.admission import InvalidRequestError

    with pytest.raises(InvalidRequestError) as e:
        _parse({"request_id": rid})
    assert e.value.param == "request_id"
    assert str(e.value) == f"request_id must be a string, got {json.dumps(rid)}."


@pytest.mark.parametrize("priority", [5, -1, 2.0])
def test_a_priority_other_than_0_is_a_400_naming_it(priority):
    from wse_inference.serve.admission import InvalidRequestError

    with pytest.raises(InvalidRequestError) as e:
        _parse({"priority": priority})
    assert e.value.param == "priority" and f"priority {int(priority)} needs priority" in str(
        e.value
    )


@pytest.mark.parametrize("priority", ["5", 1.5, True])
def test_a_priority_that_is_not_an_integer_is_a_400(priority):
    from wse_inference.serve.admission import InvalidRequestError

    with pytest.raises(InvalidRequestError, match="^priority must be an integer") as e:
        _parse({"priority": priority})
    assert e.value.param == "priority"


ACCEPTED = [{}, {"request_id": "abc-1"}, {"priority": 0}, {"priority": 0.0},
            {"priority": None, "request_id": None}]  # fmt: skip


@pytest.mark.parametrize("body", ACCEPTED)
def test_what_vllm_accepts_is_accepted(body):
    _parse(body)


def test_over_http_each_is_a_400_naming_its_field():
    assert _refused({"request_id": "r-1", "priority": 0}) is None
    for field, value in (("request_id", 5), ("priority", 5)):
        got = _refused({field: value})
        assert got is not None and (got["status"], got["param"]) == (400, field), got
