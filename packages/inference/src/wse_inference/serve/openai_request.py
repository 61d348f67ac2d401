"""The OpenAI wire format of requests: parsing and validation.

Requests (`parse_request(body, kind=..., ...)`) accept the fields the official `openai` client
sends for `/v1/completions` and `/v1/chat/completions`: model, prompt or messages, max_tokens
(or max_completion_tokens), temperature, top_p, seed, stop, stream, stream_options
({"include_usage"}), n (1..MAX_N = 16 choices; choice i is seeded with seed + i), logprobs,
echo (completions), presence_penalty and frequency_penalty (in [-2, 2]), and vLLM's top_k,
repetition_penalty (> 0), stop_token_ids and ignore_eos (generation stops at the model's
end-of-sequence tokens unless it is true). Fields that would change the output but are not
supported (best_of other than n, several prompts, a logit_bias, suffix, tools, functions, a
tool_choice other than "none", a response_format other than text, and vLLM's extras in
`_NOT_HONOURED`: min_p, min_tokens, guided_*, prompt_logprobs, a request's chat_template...)
are refused with `InvalidRequestError` (HTTP 400) unless absent, null or neutral; so are the
other route's field (messages on /v1/completions, prompt on chat) and stream_options without
stream. `user` must be a string of at most `RequestLimits.max_user_chars`. A model name this
server does not serve is `ModelNotFoundError` (HTTP 400 with OpenAI's code model_not_found;
OpenAI and vLLM answer 404); a missing one a 400. Fields this module does not know are ignored,
as vLLM ignores them (metadata, store, service_tier, a misspelt name...). Flags (stream, echo,
ignore_eos, include_usage, parallel_tool_calls) must be JSON true, false or null: "false" would
read as true. A missing max_tokens means "the rest of the context window" (vLLM's default).

Logprobs are asked with `logprobs: k` (completions) or `logprobs: true, top_logprobs: k`
(chat), k in 0..MAX_LOGPROBS = 20; `echo: true` with logprobs also scores the prompt.

Chat prompts are `wse_inference.serve.chat_template`'s (`chat_prompt`: the template chosen,
rendered within its operation and time limits).

The answers (response bodies, logprobs, streaming) are `wse_inference.serve.openai_response`'s;
vLLM's /tokenize and /detokenize bodies are here (`tokenize_request`, `detokenize_request`).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from typing import Any

from wse_inference.engine import MAX_LOGPROBS, SamplingParams, Tokenizer
from wse_inference.serve.admission import (
    InvalidRequestError,
    ModelNotFoundError,
    RequestLimits,
    check_sampling,
    encode_prompt,
)
from wse_inference.serve.chat_template import chat_prompt

__all__ = [
    "ParsedRequest",
    "parse_request",
    "chat_prompt",
    "tokenize_request",
    "detokenize_request",
    "choice_sampling",
]


@dataclasses.dataclass(frozen=True)
class ParsedRequest:
    kind: str  # "completion" | "chat"
    model: str
    prompt_ids: list[int]
    sampling: SamplingParams
    stream: bool
    include_usage: bool
    echo: bool = False  # /v1/completions: the answer starts with the prompt (and its logprobs)
    n: int = 1  # choices, each its own sequence (choice_sampling)


MAX_N = 16  # choices per request
MAX_LOGIT_BIAS = 100  # OpenAI's logit_bias values are in [-100, 100] (checked, then refused)


def choice_sampling(sampling: SamplingParams, i: int) -> SamplingParams:
    """Choice i's settings: with a seed, choice i draws with seed + i (so n choices differ
    and each is reproducible); without one, each draws from fresh entropy."""
    if i == 0 or sampling.seed is None:
        return sampling
    return dataclasses.replace(sampling, seed=sampling.seed + i)


def _bad(message: str, param: str | None) -> InvalidRequestError:
    return InvalidRequestError(message, param=param)


def _surrogate_at(value: Any, path: str) -> str | None:
    """The path of the first string (or key) in `value` holding a lone surrogate (legal in
    JSON as an escape such as "\\udcff", but not Unicode text: no tokenizer can encode it)."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return path
        return None
    if isinstance(value, dict):
        for k, v in value.items():
            found = _surrogate_at(k, path) or _surrogate_at(v, f"{path}.{k}")
            if found:
                return found
    if isinstance(value, list):
        for i, v in enumerate(value):
            found = _surrogate_at(v, f"{path}[{i}]")
            if found:
                return found
    return None


def _refuse_surrogates(body: dict) -> None:
    for key, value in body.items():
        where = _surrogate_at(key, "body") or _surrogate_at(value, str(key))
        if where:
            raise _bad(
                f"{where} holds a lone surrogate escape (such as \\udcff), which is not "
                "Unicode text; send UTF-8 text.",
                str(key) if where != "body" else None,
            )


def _check_model_name(model: Any, model_names: Sequence[str], *, required: bool) -> None:
    """A missing or non-string model is a 400; a name this server does not serve is OpenAI's
    and vLLM's 404 model_not_found (`ModelNotFoundError`)."""
    if model is None and not required:
        return
    if model is None or model == "":
        raise InvalidRequestError(
            f"model is required; this server serves {list(model_names)}.",
            param="model",
            code="missing_required_parameter",
        )
    if not isinstance(model, str):
        raise _bad(
            f"model must be a string (one of {list(model_names)}), got {model!r:.80}.", "model"
        )
    if model not in model_names:
        raise ModelNotFoundError(model, model_names)


def _number(body: dict, name: str, default: float) -> float:
    v = body.get(name)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise _bad(f"{name} must be a finite number, got {v!r:.80}.", name)
    return float(v)


def _integer(body: dict, name: str, default: int | None) -> int | None:
    v = body.get(name)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int):
        raise _bad(f"{name} must be an integer, got {v!r:.80}.", name)
    return v


def _token_list(v: Any, name: str) -> list[int] | None:
    if isinstance(v, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in v):
        return list(v)
    return None


def _stop(body: dict) -> tuple[str, ...]:
    v = body.get("stop")
    if v is None:
        return ()
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, list) or not all(isinstance(s, str) for s in v):
        raise _bad("stop must be a string or a list of strings.", "stop")  # how many: limits
    return tuple(v)  # empty ones too: check_sampling counts them, then refuses them (vLLM)


def _completion_prompt(body: dict, tokenizer: Tokenizer, max_context: int) -> list[int]:
    p = body.get("prompt")
    if isinstance(p, list) and len(p) == 1 and isinstance(p[0], str | list):
        p = p[0]  # the client's batch-of-one form
    if isinstance(p, str):
        return encode_prompt(tokenizer, p, max_context=max_context)
    ids = _token_list(p, "prompt")
    if ids is not None:
        return ids
    if isinstance(p, list) and len(p) > 1 and all(isinstance(x, str | list) for x in p):
        raise _bad("Only one prompt per request is supported; send one request each.", "prompt")
    if isinstance(p, list):  # hunt 56: [1, "a"] and [[1, [2]]] were called several prompts
        bad = next(x for x in p if isinstance(x, bool) or not isinstance(x, int))
        raise _bad(
            f"prompt must be a string or one list of integer token ids; it holds {bad!r:.80}.",
            "prompt",
        )
    raise _bad(f"prompt must be a string or a list of token ids, got {p!r:.80}.", "prompt")


# vLLM's and OpenAI's fields that would change the answer, which this server does not honour:
# refused unless absent, null or this neutral value (hunt 56: min_p "x" and guided_json were
# silently ignored). Every other field this module does not read is ignored, as vLLM ignores
# fields it does not know (a typo of a known field included).
_NOT_HONOURED: dict[str, Any] = {
    "min_tokens": 0,
    "length_penalty": 1.0,
    "use_beam_search": False,
    "prompt_logprobs": None,  # the prompt's logprobs: echo with logprobs
    "include_stop_str_in_output": False,
    "skip_special_tokens": True,
    "spaces_between_special_tokens": True,
    "allowed_token_ids": None,
    "bad_words": [],
    "truncate_prompt_tokens": None,
    "logits_processors": None,
    "return_tokens_as_token_ids": False,
    "guided_json": None,
    "guided_regex": None,
    "guided_choice": None,
    "guided_grammar": None,
    "guided_decoding_backend": None,
    "guided_whitespace_pattern": None,
    "structured_outputs": None,
    "chat_template": None,  # the server's (--chat-template), never a request's
    "chat_template_kwargs": {},
    "continue_final_message": False,
    "add_generation_prompt": True,
    "documents": None,
    "audio": None,
    "prediction": None,
    "web_search_options": None,
    "modalities": ["text"],
    "reasoning_effort": None,  # this server's models do not reason (OpenAI refuses it too)
}


def _refuse_other_route(body: dict, kind: str) -> None:
    """messages on /v1/completions or prompt on /v1/chat/completions: the other route's."""
    own, other, route = (("prompt", "messages", "/v1/chat/completions") if kind == "completion"
                         else ("messages", "prompt", "/v1/completions"))  # fmt: skip
    if body.get(other) is not None:
        raise _bad(f"{other} is a field of {route}; this route takes {own}.", other)
    if kind == "completion" and body.get("top_logprobs") is not None:  # chat's; ignored before
        raise _bad("top_logprobs is a field of /v1/chat/completions; /v1/completions takes "
                   f"logprobs: k (0..{MAX_LOGPROBS}).", "top_logprobs")  # fmt: skip


def _best_of(body: dict, n: int) -> None:
    best_of = _integer(body, "best_of", None)
    if best_of is None or best_of == n:  # n candidates, all n returned: what n alone does
        return
    if best_of < n:
        raise _bad(f"best_of must be at least n ({n}), got {best_of}.", "best_of")
    raise _bad(
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
        raise _bad(f"logit_bias must be an object of token id -> bias, got {bias!r:.80}.",
                   "logit_bias")  # fmt: skip
    for key, value in bias.items():
        if not (key.isascii() and key.isdigit()):
            raise _bad(f"logit_bias keys must be token ids (decimal integers >= 0), got "
                       f"{key!r:.40}.", "logit_bias")  # fmt: skip
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not -MAX_LOGIT_BIAS <= value <= MAX_LOGIT_BIAS
        ):
            raise _bad(f"logit_bias values must be numbers in [-{MAX_LOGIT_BIAS}, "
                       f"{MAX_LOGIT_BIAS}], got {value!r:.40} "
                       f"for token {key}.", "logit_bias")  # fmt: skip
    if bias:
        raise _bad("logit_bias is not supported by this server; leave it out (or give {}).",
                   "logit_bias")  # fmt: skip


def _tools(body: dict) -> None:
    for name in ("tools", "functions"):  # they would change the output
        if body.get(name):
            raise _bad(f"{name} is not supported by this server; leave it out.", name)
    for name in ("tool_choice", "function_call"):
        v = body.get(name)
        if v is not None and v != "none":
            raise _bad(
                f"{name} {v!r:.80} needs tools, which this server does not support; leave it "
                'out (or give "none").',
                name,
            )
    _flag(body.get("parallel_tool_calls"), "parallel_tool_calls")


def _refuse_unsupported(body: dict, limits: RequestLimits) -> None:
    n = _integer(body, "n", 1)
    if n is None or not 1 <= n <= MAX_N:
        raise _bad(f"n must be in 1..{MAX_N}, got {n}.", "n")
    _best_of(body, n)
    _logit_bias(body)
    if body.get("suffix"):
        raise _bad("suffix is not supported by this server; leave it out.", "suffix")
    _tools(body)
    min_p = body.get("min_p")
    if min_p is not None and (isinstance(min_p, bool) or not isinstance(min_p, int | float)
                              or not 0 <= min_p <= 1):  # fmt: skip
        raise _bad(f"min_p must be a number in [0, 1], got {min_p!r:.40}.", "min_p")
    if min_p:
        raise _bad("min_p is not supported by this server; leave it out (or give 0).", "min_p")
    for name, neutral in _NOT_HONOURED.items():
        v = body.get(name)
        if v is not None and not (v == neutral and type(v) is type(neutral)):
            if not (isinstance(neutral, float) and type(v) is int and v == neutral):
                raise _bad(
                    f"{name} is not supported by this server; leave it out"
                    + ("." if neutral is None else f" (or give {json.dumps(neutral)}).")
                    + f" Got {v!r:.60}.",
                    name,
                )
    fmt = body.get("response_format")
    if fmt is not None and fmt != {"type": "text"}:
        raise _bad(
            f'response_format {fmt!r:.80} is not supported; only {{"type": "text"}} is.',
            "response_format",
        )
    user = body.get("user")
    if user is not None and (not isinstance(user, str) or len(user) > limits.max_user_chars):
        got = f"{len(user):,} characters" if isinstance(user, str) else repr(user)[:40]
        raise InvalidRequestError(
            f"user must be a string of at most {limits.max_user_chars} characters (an id of the "
            f"end user), got {got}.",
            param="user",
            code="string_above_max_length" if isinstance(user, str) else "invalid_value",
        )


def _logprobs(body: dict, kind: str) -> int | None:
    """The number of alternatives per token the request asks for (None: no logprobs)."""
    if kind == "chat":
        want = body.get("logprobs")
        if want is not None and not isinstance(want, bool):
            raise _bad(f"logprobs must be true or false, got {want!r:.80}.", "logprobs")
        k, name = _integer(body, "top_logprobs", None), "top_logprobs"
        if k is not None and not 0 <= k <= MAX_LOGPROBS:
            raise _bad(f"{name} must be in 0..{MAX_LOGPROBS}, got {k}.", name)
        if k is not None and k > 0 and not want:
            raise _bad("when using top_logprobs, logprobs must be set to true.", name)
        if not want:
            return None
        k = k or 0
    else:
        k, name = _integer(body, "logprobs", None), "logprobs"
        if k is None:
            return None
    if not 0 <= k <= MAX_LOGPROBS:
        raise _bad(f"{name} must be in 0..{MAX_LOGPROBS}, got {k}.", name)
    return k


def _max_tokens(body: dict) -> int | None:
    """max_tokens, else max_completion_tokens (both checked: either may hold a bad value, and
    two different values are refused: which one wins differs between OpenAI and vLLM)."""
    max_tokens = _integer(body, "max_tokens", None)
    completion = _integer(body, "max_completion_tokens", None)
    if completion is not None and completion <= 0:
        raise _bad(f"max_completion_tokens must be at least 1, got {completion}.",
                   "max_completion_tokens")  # fmt: skip
    if max_tokens is not None and completion is not None and max_tokens != completion:
        raise _bad(
            f"max_tokens ({max_tokens}) and max_completion_tokens ({completion}) differ; give "
            "one of them (or the same value in both).",
            "max_completion_tokens",
        )
    return max_tokens if max_tokens is not None else completion


def _flag(value: Any, name: str) -> bool:
    """A JSON true/false (null: false); "false" or 1 would be read as true, so they are refused."""
    if value is None:
        return False
    if not isinstance(value, bool):
        raise _bad(f"{name} must be true or false, got {value!r:.80}.", name)
    return value


def _stream_options(opts: Any, stream: bool) -> bool:
    """stream_options.include_usage; the object only with stream true (OpenAI and vLLM refuse
    it otherwise), with no key but include_usage (and vLLM's continuous_usage_stats false)."""
    if opts is None:
        return False
    if not isinstance(opts, dict):
        raise _bad(f"stream_options must be an object, got {opts!r:.80}.", "stream_options")
    include_usage = _flag(opts.get("include_usage"), "stream_options.include_usage")
    if _flag(opts.get("continuous_usage_stats"), "stream_options.continuous_usage_stats"):
        raise _bad("stream_options.continuous_usage_stats is not supported by this server; "
                   "leave it out.", "stream_options.continuous_usage_stats")  # fmt: skip
    unknown = sorted(set(opts) - {"include_usage", "continuous_usage_stats"})
    if unknown:
        raise _bad(f"stream_options has no field {unknown[0]!r:.40}; it takes include_usage.",
                   "stream_options")  # fmt: skip
    if not stream:
        raise _bad("stream_options is only allowed when stream is true.", "stream_options")
    return include_usage


def _sampling(body: dict, kind: str) -> SamplingParams:
    """The request's settings; max_tokens 0 when the body leaves it to the context (filled in
    once the prompt's length is known)."""
    max_tokens = _max_tokens(body)
    top_k = _integer(body, "top_k", 0) or 0
    stop_ids = body.get("stop_token_ids")
    stop_ids = [] if stop_ids is None else stop_ids  # hunt 56: {}, 0 and "" passed as none
    if _token_list(stop_ids, "stop_token_ids") is None:
        raise _bad("stop_token_ids must be a list of token ids.", "stop_token_ids")
    ignore_eos = _flag(body.get("ignore_eos"), "ignore_eos")
    return SamplingParams(
        max_tokens=0 if max_tokens is None else max_tokens,
        temperature=_number(body, "temperature", 1.0),
        top_p=_number(body, "top_p", 1.0),
        top_k=0 if top_k == -1 else top_k,
        seed=_integer(body, "seed", None),
        stop=_stop(body),
        stop_token_ids=tuple(stop_ids),
        ignore_eos=ignore_eos,
        logprobs=_logprobs(body, kind),
        presence_penalty=_number(body, "presence_penalty", 0.0),
        frequency_penalty=_number(body, "frequency_penalty", 0.0),
        repetition_penalty=_number(body, "repetition_penalty", 1.0),
    )


def parse_request(
    body: Any,
    *,
    kind: str,
    tokenizer: Tokenizer,
    model_names: Sequence[str],
    max_context: int,
    chat_template: str | None = None,
    limits: RequestLimits | None = None,
) -> ParsedRequest:
    """Validate an OpenAI request body (a parsed JSON value) into prompt ids and sampling;
    `chat_template` overrides the tokenizer's. Every setting is checked before the prompt is
    tokenized (`admission.check_sampling`, `admission.encode_prompt`)."""
    if not isinstance(body, dict):
        raise _bad("The request body must be a JSON object.", None)
    _refuse_surrogates(body)
    model = body.get("model")
    _check_model_name(model, model_names, required=True)
    _refuse_other_route(body, kind)
    _refuse_unsupported(body, limits or RequestLimits())
    n = _integer(body, "n", 1) or 1
    sampling = _sampling(body, kind)
    check_sampling(sampling, n=n, limits=limits or RequestLimits())
    if kind == "chat":
        messages = body.get("messages")
        prompt_ids = chat_prompt(messages, tokenizer, chat_template, max_context=max_context)
    else:
        prompt_ids = _completion_prompt(body, tokenizer, max_context)
    if not prompt_ids:
        param = "messages" if kind == "chat" else "prompt"
        raise _bad(f"The {param} is empty; give at least one token.", param)
    if _max_tokens(body) is None:  # vLLM's default: the rest of the context (at least one)
        sampling = dataclasses.replace(sampling, max_tokens=max(1, max_context - len(prompt_ids)))
    echo = _flag(body.get("echo"), "echo")
    if echo and kind == "chat":
        raise _bad("echo is supported by /v1/completions only.", "echo")
    if echo and sampling.logprobs is not None:  # the prompt's tokens are scored too
        sampling = dataclasses.replace(sampling, prompt_logprobs=sampling.logprobs)
    stream = _flag(body.get("stream"), "stream")
    include_usage = _stream_options(body.get("stream_options"), stream)
    return ParsedRequest(
        kind=kind,
        model=str(model),
        prompt_ids=prompt_ids,
        sampling=sampling,
        stream=stream,
        include_usage=stream and include_usage,
        echo=echo,
        n=n,
    )


def _check_model(body: Any, model_names: Sequence[str]) -> dict:
    if not isinstance(body, dict):
        raise _bad("The request body must be a JSON object.", None)
    _refuse_surrogates(body)
    _check_model_name(body.get("model"), model_names, required=False)  # optional, as in vLLM
    return body


def tokenize_request(
    body: Any,
    *,
    tokenizer: Tokenizer,
    model_names: Sequence[str],
    chat_template: str | None,
    max_context: int,
) -> dict:
    """vLLM's /tokenize: {count, max_model_len, tokens, token_strs} of {"prompt": text} or of
    {"messages": [...]} through the chat template (the ids a request would run on)."""
    body = _check_model(body, model_names)
    if "messages" in body:
        ids = chat_prompt(body["messages"], tokenizer, chat_template, max_context=max_context)
    else:
        prompt = body.get("prompt")
        if not isinstance(prompt, str):
            raise _bad("Give prompt (a string) or messages (a list of chat messages).", "prompt")
        ids = encode_prompt(tokenizer, prompt, max_context=max_context)
    return {"count": len(ids), "max_model_len": max_context, "tokens": ids, "token_strs": None}


def detokenize_request(
    body: Any, *, tokenizer: Tokenizer, model_names: Sequence[str], vocab_size: int
) -> dict:
    """vLLM's /detokenize: {"prompt": the text of {"tokens": [ids]}}."""
    body = _check_model(body, model_names)
    ids = _token_list(body.get("tokens"), "tokens")
    if ids is None:
        raise _bad("tokens must be a list of token ids.", "tokens")
    bad = [t for t in ids if not 0 <= t < vocab_size]
    if bad:
        raise _bad(f"Token id {bad[0]} is outside the vocabulary [0, {vocab_size}).", "tokens")
    return {"prompt": tokenizer.decode(ids)}
