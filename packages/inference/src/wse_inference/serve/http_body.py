"""An HTTP request's JSON body, read within `RequestLimits` and parsed off the event loop.

`read_json(request, limits)` (async) returns the parsed body or raises:
- `RequestTooLargeError` (413) when `Content-Length` says more than `limits.max_body_bytes`
  (nothing is read), or a chunked body's chunk-size lines do (at the size line, told by
  `wse_inference.serve.http_protocol`), or a body grows past it while it streams in;
- `InvalidRequestError` (400): a `Content-Length` that is not a number, a body that is not
  UTF-8 JSON (reason invalid_json; NaN / Infinity and a key twice in one object included), or
  one nested deeper than `limits.max_json_depth`
  (checked without recursion, before anything walks the value);
- `ClientGone` when the client disconnected while sending it (nobody is left to answer);
- `QueueFullError` (429) when the bodies being read or parsed at once, all connections
  together, would pass `limits.max_body_bytes_in_flight`.

`refusal_response(error, metrics)` is the HTTP answer to any refusal (400; 404 with reason
model_not_found, its `code` the status, for a model this server does not serve, as OpenAI's
and vLLM's; 413, 429, 503). A Content-Type other than
application/json (or `application/*+json`), or several differing ones, a charset other than
UTF-8, or any content coding
(gzip..., in any of the Content-Encoding headers), is a 400 before the body is read; a body
that is empty, or not UTF-8 (UTF-16 included), is a 400 invalid_json.

A body that stops arriving (a Content-Length larger than what is sent) is refused with 400
after `limits.body_idle_s` seconds without a byte, and one still arriving after `limits.body_s`
seconds in all (a byte every few seconds), instead of holding the connection forever.
Requests h11 cannot parse at all (a Content-Length of "abc" or -1, an illegal header line)
never reach the app: `wse_inference.serve.http_protocol` answers them.

The bytes arrive on the event loop; parsing them, and the CPU work that follows (`run_off_loop`:
validation and tokenization), runs in a worker thread, so `/health` and the streams in flight
are answered while a large or hostile body is being refused.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

from fastapi import Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect
from wse_core.host.json_keys import distinct_keys, not_json

from wse_inference.serve.admission import (
    InvalidRequestError,
    QueueFullError,
    RequestLimits,
    RequestTooLargeError,
)
from wse_inference.serve.http_protocol import DECLARED_BODY_BYTES
from wse_inference.serve.metrics import ServeMetrics
from wse_inference.serve.openai_response import error_response

__all__ = [
    "ClientGone",
    "read_json",
    "json_depth",
    "run_off_loop",
    "refusal_response",
]

T = TypeVar("T")


class ClientGone(Exception):
    """The client disconnected before its request body was complete."""


async def run_off_loop(fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` in a worker thread (the event loop keeps serving meanwhile)."""
    return await run_in_threadpool(fn, *args)


class _BodyBudget:
    """Bytes of request bodies one app holds at once, read or being parsed, all connections
    together (used on the event loop only, so no lock). Past `limit` a body is refused with
    429: each connection may hold `max_body_bytes`, so without it memory grew with the number
    of connections (hunt 58b: 300 clients each stalling a 2 MB body held 650 MB)."""

    def __init__(self, limit: int) -> None:
        self.limit, self.held = limit, 0

    def take(self, n: int) -> None:
        if self.held + n > self.limit:
            raise QueueFullError(
                f"The server is holding {self.held:,} bytes of other request bodies (at most "
                f"{self.limit:,} at once); retry later.",
                retry_after_s=1,
            )
        self.held += n


def _budget(request: Request, limits: RequestLimits) -> _BodyBudget:
    state = request.app.state
    if getattr(state, "body_budget", None) is None:
        state.body_budget = _BodyBudget(limits.max_body_bytes_in_flight)
    return state.body_budget


async def _pieces(request: Request) -> AsyncIterator[bytes]:
    """The body as it arrives, empty pieces included: the protocol sends one to wake the reader
    when a chunk's size line declares too much (`request.stream()` skips them)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        yield message.get("body", b"")
        if not message.get("more_body", False):
            return


async def _read_bytes(request: Request, limits: RequestLimits, budget: _BodyBudget) -> bytes:
    """The body, its size taken from `budget` (the caller gives it back)."""
    limit, idle_s = limits.max_body_bytes, limits.body_idle_s
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            size = int(declared)
        except ValueError:
            raise InvalidRequestError(
                f"Content-Length must be a number of bytes, got {declared[:40]!r}."
            ) from None
        if size > limit:
            raise RequestTooLargeError(size, limit)
    chunks, size = [], 0
    stream = _pieces(request)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limits.body_s
    try:
        while True:
            try:
                wait = min(idle_s, deadline - loop.time())
                chunk = await asyncio.wait_for(anext(stream), max(wait, 0.0))
            except StopAsyncIteration:
                break
            if (promised := request.scope.get(DECLARED_BODY_BYTES, 0)) > limit:
                raise RequestTooLargeError(promised, limit, at_least=True)  # its size lines
            if size + len(chunk) > limit:
                raise RequestTooLargeError(None, limit)
            budget.take(len(chunk))
            size += len(chunk)
            chunks.append(chunk)
    except ClientDisconnect:
        budget.held -= size
        raise ClientGone() from None
    except TimeoutError:
        budget.held -= size
        said = "" if declared is None else f" of the {declared} bytes its Content-Length says"
        if loop.time() >= deadline:
            raise InvalidRequestError(
                f"The request body took too long: {size:,} bytes{said} came in "
                f"{limits.body_s:g} s. Send the whole body at once, with a Content-Length "
                "that is its size."
            ) from None
        raise InvalidRequestError(
            f"The request body stopped arriving: {size:,} bytes{said} came, then nothing for "
            f"{idle_s:g} s. Send the whole body, with a Content-Length that is its size."
        ) from None
    except BaseException:
        budget.held -= size
        raise
    return b"".join(chunks)


def json_depth(value: Any) -> int:
    """The nesting depth of a JSON value (a scalar is 0, [] or {} is 1), without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, dict):
            v = list(v.values())
        elif not isinstance(v, list):
            continue
        deepest = max(deepest, depth + 1)
        stack.extend((x, depth + 1) for x in v if isinstance(x, dict | list))
    return deepest


def _meaning(field: str) -> tuple[str, str]:
    """A Content-Type's media type and charset, as compared: lower case, UTF-8 where none is
    named (JSON's, RFC 8259), "utf8" as "utf-8"."""
    media, *params = (part.strip().lower() for part in field.split(";"))
    charset = "utf-8"
    for param in params:
        name, _, value = param.partition("=")
        if name.strip() == "charset":
            charset = value.strip().strip('"').replace("utf8", "utf-8")
    return media, charset


def _check_content_type(fields: list[str]) -> None:
    """A body declared as anything but JSON (text/plain, a form: curl -d without -H) is refused,
    as vLLM refuses it; no Content-Type at all is read as JSON. Content-Type is a singleton
    field (RFC 9110 5.3): several differing ones are refused (hunt 79: only the first was
    read, so JSON then text/plain passed); the same one repeated is that one, spelled in any
    case, with or without UTF-8 named (`_meaning`)."""
    if not fields:
        return
    if len({_meaning(f) for f in fields}) > 1:
        distinct = sorted({f.strip() for f in fields})
        said = ", ".join(repr(f[:40]) for f in distinct[:3])
        raise InvalidRequestError(
            f"Content-Type is given {len(fields)} times with different values ({said}"
            f"{', ...' if len(distinct) > 3 else ''}); send one Content-Type: application/json.",
            code="invalid_content_type",
        )
    declared = fields[0]
    media, *params = (part.strip() for part in declared.split(";"))
    media = media.lower()
    if media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    ):
        _check_charset(params, declared)
        return
    raise InvalidRequestError(
        f"Content-Type must be application/json, got {declared[:60]!r}; send the body as JSON "
        "with the header Content-Type: application/json.",
        code="invalid_content_type",
    )


def _check_charset(params: list[str], declared: str) -> None:
    """JSON is UTF-8 (RFC 8259); a body declared in another charset (latin-1, utf-16) would be
    misread or refused as "Malformed JSON ... can't decode byte", so the charset is refused
    by name (hunt 58b)."""
    for param in params:
        name, _, value = param.partition("=")
        charset = value.strip().strip('"').lower()
        if name.strip().lower() == "charset" and charset not in ("utf-8", "utf8"):
            raise InvalidRequestError(
                f"Content-Type {declared[:60]!r} declares the charset {charset[:20]!r}; this "
                "server reads JSON in UTF-8 only: send the body as UTF-8 (charset=utf-8 or no "
                "charset).",
                code="invalid_content_type",
            )


def _check_content_encoding(headers: list[str]) -> None:
    """A body with any content coding is refused (hunt 56: a gzip body was "Malformed JSON
    ... byte 0x8b"). Every Content-Encoding header counts: repeated ones are one list, applied
    in order (RFC 9110 5.3, 8.4), and empty elements are ignored (hunt 64: of "identity" then
    "gzip" only the first was read, and the gzip body was called UTF-16)."""
    codings = [c.strip().lower() for header in headers for c in header.split(",")]
    named = [c for c in codings if c]
    if all(c == "identity" for c in named):
        return
    raise InvalidRequestError(
        f"Content-Encoding {', '.join(named)[:60]!r} is not supported; send the JSON body "
        "uncompressed (no Content-Encoding).",
        code="invalid_content_encoding",
    )


def _parse(raw: bytes, max_depth: int) -> Any:
    too_deep = InvalidRequestError(
        f"The request body nests objects and lists more than {max_depth} levels deep.",
        code="invalid_json",
    )
    if not raw.strip():  # was "Malformed JSON ...: Expecting value: line 1 column 1 (char 0)"
        raise InvalidRequestError(
            "The request body is empty; send a JSON object (Content-Type: application/json).",
            code="invalid_json",
        )
    if raw[:2] in (b"\xff\xfe", b"\xfe\xff") or b"\x00" in raw[:4]:  # JSON has no NUL byte
        raise InvalidRequestError(
            "The request body is in UTF-16 or UTF-32; send the JSON in UTF-8.", code="invalid_json"
        )
    try:
        # UTF-8 only (a BOM allowed): json.loads(bytes) also reads UTF-16 and UTF-32 (hunt 56)
        raw = raw.removeprefix(b"\xef\xbb\xbf")
        text = raw.decode("utf-8")
        body = json.loads(text, parse_constant=not_json, object_pairs_hook=distinct_keys)
    except RecursionError:
        raise too_deep from None
    except UnicodeDecodeError as e:  # was Python's "'utf-8' codec can't decode byte 0xff ..."
        raise InvalidRequestError(
            f"The request body is not UTF-8 (byte {e.start:,} is 0x{raw[e.start]:02x}); send "
            "the JSON in UTF-8.",
            code="invalid_json",
        ) from None
    except ValueError as e:
        why = str(e)
        if "integer string conversion" in why:  # Python's own advice (sys.set_int_max_...)
            why = "a number has more than 4300 digits"
        raise InvalidRequestError(
            f"Malformed JSON in the request body: {why}", code="invalid_json"
        ) from None
    if json_depth(body) > max_depth:
        raise too_deep
    return body


async def read_json(request: Request, limits: RequestLimits) -> Any:
    """The request's JSON body within `limits` (see the module docstring)."""
    _check_content_type(request.headers.getlist("content-type"))
    _check_content_encoding(request.headers.getlist("content-encoding"))
    budget = _budget(request, limits)
    raw = await _read_bytes(request, limits, budget)
    try:
        return await run_off_loop(_parse, raw, limits.max_json_depth)
    finally:
        budget.held -= len(raw)


def refusal_response(e: Exception, metrics: ServeMetrics) -> Response:
    """The HTTP answer to a refused request (counted in `metrics` by reason): 400 with
    vLLM's error body (404 for a model not served: `ModelNotFoundError.http_status`), 413
    before the rest of the body is read (a client that sends it anyway has it read and
    dropped, within `RequestLimits.max_discard_bytes` and `discard_s` (`http_protocol`):
    closing at once would reset the connection before the client reads the 413), 429 with
    Retry-After, 503 while draining; an empty 400 to a client already gone."""
    if isinstance(e, ClientGone):  # nobody is left to read an answer
        metrics.reject("invalid")
        return Response(status_code=400)
    if isinstance(e, RequestTooLargeError):
        metrics.reject("invalid")
        return error_response(413, str(e), reason=e.code)
    if isinstance(e, InvalidRequestError):
        metrics.reject("invalid")
        return error_response(e.http_status, str(e), param=e.param, reason=e.code)
    if isinstance(e, QueueFullError):
        metrics.reject("queue_full")
        return error_response(
            429,
            str(e),
            reason="queue_full",
            headers={"Retry-After": str(e.retry_after_s)},
        )
    metrics.reject("shutting_down")
    return error_response(503, str(e), reason="shutting_down")
