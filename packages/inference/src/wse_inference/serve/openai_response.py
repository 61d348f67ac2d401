"""The OpenAI wire format of answers: whole bodies, SSE chunks, logprobs, errors.

`completion_body`, `chunk_body` and `usage_chunk_body` build the answer bodies of
`/v1/completions` and `/v1/chat/completions` from finished `Choice`s or streamed deltas
(`serve.generation.Generation` drives them from scheduler events); `error_response` is
vLLM's error body (`error_body`) with its status; `sse` frames one server-sent event.

Responses follow OpenAI's shapes, plus Cerebras' `time_info` ({queue_time, prompt_time,
completion_time, total_time} in seconds, `created` in Unix seconds) next to `usage`.

Log probabilities are `openai_logprobs`' (re-exported here). This module is the answer side of
the wire format (`openai_request` reads requests; `routes` holds the app, `app` the shell).
"""

from __future__ import annotations

import dataclasses
import http
import json
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse

from wse_inference.serve.openai_logprobs import logprobs_and_end, logprobs_body, token_text
from wse_inference.serve.openai_request import ParsedRequest

__all__ = [
    "Choice",
    "token_text",
    "error_response",
    "error_body",
    "error_type",
    "usage_dict",
    "logprobs_body",
    "logprobs_and_end",
    "completion_body",
    "chunk_body",
    "usage_chunk_body",
    "new_request_id",
    "sse",
    "watch_disconnect",
]


@dataclasses.dataclass(frozen=True)
class Choice:
    """One choice of a whole response, or its part in one streamed chunk."""

    text: str
    finish_reason: str | None
    logprobs: dict | None = None  # from logprobs_body
    # vLLM's: the stop token id (stop_token_ids) or string (stop) that ended it; null for
    # the model's EOS, for "length", and while it runs
    stop_reason: int | str | None = None
    token_ids: Sequence[int] = ()  # its tokens, shown with return_token_ids (vLLM's)


def new_request_id(kind: str, base: str | None = None) -> str:
    """The response id: vLLM's `chatcmpl-<base>` / `cmpl-<base>`, where `base` is the client's
    (its X-Request-Id header, else the body's request_id: vLLM's `_base_request_id`) or, when
    it sent none or an empty one, a fresh uuid (vLLM's `default or random_uuid()`)."""
    return ("chatcmpl-" if kind == "chat" else "cmpl-") + (base or uuid.uuid4().hex)


# vLLM's error `type` for a status: the `openai` client's exception class for it, which vLLM's
# create_error_response names (BadRequestError, NotFoundError...); another status its HTTP
# phrase, as vLLM's handler of Starlette's HTTPException writes it ("Method Not Allowed")
_ERROR_TYPES = {400: "BadRequestError", 404: "NotFoundError", 429: "RateLimitError",
                500: "InternalServerError"}  # fmt: skip


def error_type(status: int) -> str:
    return _ERROR_TYPES.get(status) or http.HTTPStatus(status).phrase


def error_body(
    message: str,
    *,
    status: int = 400,
    param: str | None = None,
    reason: str | None = None,
    type_: str | None = None,
) -> dict:
    """vLLM's ErrorResponse, {"error": {"message", "type", "param", "code"}} with `code` the
    HTTP status (an int) and `type` vLLM's name for it (`error_type`; vLLM >= 0.10's
    engine/protocol.py ErrorInfo, not OpenAI's strings: hunt 79), plus `reason`: this
    server's machine-readable cause (invalid_value, invalid_json, model_not_found,
    context_length_exceeded, queue_full...; OpenAI's `code` strings, which vLLM's int
    displaced; an extra key, which vLLM's ErrorInfo (extra="allow") and clients ignore)."""
    return {
        "error": {
            "message": message,
            "type": type_ or error_type(status),
            "param": param,
            "code": status,
            "reason": reason,
        }
    }


def usage_dict(prompt_tokens: int, completion_tokens: int) -> dict:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def _head(kind: str, rid: str, created: int, model: str, *, chunk: bool) -> dict:
    obj = {"chat": "chat.completion", "completion": "text_completion"}[kind]
    if chunk and kind == "chat":
        obj += ".chunk"
    return {"id": rid, "object": obj, "created": created, "model": model}


def _choice_tail(p: ParsedRequest, c: Choice, *, prompt: bool) -> dict:
    """A choice's fields after its text: logprobs, finish_reason, vLLM's stop_reason, and with
    return_token_ids its token_ids (and on /v1/completions, where `prompt`, the prompt's)."""
    out = {"logprobs": c.logprobs, "finish_reason": c.finish_reason, "stop_reason": c.stop_reason}
    if p.return_token_ids:
        if prompt and p.kind == "completion":  # chat's are the response's (vLLM's)
            out["prompt_token_ids"] = list(p.prompt_ids)
        out["token_ids"] = list(c.token_ids)
    return out


def _prompt_ids(p: ParsedRequest) -> dict:
    """A chat response's (or its first chunk's) prompt_token_ids, with return_token_ids."""
    return {"prompt_token_ids": list(p.prompt_ids)} if p.return_token_ids else {}


def completion_body(
    p: ParsedRequest,
    rid: str,
    created: int,
    *,
    choices: Sequence[Choice],
    usage: dict,
    time_info: dict,
) -> dict:
    """A whole (non-streamed) response of one or more choices."""

    def one(i: int, c: Choice) -> dict:
        out: dict = {"index": i}
        if p.kind == "chat":
            out["message"] = {"role": "assistant", "content": c.text}
        else:
            out["text"] = c.text
        return {**out, **_choice_tail(p, c, prompt=True)}

    return {
        **_head(p.kind, rid, created, p.model, chunk=False),
        "choices": [one(i, c) for i, c in enumerate(choices)],
        "usage": usage,
        "time_info": time_info,
        **(_prompt_ids(p) if p.kind == "chat" else {}),
    }


def chunk_body(
    p: ParsedRequest, rid: str, created: int, c: Choice, *, index: int = 0, first: bool = False
) -> dict:
    """One streamed chunk of choice `index`: `c`, its new text (possibly "", a step whose
    token's text is held back) with the logprobs (from `logprobs_body`), tokens and finish of
    the chunk's tokens; `first`: the choice's first chunk (a chat's role chunk), which carries
    the prompt's ids with return_token_ids."""
    choice: dict = {"index": index}
    if p.kind == "chat":
        delta: dict = {"role": "assistant", "content": ""} if first else {}
        if c.text:
            delta["content"] = c.text
        choice["delta"] = delta
    else:
        choice["text"] = c.text
    choice.update(_choice_tail(p, c, prompt=first))
    top = _prompt_ids(p) if first and p.kind == "chat" else {}
    return {**_head(p.kind, rid, created, p.model, chunk=True), "choices": [choice], **top}


def usage_chunk_body(
    p: ParsedRequest, rid: str, created: int, *, usage: dict, time_info: dict
) -> dict:
    """The last chunk with `stream_options.include_usage`: no choices, usage and time_info."""
    return {
        **_head(p.kind, rid, created, p.model, chunk=True),
        "choices": [],
        "usage": usage,
        "time_info": time_info,
    }


def error_response(
    status: int,
    message: str,
    *,
    param: str | None = None,
    reason: str | None = None,
    headers: dict | None = None,
    type_: str | None = None,
) -> JSONResponse:
    """`error_body` with its HTTP status."""
    body = error_body(message, status=status, param=param, reason=reason, type_=type_)
    return JSONResponse(body, status_code=status, headers=headers)


def sse(obj: Any) -> str:
    return f"data: {json.dumps(obj, separators=(',', ':'))}\n\n"


async def watch_disconnect(request: Request, cancel: Callable[[], None]) -> None:
    """Cancel the request when the client goes away (the body is already read)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
    cancel()
