"""The OpenAI wire format of requests: parsing and validation.

Requests (`parse_request(body, kind=..., ...)`) accept the fields the official `openai` client
sends for `/v1/completions` and `/v1/chat/completions`: model, prompt or messages, max_tokens
(or max_completion_tokens), temperature, top_p, seed (-1 is no seed, a fresh draw each time,
as vLLM's), stop, stream, stream_options ({"include_usage"}), n (1..MAX_N = 16 choices; choice
i is seeded with seed + i; n > 1 with greedy sampling is refused, vLLM's "n must be 1 when
using greedy sampling"), logprobs, echo (completions), presence_penalty and
frequency_penalty (in [-2, 2]), and vLLM's top_k, repetition_penalty (> 0), stop_token_ids
(each id once: repeats are dropped, as vLLM drops them), ignore_eos (generation stops at the
model's end-of-sequence tokens unless it is true), return_tokens_as_token_ids (logprobs name each
token "token_id:N") and return_token_ids (choices carry their token_ids and the prompt's, as
vLLM >= 0.10.2's), min_tokens (vLLM's: the stop token ids and the model's EOS ids are held
back, and no stop string ends, before that many tokens; in 0..max_tokens, vLLM's words) and
include_stop_str_in_output (vLLM's: the matched stop string, or the stop token's text, stays
at the end of the text). Integer fields take a whole-number float (2.0), as vLLM's pydantic
does. Fields that would change the output but are not supported (best_of other than n,
several prompts, a logit_bias, suffix, tools, functions, a tool_choice other than "none", a
response_format other than text, and vLLM's extras in `openai_fields.NOT_HONOURED`: min_p,
guided_*, structural_tag, prompt_embeds, prompt_logprobs, a request's chat_template,
vllm_xargs for custom logits processors...) are refused with `InvalidRequestError` (HTTP 400)
unless absent, null or neutral; so are the other route's field (messages on /v1/completions,
prompt on chat) and stream_options without stream. vLLM's kv_transfer_params (an object, for
a KV connector; none here, and vLLM without one ignores it) is taken and ignored. `user`
must be a string of at most `RequestLimits.max_user_chars`, vLLM's request_id a string (the
response id is `chatcmpl-<request_id>` / `cmpl-<request_id>`, as vLLM's), its priority 0 (no
priority scheduling here). A model name this server does not serve is `ModelNotFoundError`
(HTTP 404, as OpenAI and vLLM answer, with `reason` model_not_found: OpenAI's code string;
the body's `code` is the status, as vLLM's); a missing, null or
empty one is the served model, as in vLLM; the answer names the first served name, whichever
the request named (vLLM's `--served-model-name a b`).
Fields this module does not know are ignored, as vLLM ignores them (metadata, store,
service_tier, a misspelt name...). Flags (stream, echo, ignore_eos, include_usage,
parallel_tool_calls, return_tokens_as_token_ids, include_stop_str_in_output) must be JSON
true, false or null: "false"
would read as true. A missing
max_tokens means 16 on /v1/completions (vLLM's CompletionRequest default, and OpenAI's,
whatever generation_config.json's max_new_tokens: vLLM's `get_max_tokens` reads the file's
only for a max_tokens that is None, which on completions it never is) and the file's
max_new_tokens, else "the rest of the context window", on chat (vLLM's); either within the
rest of the context. A prompt that leaves no room is refused in vLLM's words for a request
with no max_tokens (`admission.check_prompt_fits`: "requested N tokens in the messages").
A setting the body leaves out (temperature, top_k, top_p, repetition_penalty) is the model's
generation_config.json default where it sets one (`sampling_defaults`, vLLM's
--generation-config auto).

Prompts are `serve.prompt_ids`': a text prompt gets the tokenizer's special tokens (its BOS)
unless add_special_tokens is false (vLLM's field; chat's template writes its own, so true
is refused with messages); a text the tokenizer cannot encode is a 400.

`echo: true` (completions) starts the answer with the prompt as vLLM's does: the request's own
string, or a token-id prompt decoded with its special tokens written out
(`prompt_ids.echoed_prompt`).

Logprobs are asked with `logprobs: k` (completions) or `logprobs: true, top_logprobs: k`
(chat), k in 0..MAX_LOGPROBS = 20; `echo: true` with logprobs also scores the prompt, and
with `max_tokens: 0` answers the prompt alone (vLLM's echo_without_generation: it runs with
max_tokens 1, the token made neither shown nor counted; `ParsedRequest.echo_only`); 0 or
less otherwise is refused.

Chat prompts are `wse_inference.serve.chat_template`'s (`chat_prompt`: the template chosen,
rendered within its operation and time limits).

The answers (response bodies, logprobs, streaming) are `wse_inference.serve.openai_response`'s;
vLLM's /tokenize and /detokenize bodies are here (`tokenize_request`, `detokenize_request`);
/tokenize honours add_generation_prompt, add_special_tokens and chat_template_kwargs (vLLM's:
more variables of the chat template, `chat_template.template_kwargs`, as on chat), and
refuses what chat refuses (a request's chat_template, tools, continue_final_message), as
vLLM's does; its /detokenize writes special tokens out, as vLLM's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from wse_inference.engine import MAX_LOGPROBS, SamplingParams, Tokenizer
from wse_inference.hf_tokenizer import ids_text
from wse_inference.serve.admission import (
    InvalidRequestError,
    ModelNotFoundError,
    RequestLimits,
    check_prompt_fits,
    check_sampling,
    seed_of,
    shown_int,
    shown_json,
)
from wse_inference.serve.chat_template import chat_prompt
from wse_inference.serve.openai_fields import (
    flag,
    integer,
    invalid,
    max_tokens,
    number,
    refuse_not_honoured,
    refuse_other_route,
    refuse_tools,
    refuse_unsupported,
    stream_options,
)
from wse_inference.serve.prompt_ids import (
    completion_prompt,
    echoed_prompt,
    messages_prompt,
    token_list,
)

__all__ = [
    "ParsedRequest",
    "parse_request",
    "chat_prompt",
    "tokenize_request",
    "detokenize_request",
    "choice_sampling",
    "COMPLETION_MAX_TOKENS",
]

COMPLETION_MAX_TOKENS = 16  # /v1/completions' max_tokens when left out: vLLM's and OpenAI's
_ANY_LENGTH = 2**62  # /tokenize's prompt: any number of tokens


@dataclasses.dataclass(frozen=True)
class ParsedRequest:
    kind: str  # "completion" | "chat"
    model: str
    prompt_ids: list[int]
    sampling: SamplingParams
    stream: bool
    include_usage: bool
    echo: bool = False  # /v1/completions: the answer starts with the prompt (and its logprobs)
    # echo's text: the request's prompt string, or a token-id prompt decoded with its special
    # tokens written out (`prompt_ids.echoed_prompt`); and how many of prompt_ids the
    # tokenizer added before and after it (a text prompt's BOS: not in that text)
    echo_text: str = ""
    echo_added: tuple[int, int] = (0, 0)
    n: int = 1  # choices, each its own sequence (choice_sampling)
    tokens_as_ids: bool = False  # return_tokens_as_token_ids: logprobs name "token_id:N"
    # echo with max_tokens 0 (vLLM's echo_without_generation): the prompt scored alone; it
    # runs with max_tokens 1, and the token made is never shown nor counted
    echo_only: bool = False
    return_token_ids: bool = False  # vLLM's: choices carry token_ids (and the prompt's)
    # vLLM's request_id (the X-Request-Id header wins: `routes`): the response id's base
    request_id: str | None = None


def choice_sampling(sampling: SamplingParams, i: int) -> SamplingParams:
    """Choice i's settings: with a seed, choice i draws with seed + i (so n choices differ
    and each is reproducible); without one, each draws from fresh entropy."""
    if i == 0 or sampling.seed is None:
        return sampling
    return dataclasses.replace(sampling, seed=sampling.seed + i)


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
            raise invalid(
                f"{where} holds a lone surrogate escape (such as \\udcff), which is not "
                "Unicode text; send UTF-8 text.",
                str(key) if where != "body" else None,
            )


def _check_model_name(model: Any, model_names: Sequence[str]) -> None:
    """model is optional, as in vLLM (`model: str | None = None`; `_is_model_supported` takes
    a missing or empty one as the served model; hunt 79: a 400 on the generation routes); a
    non-string is a 400; a name this server does not serve is OpenAI's and vLLM's 404
    model_not_found (`ModelNotFoundError`)."""
    if model is None or model == "":
        return
    if not isinstance(model, str):
        raise invalid(
            f"model must be a string (one of {list(model_names)}), got {shown_json(model)}.",
            "model",
        )
    if model not in model_names:
        raise ModelNotFoundError(model, model_names)


def _check_present(body: dict, name: str) -> None:
    """A route's prompt field left out (or null) is OpenAI's missing_required_parameter (hunt
    58b: it was "prompt must be a string ..., got None")."""
    if body.get(name) is None:
        what = "a list of chat messages" if name == "messages" else "a string or token ids"
        raise InvalidRequestError(
            f"{name} is required ({what}).", param=name, code="missing_required_parameter"
        )


def _stop(body: dict) -> tuple[str, ...]:
    v = body.get("stop")
    if v is None:
        return ()
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, list) or not all(isinstance(s, str) for s in v):
        raise invalid("stop must be a string or a list of strings.", "stop")  # how many: limits
    return tuple(v)  # empty ones too: check_sampling counts them, then refuses them (vLLM)


def _logprobs(body: dict, kind: str) -> int | None:
    """The number of alternatives per token the request asks for (None: no logprobs)."""
    if kind == "chat":
        want = body.get("logprobs")
        if want is not None and not isinstance(want, bool):
            raise invalid(f"logprobs must be true or false, got {shown_json(want)}.", "logprobs")
        k, name = integer(body, "top_logprobs", None), "top_logprobs"
        if k is not None and not 0 <= k <= MAX_LOGPROBS:
            raise invalid(f"{name} must be in 0..{MAX_LOGPROBS}, got {k}.", name)
        if k is not None and k > 0 and not want:
            raise invalid("when using top_logprobs, logprobs must be set to true.", name)
        if not want:
            return None
        k = k or 0
    else:
        k, name = integer(body, "logprobs", None), "logprobs"
        if k is None:
            return None
    if not 0 <= k <= MAX_LOGPROBS:
        raise invalid(f"{name} must be in 0..{MAX_LOGPROBS}, got {k}.", name)
    return k


def _echo_only(body: dict, echo: bool) -> bool:
    """Whether the request asks for its prompt scored alone: echo with max_tokens 0 (vLLM's
    echo_without_generation, lm-evaluation-harness' loglikelihood; hunt 73: refused). Below 1
    otherwise is refused, naming echo."""
    given = max_tokens(body)
    if given is None or given > 0:
        return False
    if given == 0 and echo:
        return True
    raise invalid(f"max_tokens must be at least 1 (or 0 with echo: true on /v1/completions, which "
                  f"answers the prompt scored alone), got {given}.", "max_tokens")  # fmt: skip


def _sampling(body: dict, kind: str, defaults: Mapping[str, Any]) -> SamplingParams:
    """The request's settings, `defaults` (generation_config.json's) where it sets none;
    max_tokens 0 when the body leaves it to the context (filled in once the prompt's length
    is known)."""
    given = max_tokens(body)
    top_k = integer(body, "top_k", None)
    top_k = defaults.get("top_k", 0) if top_k is None else top_k
    stop_ids = body.get("stop_token_ids")
    stop_ids = [] if stop_ids is None else stop_ids  # hunt 56: {}, 0 and "" passed as none
    if token_list(stop_ids) is None:
        raise invalid("stop_token_ids must be a list of token ids.", "stop_token_ids")
    ignore_eos = flag(body.get("ignore_eos"), "ignore_eos")
    include_stop = flag(body.get("include_stop_str_in_output"), "include_stop_str_in_output")
    return SamplingParams(
        max_tokens=0 if given is None else given,
        temperature=number(body, "temperature", defaults.get("temperature", 1.0)),
        top_p=number(body, "top_p", defaults.get("top_p", 1.0)),
        top_k=0 if top_k == -1 else top_k,
        seed=seed_of(integer(body, "seed", None)),
        stop=_stop(body),
        stop_token_ids=tuple(dict.fromkeys(stop_ids)),  # vLLM's: each id once, in order
        ignore_eos=ignore_eos,
        logprobs=_logprobs(body, kind),
        presence_penalty=number(body, "presence_penalty", 0.0),
        frequency_penalty=number(body, "frequency_penalty", 0.0),
        repetition_penalty=number(
            body, "repetition_penalty", defaults.get("repetition_penalty", 1.0)
        ),  # fmt: skip
        min_tokens=integer(body, "min_tokens", 0) or 0,  # vLLM's; checked by check_sampling
        include_stop_str_in_output=include_stop,
    )


def parse_request(
    body: Any,
    *,
    kind: str,
    tokenizer: Tokenizer,
    model_names: Sequence[str],
    max_context: int,
    chat_template: str | None = None,
    content_format: str = "auto",
    limits: RequestLimits | None = None,
    sampling_defaults: Mapping[str, Any] | None = None,
) -> ParsedRequest:
    """Validate an OpenAI request body (a parsed JSON value) into prompt ids and sampling;
    `chat_template` (in `content_format`) overrides the tokenizer's; `sampling_defaults`
    (generation_config.json's: `generation_config.server_defaults`) fill what the body leaves
    out. Every setting is checked before the prompt is tokenized (`admission.check_sampling`,
    `admission.encode_prompt`)."""
    defaults = sampling_defaults or {}
    if not isinstance(body, dict):
        raise invalid("The request body must be a JSON object.", None)
    _refuse_surrogates(body)
    model = body.get("model")
    _check_model_name(model, model_names)
    refuse_other_route(body, kind)
    refuse_unsupported(body, limits or RequestLimits())
    n = integer(body, "n", 1) or 1
    echo = flag(body.get("echo"), "echo")
    if echo and kind == "chat":
        raise invalid("echo is supported by /v1/completions only.", "echo")
    sampling = _sampling(body, kind, defaults)
    echo_only = _echo_only(body, echo)
    if echo_only:  # vLLM's: one token is made (its run scores the prompt), never shown
        sampling = dataclasses.replace(sampling, max_tokens=1)
    check_sampling(sampling, n=n, limits=limits or RequestLimits())
    _check_present(body, "messages" if kind == "chat" else "prompt")
    if kind == "chat":
        prompt_ids = messages_prompt(body, tokenizer, chat_template=chat_template,
                                     content_format=content_format,
                                     max_context=max_context)  # fmt: skip
    else:
        prompt_ids = completion_prompt(body, tokenizer, max_context)
    param = "messages" if kind == "chat" else "prompt"
    if not prompt_ids:
        raise invalid(f"The {param} is empty; give at least one token.", param)
    if max_tokens(body) is None:  # vLLM's `get_max_tokens`: within the rest of the context,
        # 16 on completions (its CompletionRequest default: the file's max_new_tokens never
        # reached; hunt 82: a file's 5 cut it to 5), the file's default on chat (hunt 75: both
        # were generated to the end of the context)
        check_prompt_fits(len(prompt_ids), max_context, param=param)
        rest = max_context - len(prompt_ids)
        cap = COMPLETION_MAX_TOKENS if kind != "chat" else defaults.get("max_tokens", rest)
        sampling = dataclasses.replace(sampling, max_tokens=min(cap, rest))
    if echo and sampling.logprobs is not None:  # the prompt's tokens are scored too
        sampling = dataclasses.replace(sampling, prompt_logprobs=sampling.logprobs)
    echo_text, added = "", (0, 0)
    if echo:
        spans = sampling.logprobs is not None  # the prompt's logprob texts lie over the text
        echo_text, added = echoed_prompt(body, tokenizer, prompt_ids, spans=spans)
    stream = flag(body.get("stream"), "stream")
    include_usage = stream_options(body.get("stream_options"), stream)
    return ParsedRequest(
        kind=kind,
        # vLLM's: the first served name, whichever the request named or none (its
        # `model_name()` is base_model_paths[0].name; hunt 82: the alias asked was echoed)
        model=model_names[0],
        prompt_ids=prompt_ids,
        sampling=sampling,
        stream=stream,
        include_usage=stream and include_usage,
        echo=echo,
        echo_text=echo_text,
        echo_added=added,
        n=n,
        tokens_as_ids=flag(body.get("return_tokens_as_token_ids"), "return_tokens_as_token_ids"),
        echo_only=echo_only,
        return_token_ids=flag(body.get("return_token_ids"), "return_token_ids"),
        request_id=body.get("request_id"),  # a string or null: refuse_unsupported checked it
    )


def _check_model(body: Any, model_names: Sequence[str]) -> dict:
    if not isinstance(body, dict):
        raise invalid("The request body must be a JSON object.", None)
    _refuse_surrogates(body)
    _check_model_name(body.get("model"), model_names)
    return body


def tokenize_request(
    body: Any,
    *,
    tokenizer: Tokenizer,
    model_names: Sequence[str],
    chat_template: str | None,
    max_context: int,
    content_format: str = "auto",
) -> dict:
    """vLLM's /tokenize: {count, max_model_len, tokens, token_strs} of {"prompt": text} or of
    {"messages": [...]} through the chat template (the ids a request would run on; with
    add_generation_prompt false, without the assistant turn's opening). Null fields are
    absent; what chat refuses (tools, a request's chat_template...) is refused here too (hunt
    65: they were ignored, and add_generation_prompt false gave the chat's count). A prompt
    longer than the context is counted too, as vLLM's (no context check)."""
    body = _check_model(body, model_names)
    if flag(body.get("return_token_strs"), "return_token_strs"):  # was answered with null
        raise invalid("return_token_strs is not supported by this server; leave it out.",
                      "return_token_strs")  # fmt: skip
    refuse_tools(body)
    refuse_not_honoured(body, ("chat_template", "continue_final_message"))
    generation = body.get("add_generation_prompt")
    generation = True if generation is None else flag(generation, "add_generation_prompt")
    messages = body.get("messages")
    if messages is not None and body.get("prompt") is not None:  # the prompt was dropped
        raise invalid("Give prompt or messages, not both.", "prompt")
    # no context check, as vLLM's: the count of a prompt longer than the context too (hunt 75:
    # refused); the body's size limit bounds what is tokenized
    if messages is not None:
        ids = messages_prompt(body, tokenizer, chat_template=chat_template,
                              content_format=content_format, max_context=None,
                              add_generation_prompt=generation)  # fmt: skip
    else:
        if not isinstance(body.get("prompt"), str):
            raise invalid("Give prompt (a string) or messages (a list of chat messages).", "prompt")
        ids = completion_prompt(body, tokenizer, _ANY_LENGTH)  # hunt 69: add_special_tokens
    return {"count": len(ids), "max_model_len": max_context, "tokens": ids, "token_strs": None}


def detokenize_request(
    body: Any, *, tokenizer: Tokenizer, model_names: Sequence[str], vocab_size: int
) -> dict:
    """vLLM's /detokenize: {"prompt": the text of {"tokens": [ids]}}, special tokens written
    out, as vLLM's (transformers' `decode(ids)`: hunt 81, they were dropped)."""
    body = _check_model(body, model_names)
    ids = token_list(body.get("tokens"))
    if ids is None:
        raise invalid("tokens must be a list of token ids.", "tokens")
    bad = [t for t in ids if not 0 <= t < vocab_size]
    if bad:
        raise invalid(
            f"Token id {shown_int(bad[0])} is outside the vocabulary [0, {vocab_size}).", "tokens"
        )
    return {"prompt": ids_text(tokenizer, ids)}
