"""One admitted OpenAI request, from scheduler events to the HTTP answer.

`Generation(scheduler, parsed)` submits the request's `n` choices (one scheduler submission
each, `openai_api.choice_sampling`) and turns their `StreamEvent`s into either one whole
response (`whole`: every choice's text, logprobs and finish reason, usage counting the prompt
once) or an SSE stream (`stream`: chunks tagged by choice index, a slow reader's queued events
merged per choice, echo and logprobs in each choice's chunks, one usage chunk and one
`data: [DONE]` after the last choice). A client that goes away cancels every choice.
`error_response` is the OpenAI error body with its status.

Responses follow OpenAI's shapes, plus Cerebras' `time_info` ({queue_time, prompt_time,
completion_time, total_time} in seconds, `created` in Unix seconds) next to `usage`.

Log probabilities, as vLLM returns them (the raw model's, before temperature and cuts; at
most MAX_LOGPROBS = 20 alternatives): `/v1/completions` takes `logprobs: k` and answers
{tokens, token_logprobs, top_logprobs (per token a {token: logprob} dict of the k most likely
and the chosen token; null when k = 0), text_offset}; with `echo: true` the text starts with
the prompt and the logprobs with the prompt's tokens (the first one's null), which is how
lm-evaluation-harness' local-completions scores loglikelihoods; `/v1/chat/completions` takes
`logprobs: true` and `top_logprobs: k` and answers {content: [{token, logprob, bytes,
top_logprobs: [{token, logprob, bytes}] x k}]}. Streamed chunks carry their tokens'.
A token's text is `tokenizer.decode([id])`; logprobs are clamped at -9999.0 as vLLM's are.

This module is the answer side of the wire format (`openai_api` reads requests; `server`
holds the app and the process shell).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import functools
import json
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse

from wse_inference import openai_api as oa
from wse_inference.engine import Tokenizer, TokenLogprob
from wse_inference.openai_api import ParsedRequest
from wse_inference.scheduler import Scheduler, StreamEvent

__all__ = [
    "Generation",
    "Choice",
    "error_response",
    "error_body",
    "usage_dict",
    "logprobs_body",
    "completion_body",
    "chunk_body",
    "usage_chunk_body",
    "new_request_id",
    "sse",
    "watch_disconnect",
]


@dataclasses.dataclass(frozen=True)
class Choice:
    """One finished choice of a whole (non-streamed) response."""

    text: str
    finish_reason: str
    logprobs: dict | None = None  # from logprobs_body


def new_request_id(kind: str) -> str:
    return ("chatcmpl-" if kind == "chat" else "cmpl-") + uuid.uuid4().hex


def error_body(
    message: str,
    *,
    type_: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
) -> dict:
    """OpenAI's error object."""
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


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


def _clamp(lp: float) -> float:
    return max(lp, -9999.0)


def logprobs_body(
    p: ParsedRequest,
    logprobs: Sequence[TokenLogprob] | None,
    tokenizer: Tokenizer,
    *,
    text_offset: int = 0,
    prompt: Sequence[TokenLogprob | None] | None = None,
) -> dict | None:
    """The `logprobs` of a choice (or a streamed chunk's choice) for these tokens; None when
    the request did not ask. `text_offset`: where the first token's text starts in the
    completion (the length of the text already sent, for a stream). `prompt` (echo): the
    prompt's own logprobs come first, the first token's null as in vLLM and OpenAI."""
    if p.sampling.logprobs is None or logprobs is None:
        return None
    k = p.sampling.logprobs
    word = functools.lru_cache(maxsize=None)(lambda t: tokenizer.decode([t]))
    if p.kind == "chat":

        def entry(t: int, lp: float) -> dict:
            return {"token": word(t), "logprob": _clamp(lp), "bytes": list(word(t).encode())}

        return {
            "content": [
                {**entry(x.token, x.logprob), "top_logprobs": [entry(*a) for a in x.top[:k]]}
                for x in logprobs
            ]
        }
    scored: list[tuple[int, TokenLogprob | None]] = [(x.token, x) for x in logprobs]
    if prompt is not None:
        scored[:0] = [(p.prompt_ids[0], None), *((x.token, x) for x in prompt[1:] if x)]
    offsets = []
    for t, _ in scored:
        offsets.append(text_offset)
        text_offset += len(word(t))
    return {
        "tokens": [word(t) for t, _ in scored],
        "token_logprobs": [None if x is None else _clamp(x.logprob) for _, x in scored],
        "top_logprobs": [
            {**{word(a): _clamp(lp) for a, lp in x.top[:k]}, word(t): _clamp(x.logprob)}
            if k and x is not None
            else None
            for t, x in scored
        ],
        "text_offset": offsets,
    }


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
        return {**out, "logprobs": c.logprobs, "finish_reason": c.finish_reason}

    return {
        **_head(p.kind, rid, created, p.model, chunk=False),
        "choices": [one(i, c) for i, c in enumerate(choices)],
        "usage": usage,
        "time_info": time_info,
    }


def chunk_body(
    p: ParsedRequest,
    rid: str,
    created: int,
    *,
    text: str | None,
    finish_reason: str | None,
    role: bool = False,
    logprobs: dict | None = None,
    index: int = 0,
) -> dict:
    """One streamed chunk of choice `index`: new text and/or the finish reason (a role chunk
    opens a chat); `logprobs` (from `logprobs_body`) of the chunk's tokens."""
    choice: dict = {"index": index}
    if p.kind == "chat":
        delta: dict = {"role": "assistant", "content": ""} if role else {}
        if text:
            delta["content"] = text
        choice["delta"] = delta
    else:
        choice["text"] = text or ""
    choice.update(logprobs=logprobs, finish_reason=finish_reason)
    return {**_head(p.kind, rid, created, p.model, chunk=True), "choices": [choice]}


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
    type_: str,
    param: str | None = None,
    code: str | None = None,
    headers: dict | None = None,
) -> JSONResponse:
    """An OpenAI error body {"error": {...}} with an HTTP status."""
    body = error_body(message, type_=type_, param=param, code=code)
    return JSONResponse(body, status_code=status, headers=headers)


def sse(obj: Any) -> str:
    return f"data: {json.dumps(obj, separators=(',', ':'))}\n\n"


async def watch_disconnect(request: Request, cancel: Callable[[], None]) -> None:
    """Cancel the request when the client goes away (the body is already read)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
    cancel()


class Generation:
    """One admitted request of `p.n` choices (one scheduler submission each): events arrive
    from the engine thread into one asyncio queue as (choice index, event)."""

    def __init__(self, scheduler: Scheduler, p: oa.ParsedRequest) -> None:
        loop = asyncio.get_running_loop()
        self.queue: asyncio.Queue[tuple[int, StreamEvent]] = asyncio.Queue()
        self._pending: collections.deque[tuple[int, StreamEvent]] = collections.deque()
        self.p = p
        self.tokenizer = scheduler.engine.tokenizer
        self.rid = new_request_id(p.kind)
        self.handles: list[Any] = []
        try:
            for i in range(p.n):
                self.handles.append(
                    scheduler.submit(
                        prompt_ids=p.prompt_ids,
                        sampling=oa.choice_sampling(p.sampling, i),
                        sink=lambda ev, i=i: self._put(loop, i, ev),
                    )
                )
        except BaseException:
            self.cancel()  # admitted choices of a refused request do not run
            raise
        self.created = self.handles[0].timing.created

    def _put(self, loop: asyncio.AbstractEventLoop, i: int, ev: StreamEvent) -> None:
        loop.call_soon_threadsafe(self.queue.put_nowait, (i, ev))

    def cancel(self) -> None:
        for h in self.handles:
            h.cancel()

    def _final(self, finals: dict[int, StreamEvent]) -> tuple[dict, dict]:
        """usage (the prompt once, every choice's completion) and the last choice's timing"""
        ev = finals[0]
        completion = sum(e.completion_tokens for e in finals.values())
        last = max(self.handles, key=lambda h: h.timing.end_s or 0.0)
        return usage_dict(ev.prompt_tokens, completion), last.timing.time_info()

    async def whole(self, request: Request) -> JSONResponse:
        watcher = asyncio.create_task(watch_disconnect(request, self.cancel))
        n = self.p.n
        parts: list[list[str]] = [[self._echo()] for _ in range(n)]
        lps: list[list] = [[] for _ in range(n)]
        prompt: list[Any] = [None] * n
        finals: dict[int, StreamEvent] = {}
        try:
            while len(finals) < n:
                i, ev = await self.queue.get()
                parts[i].append(ev.text)
                lps[i] += ev.logprobs or ()
                prompt[i] = prompt[i] or ev.prompt_logprobs
                if ev.finish_reason is not None:
                    finals[i] = ev
                    if ev.error is not None:
                        break
        finally:
            watcher.cancel()
            self.cancel()
        if ev.error is not None:
            if ev.finish_reason == "invalid":  # refused by the engine itself
                return error_response(
                    400, ev.error, type_="invalid_request_error", code="invalid_value"
                )
            status = 503 if ev.finish_reason == "abort" else 500
            return error_response(status, ev.error, type_="server_error", code=ev.finish_reason)
        usage, time_info = self._final(finals)
        choices = [
            Choice(
                text="".join(parts[i]),
                finish_reason=finals[i].finish_reason or "stop",
                logprobs=logprobs_body(self.p, lps[i], self.tokenizer, prompt=prompt[i]),
            )
            for i in range(n)
        ]
        return JSONResponse(
            completion_body(
                self.p, self.rid, self.created, choices=choices, usage=usage, time_info=time_info
            )
        )

    def _echo(self) -> str:
        """The prompt's text when the request asked for it back (echo), else ''."""
        return self.tokenizer.decode(self.p.prompt_ids) if self.p.echo else ""

    async def _next(self) -> tuple[int, StreamEvent]:
        """The next event of some choice, merged with that choice's events already queued: a
        slow reader gets fewer chunks."""
        if not self._pending:
            self._pending.append(await self.queue.get())
        while not self.queue.empty():
            self._pending.append(self.queue.get_nowait())
        i, ev = self._pending.popleft()
        rest: collections.deque[tuple[int, StreamEvent]] = collections.deque()
        while self._pending:
            j, nxt = self._pending.popleft()
            if j != i or ev.finish_reason is not None:
                rest.append((j, nxt))
                continue
            lps = None if ev.logprobs is None else ev.logprobs + (nxt.logprobs or ())
            ev = dataclasses.replace(
                nxt,
                text=ev.text + nxt.text,
                token_ids=ev.token_ids + nxt.token_ids,
                logprobs=lps,
                prompt_logprobs=ev.prompt_logprobs or nxt.prompt_logprobs,
            )
        self._pending = rest
        return i, ev

    async def stream(self) -> AsyncIterator[str]:
        p, rid, created, n = self.p, self.rid, self.created, self.p.n
        offset = [0] * n  # where each choice's next token text starts (text_offset)
        echo = [self._echo()] * n  # sent with each choice's first chunk
        finals: dict[int, StreamEvent] = {}
        try:
            if p.kind == "chat":
                for i in range(n):
                    yield sse(
                        chunk_body(
                            p, rid, created, text=None, finish_reason=None, role=True, index=i
                        )
                    )
            while len(finals) < n:
                i, ev = await self._next()
                if ev.error is not None:
                    if ev.text:
                        yield sse(
                            chunk_body(p, rid, created, text=ev.text, finish_reason=None, index=i)
                        )
                    invalid = ev.finish_reason == "invalid"
                    kind = "invalid_request_error" if invalid else "server_error"
                    yield sse(error_body(ev.error, type_=kind, code=ev.finish_reason))
                    break
                if ev.text or ev.finish_reason or ev.logprobs or echo[i]:
                    scored = ev.prompt_logprobs if echo[i] else None
                    lps = logprobs_body(
                        p, ev.logprobs, self.tokenizer, text_offset=offset[i], prompt=scored
                    )
                    if lps is not None and lps.get("tokens"):  # completions: text_offset
                        offset[i] = lps["text_offset"][-1] + len(lps["tokens"][-1])
                    text, echo[i] = echo[i] + ev.text, ""
                    chunk = chunk_body(
                        p,
                        rid,
                        created,
                        text=text,
                        finish_reason=ev.finish_reason,
                        logprobs=lps,
                        index=i,
                    )
                    if ev.finish_reason is not None:
                        chunk["time_info"] = self.handles[i].timing.time_info()
                    yield sse(chunk)
                if ev.finish_reason is not None:
                    finals[i] = ev
            else:  # every choice finished
                if p.include_usage:
                    usage, time_info = self._final(finals)
                    yield sse(usage_chunk_body(p, rid, created, usage=usage, time_info=time_info))
            yield "data: [DONE]\n\n"
        finally:  # also on client disconnect: the stream task is cancelled
            self.cancel()
