"""The HTTP/1.1 connection the server runs: uvicorn's h11 protocol, answering what h11 cannot
parse with OpenAI's JSON error body.

Requests h11 cannot parse at all (a Content-Length of "abc" or -1, an illegal header line)
never reach the app: `JsonErrorsH11Protocol`, the uvicorn protocol the server runs, answers
them with the same OpenAI JSON error body as the app's refusals (uvicorn's own answer is plain
text) saying what h11 found, and closes the connection. So are heads past
`RequestLimits.max_head_bytes`, heads that do not arrive within `RequestLimits.head_s`
(slowloris), heads with both Transfer-Encoding and Content-Length, and HTTP versions other
than 1.0 and 1.1. h11's reasons are told in words, the offending line quoted as text ("the
header line 'Host x' has no colon"), not as h11's `bytearray(b'...')` repr. A request target
in absolute form ("http://host:port/health", RFC 9112 3.2.2: a server MUST accept it) is
served as its path and query. After a response sent before its request's body all came (a 413 on the
Content-Length), the rest of the body is read and dropped for at most
`RequestLimits.max_discard_bytes` and `RequestLimits.discard_s`, then the connection is
closed (uvicorn read it to its end, however long). `protocol_for(limits)` is the class
uvicorn is given.

A chunked body whose chunk-size lines declare more than `RequestLimits.max_body_bytes` (the
bytes received plus the rest of the current chunk) is told to the app at once: the protocol
puts that size in the request's ASGI scope under `DECLARED_BODY_BYTES` and wakes the app's
`receive`, and `wse_inference.serve.http_body` answers 413, as it answers a Content-Length past
the limit before the body.
"""

from __future__ import annotations

import ast
import asyncio
import json
import re
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from wse_inference.serve.admission import RequestLimits
from wse_inference.serve.openai_response import error_body

__all__ = ["DECLARED_BODY_BYTES", "JsonErrorsH11Protocol", "h11_reason", "protocol_for"]

# ASGI scope key: the size a chunked body has declared, set once it passes max_body_bytes
DECLARED_BODY_BYTES = "wse.declared_body_bytes"


# h11's reasons that quote a line as a bytes repr, and what they say in words
_H11_LINE = re.compile(
    r"(illegal request line|illegal header line|illegal chunk header|malformed chunk footer): "
    r"""(?:bytearray\()?(b'(?:[^'\\]|\\.)*'|b"(?:[^"\\]|\\.)*")\)?(.*)""",
    re.DOTALL,
)
_H11_WORDS = {
    "illegal request line": 'the request line {} is not "METHOD /path HTTP/1.1"',
    "illegal chunk header": "the chunk size line {} is not a hexadecimal size",
    "malformed chunk footer": "the chunk data is followed by {}, not CRLF: a chunk is longer "
    "than its size line says",
}
_ABSOLUTE_FORM = re.compile(rb"(?i)https?://[^/?#]*")


def _quoted_line(literal: str) -> str:
    """h11's bytes repr of a line as the text a person sent, quoted, cut at 80 characters."""
    text = ast.literal_eval(literal).decode("utf-8", errors="replace").rstrip("\r\n")
    return repr(text[:80]) + (f"... ({len(text):,} characters)" if len(text) > 80 else "")


def h11_reason(message: str) -> str:
    """h11's error `message` in one readable line (hunt 65: "illegal request line:
    bytearray(b'GET /health')"), at most about 200 characters."""
    match = _H11_LINE.fullmatch(message)
    if match is None:
        return " ".join(message.split())[:200]
    what, literal = match.group(1), match.group(2)
    line, sent = _quoted_line(literal), ast.literal_eval(literal)
    if what == "illegal header line":
        return f"the header line {line} " + ('is not "Name: value"' if b":" in sent else
                                             "has no colon")  # fmt: skip
    if what == "illegal request line" and not sent.isascii():
        return f"the request line {line} is not ASCII; percent-encode the path (é is %C3%A9)"
    return _H11_WORDS[what].format(line)


def _origin_form(target: bytes) -> bytes:
    """An absolute-form target's path and query ("/" when it has no path); others as sent."""
    match = _ABSOLUTE_FORM.match(target)
    if match is None:
        return target
    rest = target[match.end() :]
    return rest if rest.startswith(b"/") else b"/" + rest


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
    discard_s: float = RequestLimits.discard_s
    max_discard_bytes: int = RequestLimits.max_discard_bytes
    max_body_bytes: int = RequestLimits.max_body_bytes

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._why = ""
        self._head_timer: asyncio.TimerHandle | None = None
        self._discard_timer: asyncio.TimerHandle | None = None
        self._discarded = 0
        self._body_bytes = 0  # of the request being read
        parse = self.conn.next_event

        def next_event() -> Any:
            try:
                event = parse()
            except h11.RemoteProtocolError as e:
                self._why = h11_reason(str(e))
                raise
            if isinstance(event, h11.Data):
                self._body_bytes += len(event.data)
            elif isinstance(event, h11.Request):  # the head is complete: the app takes over
                self._body_bytes = 0
                self._stop_head_timer()
                self._why = _head_refusal(event, self.max_head_bytes)
                if self._why:
                    raise h11.RemoteProtocolError(self._why)
                # h11's events are frozen; uvicorn reads the path from this target next
                object.__setattr__(event, "target", _origin_form(event.target))
            return event

        self.conn.next_event = next_event  # type: ignore[method-assign]

    def connection_made(self, transport: Any) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._start_head_timer()

    def data_received(self, data: bytes) -> None:
        if self._discard_timer is not None:  # answered: the rest of the body is dropped
            self._discarded += len(data)
            if self._discarded > self.max_discard_bytes:
                self._stop_discarding()
                return
        if self.conn.their_state is h11.IDLE:  # a new request's head is arriving
            self._start_head_timer()
        super().data_received(data)
        self._check_declared_chunk()
        if self._discard_timer is not None and self.conn.their_state is not h11.SEND_BODY:
            self._discard_timer.cancel()  # the body ended: the connection is kept
            self._discard_timer = None
            self._start_head_timer()  # uvicorn's keep-alive timer was unset by its data

    def _check_declared_chunk(self) -> None:
        """Tell the app when a chunk's size line makes the body larger than `max_body_bytes`
        (hunt 64: a chunk of "40000000" (1 GiB) was waited on for `body_idle_s`, then called
        a body that stopped arriving). h11 keeps the rest of the current chunk in
        `_bytes_in_chunk` (only its chunked reader has it) and says it nowhere else."""
        rest = getattr(self.conn._reader, "_bytes_in_chunk", 0)
        declared = self._body_bytes + rest
        if rest == 0 or declared <= self.max_body_bytes or DECLARED_BODY_BYTES in self.scope:
            return
        self.scope[DECLARED_BODY_BYTES] = declared  # type: ignore[literal-required]
        self.cycle.message_event.set()  # even before the chunk's first byte, `receive` returns

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.transport.is_closing() or self.conn.their_state is not h11.SEND_BODY:
            return
        self._discarded = 0  # answered before the body all came: drop the rest, for a while
        self._discard_timer = self.loop.call_later(self.discard_s, self._stop_discarding)

    def _stop_discarding(self) -> None:
        """Close a connection whose refused body goes on past the bounds on dropping it."""
        if self._discard_timer is not None:
            self._discard_timer.cancel()
            self._discard_timer = None
        if not self.transport.is_closing():
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_timer()
        if self._discard_timer is not None:
            self._discard_timer.cancel()
            self._discard_timer = None
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
        """The 400 with vLLM's error body, written as bytes: h11 sends no response before a
        request's head (the timeout's case); the connection is closed after it."""
        why = self._why or "not an HTTP/1.1 request"
        if "Content-Length" in why and "framings" not in why:  # h11's words on the header
            why += "; Content-Length must be the body's size in bytes, one decimal integer >= 0"
        if "Receive buffer too long" in why:
            why = (
                f"the request line and headers exceed {self.max_head_bytes:,} bytes; send "
                "smaller headers"
            )
        err = error_body(f"Malformed HTTP request: {why}.", reason="invalid_http")
        body = json.dumps(err, separators=(",", ":")).encode()
        head = (
            "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
        )
        self.transport.write(head.encode() + body)
        self.transport.close()


def protocol_for(limits: RequestLimits) -> type[JsonErrorsH11Protocol]:
    """`JsonErrorsH11Protocol` with `limits`' head timeout and size, body size and its bounds
    on dropping a refused body (uvicorn builds one per connection from the class; give uvicorn
    `h11_max_incomplete_event_size` the same head size)."""
    bounds = ("head_s", "max_head_bytes", "discard_s", "max_discard_bytes", "max_body_bytes")
    return type(
        "JsonErrorsH11Protocol",
        (JsonErrorsH11Protocol,),
        {name: getattr(limits, name) for name in bounds},
    )
