"""An HTTP request's JSON body, read within `RequestLimits` and parsed off the event loop.

`read_json(request, limits)` (async) returns the parsed body or raises:
- `RequestTooLargeError` (413) when `Content-Length` says more than `limits.max_body_bytes`
  (nothing is read), or when a body without one (chunked) grows past it while it streams in;
- `InvalidRequestError` (400): a `Content-Length` that is not a number, a body that is not
  UTF-8 JSON (code invalid_json; NaN / Infinity and a key twice in one object included), or
  one nested deeper than `limits.max_json_depth`
  (checked without recursion, before anything walks the value);
- `ClientGone` when the client disconnected while sending it (nobody is left to answer).

`refusal_response(error, metrics)` is the HTTP answer to any refusal (400, a model this server
does not serve included, with code model_not_found; 413, 429, 503). A Content-Type other than
application/json (or `application/*+json`), a charset other than UTF-8, or any Content-Encoding
(gzip...), is a 400 before the body is read; a body that is empty, or not UTF-8 (UTF-16
included), is a 400 invalid_json.

A body that stops arriving (a Content-Length larger than what is sent) is refused with 400
after `limits.body_idle_s` seconds without a byte, instead of holding the connection forever.
Requests h11 cannot parse at all (a Content-Length of "abc" or -1, an illegal header line)
never reach the app: `JsonErrorsH11Protocol`, the uvicorn protocol the server runs, answers
them with the same OpenAI JSON error body (uvicorn's own answer is plain text) saying what h11
found.

The bytes arrive on the event loop; parsing them, and the CPU work that follows (`run_off_loop`:
validation and tokenization), runs in a worker thread, so `/health` and the streams in flight
are answered while a large or hostile body is being refused.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any, TypeVar

import h11
from fastapi import Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect
from uvicorn.protocols.http.h11_impl import H11Protocol

from wse_inference.serve.admission import (
    InvalidRequestError,
    QueueFullError,
    RequestLimits,
    RequestTooLargeError,
)
from wse_inference.serve.metrics import ServeMetrics
from wse_inference.serve.openai_response import error_body, error_response

__all__ = [
    "ClientGone",
    "read_json",
    "json_depth",
    "run_off_loop",
    "refusal_response",
    "JsonErrorsH11Protocol",
    "protocol_for",
]

T = TypeVar("T")


class ClientGone(Exception):
    """The client disconnected before its request body was complete."""


async def run_off_loop(fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` in a worker thread (the event loop keeps serving meanwhile)."""
    return await run_in_threadpool(fn, *args)


async def _read_bytes(request: Request, limit: int, idle_s: float) -> bytes:
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
    stream = request.stream()
    try:
        while True:
            try:
                chunk = await asyncio.wait_for(anext(stream), idle_s)
            except StopAsyncIteration:
                break
            size += len(chunk)
            if size > limit:
                raise RequestTooLargeError(None, limit)
            chunks.append(chunk)
    except ClientDisconnect:
        raise ClientGone() from None
    except TimeoutError:
        said = "" if declared is None else f" of the {declared} bytes its Content-Length says"
        raise InvalidRequestError(
            f"The request body stopped arriving: {size:,} bytes{said} came, then nothing for "
            f"{idle_s:g} s. Send the whole body, with a Content-Length that is its size."
        ) from None
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


def _not_json(word: str) -> Any:
    """NaN, Infinity and -Infinity: Python's json reads them, JSON has no such values."""
    raise ValueError(f"{word} is not a JSON value (numbers must be finite)")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object whose keys are distinct: {"prompt": "a", "prompt": "b"} is ambiguous (the
    last would silently win), so it is refused."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"the key {key[:40]!r} appears more than once in one object")
            seen.add(key)
    return out


def _check_content_type(declared: str | None) -> None:
    """A body declared as anything but JSON (text/plain, a form: curl -d without -H) is refused,
    as vLLM refuses it; no Content-Type at all is read as JSON."""
    if declared is None:
        return
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
        body = json.loads(text, parse_constant=_not_json, object_pairs_hook=_no_duplicates)
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
    _check_content_type(request.headers.get("content-type"))
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding != "identity":  # hunt 56: a gzip body was "Malformed JSON ... byte 0x8b"
        raise InvalidRequestError(
            f"Content-Encoding {encoding[:40]!r} is not supported; send the JSON body "
            "uncompressed (no Content-Encoding).",
            code="invalid_content_encoding",
        )
    raw = await _read_bytes(request, limits.max_body_bytes, limits.body_idle_s)
    return await run_off_loop(_parse, raw, limits.max_json_depth)


def refusal_response(e: Exception, metrics: ServeMetrics) -> Response:
    """The HTTP answer to a refused request (counted in `metrics` by reason): 400 with
    OpenAI's error body, 413 before the rest of the body is read (a client that sends it
    anyway has it read and dropped: closing at once would reset the connection before the
    client reads the 413), 429 with Retry-After, 503 while draining; an empty 400 to a client
    already gone."""
    if isinstance(e, ClientGone):  # nobody is left to read an answer
        metrics.reject("invalid")
        return Response(status_code=400)
    if isinstance(e, RequestTooLargeError):
        metrics.reject("invalid")
        return error_response(413, str(e), type_="invalid_request_error", code=e.code)
    if isinstance(e, InvalidRequestError):
        metrics.reject("invalid")
        return error_response(
            400, str(e), type_="invalid_request_error", param=e.param, code=e.code
        )
    if isinstance(e, QueueFullError):
        metrics.reject("queue_full")
        return error_response(
            429,
            str(e),
            type_="rate_limit_error",
            code="queue_full",
            headers={"Retry-After": str(e.retry_after_s)},
        )
    metrics.reject("shutting_down")
    return error_response(503, str(e), type_="service_unavailable", code="shutting_down")


def _head_bytes(event: h11.Request) -> int:
    """The size of a parsed request line and headers as sent (CRLFs included)."""
    line = len(event.method) + len(event.target) + len(event.http_version) + 9
    return line + sum(len(name) + len(value) + 4 for name, value in event.headers) + 2


def _head_refusal(event: h11.Request, max_head_bytes: int) -> str:
    """Why a complete head is refused ('' if it is not): past `max_head_bytes` (it came whole
    in one read, which h11's limit never sees), or both Transfer-Encoding and Content-Length
    (h11 read the body as chunked and kept the connection open: RFC 9112 6.3 says close, as
    the two framings are how requests are smuggled past a proxy), or an HTTP version other than
    1.0 and 1.1 (HTTP/2's preface "PRI * HTTP/2.0" was a 404, then a 400 on its "SM")."""
    if _head_bytes(event) > max_head_bytes:
        return f"the request line and headers exceed {max_head_bytes:,} bytes; send smaller headers"
    if event.http_version not in (b"1.0", b"1.1"):  # h11 read HTTP/2's preface as a request
        return (
            f"HTTP/{event.http_version.decode(errors='replace')[:8]} is not served here; send "
            "HTTP/1.1 (gRPC clients: the server's gRPC port)"
        )
    names = {name for name, _ in event.headers}
    if b"transfer-encoding" in names and b"content-length" in names:
        return (
            "it has both Transfer-Encoding and Content-Length, two framings of one body; "
            "send one of them"
        )
    return ""


class JsonErrorsH11Protocol(H11Protocol):
    """uvicorn's h11 protocol, answering a request h11 cannot parse with OpenAI's JSON error
    body naming what is wrong (uvicorn's own answer is text/plain "Invalid HTTP request
    received."; such a request never reaches the app). A request line and headers that have
    not all arrived `head_s` seconds after their first byte (or after the connection opened)
    get a 400 and the connection is closed (uvicorn has no such timeout: a slowloris client
    held its connection forever). A head past `max_head_bytes` is a 400 whether it arrived in
    pieces (h11's incomplete-event limit) or whole in one read (hunt 58b: up to ~256 KB were
    taken that way); so is a head with both Transfer-Encoding and Content-Length.
    `protocol_for(limits)` sets `head_s` and `max_head_bytes`."""

    head_s: float = RequestLimits.head_s
    max_head_bytes: int = RequestLimits.max_head_bytes

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._why = ""
        self._head_timer: asyncio.TimerHandle | None = None
        parse = self.conn.next_event

        def next_event() -> Any:
            try:
                event = parse()
            except h11.RemoteProtocolError as e:
                self._why = " ".join(str(e).split())[:200]
                raise
            if isinstance(event, h11.Request):  # the head is complete: the app takes over
                self._stop_head_timer()
                self._why = _head_refusal(event, self.max_head_bytes)
                if self._why:
                    raise h11.RemoteProtocolError(self._why)
            return event

        self.conn.next_event = next_event  # type: ignore[method-assign]

    def connection_made(self, transport: Any) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._start_head_timer()

    def data_received(self, data: bytes) -> None:
        if self.conn.their_state is h11.IDLE:  # a new request's head is arriving
            self._start_head_timer()
        super().data_received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_timer()
        super().connection_lost(exc)

    def _start_head_timer(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.head_s, self._head_timed_out)

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        self._why = (
            f"the request line and headers did not arrive within {self.head_s:g} s of their "
            "first byte; send the whole head at once"
        )
        self._send_json_400()

    def send_400_response(self, msg: str) -> None:
        self._stop_head_timer()
        self._send_json_400()

    def _send_json_400(self) -> None:
        """The 400 with OpenAI's body, written as bytes: h11 sends no response before a
        request's head (the timeout's case); the connection is closed after it."""
        why = self._why or "not an HTTP/1.1 request"
        if "Content-Length" in why and "framings" not in why:  # h11's words on the header
            why += "; Content-Length must be the body's size in bytes, one decimal integer >= 0"
        if "Receive buffer too long" in why:
            why = (
                f"the request line and headers exceed {self.max_head_bytes:,} bytes; send "
                "smaller headers"
            )
        err = error_body(f"Malformed HTTP request: {why}.", code="invalid_http")
        body = json.dumps(err, separators=(",", ":")).encode()
        head = (
            "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
        )
        self.transport.write(head.encode() + body)
        self.transport.close()


def protocol_for(limits: RequestLimits) -> type[JsonErrorsH11Protocol]:
    """`JsonErrorsH11Protocol` with `limits`' head timeout and size (uvicorn builds one per
    connection from the class; give uvicorn `h11_max_incomplete_event_size` the same size)."""
    return type(
        "JsonErrorsH11Protocol",
        (JsonErrorsH11Protocol,),
        {"head_s": limits.head_s, "max_head_bytes": limits.max_head_bytes},
    )
