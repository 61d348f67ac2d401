"""Admission rules shared by the HTTP and gRPC servers: which requests are refused, and how.

- `InvalidRequestError` (HTTP 400 / gRPC INVALID_ARGUMENT): `check_request` raises it for an
  empty prompt, token ids outside the vocabulary, max_tokens <= 0, a prompt + max_tokens beyond
  the context window (vLLM's wording, `context_length_message`), temperature < 0, top_p outside
  (0, 1], top_k < 0. Requests are never silently truncated.
- `QueueFullError` (HTTP 429 with Retry-After / gRPC RESOURCE_EXHAUSTED): the bounded waiting
  queue is full.
- `ShuttingDownError` (HTTP 503 / gRPC UNAVAILABLE): the server is draining.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from wse_core.errors import WseError

from wse_inference.engine import MAX_LOGPROBS, SamplingParams

__all__ = [
    "InvalidRequestError",
    "QueueFullError",
    "ShuttingDownError",
    "check_request",
    "context_length_message",
]


class InvalidRequestError(WseError):
    """A request the server refuses (HTTP 400 / gRPC INVALID_ARGUMENT)."""

    def __init__(
        self, message: str, *, param: str | None = None, code: str = "invalid_value"
    ) -> None:
        super().__init__(message)
        self.param = param
        self.code = code


class QueueFullError(WseError):
    """The waiting queue is full (HTTP 429 / gRPC RESOURCE_EXHAUSTED)."""

    def __init__(self, message: str, *, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class ShuttingDownError(WseError):
    """The server is draining and takes no new requests (HTTP 503 / gRPC UNAVAILABLE)."""


def context_length_message(max_context: int, prompt_tokens: int, completion_tokens: int) -> str:
    """vLLM's wording for a request that does not fit in the context window."""
    return (
        f"This model's maximum context length is {max_context} tokens. However, you requested "
        f"{prompt_tokens + completion_tokens} tokens ({prompt_tokens} in the messages, "
        f"{completion_tokens} in the completion). Please reduce the length of the messages or "
        "completion."
    )


def check_request(
    prompt_ids: Sequence[int], sampling: SamplingParams, *, max_context: int, vocab_size: int
) -> None:
    """Raise `InvalidRequestError` unless the request can run exactly as asked."""
    if len(prompt_ids) == 0:
        raise InvalidRequestError("The prompt is empty; give at least one token.", param="prompt")
    bad = [t for t in prompt_ids if not 0 <= int(t) < vocab_size]
    if bad:
        raise InvalidRequestError(
            f"Token id {bad[0]} is outside the vocabulary [0, {vocab_size}).", param="prompt"
        )
    if sampling.max_tokens <= 0:
        raise InvalidRequestError(
            f"max_tokens must be at least 1, got {sampling.max_tokens}.", param="max_tokens"
        )
    if len(prompt_ids) + sampling.max_tokens > max_context:
        raise InvalidRequestError(
            context_length_message(max_context, len(prompt_ids), sampling.max_tokens),
            param="max_tokens",
            code="context_length_exceeded",
        )
    if not (sampling.temperature >= 0 and math.isfinite(sampling.temperature)):
        raise InvalidRequestError(
            f"temperature must be >= 0, got {sampling.temperature}.", param="temperature"
        )
    if not 0 < sampling.top_p <= 1:
        raise InvalidRequestError(f"top_p must be in (0, 1], got {sampling.top_p}.", param="top_p")
    bad = [t for t in sampling.stop_token_ids if not 0 <= int(t) < vocab_size]
    if bad:
        raise InvalidRequestError(
            f"Stop token id {bad[0]} is outside the vocabulary [0, {vocab_size}).",
            param="stop_token_ids",
        )
    if sampling.top_k < 0:
        raise InvalidRequestError(
            f"top_k must be >= 0 (0 disables it), got {sampling.top_k}.", param="top_k"
        )
    for name in ("presence_penalty", "frequency_penalty"):
        v = getattr(sampling, name)
        if not -2.0 <= v <= 2.0:
            raise InvalidRequestError(f"{name} must be in [-2, 2], got {v}.", param=name)
    if not 0 < sampling.repetition_penalty < math.inf:
        raise InvalidRequestError(
            f"repetition_penalty must be > 0 (1 is off), got {sampling.repetition_penalty}.",
            param="repetition_penalty",
        )
    for name in ("logprobs", "prompt_logprobs"):
        k = getattr(sampling, name)
        if k is not None and not 0 <= k <= MAX_LOGPROBS:
            raise InvalidRequestError(f"{name} must be in 0..{MAX_LOGPROBS}, got {k}.", param=name)
