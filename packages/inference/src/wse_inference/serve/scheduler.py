"""Continuous batching over an `Engine`'s slots, in one engine thread, for HTTP and gRPC.

Contract:
- `Scheduler(engine, max_queued=...)`; `start()` launches the engine thread, the only thread
  that ever calls the engine. `submit(prompt_ids=..., sampling=..., sink=...)` validates the
  request (`InvalidRequestError`, with vLLM's context-length wording), admits it to a bounded
  waiting queue (`QueueFullError` beyond `max_queued`, `ShuttingDownError` once draining) and
  returns a `RequestHandle`; `submit_choices` does so for a request's n choices at once (all
  admitted or none). `sink(event)` is then called from the engine thread with
  `StreamEvent`s: text deltas, and exactly one final event (`finish_reason` set). It must not
  block (e.g. `loop.call_soon_threadsafe(queue.put_nowait, ...)` or `queue.Queue.put`).
- Every loop iteration: apply cancellations (a cancelled request's slot and KV cache are
  released before the next engine step), admit waiting requests into free slots
  (prefill + insert), run one `generate` step, deliver tokens, release finished slots.
- Text is detokenized here (`TextStream`: from the prompt's last tokens, stop strings, UTF-8
  boundaries); the token count is never more than `max_tokens`. A request with
  `sampling.logprobs` gets each event's tokens' `TokenLogprob`s in `StreamEvent.logprobs`
  (from `Prefix.first_logprob` and `SlotOutput.logprobs`). One submitted with
  `observed=False` (the server's warm-up) is kept out of the observer's metrics.
- `drain(grace_s)` stops admission and lets work in flight finish for up to `grace_s`, then
  ends what is left with finish_reason "abort" (the client is told); `stop()` joins the thread.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from wse_core.errors import WseError

from wse_inference.engine import Engine, SamplingParams, TokenLogprob
from wse_inference.serve import request as rq
from wse_inference.serve.admission import (
    InvalidRequestError,
    QueueFullError,
    RequestLimits,
    ShuttingDownError,
    check_request,
    context_length_message,
)
from wse_inference.serve.request import RequestHandle, SchedulerObserver, StreamEvent
from wse_inference.serve.text_stream import TextStream

__all__ = ["Scheduler", "SchedulerStats", "InvalidRequestError", "QueueFullError",
           "ShuttingDownError", "check_request", "context_length_message"]  # fmt: skip

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class SchedulerStats:
    running: int
    waiting: int
    max_slots: int
    max_queued: int
    steps: int
    draining: bool
    engine_metrics: dict[str, float]


@dataclasses.dataclass
class _Active:
    handle: RequestHandle
    stream: TextStream
    last_emit_s: float


class Scheduler:
    """Continuous batching in one engine thread; see the module docstring."""

    def __init__(
        self,
        engine: Engine,
        *,
        max_queued: int = 64,
        observer: SchedulerObserver | None = None,
        limits: RequestLimits | None = None,  # None: built here, as the server builds its own
    ) -> None:
        self.engine = engine
        self.max_queued = max_queued
        self.limits = RequestLimits() if limits is None else limits
        self.observer = observer
        self._eos_ids = rq.model_eos_ids(engine)  # vLLM's stop_reason of an EOS: null
        self._cond = threading.Condition()
        self._waiting: collections.deque[RequestHandle] = collections.deque()
        self._active: dict[int, _Active] = {}
        self._ids = itertools.count(1)
        self._draining = False
        self._deadline_s = math.inf
        self._stopping = False
        self._steps = 0
        self._admitting = 0  # a request popped from the queue, in prefill (holds a slot)
        self._engine_metrics: dict[str, float] = {}
        self._iteration_tokens = 0  # observed prompt tokens prefilled + tokens sent, this step
        self._mean_request_s = 1.0
        self._thread = threading.Thread(target=self._run, name="wse-engine", daemon=True)

    # ---- the API used by the servers (any thread) ----

    def start(self) -> Scheduler:
        self._thread.start()
        return self

    def submit(
        self,
        *,
        prompt_ids: Sequence[int],
        sampling: SamplingParams,
        sink: Callable[[StreamEvent], None],
        observed: bool = True,  # False: kept out of the observer's (the server's warm-up)
    ) -> RequestHandle:
        return self.submit_choices(
            prompt_ids=prompt_ids, samplings=[sampling], sinks=[sink], observed=observed
        )[0]

    def submit_choices(
        self,
        *,
        prompt_ids: Sequence[int],
        samplings: Sequence[SamplingParams],
        sinks: Sequence[Callable[[StreamEvent], None]],
        observed: bool = True,
        scored_alone: bool = False,  # echo with max_tokens 0 (`admission.check_request`)
    ) -> list[RequestHandle]:
        """The choices of one request (one sampling and sink each), admitted all together or
        none: the queue limit counts them at once, against the requests queued before them
        (hunt 80: choice 0 of an n = 2 request, admitted then cancelled when choice 1 was
        refused, was counted in the 429 as a queued request)."""
        e = self.engine
        for sampling in samplings:
            check_request(prompt_ids, sampling, max_context=e.max_context,
                          vocab_size=e.vocab_size, limits=self.limits,
                          scored_alone=scored_alone)  # fmt: skip
        with self._cond:
            if self._draining or self._stopping:
                raise ShuttingDownError("The server is shutting down; retry on another replica.")
            self._check_room(len(samplings))
            handles = [
                RequestHandle(next(self._ids), prompt_ids, s, sink, self._wake, observed=observed)
                for s, sink in zip(samplings, sinks, strict=True)
            ]
            self._waiting.extend(handles)
            self._cond.notify()
        return handles

    def _check_room(self, n: int) -> None:
        """`QueueFullError` unless `n` more requests fit in the free slots and the queue
        (called holding the lock). The requests waiting take the free slots first."""
        waiting = sum(not h.cancelled for h in self._waiting)
        free = max(0, self.engine.max_slots - len(self._active) - self._admitting)
        if waiting + n - free <= self.max_queued:
            return
        slots, before = self.engine.max_slots, max(0, waiting - free)  # hunt 65: no more
        spare = max(0, free - waiting)  # slots no queued request is about to take
        if spare:  # only where n > 1: one request is refused only once the slots are claimed
            taken = f"{spare} of its {slots} slots {'is' if spare == 1 else 'are'} free"
        else:
            taken = f"all {slots} slots are taken" if slots != 1 else "its 1 slot is taken"
        queued = f"{before} request{'s are' if before != 1 else ' is'} queued for one"
        own = "" if n == 1 else (f"; this request's n = {n} choices need {n - spare} places in "
                                 "the queue")  # fmt: skip
        raise QueueFullError(
            f"The server is busy: {taken} and {queued} (limit {self.max_queued}){own}; retry "
            "later.",
            retry_after_s=self._retry_after_s(),
        )

    def stats(self) -> SchedulerStats:
        with self._cond:
            return SchedulerStats(
                running=len(self._active),
                waiting=sum(not h.cancelled for h in self._waiting),
                max_slots=self.engine.max_slots,
                max_queued=self.max_queued,
                steps=self._steps,
                draining=self._draining,
                engine_metrics=dict(self._engine_metrics),
            )

    def drain(self, grace_s: float) -> None:
        """Stop admission; requests still running after `grace_s` end with "abort"."""
        with self._cond:
            self._draining = True
            self._deadline_s = min(self._deadline_s, time.monotonic() + grace_s)
            self._cond.notify()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Abort what is left, end the engine thread and wait for it (at most `timeout_s`)."""
        with self._cond:
            self._draining = self._stopping = True
            self._deadline_s = time.monotonic()
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    @property
    def idle(self) -> bool:
        with self._cond:
            return not self._active and not self._waiting and not self._admitting

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify()

    def _retry_after_s(self) -> int:
        per_slot = self._mean_request_s * (len(self._waiting) + 1) / self.engine.max_slots
        return int(min(60, max(1, math.ceil(per_slot))))

    # ---- the engine thread ----

    def _run(self) -> None:
        state = self.engine.init_decode_state()
        while True:
            with self._cond:
                while not (self._waiting or self._active or self._stopping):
                    self._cond.wait(0.5)
                if self._stopping and not self._waiting and not self._active:
                    return
                past_deadline = time.monotonic() >= self._deadline_s
            try:
                state = self._iteration(state, abort_all=past_deadline)
            except Exception as e:  # an engine failure must not kill the server
                log.exception("engine step failed")
                state = self._fail_all(state, f"engine failure: {type(e).__name__}: {e}")

    def _iteration(self, state: Any, *, abort_all: bool) -> Any:
        self._iteration_tokens = 0
        state = self._apply_cancels(state, abort_all=abort_all)
        state = self._admit(state)
        if self._active:
            state, outputs = self.engine.generate(state=state)
            state = self._deliver(state, outputs)
            with self._cond:
                self._steps += 1
        self._engine_metrics = self.engine.metrics()
        if self._iteration_tokens and self.observer is not None:  # vLLM's iteration_tokens
            self.observer.on_iteration(self._iteration_tokens)
        return state

    def _apply_cancels(self, state: Any, *, abort_all: bool) -> Any:
        with self._cond:
            gone = [h for h in self._waiting if h.cancelled or abort_all]
            for h in gone:
                self._waiting.remove(h)
        for h in gone:
            self._finish(h, "abort", error=None if h.cancelled else "server is shutting down")
        for slot, a in list(self._active.items()):
            if a.handle.cancelled or abort_all:
                state = self._release(state, slot)
                self._finish(
                    a.handle,
                    "abort",
                    error=None if a.handle.cancelled else "server is shutting down",
                )
        return state

    def _admit(self, state: Any) -> Any:
        free = [s for s in range(self.engine.max_slots) if s not in self._active]
        while free:
            with self._cond:
                if not self._waiting:
                    break
                h = self._waiting.popleft()
                self._admitting = 1
            try:
                state = self._admit_one(h, state, free)
            finally:
                with self._cond:
                    self._admitting = 0
        return state

    def _admit_one(self, h: RequestHandle, state: Any, free: list[int]) -> Any:
        """Prefill one request and insert it into a free slot (unless it is already done)."""
        if h.cancelled:
            self._finish(h, "abort")
            return state
        h.timing.prefill_start_s = time.monotonic()
        try:
            prefix = self.engine.prefill(prompt_ids=h.prompt_ids, sampling=h.sampling)
        except WseError as e:  # the engine refused the request: the client's error
            self._finish(h, "invalid", error=str(e))
            return state
        except Exception as e:
            log.exception("prefill failed")
            self._finish(h, "error", error=f"prefill failed: {type(e).__name__}: {e}")
            return state
        now = time.monotonic()
        h.timing.first_token_s = now
        a = _Active(h, self._text_stream(h, prefix.sampling), now)
        first_lp = None if prefix.first_logprob is None else [prefix.first_logprob]
        scored = prefix.prompt_logprobs
        if self._emit(a, [prefix.first_token], first_lp, finished_by_engine=None, prompt=scored):
            return state
        slot = free.pop(0)
        try:
            state = self.engine.insert(prefix=prefix, state=state, slot=slot)
        except Exception as e:
            self._finish(h, "error", error=f"insert failed: {type(e).__name__}: {e}")
            raise
        with self._cond:
            self._active[slot] = a
        return state

    def _deliver(self, state: Any, outputs: Sequence[Any]) -> Any:
        for out in outputs:
            a = self._active.get(out.slot)
            if a is None:
                continue
            reason = (out.finish_reason or "stop") if out.finished else None
            if self._emit(a, list(out.tokens), out.logprobs, finished_by_engine=reason):
                state = self._release(state, out.slot)
        return state

    def _emit(
        self,
        a: _Active,
        tokens: list[int],
        logprobs: Sequence[TokenLogprob] | None,
        *,
        finished_by_engine: str | None,
        prompt: tuple[TokenLogprob | None, ...] | None = None,
    ) -> bool:
        """Send new tokens of one request (and their logprobs, and on the first event the
        prompt's, if it asked for them); True when it has finished (final event sent)."""
        h = a.handle
        tokens = tokens[: h.sampling.max_tokens - h.completion_tokens]
        lps = None if logprobs is None else tuple(logprobs[: len(tokens)])
        text, stopped = a.stream.push(tokens)
        first = h.completion_tokens == 0
        h.completion_tokens += len(tokens)
        now = time.monotonic()
        if tokens:  # the prefill's token at its first_token_s: one token decodes for 0 s
            h.timing.last_token_s = h.timing.first_token_s if first else now
        if self.observer is not None and tokens and h.observed:
            self._iteration_tokens += len(tokens) + (len(h.prompt_ids) if first else 0)
            if first:
                self.observer.on_first_token(h)
            else:
                self.observer.on_tokens(h, len(tokens), now - a.last_emit_s)
        a.last_emit_s = now
        reason = "stop" if stopped else finished_by_engine
        if reason is None and h.completion_tokens >= h.sampling.max_tokens:
            reason = "length"
        if reason is None:
            if text or tokens:
                ev = StreamEvent(text, tuple(tokens), logprobs=lps, prompt_logprobs=prompt)
                self._send(h, ev)
            return False
        text += a.stream.flush()
        matched = a.stream.stop_reason if reason == "stop" else None  # vLLM's stop_reason:
        why = rq.stop_reason(matched, h.sampling, self._eos_ids)  # the model's EOS is null
        self._finish(h, reason, text=text, token_ids=tuple(tokens), logprobs=lps, prompt=prompt,
                     stop_reason=why)  # fmt: skip
        return True

    def _release(self, state: Any, slot: int) -> Any:
        self._active.pop(slot, None)
        return self.engine.release(state=state, slot=slot)

    def _finish(
        self,
        h: RequestHandle,
        reason: str,
        *,
        text: str = "",
        token_ids: tuple[int, ...] = (),
        error: str | None = None,
        logprobs: tuple[TokenLogprob, ...] | None = None,
        prompt: tuple[TokenLogprob | None, ...] | None = None,
        stop_reason: int | str | None = None,
    ) -> None:
        if h.finished:
            return
        h.finished = True
        h.timing.end_s = time.monotonic()
        total = h.timing.end_s - h.timing.arrival_s
        self._mean_request_s = 0.9 * self._mean_request_s + 0.1 * total
        if self.observer is not None and h.observed:
            self.observer.on_finish(h, reason)
        self._send(
            h,
            StreamEvent(
                text=text,
                token_ids=token_ids,
                finish_reason=reason,
                error=error,
                prompt_tokens=len(h.prompt_ids),
                completion_tokens=h.completion_tokens,
                logprobs=logprobs,
                prompt_logprobs=prompt,
                stop_reason=stop_reason,
            ),
        )

    def _send(self, h: RequestHandle, event: StreamEvent) -> None:
        try:
            h.sink(event)
        except Exception:  # the consumer is gone (closed loop): treat as a cancel
            log.debug("sink of request %d failed; cancelling", h.request_id, exc_info=True)
            h.cancelled = True

    def _fail_all(self, state: Any, message: str) -> Any:
        for slot, a in list(self._active.items()):
            self._active.pop(slot)
            self._finish(a.handle, "error", error=message)
        return self.engine.init_decode_state()

    def _text_stream(self, h: RequestHandle, run: SamplingParams) -> TextStream:
        """The request's detokenizer, decoding from the prompt's last tokens (vLLM's offsets:
        hunt 70, " hello" lost its space after the prompt with Llama-2's tokenizer). Its stop
        ids are those the engine runs the request with (`run`, its `Prefix.sampling`: the
        request's and, unless ignore_eos, the model's EOS ids, `sampling.with_eos`), so the
        token that ends the sequence is left out of the text, as vLLM's detokenizer leaves it
        (hunt 72: a model EOS that is a plain token, the byte tokenizer's, was in the text),
        unless include_stop_str_in_output; min_tokens as the engine's (`SequenceTracker`)."""
        s = h.sampling
        return TextStream(
            self.engine.tokenizer,
            stop=s.stop,
            stop_token_ids=(*s.stop_token_ids, *run.stop_token_ids),
            prompt_ids=h.prompt_ids,
            min_tokens=s.min_tokens,
            include_stop=s.include_stop_str_in_output,
        )
