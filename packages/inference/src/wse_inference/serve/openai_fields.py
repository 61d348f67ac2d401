"""Reading and refusing an OpenAI request's fields (`wse_inference.serve.openai_request`'s
parsing uses them): `invalid` (an `InvalidRequestError` naming its field); `number`,
`integer` (a whole-number float too, as vLLM's pydantic reads one) and `flag` (a field of
that JSON type or its default); `max_tokens` (or max_completion_tokens) and
`stream_options`; and the fields this server does not honour: `refuse_unsupported` (n past
`MAX_N`, best_of, logit_bias, suffix, tools, response_format, min_p, vLLM's extras in
`NOT_HONOURED` unless absent, null or neutral, a non-empty vllm_xargs (custom logits
processors' arguments; kv_transfer_params, an object, is taken and ignored, as vLLM without a
KV connector ignores it), `user`, vLLM's `request_id` not a string or
past `RequestLimits.max_request_id_chars` (`check_request_id`, the X-Request-Id header's
bound too) and `priority` other than 0), `refuse_tools` and
`refuse_not_honoured` (the parts /tokenize shares) and `refuse_other_route` (messages on
/v1/completions, prompt on chat). Values a refusal repeats are spelt as JSON
(`admission.shown_json`).
"""

from __future__ import annotations

import json
import math
from typing import Any

from wse_inference.engine import MAX_LOGPROBS
from wse_inference.serve.admission import (
    SEED_MAX,
    SEED_MIN,
    InvalidRequestError,
    RequestLimits,
    shown_int,
    shown_json,
)

__all__ = [
    "MAX_N",
    "MAX_LOGIT_BIAS",
    "NOT_HONOURED",
    "check_request_id",
    "invalid",
    "integer",
    "number",
    "flag",
    "max_tokens",
    "stream_options",
    "refuse_not_honoured",
    "refuse_other_route",
    "refuse_tools",
    "refuse_unsupported",
]

MAX_N = 16  # choices per request
MAX_LOGIT_BIAS = 100  # OpenAI's logit_bias values are in [-100, 100] (checked, then refused)


def invalid(message: str, param: str | None) -> InvalidRequestError:
    return InvalidRequestError(message, param=param)


def number(body: dict, name: str, default: float) -> float:
    v = body.get(name)
    if v is None:
        return default
    try:  # an integer past 1.8e308 is an OverflowError (hunt 58b: temperature 10**400, a 500)
        finite = not isinstance(v, bool) and isinstance(v, int | float) and math.isfinite(v)
    except OverflowError:
        finite = False
    if not finite:
        got = shown_int(v) if isinstance(v, int) else shown_json(v)
        raise invalid(f"{name} must be a finite number, got {got}.", name)
    return float(v)


def integer(body: dict, name: str, default: int | None) -> int | None:
    v = body.get(name)
    if v is None:
        return default
    if isinstance(v, float) and v.is_integer():  # pydantic's lax mode, vLLM's: 2.0 is 2
        v = int(v)  # (hunt 73: "max_tokens": 2.0 was refused; 2.5, inf and NaN still are)
    if isinstance(v, bool) or not isinstance(v, int):
        raise invalid(f"{name} must be an integer, got {shown_json(v)}.", name)
    if not SEED_MIN <= v <= SEED_MAX:  # no field takes more; its digits are not echoed whole
        raise invalid(f"{name} must be a 64-bit integer, got {shown_int(v)}.", name)
    return v


def max_tokens(body: dict) -> int | None:
    """max_tokens, else max_completion_tokens (both checked: either may hold a bad value, and
    two different values are refused: which one wins differs between OpenAI and vLLM)."""
    given = integer(body, "max_tokens", None)
    completion = integer(body, "max_completion_tokens", None)
    if completion is not None and completion <= 0:
        raise invalid(f"max_completion_tokens must be at least 1, got {completion}.",
                   "max_completion_tokens")  # fmt: skip
    if given is not None and completion is not None and given != completion:
        raise invalid(
            f"max_tokens ({given}) and max_completion_tokens ({completion}) differ; give "
            "one of them (or the same value in both).",
            "max_completion_tokens",
        )
    return given if given is not None else completion


def stream_options(opts: Any, stream: bool) -> bool:
    """stream_options.include_usage; the object only with stream true (OpenAI and vLLM refuse
    it otherwise), with no key but include_usage (and vLLM's continuous_usage_stats false)."""
    if opts is None:
        return False
    if not isinstance(opts, dict):
        raise invalid(f"stream_options must be an object, got {shown_json(opts)}.",
                      "stream_options")  # fmt: skip
    include_usage = flag(opts.get("include_usage"), "stream_options.include_usage")
    if flag(opts.get("continuous_usage_stats"), "stream_options.continuous_usage_stats"):
        raise invalid("stream_options.continuous_usage_stats is not supported by this server; "
                   "leave it out.", "stream_options.continuous_usage_stats")  # fmt: skip
    unknown = sorted(set(opts) - {"include_usage", "continuous_usage_stats"})
    if unknown:
        raise invalid(f"stream_options has no field {shown_json(unknown[0], head=40)}; it takes "
                      "include_usage.", "stream_options")  # fmt: skip
    if not stream:
        raise invalid("stream_options is only allowed when stream is true.", "stream_options")
    return include_usage


# vLLM's and OpenAI's fields that would change the answer, which this server does not honour:
# refused unless absent, null or this neutral value (hunt 56: min_p "x" and guided_json were
# silently ignored). Every other field this module does not read is ignored, as vLLM ignores
# fields it does not know (a typo of a known field included).
NOT_HONOURED: dict[str, Any] = {
    "length_penalty": 1.0,
    "use_beam_search": False,
    "prompt_logprobs": None,  # the prompt's logprobs: echo with logprobs
    "skip_special_tokens": True,
    "spaces_between_special_tokens": True,
    "allowed_token_ids": None,
    "bad_words": [],
    "truncate_prompt_tokens": None,
    "logits_processors": None,
    "guided_json": None,
    "guided_regex": None,
    "guided_choice": None,
    "guided_grammar": None,
    "guided_decoding_backend": None,
    "guided_whitespace_pattern": None,
    "structured_outputs": None,
    "structural_tag": None,  # vLLM's guided decoding too (hunt 79: ignored, a 200)
    # vLLM's base64 tensors as the prompt; vLLM refuses them too unless started with
    # --enable-prompt-embeds (hunt 79: ignored, the answer was `prompt`'s)
    "prompt_embeds": None,
    "chat_template": None,  # the server's (--chat-template), never a request's
    "continue_final_message": False,
    "add_generation_prompt": True,
    "documents": None,
    "audio": None,
    "prediction": None,
    "web_search_options": None,
    "modalities": ["text"],
    "reasoning_effort": None,  # this server's models do not reason (OpenAI refuses it too)
    # vLLM's SamplingParams fields of its newer protocol (completion/ and chat_completion/
    # protocol.py; hunt 80: each ignored, a 200): the logprobs of chosen ids in place of the
    # top-k (vLLM's min_length 1: [] is its 400 too), an early end on repeated n-grams, and a
    # watermark on the sampled tokens
    "logprob_token_ids": None,
    "repetition_detection": None,
    "watermarking": False,
}


def refuse_other_route(body: dict, kind: str) -> None:
    """messages on /v1/completions or prompt on /v1/chat/completions: the other route's."""
    own, other, route = (("prompt", "messages", "/v1/chat/completions") if kind == "completion"
                         else ("messages", "prompt", "/v1/completions"))  # fmt: skip
    if body.get(other) is not None:
        raise invalid(f"{other} is a field of {route}; this route takes {own}.", other)
    if kind == "completion" and body.get("top_logprobs") is not None:  # chat's; ignored before
        raise invalid("top_logprobs is a field of /v1/chat/completions; /v1/completions takes "
                   f"logprobs: k (0..{MAX_LOGPROBS}).", "top_logprobs")  # fmt: skip


def _best_of(body: dict, n: int) -> None:
    best_of = integer(body, "best_of", None)
    if best_of is None or best_of == n:  # n candidates, all n returned: what n alone does
        return
    if best_of < n:
        raise invalid(f"best_of must be at least n ({n}), got {best_of}.", "best_of")
    raise invalid(
        f"best_of > n is not supported (best_of {best_of}, n {n}); leave it out or give n.",
        "best_of",
    )


def _logit_bias(body: dict) -> None:
    """OpenAI's shape checked (token id keys, values in [-100, 100]), then refused: not
    supported; {} and null are."""
    bias = body.get("logit_bias")
    if bias is None:
        return
    if not isinstance(bias, dict):
        raise invalid(f"logit_bias must be an object of token id -> bias, got "
                   f"{shown_json(bias)}.", "logit_bias")  # fmt: skip
    for key, value in bias.items():
        if not (key.isascii() and key.isdigit()):
            raise invalid(f"logit_bias keys must be token ids (decimal integers >= 0), got "
                       f"{shown_json(key, head=40)}.", "logit_bias")  # fmt: skip
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not -MAX_LOGIT_BIAS <= value <= MAX_LOGIT_BIAS
        ):
            raise invalid(f"logit_bias values must be numbers in [-{MAX_LOGIT_BIAS}, "
                       f"{MAX_LOGIT_BIAS}], got {shown_json(value, head=40)} "
                       f"for token {key}.", "logit_bias")  # fmt: skip
    if bias:
        raise invalid("logit_bias is not supported by this server; leave it out (or give {}).",
                   "logit_bias")  # fmt: skip


def refuse_tools(body: dict) -> None:
    """tools and functions (they would change the output) unless null or [] (hunt 65: a falsy
    0, {}, "" or false passed as none), and a tool_choice or function_call needing them."""
    for name, what in (("tools", "tools"), ("functions", "functions")):
        v = body.get(name)
        if v is not None and not isinstance(v, list):
            raise invalid(f"{name} must be a list of {what}, got {shown_json(v)}.", name)
        if v:
            raise invalid(f"{name} is not supported by this server; leave it out.", name)
    for name in ("tool_choice", "function_call"):
        v = body.get(name)
        if v is not None and v != "none":
            raise invalid(
                f"{name} {shown_json(v)} needs tools, which this server does not support; "
                'leave it out (or give "none").',
                name,
            )
    flag(body.get("parallel_tool_calls"), "parallel_tool_calls")


def refuse_unsupported(body: dict, limits: RequestLimits) -> None:
    n = integer(body, "n", 1)
    if n is None or not 1 <= n <= MAX_N:
        raise invalid(f"n must be in 1..{MAX_N}, got {n}.", "n")
    _best_of(body, n)
    _logit_bias(body)
    suffix = body.get("suffix")
    if suffix is not None and not isinstance(suffix, str):  # hunt 65: 0, false and [] passed
        raise invalid(f"suffix must be a string, got {shown_json(suffix)}.", "suffix")
    if suffix:
        raise invalid("suffix is not supported by this server; leave it out.", "suffix")
    refuse_tools(body)
    min_p = body.get("min_p")
    if min_p is not None and (isinstance(min_p, bool) or not isinstance(min_p, int | float)
                              or not 0 <= min_p <= 1):  # fmt: skip
        raise invalid(f"min_p must be a number in [0, 1], got {shown_json(min_p, head=40)}.",
                      "min_p")  # fmt: skip
    if min_p:
        raise invalid("min_p is not supported by this server; leave it out (or give 0).", "min_p")
    refuse_not_honoured(body, NOT_HONOURED)
    _extension_args(body)
    fmt = body.get("response_format")
    if fmt is not None and fmt != {"type": "text"}:
        raise invalid(
            f'response_format {shown_json(fmt)} is not supported; only {{"type": "text"}} is.',
            "response_format",
        )
    _request_id_and_priority(body, limits)
    user = body.get("user")
    if user is not None and (not isinstance(user, str) or len(user) > limits.max_user_chars):
        got = f"{len(user):,} characters" if isinstance(user, str) else repr(user)[:40]
        raise InvalidRequestError(
            f"user must be a string of at most {limits.max_user_chars} characters (an id of the "
            f"end user), got {got}.",
            param="user",
            code="string_above_max_length" if isinstance(user, str) else "invalid_value",
        )


def _extension_args(body: dict) -> None:
    """vLLM's two objects for what runs beside the sampler, each of vLLM's shape (an object;
    vLLM's pydantic refuses another type with a 400 too):

    - vllm_xargs (vLLM's `SamplingParams.extra_args`): arguments for custom logits processors
      (`vllm serve --logits-processors`), which steer the output; this server loads none, so
      a non-empty one is refused rather than dropped (vLLM without such a processor drops it,
      and the request is answered as if it were not steered); {} and null are taken;
    - kv_transfer_params: what a KV connector (disaggregated prefill) reads; it does not
      change the output, and vLLM without a connector, as this server is, ignores it: taken
      and ignored."""
    xargs = body.get("vllm_xargs")
    if xargs is not None and not isinstance(xargs, dict):
        raise invalid(f"vllm_xargs must be an object of argument names to values, got "
                      f"{shown_json(xargs, head=60)}.", "vllm_xargs")  # fmt: skip
    if xargs:
        raise invalid(
            f"vllm_xargs {shown_json(xargs, head=60)} carries arguments for custom logits "
            "processors (vLLM's --logits-processors); this server loads none, so nothing "
            "would read them; leave it out (or give {}).",
            "vllm_xargs",
        )
    kv = body.get("kv_transfer_params")
    if kv is not None and not isinstance(kv, dict):
        raise invalid(f"kv_transfer_params must be an object, got {shown_json(kv, head=60)}.",
                      "kv_transfer_params")  # fmt: skip


def check_request_id(rid: str, name: str, limits: RequestLimits) -> None:
    """A request id (`name`: the body's request_id or the X-Request-Id header) of at most
    `RequestLimits.max_request_id_chars`, as `user` is bounded: every streamed chunk of every
    choice repeats it (hunt 79: a 1 MB id sent 2 MB at n = 2; vLLM sets no bound)."""
    if len(rid) > limits.max_request_id_chars:
        raise InvalidRequestError(
            f"{name} must be at most {limits.max_request_id_chars} characters (the response "
            f"id repeats it in every chunk), got {len(rid):,} characters.",
            param=name,
            code="string_above_max_length",
        )


def _request_id_and_priority(body: dict, limits: RequestLimits) -> None:
    """vLLM's `request_id` (a str field: an int is a 400 there; at most
    `RequestLimits.max_request_id_chars`) and `priority` (an int; vLLM refuses a non-zero one,
    "Got priority 5 but Priority scheduling is not enabled.", unless --scheduling-policy
    priority, which this server has not); hunt 78: both were ignored."""
    rid = body.get("request_id")
    if rid is not None and not isinstance(rid, str):
        raise invalid(f"request_id must be a string, got {shown_json(rid, head=40)}.",
                      "request_id")  # fmt: skip
    if rid is not None:
        check_request_id(rid, "request_id", limits)
    priority = integer(body, "priority", 0)
    if priority:
        raise invalid(f"priority {shown_int(priority)} needs priority scheduling, which this "
                      "server does not have (it serves in arrival order); leave it out (or "
                      "give 0).", "priority")  # fmt: skip


def refuse_not_honoured(body: dict, names: Any) -> None:
    """Each of `names` (keys of `NOT_HONOURED`) refused unless absent, null or neutral."""
    for name in names:
        v, neutral = body.get(name), NOT_HONOURED[name]
        if v is not None and not (v == neutral and type(v) is type(neutral)):
            if not (isinstance(neutral, float) and type(v) is int and v == neutral):
                raise invalid(
                    f"{name} is not supported by this server; leave it out"
                    + ("." if neutral is None else f" (or give {json.dumps(neutral)}).")
                    + f" Got {shown_json(v, head=60)}.",
                    name,
                )


def flag(value: Any, name: str) -> bool:
    """A JSON true/false (null: false); "false" or 1 would be read as true, so they are refused."""
    if value is None:
        return False
    if not isinstance(value, bool):
        raise invalid(f"{name} must be true or false, got {shown_json(value)}.", name)
    return value
