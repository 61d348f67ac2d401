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

All methods take keyword arguments only. `MockEngine` (in `wse_inference.mock`) implements
this with outputs that can be computed by hand, for server tests.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

__all__ = ["SamplingParams", "Prefix", "SlotOutput", "Engine", "Tokenizer"]


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


@dataclasses.dataclass
class Prefix:
    """A prefilled prompt: engine-specific cache payload plus the first sampled token."""

    prompt_len: int
    first_token: int
    sampling: SamplingParams
    payload: Any  # the engine's KV cache / RNG state for this sequence


@dataclasses.dataclass(frozen=True)
class SlotOutput:
    """What one slot produced in one `generate` step."""

    slot: int
    tokens: tuple[int, ...]
    finished: bool
    finish_reason: str | None = None  # "stop" | "length" | None


@runtime_checkable
class Tokenizer(Protocol):
    def encode(self, text: str) -> list[int]: ...
    def decode(self, ids: Sequence[int]) -> str: ...


@runtime_checkable
class Engine(Protocol):
    model_name: str
    max_slots: int
    max_context: int  # prompt + generated tokens per sequence
    vocab_size: int
    tokenizer: Tokenizer

    def init_decode_state(self) -> Any: ...

    def prefill(self, *, prompt_ids: Sequence[int], sampling: SamplingParams) -> Prefix: ...

    def insert(self, *, prefix: Prefix, state: Any, slot: int) -> Any: ...

    def generate(self, *, state: Any) -> tuple[Any, list[SlotOutput]]: ...

    def release(self, *, state: Any, slot: int) -> Any: ...

    def metrics(self) -> dict[str, float]:
        """Engine counters for /metrics (e.g. speculative acceptance); may be empty."""
        ...
