"""The server's warm-up: requests through the scheduler, before the port opens, that run every
program serving runs, so that no user's request compiles (vLLM captures its graphs at start).

Contract: `warm_up(scheduler, timeout_s=...)` runs, kept out of /metrics (`observed=False`):

1. a greedy request with logprobs (and prompt logprobs, on a two-token prompt) for several
   decode steps: the prefill, the first token without penalties, the insert into a fresh
   decode state, the decode step, the logprobs' programs;
2. once (1) has had a decode step, a sampled request with a seed, top-k, top-p and all three
   penalties: the first token with penalties, an insert into the state a decode step
   returned while another slot decodes (admission under load), a decode step over both.
   On a one-slot engine it is sent once (1) has ended (no other slot can decode beside it),
   so the warm-up never asks for a queue place: hunt 80, `--max-num-seqs 1 --max-queued 0`
   (and any 1-layer model with `--max-queued 0`) died at start-up on the warm-up's own 429;
3. after both end, a one-token request (no seed): it ends at its prefill, in an engine
   iteration after (1)'s and (2)'s slots were released, so the release's program is run
   before `warm_up` returns.

Every request ignores the model's EOS, so an EOS drawn first cannot skip the decode path.
When (3) ends, its sink (on the engine thread, after every warm-up program has run and before
the scheduler reads the engine's counters at the iteration's end) calls the engine's
`reset_metrics()` where it has one, so its own counters (speculative rounds, drafted and
accepted tokens, pipeline steps) start from zero too (hunt 77: the scheduler's requests were
kept out of /metrics, the engine's 18 drafted tokens of them were not).
It returns the log probabilities (chosen and top) of (1)'s tokens, for the server's check
that they are finite. Hunt 77: one greedy request of two tokens left `prime` on a used
state, the penalties' first token and the release to the first users (a 5x slower first
load test, a 3 s stall between a request's first and second token).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from wse_inference.engine import SamplingParams
from wse_inference.serve.scheduler import Scheduler

__all__ = ["warm_up"]

_DECODE_TOKENS = 4  # tokens of the decoding requests: three decode steps after the first
_PENALIZED = dict(presence_penalty=0.5, frequency_penalty=0.5, repetition_penalty=1.2)


class _Watched:
    """One warm-up request's events as they arrive on the engine thread."""

    def __init__(self, cond: threading.Condition, on_end: Callable[[], None] | None) -> None:
        self._cond = cond
        self._on_end = on_end  # run on the engine thread as the request ends
        self.events = 0
        self.done = False
        self.scores: list[float] = []

    def sink(self, ev: Any) -> None:
        try:  # a failing on_end must not leave the warm-up waiting for this event
            if ev.finish_reason is not None and self._on_end is not None:
                self._on_end()
        finally:
            with self._cond:
                self.events += 1
                for lp in ev.logprobs or ():
                    self.scores.extend((lp.logprob, *(v for _, v in lp.top)))
                self.done = self.done or ev.finish_reason is not None
                self._cond.notify_all()


def _requests(max_context: int, vocab_size: int) -> tuple[tuple[list[int], SamplingParams], ...]:
    """(prompt ids, sampling) of the three requests, fitted to the context (at least 2)."""
    scored = [0, 1 % vocab_size] if max_context >= 3 else [0]
    greedy = SamplingParams(
        max_tokens=max(1, min(_DECODE_TOKENS, max_context - len(scored))),
        temperature=0.0,
        logprobs=1,
        prompt_logprobs=1 if len(scored) > 1 else None,
        ignore_eos=True,
    )
    penalized = SamplingParams(
        max_tokens=min(_DECODE_TOKENS, max_context - 1),
        temperature=1.0,
        top_k=40,
        top_p=0.9,
        seed=0,
        ignore_eos=True,
        **_PENALIZED,
    )
    closing = SamplingParams(max_tokens=1, ignore_eos=True)
    return (scored, greedy), ([0], penalized), ([0], closing)


def warm_up(scheduler: Scheduler, *, timeout_s: float = 600.0) -> list[float]:
    """Run the warm-up's requests (module docstring) on a started scheduler; the greedy
    request's log probabilities. TimeoutError when the engine does not finish them in
    `timeout_s`."""
    engine = scheduler.engine
    greedy, penalized, closing = _requests(engine.max_context, engine.vocab_size)
    deadline = time.monotonic() + timeout_s
    cond = threading.Condition()

    def submit(prompt_ids: list[int], sampling: SamplingParams, on_end=None) -> _Watched:
        w = _Watched(cond, on_end)
        scheduler.submit(prompt_ids=prompt_ids, sampling=sampling, sink=w.sink, observed=False)
        return w

    def wait(until) -> None:
        with cond:
            if not cond.wait_for(until, max(0.0, deadline - time.monotonic())):
                raise TimeoutError(f"the engine did not answer a warm-up request in {timeout_s} s")

    first = submit(*greedy)
    if engine.max_slots < 2:  # the only slot is (1)'s: (2) would wait in the queue
        wait(lambda: first.done)
    else:
        wait(lambda: first.events >= 2 or first.done)  # it has been through a decode step
    second = submit(*penalized)
    wait(lambda: first.done and second.done)
    last = submit(*closing, on_end=getattr(engine, "reset_metrics", None))
    wait(lambda: last.done)
    return first.scores
