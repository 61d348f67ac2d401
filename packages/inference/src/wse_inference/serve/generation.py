"""One admitted OpenAI request, from scheduler events to the HTTP answer.

`Generation(scheduler, parsed)` submits the request's `n` choices (one scheduler submission
each, `openai_request.choice_sampling`) and turns their `StreamEvent`s into either one whole
response (`whole`: every choice's text, logprobs and finish reason, usage counting the prompt
once) or an SSE stream (`stream`: chunks tagged by choice index, one for every engine step
that made tokens, its text "" while it is held back (a character's bytes, a stop string's
start), as vLLM's; a chat choice's role chunk sent just before its first output, not at
once, as vLLM's (a client times it as the first token); a slow reader's queued events merged
per choice, echo and logprobs in each choice's chunks, one usage chunk and one
`data: [DONE]` after the last choice). Choices carry
vLLM's stop_reason, and with return_token_ids their token ids; echo with max_tokens 0 answers
the prompt alone (`_shown`). A client that goes away cancels every choice. More
choices than the server's slots and queue hold together is `InvalidRequestError` (400). The
bodies are `openai_response`'s.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import functools
from collections.abc import AsyncIterator
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse

from wse_inference.serve import openai_request as oa
from wse_inference.serve.admission import InvalidRequestError
from wse_inference.serve.openai_response import (
    Choice,
    chunk_body,
    completion_body,
    error_body,
    error_response,
    logprobs_and_end,
    logprobs_body,
    new_request_id,
    sse,
    usage_chunk_body,
    usage_dict,
    watch_disconnect,
)
from wse_inference.serve.request import StreamEvent
from wse_inference.serve.scheduler import Scheduler

__all__ = ["Generation"]


def _slots_source(engine: Any) -> str:
    """Where an engine's decode slots come from, for a refusal: a pipelined engine (one with
    `stages`) holds one per stage, and has at most one stage per layer, so --max-num-seqs
    is capped at its model's layers (hunt 68: the 400 blamed a --max-num-seqs of 2 for 1)."""
    if getattr(engine, "stages", None) is None:
        return "its --max-num-seqs"
    layers = getattr(getattr(engine, "config", None), "n_layers", None)
    cap = f"the model's {layers} layer{'s' * (layers != 1)}" if layers else "its layers"
    return f"one slot per pipeline stage (--max-num-seqs, capped at {cap})"


def _check_fits(scheduler: Scheduler, n: int) -> None:
    """n choices are n requests at once: more than the slots and the queue hold together
    would be a 429 whatever the load, and retrying never helps (hunt 58b), so it is a 400."""
    slots, queued = scheduler.engine.max_slots, scheduler.max_queued
    if n > slots + queued:
        raise InvalidRequestError(
            f"n = {n} choices run as {n} requests at once; this server holds at most "
            f"{slots + queued} ({slots} decode slot{'s' * (slots != 1)} + {queued} queued: "
            f"{_slots_source(scheduler.engine)}, and its --max-queued). Ask for "
            f"n <= {slots + queued}, or send several requests.",
            param="n",
        )


# A choice the engine ended with an error, by its finish_reason: the HTTP status and `reason`
# of the answer (whole or streamed alike): "invalid" the engine's refusal of the request (400),
# "abort" a server shutting down (503), anything else ("error") the server's fault (500)
_FAILURES = {"invalid": (400, "invalid_value"), "abort": (503, "abort")}


def _failure(finish_reason: str | None) -> tuple[int, str]:
    """The (HTTP status, reason) of a choice that ended with an error (`_FAILURES`)."""
    return _FAILURES.get(finish_reason or "", (500, finish_reason or "error"))


class Generation:
    """One admitted request of `p.n` choices (one scheduler submission each): events arrive
    from the engine thread into one asyncio queue as (choice index, event)."""

    def __init__(self, scheduler: Scheduler, p: oa.ParsedRequest) -> None:
        loop = asyncio.get_running_loop()
        self.queue: asyncio.Queue[tuple[int, StreamEvent]] = asyncio.Queue()
        self._pending: collections.deque[tuple[int, StreamEvent]] = collections.deque()
        self.p = p
        self.tokenizer = scheduler.engine.tokenizer
        self.rid = new_request_id(p.kind, p.request_id)
        _check_fits(scheduler, p.n)
        self.handles = scheduler.submit_choices(  # all n admitted, or none (a 400 or 429)
            prompt_ids=p.prompt_ids,
            samplings=[oa.choice_sampling(p.sampling, i) for i in range(p.n)],
            sinks=[functools.partial(self._put, loop, i) for i in range(p.n)],
            scored_alone=p.echo_only,
        )
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
        ids: list[list[int]] = [[] for _ in range(n)]
        prompt: list[Any] = [None] * n
        finals: dict[int, StreamEvent] = {}
        try:
            while len(finals) < n:
                i, ev = await self.queue.get()
                ev = self._shown(ev)
                parts[i].append(ev.text)
                ids[i] += ev.token_ids
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
            status, why = _failure(ev.finish_reason)
            return error_response(status, ev.error, reason=why)
        usage, time_info = self._final(finals)
        choices = [
            Choice(
                text="".join(parts[i]),
                finish_reason=finals[i].finish_reason or "stop",
                logprobs=logprobs_body(
                    self.p,
                    lps[i],
                    self.tokenizer,
                    prompt=prompt[i],
                ),
                stop_reason=finals[i].stop_reason,
                token_ids=ids[i],
            )
            for i in range(n)
        ]
        return JSONResponse(
            completion_body(
                self.p, self.rid, self.created, choices=choices, usage=usage, time_info=time_info
            )
        )

    def _echo(self) -> str:
        """The prompt's text when the request asked for it back (echo: `echo_text`, the
        request's own string as vLLM's; hunt 82: its ids decoded without special tokens), else
        ''."""
        return self.p.echo_text if self.p.echo else ""

    def _shown(self, ev: StreamEvent) -> StreamEvent:
        """`ev` as the answer shows it: with echo and max_tokens 0 (`echo_only`) the token made
        to score the prompt is neither shown nor counted, and it ends at "length" (vLLM's
        echo_without_generation; hunt 73: refused)."""
        if not self.p.echo_only:
            return ev
        finish = "length" if ev.finish_reason in ("stop", "length") else ev.finish_reason
        lps = None if ev.logprobs is None else ()
        return dataclasses.replace(ev, text="", token_ids=(), logprobs=lps, completion_tokens=0,
                                   finish_reason=finish, stop_reason=None)  # fmt: skip

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
        fresh = [p.kind == "completion"] * n  # a completion's next chunk is its first
        role = [p.kind == "chat"] * n  # a chat choice's role chunk is still to send
        sampled: list[list[int]] = [[] for _ in range(n)]  # a character may span chunks
        finals: dict[int, StreamEvent] = {}
        try:
            while len(finals) < n:
                i, ev = await self._next()
                ev = self._shown(ev)
                if role[i]:  # with the choice's first output, as vLLM's serving_chat (hunt 79:
                    # sent at once, before queueing and prefill, it was timed as the first
                    # token: chat TTFT 36.5 ms against completions' 587 ms on the same load)
                    role[i] = False
                    yield sse(chunk_body(p, rid, created, Choice("", None), index=i, first=True))
                if ev.error is not None:
                    if ev.text:
                        yield sse(chunk_body(p, rid, created, Choice(ev.text, None), index=i))
                    status, why = _failure(ev.finish_reason)
                    yield sse(error_body(ev.error, status=status, reason=why))
                    break
                # a chunk for every step that made tokens, its text "" while a character's
                # bytes or a stop string's start are held back, as vLLM's (hunt 73: such steps
                # sent nothing, so clients timed the first token and the gaps wrongly)
                if ev.text or ev.token_ids or ev.finish_reason or echo[i]:
                    scored = ev.prompt_logprobs if echo[i] else None
                    lps, offset[i] = logprobs_and_end(
                        p,
                        ev.logprobs,
                        self.tokenizer,
                        text_offset=offset[i],
                        prompt=scored,
                        previous=sampled[i],
                    )
                    sampled[i] += [x.token for x in ev.logprobs or ()]
                    text, echo[i] = echo[i] + ev.text, ""
                    c = Choice(text, ev.finish_reason, lps, ev.stop_reason, ev.token_ids)
                    chunk = chunk_body(p, rid, created, c, index=i, first=fresh[i])
                    fresh[i] = False
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
