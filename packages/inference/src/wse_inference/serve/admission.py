"""Admission rules shared by the HTTP and gRPC servers: which requests are refused, and how.

One validator for both front ends, in the order a request meets it:

1. `RequestLimits`: the body (HTTP) or message (gRPC) size, `RequestTooLargeError` (HTTP 413;
   gRPC's own RESOURCE_EXHAUSTED past `max_receive_message_length`), and the JSON nesting
   depth (HTTP; protobuf messages have a fixed depth);
2. before any tokenization, `check_sampling` (every sampling setting: temperature in [0, 2]
   (OpenAI's range), top_p, top_k, penalties, logprobs in 0..MAX_LOGPROBS, at most
   `stop_strings` stop strings (`LIMITS["serve_stop_strings"]`, read when the limits are
   built; empty ones counted, then refused as vLLM does) of at most `max_stop_chars`
   characters each and `stop_token_ids` distinct stop token ids (`LIMITS["serve_stop_token_ids"]`,
   read as the stop strings' is), a seed that is a 64-bit signed integer, also seed + n - 1
   for n choices (-1 is no seed: `seed_of`, vLLM's), min_tokens in 0..max_tokens in vLLM's
   words, once max_tokens is known, and n 1 with greedy sampling, as vLLM refuses n > 1 at a
   temperature below `GREEDY_TEMPERATURE`) and
   `encode_prompt`, which refuses a prompt text longer in UTF-8 bytes than `max_context`
   tokens of this tokenizer can hold (`tokenizer.max_token_bytes`, when the tokenizer
   declares it) before encoding it;
3. after tokenization, `check_request` (in `Scheduler.submit`): an empty prompt, token ids
   outside the vocabulary, max_tokens <= 0, a prompt + max_tokens beyond the context window
   (vLLM's wording, `context_length_message`), and `check_sampling` again for callers that
   submit directly; for a request that names no max_tokens, before its output is sized to the
   rest of the context, `check_prompt_fits` (a prompt alone as long as the context, in vLLM's
   words for that case: no completion counted).

- `InvalidRequestError` (HTTP 400 / gRPC INVALID_ARGUMENT): any of the above. Requests are
  never silently truncated. `ModelNotFoundError`, a model name not served, is OpenAI's and
  vLLM's HTTP 404 (`openai.NotFoundError`; hunt 77: a 400), its error body's `reason`
  model_not_found (`code` is the status, 404, as vLLM's); gRPC's NOT_FOUND, gRPC's
  mapping of HTTP 404 (hunt 81: it was INVALID_ARGUMENT).
- `QueueFullError` (HTTP 429 with Retry-After / gRPC RESOURCE_EXHAUSTED): the bounded waiting
  queue is full.
- `ShuttingDownError` (HTTP 503 / gRPC UNAVAILABLE): the server is draining.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from typing import Any

from wse_core.errors import WseError, shown
from wse_core.host.limits import lift, limit

from wse_inference.engine import MAX_LOGPROBS, SamplingParams, check_min_tokens

__all__ = [
    "InvalidRequestError",
    "ModelNotFoundError",
    "RequestTooLargeError",
    "QueueFullError",
    "ShuttingDownError",
    "RequestLimits",
    "SEED_MIN",
    "SEED_MAX",
    "UNSEEDED",
    "GREEDY_TEMPERATURE",
    "MAX_TEMPERATURE",
    "check_sampling",
    "seed_of",
    "encode_prompt",
    "check_prompt_fits",
    "check_request",
    "context_length_message",
    "shown_int",
    "shown_json",
]

SEED_MIN, SEED_MAX = -(2**63), 2**63 - 1  # seeds are int64 (vLLM's range, the proto's type)
# A request's seed -1 is no seed, a fresh draw each time: vLLM's `SamplingParams.__post_init__`
# (vllm/sampling_params.py: `if self.seed == -1: self.seed = None`), the "random" many front
# ends send by default (hunt 81: it was a fixed seed, the same "random" answer every time)
UNSEEDED = -1
# Below this temperature a request is greedy for n's rule: vLLM's `_SAMPLING_EPS` (1e-5,
# vllm/sampling_params.py), under which it samples by argmax and refuses n > 1
GREEDY_TEMPERATURE = 1e-5
INT32_MAX = 2**31 - 1  # top_k and the other counts travel as int32 on the device
MAX_TEMPERATURE = 2.0  # OpenAI's documented range is [0, 2]; 1e308 was taken (hunt 55)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RequestLimits:
    """What a request may not exceed, checked before it is parsed or tokenized."""

    max_body_bytes: int = 2**21  # 2 MiB: an HTTP body (413) or a gRPC message
    # HTTP bodies held at once, read or being parsed, all connections together (429 past
    # it): 64 bodies of max_body_bytes (hunt 58b: 300 stalled 2 MB bodies held 650 MB)
    max_body_bytes_in_flight: int = 64 * 2**21
    max_json_depth: int = 32  # nested objects and lists in an HTTP body (400)
    # stop strings; None: LIMITS["serve_stop_strings"] (64, WSE_LIMIT_SERVE_STOP_STRINGS
    # lifts it; hunt 79: OpenAI's 4, fixed, refused an lm-eval task's `until` list)
    max_stop: int | None = None
    # the stop strings a request may give: `max_stop`, or the limit in force when these limits
    # were built, read once here (hunt 80: read at every request, a bad
    # WSE_LIMIT_SERVE_STOP_STRINGS turned each request into a 500; now `RequestLimits()`,
    # and so `ServeConfig()`, refuses it with its one line)
    stop_strings: int = dataclasses.field(init=False, compare=False)
    # characters of one stop string (hunt 59: 1 MB stops were taken; the stream holds back
    # len - 1 characters of text to match one, so a stop that long held a whole completion
    # back): 40x the longest end markers of chat templates ('<|eot_id|>', '\n\nHuman:')
    max_stop_chars: int = 1024
    # distinct stop token ids (vLLM sets no bound and drops repeats; 10^5 were taken, hunt 56,
    # and each distinct count compiles `decoding._decode_loop` again); None:
    # LIMITS["serve_stop_token_ids"] (64, WSE_LIMIT_SERVE_STOP_TOKEN_IDS lifts it; hunt 81: a
    # fixed 64 that counted repeats, with no way to lift it), read once as `stop_strings` is
    max_stop_token_ids: int | None = None
    stop_token_ids: int = dataclasses.field(init=False, compare=False)
    body_idle_s: float = 10.0  # an HTTP body that sends nothing for this long is refused (400)
    # the whole body must have arrived by then (hunt 62: a byte every 4 s kept a 100 KB body
    # open for days); 2 MiB in 60 s is 280 kbit/s. Go's http.Server.ReadTimeout is the like.
    body_s: float = 60.0
    max_user_chars: int = 256  # `user`, an end-user id (hunt 56: 1.5 MB ids were taken)
    # vLLM's request_id (the body's) and its X-Request-Id header: the response id's base, which
    # every streamed chunk of every choice repeats (hunt 79: a 1 MB id, n = 2, sent 2 MB)
    max_request_id_chars: int = 256
    # HTTP's request line and headers (uvicorn's h11_max_incomplete_event_size; h11's default):
    # past it a 400 says so (hunt 57: a 200 KB header was "Receive buffer too long")
    max_head_bytes: int = 16 * 1024
    head_s: float = 10.0  # the request line and headers must have arrived by then (slowloris)
    # The rest of a body answered before it all came (a 413 on its Content-Length) is read and
    # dropped, so the client, still sending, is not reset before it reads the answer; then
    # the connection is closed (hunt 59: 8.9 GB were read in 15 s, for as long as the client
    # sent). nginx's lingering close reads for at most 30 s; Go's server reads 256 KiB.
    max_discard_bytes: int = 64 * 2**20  # 32 bodies of max_body_bytes: ~5 s at 100 Mbit/s
    discard_s: float = 10.0

    def __post_init__(self) -> None:
        given = self.max_stop
        object.__setattr__(
            self, "stop_strings", limit("serve_stop_strings") if given is None else given
        )
        ids = self.max_stop_token_ids
        object.__setattr__(
            self, "stop_token_ids", limit("serve_stop_token_ids") if ids is None else ids
        )


class InvalidRequestError(WseError):
    """A request the server refuses (HTTP `http_status`, 400 / gRPC INVALID_ARGUMENT); its
    `code` (invalid_value...) is the HTTP error body's `reason`, whose `code` is the status."""

    http_status = 400

    def __init__(
        self, message: str, *, param: str | None = None, code: str = "invalid_value"
    ) -> None:
        super().__init__(message)
        self.param = param
        self.code = code


class ModelNotFoundError(InvalidRequestError):
    """A model name this server does not serve: HTTP 404, as OpenAI and vLLM answer
    (`openai.NotFoundError`; hunt 77: it was a 400), with `reason` model_not_found (OpenAI's
    code string; the body's `code` is the status, 404, as vLLM's)."""

    http_status = 404

    def __init__(self, model: object, served: Sequence[str]) -> None:
        super().__init__(
            f"The model {shown_json(model)} does not exist; this server serves {list(served)}.",
            param="model",
            code="model_not_found",
        )


class RequestTooLargeError(InvalidRequestError):
    """A body beyond `RequestLimits.max_body_bytes` (HTTP 413)."""

    def __init__(self, size_bytes: int | None, limit_bytes: int, *, at_least: bool = False) -> None:
        # a chunked body's whole size is not known (hunt 75: the running total where the limit
        # was crossed, or the chunks' sizes so far, were stated as the body's size)
        size = (
            f"{size_bytes:,} bytes"
            if size_bytes is not None
            else f"more than {limit_bytes:,} bytes"
        )
        size = f"at least {size_bytes:,} bytes (its chunk sizes so far)" if at_least else size
        super().__init__(
            f"The request body is {size}; this server takes at most {limit_bytes:,} bytes.",
            code="request_too_large",
        )


class QueueFullError(WseError):
    """The waiting queue is full (HTTP 429 / gRPC RESOURCE_EXHAUSTED)."""

    def __init__(self, message: str, *, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class ShuttingDownError(WseError):
    """The server is draining and takes no new requests (HTTP 503 / gRPC UNAVAILABLE)."""


def shown_int(v: int) -> str:
    """An integer for an error message: whole up to 24 digits, else its head and its length
    (hunt 58b: a 4,000-digit max_tokens or token id came back whole, twice, in an 8 KB error)."""
    text = str(v)
    return (
        text
        if len(text) <= 24
        else f"{text[:12]}... (an integer of {len(text.lstrip('-')):,} digits)"
    )


def shown_json(value: Any, *, head: int = 80) -> str:
    """A request's value for an error message as JSON spells it (true, null, {"a": 1}; hunt
    65: `prompt: [true]` was "it holds True"), strings quoted as `repr` quotes them; cut after
    `head` characters with its length said (`wse_core.errors.shown`), the quote closed."""
    if isinstance(value, str):
        return shown(value, head=head)
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):  # not from JSON (a caller's own object): as Python says it
        text = repr(value)
    return shown(text, quote=False, head=head)


def seed_of(seed: int | None) -> int | None:
    """A request's seed as it runs: `UNSEEDED` (-1) is no seed (None), as vLLM reads it."""
    return None if seed == UNSEEDED else seed


def context_length_message(
    max_context: int, prompt_tokens: int, completion_tokens: int | None
) -> str:
    """vLLM's wording for a request that does not fit in the context window
    (`OpenAIServing._validate_input`, vllm/entrypoints/openai/serving_engine.py);
    `completion_tokens` None: the request named no max_tokens, its prompt alone too long."""
    if completion_tokens is None:  # vLLM's `max_tokens is None` branch, its words and comma
        return (
            f"This model's maximum context length is {max_context} tokens. However, you "
            f"requested {prompt_tokens} tokens in the messages, Please reduce the length of the "
            "messages."
        )
    return (
        f"This model's maximum context length is {max_context} tokens. However, you requested "
        f"{prompt_tokens + completion_tokens} tokens ({prompt_tokens} in the messages, "
        f"{completion_tokens} in the completion). Please reduce the length of the messages or "
        "completion."
    )


def check_prompt_fits(prompt_tokens: int, max_context: int, *, param: str) -> None:
    """A request that names no max_tokens (its output the rest of the context, at least one
    token) whose prompt alone fills the context: vLLM's 400 for `max_tokens is None` and
    `token_num >= max_model_len`, which counts no completion (hunt 82: "N + 1 tokens (N in the
    messages, 1 in the completion)", the 1 being the server's own filler)."""
    if prompt_tokens >= max_context:
        raise InvalidRequestError(
            context_length_message(max_context, prompt_tokens, None),
            param=param,
            code="context_length_exceeded",
        )


def check_sampling(sampling: SamplingParams, *, n: int = 1, limits: RequestLimits) -> None:
    """Raise `InvalidRequestError` for a sampling setting no engine can run (see the module
    docstring); nothing here depends on the prompt, so it runs before tokenization."""
    if not 0 <= sampling.temperature <= MAX_TEMPERATURE:  # NaN fails both comparisons
        raise InvalidRequestError(
            f"temperature must be in [0, {MAX_TEMPERATURE:g}] (0 is greedy), got "
            f"{sampling.temperature}.",
            param="temperature",
        )
    if not 0 < sampling.top_p <= 1:
        raise InvalidRequestError(f"top_p must be in (0, 1], got {sampling.top_p}.", param="top_p")
    if not 0 <= sampling.top_k <= INT32_MAX:
        raise InvalidRequestError(
            f"top_k must be -1 or >= 0 (-1 and 0 disable it), got {sampling.top_k}.", param="top_k"
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
    max_stop = limits.stop_strings
    if len(sampling.stop) > max_stop:
        lifted = f" ({lift('serve_stop_strings')})" if limits.max_stop is None else ""
        raise InvalidRequestError(
            f"stop must be a string or a list of at most {max_stop} strings, got "
            f"{len(sampling.stop)}{lifted}.",
            param="stop",
        )
    long = next((i for i, s in enumerate(sampling.stop) if len(s) > limits.max_stop_chars), None)
    if long is not None:  # OpenAI's wording for a string past its length
        raise InvalidRequestError(
            f"Invalid 'stop[{long}]': string too long. Expected a string with maximum length "
            f"{limits.max_stop_chars}, but got a string with length "
            f"{len(sampling.stop[long]):,} instead.",
            param="stop",
            code="string_above_max_length",
        )
    if any(not s for s in sampling.stop):  # counted above first (hunt 55: 100 '' passed)
        raise InvalidRequestError(
            "stop cannot contain an empty string (it would match at once).", param="stop"
        )
    distinct = len(set(sampling.stop_token_ids))  # a repeat stops nothing more (vLLM drops it)
    if distinct > limits.stop_token_ids:
        lifted = f" ({lift('serve_stop_token_ids')})" if limits.max_stop_token_ids is None else ""
        raise InvalidRequestError(
            f"stop_token_ids must be a list of at most {limits.stop_token_ids} distinct token "
            f"ids, got {distinct:,}{lifted}.",
            param="stop_token_ids",
        )
    if n > 1 and sampling.temperature < GREEDY_TEMPERATURE:  # vLLM's words, then why
        raise InvalidRequestError(
            f"n must be 1 when using greedy sampling, got {n}: at temperature "
            f"{sampling.temperature:g} every choice is the same; give a temperature above 0 "
            "for different choices.",
            param="n",
        )
    try:  # vLLM's words; max_tokens 0 (the rest of the context, not yet known) bounds nothing
        check_min_tokens(sampling.min_tokens, sampling.max_tokens, ValueError)
    except ValueError as e:
        raise InvalidRequestError(str(e), param="min_tokens") from None
    seed = sampling.seed
    if seed is not None and not SEED_MIN <= seed <= SEED_MAX - (n - 1):
        raise InvalidRequestError(
            f"seed must be a 64-bit integer in [{SEED_MIN}, {SEED_MAX - (n - 1)}]"
            + (f" (choice i uses seed + i, n = {n})" if n > 1 else "")
            + f", got {seed}.",
            param="seed",
        )


def encode_prompt(
    tokenizer: Any, text: str, *, max_context: int, param: str = "prompt"
) -> list[int]:
    """`tokenizer.encode(text)`, after refusing a text that cannot fit: more UTF-8 bytes than
    `max_context` tokens of at most `tokenizer.max_token_bytes` bytes each (a lower bound on
    its token count, so nothing that fits is refused). A tokenizer without `max_token_bytes`
    is bounded by the body limit alone."""
    per_token = getattr(tokenizer, "max_token_bytes", None)
    if per_token and len(text) > max_context:  # len(text) <= its UTF-8 bytes: a cheap screen
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > max_context * per_token:
            at_least = -(-size // per_token)
            # hunt 60: "the messages is", "at most 1 bytes each"
            are, each = ("are" if param.endswith("s") else "is"), ("s" if per_token > 1 else "")
            raise InvalidRequestError(
                f"This model's maximum context length is {max_context} tokens. However, the "
                f"{param} {are} {size:,} bytes, at least {at_least:,} tokens of this tokenizer "
                f"(at most {per_token} byte{each} each). Please reduce the length of the {param}.",
                param=param,
                code="context_length_exceeded",
            )
    return list(tokenizer.encode(text)) if text else []


def check_request(
    prompt_ids: Sequence[int],
    sampling: SamplingParams,
    *,
    max_context: int,
    vocab_size: int,
    limits: RequestLimits | None = None,
    scored_alone: bool = False,
) -> None:
    """Raise `InvalidRequestError` unless the request can run exactly as asked.
    `scored_alone`: echo with max_tokens 0, run with max_tokens 1 (its token never shown): the
    context holds its prompt alone, as vLLM checks the max_tokens sent (0) before it runs one
    (hunt 80: a prompt that filled the context was refused, "1 in the completion")."""
    if len(prompt_ids) == 0:
        raise InvalidRequestError("The prompt is empty; give at least one token.", param="prompt")
    bad = [t for t in prompt_ids if not 0 <= int(t) < vocab_size]
    if bad:
        raise InvalidRequestError(
            f"Token id {shown_int(bad[0])} is outside the vocabulary [0, {vocab_size}).",
            param="prompt",
        )
    if sampling.max_tokens <= 0:
        raise InvalidRequestError(
            f"max_tokens must be at least 1, got {sampling.max_tokens}.", param="max_tokens"
        )
    asked = 0 if scored_alone else sampling.max_tokens
    if len(prompt_ids) + asked > max_context:
        raise InvalidRequestError(
            context_length_message(max_context, len(prompt_ids), asked),
            param="max_tokens",
            code="context_length_exceeded",
        )
    bad = [t for t in sampling.stop_token_ids if not 0 <= int(t) < vocab_size]
    if bad:
        raise InvalidRequestError(
            f"Stop token id {shown_int(bad[0])} is outside the vocabulary [0, {vocab_size}).",
            param="stop_token_ids",
        )
    check_sampling(sampling, limits=limits or RequestLimits())
