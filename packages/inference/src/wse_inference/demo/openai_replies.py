"""What an OpenAI-compatible server answers `wse infer bench`, read with bounds and checked.

The load-test client (`demo.load_test`) trusts none of it (hunts 58b, 68, 69):

- `read_head(parts, limit)`: at most `limit + 1` bytes of a body (a body may never end);
- `sse_data(parts, limit)`: the `data:` payloads of an SSE stream, its lines at most `limit`
  bytes (`LineTooLong` past it: a line with no newline was buffered until the deadline, ~200 MB/s);
- `first_model(status, body)`: the first model id of GET /v1/models (`ServerReplyError`,
  carrying the HTTP status where it was not 200, when there is none);
- `parse_chunk(data, chat=False)`: one `data:` payload as a `Chunk` (ValueError saying what
  is wrong, each in one form: "a chunk that is not JSON (Expecting value at character 0):
  'not json at all'", "a chunk that is not UTF-8 (byte 0xff at character 0): ..."; hunt 78:
  it was json's bare "Expecting value: line 1 column 1 (char 0)"); `chat`: a chat stream's,
  whose text is its choices' `delta.content`;
- `reason(detail)`: the message of an error reply.

JSON nested deeper than Python's reader goes (a 4 KB `[[[[...` is enough) is a RecursionError
from `json.loads`; here it is a malformed reply like any other (it was a traceback, hunt 69).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import NamedTuple

import httpx
from wse_core.errors import not_utf8

__all__ = [
    "MAX_MODELS_BYTES",
    "MAX_LINE_BYTES",
    "MAX_ERROR_BYTES",
    "MAX_INT_DIGITS",
    "Chunk",
    "LineTooLong",
    "ServerReplyError",
    "first_model",
    "parse_chunk",
    "phrase",
    "read_head",
    "reason",
    "sse_data",
]

# GET /v1/models lists each model in ~100-200 bytes (vLLM's entries, with their permission
# block, ~400); a server with 1,000 LoRA adapters answers ~400 KB. Past 1 MiB it is not a list
# of models (hunt 69: an endless reply was read whole, 2.1 GB in 10 s).
MAX_MODELS_BYTES = 1 << 20
# One SSE line is one chunk: a few tokens of text and their ids, a few KB with top-20 logprobs.
# A chunk of 1 MiB is a server fault; the cap bounds each request's buffer (hunt 69: 1.6 GB).
MAX_LINE_BYTES = 1 << 20
MAX_ERROR_BYTES = 4096  # the start of an error reply is enough to say why (it may be endless)
# Digits of the longest integer a chunk may hold: a count or a timestamp fits in 64 bits (19
# digits); a longer one is refused before Python makes it (past 4,300 digits Python's own
# refusal tells the reader to lift an interpreter limit).
MAX_INT_DIGITS = 20


class ServerReplyError(Exception):
    """The server's GET /v1/models gave no model id to ask for. When it answered another HTTP
    status than 200 (404: not the base URL; 401/403: a key is needed), `status` is that status
    and `reason` the server's message (its text: unescaped); else both are None."""

    def __init__(
        self, message: str, *, status: int | None = None, reason: str | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.reason = status, reason


class LineTooLong(ValueError):
    """An SSE line past `MAX_LINE_BYTES` (no newline in sight)."""


class Chunk(NamedTuple):
    """One streamed completion chunk: `choice` (its `choices` list is not empty: vLLM's test
    for a chunk that carries a token), their `text`, `finished` (a choice has a
    finish_reason), `tokens` and `prompt_tokens` (usage.completion_tokens and
    usage.prompt_tokens, None when absent), `role_only` (a chat chunk whose deltas carry a
    role and no content: vLLM's server opens every chat stream with one)."""

    choice: bool
    text: str
    finished: bool
    tokens: int | None
    prompt_tokens: int | None = None
    role_only: bool = False


async def read_head(parts: AsyncIterator[bytes], limit: int) -> bytes:
    """The first bytes of a body, at most `limit + 1` (more than `limit`: it did not end)."""
    head = bytearray()  # appended in place: a body read a byte at a time is no quadratic copy
    async for part in parts:
        head += part
        if len(head) > limit:
            break
    return bytes(head[: limit + 1])


async def sse_data(parts: AsyncIterator[bytes], limit: int) -> AsyncIterator[list[str]]:
    """The `data:` payloads of an SSE body (UTF-8, a bad byte kept as a lone surrogate,
    surrogateescape's, for `parse_chunk` to refuse as vLLM's client does), those completed by
    each read together (they arrived at once); `LineTooLong` for a line of more than `limit`
    bytes. Each read is scanned in C (`splitlines`), never what came before it: a server
    sending a byte at a time costs no more than one sending it all. A CRLF cut
    between two reads is one empty line more, which SSE reads as an event boundary."""
    pending = bytearray()
    async for part in parts:
        if b"\n" not in part and b"\r" not in part:  # the middle of a line
            pending += part
            _check_line(len(pending), limit)
            continue
        lines = part.splitlines(keepends=True)
        lines[0] = bytes(pending) + lines[0]
        pending = bytearray(b"" if lines[-1].endswith((b"\n", b"\r")) else lines.pop())
        if max(len(lines[0]), len(part)) > limit:  # else no line can be longer (the usual)
            longest = max(len(line.rstrip(b"\r\n")) for line in lines)  # one ends in "\n"
            _check_line(max(longest, len(pending)), limit)
        yield [_payload(line) for line in lines if line.startswith(b"data:")]
    if pending.startswith(b"data:"):
        yield [_payload(bytes(pending))]


def _payload(line: bytes) -> str:
    """A `data:` line's payload: after "data:" and its optional space (SSE's rule)."""
    data = line[5:].rstrip(b"\r\n")
    return (data[1:] if data.startswith(b" ") else data).decode("utf-8", "surrogateescape")


def _check_line(size: int, limit: int) -> None:
    if size > limit:
        raise LineTooLong(
            f"a line of more than {limit:,} bytes from the server without a newline (a chunk "
            "is a few KB)"
        )


def _loads(data: str | bytes, **kw: object) -> object:
    """`json.loads`, with JSON nested too deep for it a ValueError like any malformed text."""
    try:
        return json.loads(data, **kw)  # type: ignore[arg-type]
    except RecursionError:
        raise ValueError("JSON nested deeper than any OpenAI reply (about 1,000 levels)") from None


def first_model(status: int, body: bytes) -> str:
    """The first model id of OpenAI's GET /v1/models reply (`status`, `body`)."""
    if status != 200:
        said = reason(body)
        raise ServerReplyError(
            f"GET /v1/models answered {status} {phrase(status)}: {said}", status=status, reason=said
        )
    if len(body) > MAX_MODELS_BYTES:
        raise ServerReplyError(
            f"GET /v1/models sent more than {MAX_MODELS_BYTES:,} bytes (a list of models is a "
            "few KB)"
        )
    try:
        model = _loads(body)["data"][0]["id"]  # type: ignore[index]
    except (ValueError, LookupError, TypeError):
        model = None
    if not isinstance(model, str) or not model:
        raise ServerReplyError(
            f'GET /v1/models did not answer OpenAI\'s {{"data": [{{"id": ...}}]}} (got '
            f"{body[:80].decode(errors='replace')!r}); give the model with --model, or check "
            "the URL"
        )
    return model


def phrase(status: int) -> str:
    """The standard words of an HTTP status (`Not Found`), not the server's own."""
    return httpx.codes.get_reason_phrase(status) or "(no standard meaning)"


def parse_chunk(data: str, *, chat: bool = False) -> Chunk:
    """One SSE `data:` payload as a `Chunk`; ValueError naming what is wrong if it is not
    OpenAI's chunk (or is an error event). `chat`: a chat completion's chunk, its text its
    choices' `delta.content`."""

    def integer(digits: str) -> int:
        if len(digits.lstrip("-")) > MAX_INT_DIGITS:
            raise ValueError(
                f"a chunk holding an integer of {len(digits.lstrip('-')):,} digits (a count "
                f"has at most {MAX_INT_DIGITS} digits): {data[:80]!r}"
            )
        return int(digits)

    if (where := not_utf8(data)) is not None:  # vLLM's client decodes a chunk strictly
        shown = data.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        raise ValueError(f"a chunk that is not UTF-8 ({where}): {shown[:80]!r}")
    try:
        chunk = _loads(data, parse_int=integer)
    except json.JSONDecodeError as e:  # the others are this module's own lines
        where = f"{e.msg} at character {e.pos:,}"  # the line shows only its first 80
        raise ValueError(f"a chunk that is not JSON ({where}): {data[:80]!r}") from None
    if not isinstance(chunk, dict):
        raise ValueError(f"a chunk that is not a JSON object: {data[:80]!r}")
    if "error" in chunk:
        err = chunk["error"]
        raise ValueError(str(err.get("message") if isinstance(err, dict) else err)[:200])
    choices = chunk.get("choices") or []
    if not isinstance(choices, list) or not all(
        isinstance(c, dict) and isinstance(c.get("text") or "", str) for c in choices
    ):
        raise ValueError(f"a chunk whose choices are not OpenAI's: {data[:80]!r}")
    text = "".join(c.get("text") or "" for c in choices)
    finished = any(c.get("finish_reason") for c in choices)
    role_only = False
    if chat and choices:
        deltas = [c.get("delta") or {} for c in choices]
        if not all(isinstance(d, dict) and isinstance(d.get("content") or "", str) for d in deltas):
            raise ValueError(f"a chunk whose choices are not OpenAI chat's: {data[:80]!r}")
        text = "".join(d.get("content") or "" for d in deltas)
        role_only = not text and not finished and any("role" in d for d in deltas)
    usage = chunk.get("usage")
    if usage is None:
        return Chunk(bool(choices), text, finished, None, role_only=role_only)
    tokens, prompt = (usage.get(k) if isinstance(usage, dict) else None
                      for k in ("completion_tokens", "prompt_tokens"))  # fmt: skip
    if not _count(tokens) or not (prompt is None or _count(prompt)):
        raise ValueError(f"a chunk whose usage is not OpenAI's: {data[:80]!r}")
    return Chunk(bool(choices), text, finished, tokens, prompt, role_only)


def _count(v) -> bool:
    """A token count as JSON gives one: an int >= 0, not a bool."""
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def reason(detail: bytes) -> str:
    """An error reply's OpenAI message (at most 300 characters), else its first 200 bytes
    (hunt 61: the JSON was cut at 200 bytes, mid-message)."""
    try:
        message = str(_loads(detail)["error"]["message"])  # type: ignore[index]
    except (ValueError, KeyError, TypeError):
        return detail[:200].decode(errors="replace")
    return message if len(message) <= 300 else message[:300] + "..."
