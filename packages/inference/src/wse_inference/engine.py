"""The engine interface, in the JetStream spirit: prefill / insert / generate over slots.

The server (HTTP and gRPC) only ever talks to an `Engine`. An engine owns `max_slots` decode
slots (users in flight; on the wafer they fill the pipeline stages). The server's scheduler:

1. `prefill(prompt_ids=..., sampling=...)` processes one prompt and returns a `Prefix`
   holding its KV cache and its first generated token;
2. `insert(prefix=..., state=..., slot=...)` puts that prefix into a free slot of the decode
   state;
3. `generate(state=...)` advances every occupied slot by one engine step and returns, per
   occupied slot, the tokens it produced this step (one, or several with speculative
   decoding) and whether it finished (stop token, stop string or max_tokens);
4. `release(state=..., slot=...)` frees a slot (finished, cancelled or disconnected client),
   with its KV cache, within the step.

State: engines own mutable state, unlike JetStream's, which return new state. The decode
state from `init_decode_state()` is the engine's own mutable object: `insert`, `generate` and
`release` update it in place and return that same object (so a call site reads
`state = engine.insert(...)` either way); a caller keeps exactly one reference, never reuses
an earlier one and calls from one thread only (the scheduler's engine thread). The engine
also keeps its own counters (`metrics()`). The reason is that a fresh state per call would
be a pretence: the device halves of the state (KV caches, pipeline activations) are donated
to the jitted step, so the arrays of the state before a call are invalid after it, and the
host halves (each slot's `SequenceTracker`) would have to be copied every step for nothing.

Log probabilities (vLLM's default `raw_logprobs`): with `SamplingParams.logprobs = k`
(0..MAX_LOGPROBS) every generated token comes with a `TokenLogprob`: its log probability under
the model's raw next-token distribution (log_softmax of the logits, before temperature,
top-k and top-p) and the k most likely tokens with theirs, by rank. `Prefix.first_logprob`
holds the first token's; `SlotOutput.logprobs` runs alongside `SlotOutput.tokens`. With
`SamplingParams.prompt_logprobs = k`, `Prefix.prompt_logprobs` scores the prompt's own tokens
the same way (None for the first, which nothing predicts), as vLLM's prompt_logprobs.

`SequenceTracker` is the host-side finish logic every engine shares: the first token counts
toward max_tokens; a stop token id (reported) or a stop string in the final decoded text
(the server's `TextStream`: never in the U+FFFD of a character still arriving) ends with
"stop", neither before `min_tokens` tokens (vLLM's `check_stop`; the decoders hold those ids
back until then, `sampling.penalize`); max_tokens ends with "length".

`ByteTokenizer` is the one byte-level tokenizer (token id = UTF-8 byte, vocab 256): the mock's,
and a model directory's without a tokenizer.json. Ids outside [0, 256) are not bytes and
decode to nothing (as a model's special tokens do); invalid UTF-8 decodes to U+FFFD.

All methods take keyword arguments only. `MockEngine` (in `wse_inference.mock`) implements
this with outputs that can be computed by hand, for server tests.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from wse_core.errors import WseError, is_int, shown, shown_int

# the server's detokenizer, which every engine's SequenceTracker shares (it imports nothing)
from wse_inference.serve.text_stream import TextStream

__all__ = [
    "MAX_LOGPROBS",
    "SamplingParams",
    "SamplingError",
    "validate_sampling",
    "validate_prompt",
    "TokenLogprob",
    "Prefix",
    "SlotOutput",
    "Engine",
    "Tokenizer",
    "ByteTokenizer",
    "SequenceTracker",
    "stop_index",
    "check_min_tokens",
]

MAX_LOGPROBS = 20  # the most alternatives a request may ask for (vLLM's --max-logprobs)
INT32_MAX = 2**31 - 1  # top_k travels to the device as an int32
SEED_MIN, SEED_MAX = -(2**63), 2**63 - 1  # seeds are int64 (vLLM's range; the server's too)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SamplingParams:
    """How to pick tokens. temperature 0 is greedy; top_k 0 and top_p 1 disable those cuts."""

    max_tokens: int = 16
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False  # vLLM's: run past the model's end-of-sequence tokens
    logprobs: int | None = None  # None: none; k: each token's and the k most likely tokens'
    prompt_logprobs: int | None = None  # the same for the prompt's tokens (vLLM's; echo)
    # vLLM's / OpenAI's penalties on the logits before temperature (`sampling.penalize`)
    presence_penalty: float = 0.0  # minus this for every token generated at least once
    frequency_penalty: float = 0.0  # minus this times the times a token was generated
    repetition_penalty: float = 1.0  # logits of prompt or generated tokens: / it if > 0, else x
    # vLLM's min_tokens: until this many tokens are made, the stop token ids and the model's
    # EOS ids are held back (logit -inf, `sampling.penalize`) and no stop string ends in their
    # text (`TextStream`); at most max_tokens
    min_tokens: int = 0
    # vLLM's include_stop_str_in_output: a matched stop string (and the text of a stop token
    # id or EOS that ended the sequence) stays at the end of the text
    include_stop_str_in_output: bool = False
    # the model's end-of-sequence ids, recorded by the engine (`sampling.with_eos`) for a
    # request with min_tokens: held back with the stop token ids even under ignore_eos (vLLM's
    # all_stop_token_ids); never a request's own setting
    eos_token_ids: tuple[int, ...] = ()

    @property
    def penalized(self) -> bool:
        """Whether the logits are processed before sampling (`sampling.penalize`): a penalty
        that is not neutral, or min_tokens."""
        neutral = (0.0, 0.0, 1.0)
        penalties = (self.presence_penalty, self.frequency_penalty, self.repetition_penalty)
        return penalties != neutral or self.min_tokens > 0


class SamplingError(WseError):
    """A sampling setting or a prompt that no decoder can honour."""


def validate_sampling(
    sampling: SamplingParams, *, vocab_size: int, max_context: int, prompt_len: int
) -> None:
    """Raise `SamplingError` for settings outside their ranges or a prompt that cannot fit.
    Host values, once per request: nothing here runs on the decode path."""
    _check_types(sampling)
    if sampling.max_tokens <= 0:
        raise SamplingError(f"max_tokens must be >= 1, got {shown_int(sampling.max_tokens)}")
    if not 0 <= sampling.temperature < math.inf:  # hunt 65: inf was taken (logits / inf)
        raise SamplingError(
            f"temperature must be a finite number >= 0 (0 is greedy), got {sampling.temperature}"
        )
    if not 0 < sampling.top_p <= 1:
        raise SamplingError(f"top_p must be in (0, 1], got {sampling.top_p}")
    if not 0 <= sampling.top_k <= INT32_MAX:  # an int32 on the device
        raise SamplingError(
            f"top_k must be in 0..{INT32_MAX} (0 disables it), got {shown_int(sampling.top_k)}"
        )
    if sampling.seed is not None and not SEED_MIN <= sampling.seed <= SEED_MAX:
        raise SamplingError(  # hunt 65: 2**70 was an OverflowError inside JAX
            f"seed must be an integer in [{SEED_MIN}, {SEED_MAX}] (64 bits), "
            f"got {shown_int(sampling.seed)}"
        )
    if prompt_len <= 0:
        raise SamplingError("the prompt is empty; give at least one token")
    # a one-token request ends at its prefill: its token is never fed back, so it takes no
    # place in the cache (vLLM's engine makes one token from a prompt of max_model_len; hunt
    # 80: echo with max_tokens 0, run as 1, scores a prompt that fills the context)
    if prompt_len + sampling.max_tokens > max_context + (sampling.max_tokens == 1):
        raise SamplingError(
            f"prompt ({prompt_len} tokens) + max_tokens ({shown_int(sampling.max_tokens)}) = "
            f"{shown_int(prompt_len + sampling.max_tokens)} exceeds the context of "
            f"{max_context} tokens; "
            + (
                f"shorten the prompt or lower max_tokens to <= {max_context - prompt_len}"
                if prompt_len < max_context  # hunt 62: else it said "lower max_tokens to <= 0"
                else "the prompt alone fills it: shorten it to at most "
                f"{max_context - (sampling.max_tokens > 1)} tokens"
            )
        )
    for name in ("presence_penalty", "frequency_penalty"):
        v = getattr(sampling, name)
        if not -2.0 <= v <= 2.0:
            raise SamplingError(f"{name} must be in [-2, 2] (0 is off), got {v}")
    if not 0 < sampling.repetition_penalty < math.inf:
        raise SamplingError(
            f"repetition_penalty must be > 0 (1 is off), got {sampling.repetition_penalty}"
        )
    for name in ("logprobs", "prompt_logprobs"):
        k = getattr(sampling, name)
        if k is not None and not 0 <= k <= MAX_LOGPROBS:
            raise SamplingError(
                f"{name} must be in 0..{MAX_LOGPROBS} (the most likely tokens returned with "
                f"each token), got {shown_int(k)}"
            )
    bad = [t for t in sampling.stop_token_ids if not 0 <= t < vocab_size]
    if bad:
        raise SamplingError(
            f"stop token id {shown_int(bad[0])} is outside the vocabulary 0..{vocab_size - 1}"
        )
    check_min_tokens(sampling.min_tokens, sampling.max_tokens, SamplingError)


def check_min_tokens(min_tokens: int, max_tokens: int, error: type[Exception]) -> None:
    """Raise `error` with vLLM's words (`SamplingParams._verify_args`) unless 0 <= min_tokens
    <= max_tokens; a max_tokens of 0 or less (not yet known: the server's, before the prompt
    is read) bounds nothing."""
    if min_tokens < 0:
        raise error(f"min_tokens must be greater than or equal to 0, got {shown_int(min_tokens)}.")
    if max_tokens > 0 and min_tokens > max_tokens:
        raise error(
            f"min_tokens must be less than or equal to max_tokens={max_tokens}, got "
            f"{shown_int(min_tokens)}."
        )


# integers always; seed, logprobs, prompt_logprobs or None
_WHOLE = ("max_tokens", "top_k", "min_tokens")
_REAL = ("temperature", "top_p", "presence_penalty", "frequency_penalty", "repetition_penalty")


def _check_types(sampling: SamplingParams) -> None:
    """Each setting of the type its range check reads (hunt 65: max_tokens=2.5 made 2 tokens,
    top_k=2.5 and logprobs=1.5 were cut to integers, stop="abc" stopped at "a", "b" or "c")."""
    for name in (*_WHOLE, "seed", "logprobs", "prompt_logprobs"):
        v = getattr(sampling, name)
        if not is_int(v) and (v is not None or name in _WHOLE):
            raise SamplingError(f"{name} must be a whole number, got {_given(v)}")
    for name in _REAL:
        v = getattr(sampling, name)
        if not isinstance(v, numbers.Real) or isinstance(v, bool):
            raise SamplingError(f"{name} must be a number, got {_given(v)}")
    for name in ("ignore_eos", "include_stop_str_in_output"):  # hunt 67: "no" was truthy
        if not isinstance(v := getattr(sampling, name), bool):
            raise SamplingError(f"{name} must be true or false, got {_given(v)}")
    stop, ids = sampling.stop, sampling.stop_token_ids
    if not isinstance(stop, tuple | list) or not all(isinstance(s, str) for s in stop):
        raise SamplingError(f"stop must be a tuple of strings, got {_given(stop)}")
    if not isinstance(ids, tuple | list):
        raise SamplingError(f"stop_token_ids must be a tuple of token ids, got {_given(ids)}")
    if (bad := next((t for t in ids if not is_int(t)), None)) is not None:
        raise SamplingError(f"stop token id {_given(bad)} is not a whole number")


def validate_prompt(prompt_ids: Sequence[int], *, vocab_size: int) -> None:
    """Raise `SamplingError` unless every prompt id is a whole number in 0..vocab_size - 1
    (hunt 65: an id past the vocabulary gave NaN logits, decoded as token 0; -1 was the last
    token; 2.7 was cut to 2). Host values, once per prompt."""
    if isinstance(prompt_ids, str):
        raise SamplingError(f"prompt ids must be a sequence of token ids, got {_given(prompt_ids)}")
    if _in_vocab(prompt_ids, vocab_size):
        return
    for i, t in enumerate(prompt_ids):  # which id, and why
        if not is_int(t):
            raise SamplingError(
                f"prompt token id {_given(t)} at index {i} is not a whole number; token ids "
                f"are integers in 0..{vocab_size - 1}"
            )
        if not 0 <= t < vocab_size:
            raise SamplingError(
                f"prompt token id {shown_int(int(t))} at index {i} is outside the vocabulary "
                f"0..{vocab_size - 1}"
            )


def _in_vocab(ids: Any, vocab_size: int) -> bool:
    """The fast path (8,000 ids: a list in ~0.6 ms, the loop's seven; an array in microseconds):
    a 1-D integer array or a list of Python ints, all in 0..vocab_size - 1; False also where
    only the loop can tell."""
    if getattr(ids, "ndim", None) == 1 and getattr(ids.dtype, "kind", "") in "iu":
        return ids.size == 0 or (0 <= int(ids.min()) and int(ids.max()) < vocab_size)
    if not isinstance(ids, list | tuple | range) or any(type(t) is not int for t in ids):
        return False
    return not ids or (0 <= min(ids) and max(ids) < vocab_size)


def _given(v: object) -> str:
    """A setting as a refusal repeats it: its type and (the start of) its value."""
    return f"{type(v).__name__} {shown(v, quote=isinstance(v, str))}"


@dataclasses.dataclass(frozen=True)
class TokenLogprob:
    """A generated token's raw log probability and the `top` (token, logprob) pairs, most
    likely first (as many as the request's `logprobs`)."""

    token: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


@dataclasses.dataclass
class Prefix:
    """A prefilled prompt: engine-specific cache payload plus the first sampled token."""

    prompt_len: int
    first_token: int
    sampling: SamplingParams
    payload: Any  # the engine's KV cache / RNG state for this sequence
    first_logprob: TokenLogprob | None = None  # with sampling.logprobs set
    # with sampling.prompt_logprobs set: one per prompt token, None for the first
    prompt_logprobs: tuple[TokenLogprob | None, ...] | None = None


@dataclasses.dataclass(frozen=True)
class SlotOutput:
    """What one slot produced in one `generate` step."""

    slot: int
    tokens: tuple[int, ...]
    finished: bool
    finish_reason: str | None = None  # "stop" | "length" | None
    logprobs: tuple[TokenLogprob, ...] | None = None  # one per token, with sampling.logprobs


@runtime_checkable
class Tokenizer(Protocol):
    def encode(self, text: str) -> list[int]: ...
    def decode(self, ids: Sequence[int]) -> str: ...


class ByteTokenizer:
    """UTF-8 bytes as token ids (vocab 256); ids outside [0, 256) decode to nothing."""

    kind = "bytes"
    vocab_size = 256
    max_token_bytes = 1  # a token is one byte of text (`serve.admission.encode_prompt`)

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: Sequence[int]) -> str:
        return bytes(int(i) for i in ids if 0 <= int(i) < 256).decode("utf-8", errors="replace")

    def vocab(self) -> dict[str, int]:
        """Token names as HF's byte-fallback spells them (`<0x41>`) -> ids."""
        return {f"<0x{i:02X}>": i for i in range(256)}


@runtime_checkable
class Engine(Protocol):
    """Slots over one model; the decode state is the engine's own and mutable (module
    docstring): every method that takes `state` updates it in place and returns it."""

    model_name: str
    max_slots: int
    max_context: int  # prompt + generated tokens per sequence (one token: the prompt alone)
    vocab_size: int
    tokenizer: Tokenizer

    def init_decode_state(self) -> Any:
        """A fresh decode state with every slot free (the one object later calls update)."""
        ...

    def prefill(self, *, prompt_ids: Sequence[int], sampling: SamplingParams) -> Prefix:
        """Run one prompt; touches no decode state."""
        ...

    def insert(self, *, prefix: Prefix, state: Any, slot: int) -> Any:
        """Put `prefix` into free `slot` of `state`, in place; returns `state`."""
        ...

    def generate(self, *, state: Any) -> tuple[Any, list[SlotOutput]]:
        """One engine step of every occupied slot, in place -> (`state`, outputs)."""
        ...

    def release(self, *, state: Any, slot: int) -> Any:
        """Free `slot` (and its KV cache) in place; returns `state`."""
        ...

    def metrics(self) -> dict[str, float]:
        """Engine counters for /metrics (e.g. speculative acceptance); may be empty."""
        ...


def stop_index(text: str, stops: Sequence[str]) -> int | None:
    """The index in `text` where the earliest stop string starts, or None."""
    hits = [i for i in (text.find(s) for s in stops if s) if i >= 0]
    return min(hits) if hits else None


@dataclasses.dataclass
class SequenceTracker:
    """Generated tokens of one sequence and whether (and why) it finished.

    Its text is `TextStream`'s, the server's detokenizer (one for every engine and the CLI),
    decoded after `prompt_ids` (the request's, as the server's: hunt 70, a "▁" tokenizer's
    first word lost its space without them) and run as text is asked for: stop strings are
    matched on final text, never on the U+FFFD of a character still arriving (hunt 70:
    "p\ufffd" stopped a sequence whose text holds "pѽ"), and `visible_text()` is final text
    only, so what it has shown stays true."""

    sampling: SamplingParams
    tokenizer: Any = None
    tokens: list[int] = dataclasses.field(default_factory=list)
    finish_reason: str | None = None
    prompt_ids: Sequence[int] = dataclasses.field(default=(), kw_only=True, repr=False)
    _stream: TextStream | None = dataclasses.field(default=None, init=False, repr=False)
    _pushed: int = dataclasses.field(default=0, init=False, repr=False)  # tokens in _shown
    _shown: str = dataclasses.field(default="", init=False, repr=False)

    def add(self, token: int) -> str | None:
        """Append one generated token; returns the finish reason once finished."""
        if self.finish_reason is not None:
            return self.finish_reason
        self.tokens.append(int(token))
        s = self.sampling
        if int(token) in s.stop_token_ids and len(self.tokens) >= s.min_tokens:  # vLLM's
            self.finish_reason = "stop"
        elif s.stop and self.tokenizer is not None and self._caught_up().stopped:
            self.finish_reason = "stop"
        elif len(self.tokens) >= s.max_tokens:
            self.finish_reason = "length"
            if s.stop and self.tokenizer is not None and self._flush():
                self.finish_reason = "stop"  # held to the end: bytes no UTF-8, final now
        return self.finish_reason

    def visible_text(self) -> str:
        """The final text so far: cut before a stop string (stop strings are not shown), its
        held-back end (a character still arriving, what may begin a stop string) shown once
        the sequence has finished."""
        if self.tokenizer is None:
            return ""
        if self.finish_reason is None:
            self._caught_up()
        else:
            self._flush()
        return self._shown

    def _flush(self) -> bool:
        """All of the text, the end held back too (once finished); True on a stop string."""
        stream = self._caught_up()
        self._shown += stream.flush()  # "" from the second call on
        return stream.stopped

    def _caught_up(self) -> TextStream:
        """The text stream (made on first use), every token pushed; `.stopped` once it has
        met a stop string."""
        if self._stream is None:
            s = self.sampling
            self._stream = TextStream(
                self.tokenizer,
                stop=s.stop,
                stop_token_ids=s.stop_token_ids,
                prompt_ids=self.prompt_ids,
                min_tokens=s.min_tokens,
                include_stop=s.include_stop_str_in_output,
            )
        if self._pushed < len(self.tokens):
            self._shown += self._stream.push(self.tokens[self._pushed :])[0]
            self._pushed = len(self.tokens)
        return self._stream
