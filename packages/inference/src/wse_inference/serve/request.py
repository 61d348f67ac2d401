"""One request as the scheduler serves it: its handle, its timestamps, the events it streams.

- `RequestHandle`: what `Scheduler.submit` returns; `cancel()` is safe from any thread, any
  time, more than once (the scheduler frees the slot before its next engine step); one not
  `observed` (the server's warm-up) never reaches the `SchedulerObserver`;
- `RequestTiming`: monotonic timestamps of arrival, prefill, first and last token and end, and
  Cerebras' `time_info` from them;
- `StreamEvent`: new text and tokens (and their logprobs, if asked) of one request; the last
  event has `finish_reason` set (and `stop_reason`, vLLM's, for a stop of the request's);
- `SchedulerObserver`: the hooks the engine thread calls on first token, tokens, finish and
  each engine iteration;
- `stop_reason(matched, sampling, eos_ids)`: vLLM's stop_reason of a "stop", from what ended it
  and the model's EOS ids (`model_eos_ids(engine)`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from wse_inference.engine import SamplingParams, TokenLogprob

__all__ = [
    "RequestHandle",
    "RequestTiming",
    "StreamEvent",
    "SchedulerObserver",
    "model_eos_ids",
    "stop_reason",
]


@dataclasses.dataclass
class RequestTiming:
    """Monotonic timestamps (s) of one request; `created` is the Unix time of arrival."""

    created: int
    arrival_s: float
    prefill_start_s: float | None = None
    first_token_s: float | None = None
    last_token_s: float | None = None  # the latest token sent so far
    end_s: float | None = None

    def time_info(self) -> dict[str, float]:
        """Cerebras' `time_info`: queue, prompt, completion and total seconds, and created."""
        end = self.end_s if self.end_s is not None else time.monotonic()
        pre = self.prefill_start_s if self.prefill_start_s is not None else end
        first = self.first_token_s if self.first_token_s is not None else end
        return {
            "queue_time": pre - self.arrival_s,
            "prompt_time": first - pre,
            "completion_time": end - first,
            "total_time": end - self.arrival_s,
            "created": self.created,
        }


@dataclasses.dataclass(frozen=True)
class StreamEvent:
    """New text and tokens of one request; the last event has `finish_reason` set."""

    text: str
    token_ids: tuple[int, ...]
    finish_reason: str | None = None  # "stop" | "length" | "abort" | "error" | "invalid"
    error: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    logprobs: tuple[TokenLogprob, ...] | None = None  # one per token_ids entry, if asked
    # the prompt's own (sampling.prompt_logprobs), on the request's first event only
    prompt_logprobs: tuple[TokenLogprob | None, ...] | None = None
    # on the last event of a "stop": the request's stop token id or the stop string that
    # ended it (vLLM's stop_reason); None for the model's EOS and every other finish
    stop_reason: int | str | None = None


class RequestHandle:
    """One admitted request: `cancel()` is safe from any thread, any time, more than once."""

    def __init__(
        self,
        request_id: int,
        prompt_ids: Sequence[int],
        sampling: SamplingParams,
        sink: Callable[[StreamEvent], None],
        wake: Callable[[], None],
        *,
        observed: bool = True,
    ) -> None:
        self.request_id = request_id
        self.observed = observed  # False: the server's own (warm-up), kept out of its metrics
        self.prompt_ids = [int(t) for t in prompt_ids]
        self.sampling = sampling
        self.sink = sink
        self.timing = RequestTiming(created=int(time.time()), arrival_s=time.monotonic())
        self.completion_tokens = 0
        self.finished = False
        self.cancelled = False
        self._wake = wake  # the scheduler's: applies the cancel before its next step

    def cancel(self) -> None:
        if not self.finished and not self.cancelled:
            self.cancelled = True
            self._wake()


class SchedulerObserver(Protocol):
    """Hooks the engine thread calls (e.g. Prometheus histograms); must be quick."""

    def on_first_token(self, handle: RequestHandle) -> None: ...

    def on_tokens(self, handle: RequestHandle, n: int, gap_s: float) -> None: ...

    def on_finish(self, handle: RequestHandle, reason: str) -> None: ...

    def on_iteration(self, tokens: int) -> None: ...  # prompt tokens prefilled + tokens made


def model_eos_ids(engine: object) -> frozenset[int]:
    """The model's EOS, whose vLLM stop_reason is null: the tokenizer's eos_token
    (`LoadedModel.eos_token_id`, vLLM's `eos_token_id`) of the engine or its model
    (`PipelineEngine.model`, `SpeculativeEngine`'s `target`). The other end-of-sequence ids
    it stops on (`sampling.with_eos`'s: generation_config.json's, config.json's) report their
    id, as vLLM adds them to the request's stop_token_ids (hunt 75: Llama 3.1's <|eom_id|>
    128008 was null; clients read it as "tool call pending"). Without a tokenizer EOS, every
    one of `eos_token_ids` is taken as the model's; none for an engine with no EOS ids
    (`MockEngine`)."""
    for owner in (engine, getattr(engine, "model", None), getattr(engine, "target", None)):
        ids = getattr(owner, "eos_token_ids", None)
        if ids is not None:
            primary = getattr(owner, "eos_token_id", None)
            return frozenset({int(primary)} if primary is not None else map(int, ids))
    return frozenset()


def stop_reason(
    matched: int | str | None, sampling: SamplingParams, eos_ids: frozenset[int]
) -> int | str | None:
    """vLLM's `stop_reason` of a request that stopped on `matched` (its text stream's stop
    string or token id): the stop string; a token id of the request's `stop_token_ids` or
    another of the model's EOS ids; None for the model's EOS (`eos_ids`: `model_eos_ids`),
    also when the request lists it in `stop_token_ids`, unless it ignores EOS, as vLLM's
    `check_stop` tests EOS before the stop ids (hunt 74: that id)."""
    if not isinstance(matched, int):
        return matched
    if matched in eos_ids:  # the model's EOS: null, unless the request ignores EOS
        return matched if matched in sampling.stop_token_ids and sampling.ignore_eos else None
    if matched in sampling.stop_token_ids or bool(eos_ids):  # eos_ids named: another EOS id
        return matched  # the request's stop id, or another of the model's EOS ids
    return None  # an engine that names no EOS (`model_eos_ids` empty) stopped on its own
