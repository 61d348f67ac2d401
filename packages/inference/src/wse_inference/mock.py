"""A mock `Engine` whose outputs can be computed by hand, for server and scheduler tests.

Contract (see `wse_inference.engine`): `engine.ByteTokenizer` (token id = UTF-8 byte, vocab 256);
the first token after a prompt is `(prompt[-1] + 1) % vocab_size` and every next token is
`(last + 1) % vocab_size`, whatever the sampling temperature and penalties. So the prompt "abc"
continues "defg...". With min_tokens (vLLM's), a stop token id is held back until that many
tokens are made, as the real decoders hold it (`sampling.penalize`): the token made is then
the next id that is not held (its most likely one without them: "abc" with stop token id
"e" and min_tokens 3 continues "dfg"). A sequence finishes with "length" after `max_tokens`
generated tokens (the prefill's first token counts), or with "stop" on a token in
`stop_token_ids` (that token is reported) or on a stop string in its final text: the
engines' one `SequenceTracker` decides all three, as it does for the real engines (hunt 70:
the mock matched stop strings on a whole decode, the U+FFFD of a character still arriving
included, and past a stop in its step).

Log probabilities (`SamplingParams.logprobs`): the mock's next-token distribution halves from
token to token after the last one, p((last + 1 + j) % vocab) = 2^-(j + 1) (the last id takes
the rest), so every generated token has logprob -ln 2 and its k alternatives are
(last + 1 + j) % vocab with -(j + 1) ln 2, j = 0..k-1 (`expected_logprob`).

`step_delay_s` / `prefill_delay_s` make `generate` / `prefill` sleep, to emulate a slow model.
With `spec_tokens=k` and `spec_accepted=j` it emulates speculative decoding: every step emits
j + 1 tokens per slot (fewer at its finish) and counts k drafted and j accepted tokens in
`metrics()`; `reset_metrics()` starts those counts (steps, prefills, drafted and accepted
tokens) from zero as the real engines' do, so the server's warm-up is not counted (hunt 78).

The mock keeps a KV "cache" of one entry per token (prompt + generated) per occupied slot and
counts it in `metrics()["kv_cache_tokens"]`; `release` frees it. It raises on a double insert
or a release of an empty slot, so scheduler bugs show up in tests.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Sequence

from wse_inference.engine import (
    ByteTokenizer,
    Prefix,
    SamplingParams,
    SequenceTracker,
    SlotOutput,
    Tokenizer,
    TokenLogprob,
)

__all__ = [
    "ByteTokenizer",
    "MockEngine",
    "MockDecodeState",
    "expected_continuation",
    "expected_logprob",
]


_COUNTS = ("steps", "prefills", "spec_draft_tokens", "spec_accepted_tokens")  # reset_metrics


@dataclasses.dataclass
class _Seq:
    tracker: SequenceTracker  # the generated tokens (the prefill's first too) and the finish
    kv: list[int]  # one cache entry per token: prompt + generated


@dataclasses.dataclass
class MockDecodeState:
    """Occupied slots of the mock: slot -> sequence. Mutable: the engine's methods update it
    in place and return it (`wse_inference.engine`)."""

    slots: dict[int, _Seq] = dataclasses.field(default_factory=dict)


def expected_continuation(prompt_ids: Sequence[int], n: int, vocab_size: int = 256) -> list[int]:
    """The n tokens the mock generates after `prompt_ids` (no stop tokens): the hand oracle."""
    last = int(prompt_ids[-1])
    return [(last + 1 + i) % vocab_size for i in range(n)]


def expected_logprob(
    last: int, k: int, vocab_size: int = 256, *, token: int | None = None
) -> TokenLogprob:
    """The mock's `TokenLogprob` for `token` (default: the one it generates, last + 1) after
    `last`, with k alternatives."""
    top = tuple(((last + 1 + j) % vocab_size, -(j + 1) * math.log(2)) for j in range(k))
    j = 0 if token is None else (token - last - 1) % vocab_size
    lp = -min(j + 1, vocab_size - 1) * math.log(2)  # the last id takes the rest: 2^-(V-1)
    return TokenLogprob((last + 1 + j) % vocab_size, lp, top)


class MockEngine:
    """The `Engine` protocol with next token = (last + 1) mod vocab and optional delays."""

    def __init__(
        self,
        *,
        max_slots: int = 4,
        max_context: int = 256,
        model_name: str = "mock",
        step_delay_s: float = 0.0,
        prefill_delay_s: float = 0.0,
        spec_tokens: int = 0,
        spec_accepted: int = 0,
    ) -> None:
        if not 0 <= spec_accepted <= spec_tokens:
            raise ValueError(f"spec_accepted={spec_accepted} must be in [0, {spec_tokens}]")
        self.model_name = model_name
        self.max_slots = max_slots
        self.max_context = max_context
        self.tokenizer: Tokenizer = ByteTokenizer()
        self.vocab_size = self.tokenizer.vocab_size
        self.step_delay_s = step_delay_s
        self.prefill_delay_s = prefill_delay_s
        self.spec_tokens = spec_tokens
        self.spec_accepted = spec_accepted
        self._lock = threading.Lock()
        self._counters = {
            "steps": 0,
            "prefills": 0,
            "kv_cache_tokens": 0,
            "slots_in_use": 0,
            "spec_draft_tokens": 0,
            "spec_accepted_tokens": 0,
        }
        self.release_steps: list[tuple[int, int]] = []  # (slot, step count at release)

    @property
    def step_count(self) -> int:
        return self._counters["steps"]

    def init_decode_state(self) -> MockDecodeState:
        return MockDecodeState()

    def prefill(self, *, prompt_ids: Sequence[int], sampling: SamplingParams) -> Prefix:
        top = self.max_context - (sampling.max_tokens > 1)  # validate_sampling's bound
        if not 0 < len(prompt_ids) <= top:
            raise ValueError(f"prompt of {len(prompt_ids)} tokens; need 1..{top}")
        if self.prefill_delay_s:
            time.sleep(self.prefill_delay_s)
        with self._lock:
            self._counters["prefills"] += 1
        first = self._next(int(prompt_ids[-1]), 0, sampling)
        return Prefix(
            prompt_len=len(prompt_ids),
            first_token=first,
            sampling=sampling,
            payload=[int(t) for t in prompt_ids] + [first],
            first_logprob=self._logprob(int(prompt_ids[-1]), sampling, first),
            prompt_logprobs=self._prompt_logprobs(prompt_ids, sampling.prompt_logprobs),
        )

    def _prompt_logprobs(self, ids: Sequence[int], k: int | None):
        if k is None:
            return None
        pairs = zip(ids[:-1], ids[1:], strict=True)
        scored = (expected_logprob(int(a), k, self.vocab_size, token=int(b)) for a, b in pairs)
        return (None, *scored)

    def _logprob(self, last: int, sampling: SamplingParams, token: int) -> TokenLogprob | None:
        k = sampling.logprobs
        return None if k is None else expected_logprob(last, k, self.vocab_size, token=token)

    def _next(self, last: int, made: int, sampling: SamplingParams) -> int:
        """The token after `last` when `made` tokens are made: last + 1, or while min_tokens
        holds the stop token ids back, the next id that is not one of them."""
        token = (last + 1) % self.vocab_size
        if made < sampling.min_tokens:
            held = {*sampling.stop_token_ids, *sampling.eos_token_ids}
            for _ in range(len(held)):  # at most every held id in a row
                token = (token + 1) % self.vocab_size if token in held else token
        return token

    def insert(self, *, prefix: Prefix, state: MockDecodeState, slot: int) -> MockDecodeState:
        if slot in state.slots or not 0 <= slot < self.max_slots:
            raise ValueError(f"slot {slot} is occupied or out of range 0..{self.max_slots - 1}")
        prompt = list(prefix.payload[:-1])  # the payload: prompt + first token
        tracker = SequenceTracker(prefix.sampling, self.tokenizer, prompt_ids=prompt)
        tracker.add(prefix.first_token)
        state.slots[slot] = _Seq(tracker, list(prefix.payload))
        self._account(state)
        return state

    def generate(self, *, state: MockDecodeState) -> tuple[MockDecodeState, list[SlotOutput]]:
        if self.step_delay_s:
            time.sleep(self.step_delay_s)
        outputs = [self._advance(slot, seq) for slot, seq in sorted(state.slots.items())]
        with self._lock:
            self._counters["steps"] += 1
            if state.slots and self.spec_tokens:
                self._counters["spec_draft_tokens"] += self.spec_tokens * len(state.slots)
                self._counters["spec_accepted_tokens"] += self.spec_accepted * len(state.slots)
        self._account(state)
        return state, outputs

    def release(self, *, state: MockDecodeState, slot: int) -> MockDecodeState:
        if slot not in state.slots:
            raise ValueError(f"release of empty slot {slot}")
        del state.slots[slot]
        self.release_steps.append((slot, self.step_count))
        self._account(state)
        return state

    def metrics(self) -> dict[str, float]:
        with self._lock:
            m = {k: float(v) for k, v in self._counters.items()}
        if m["spec_draft_tokens"]:
            m["spec_acceptance_rate"] = m["spec_accepted_tokens"] / m["spec_draft_tokens"]
        return m

    def reset_metrics(self) -> None:
        """Start the counts of `metrics()` from zero (the server's warm-up calls it once its
        requests are done); the KV cache and the slots in use are the state, kept."""
        with self._lock:
            for k in _COUNTS:
                self._counters[k] = 0
        self.release_steps.clear()

    def _advance(self, slot: int, seq: _Seq) -> SlotOutput:
        """One step of one slot: j + 1 tokens with speculation, cut at a finish (a stop or
        max_tokens), as the speculative engine cuts its round."""
        t = seq.tracker
        k = t.sampling.logprobs
        tokens: list[int] = []
        lps: list[TokenLogprob] = []
        while t.finish_reason is None and len(tokens) <= self.spec_accepted:
            last = t.tokens[-1]
            nxt = self._next(last, len(t.tokens), t.sampling)
            if k is not None:
                lps.append(expected_logprob(last, k, self.vocab_size, token=nxt))
            tokens.append(nxt)
            seq.kv.append(tokens[-1])
            t.add(tokens[-1])
        return SlotOutput(
            slot=slot,
            tokens=tuple(tokens),
            finished=t.finish_reason is not None,
            finish_reason=t.finish_reason,
            logprobs=None if k is None else tuple(lps),
        )

    def _account(self, state: MockDecodeState) -> None:
        with self._lock:
            self._counters["kv_cache_tokens"] = sum(len(s.kv) for s in state.slots.values())
            self._counters["slots_in_use"] = len(state.slots)
