"""A request's prompt as token ids, for the OpenAI routes and vLLM's /tokenize.

Contract. `completion_prompt(body, tokenizer, max_context)` is /v1/completions' prompt: a
string, encoded as transformers' `tokenizer(text)` and vLLM's completions encode it, with the
special tokens the tokenizer adds (its BOS) unless the body's `add_special_tokens` is false
(vLLM's field, default true; hunt 69: it was checked, then ignored, and no text prompt had
its BOS); or one list of ids, taken as they are. `text_prompt` is the same for one text (an
empty one is [bos] with a tokenizer that adds one: vLLM refuses a prompt empty once
tokenized, transformers gives [bos]). `messages_prompt` is a chat through its template, whose
special tokens are the template's own (`{{ bos_token }}`): `add_special_tokens` true would
add a second BOS (vLLM's chat default is false), so it is refused; its chat_template_kwargs
are more variables of the template (vLLM's). A text the tokenizer cannot
encode (`hf_tokenizer.TokenizerError`) is an `InvalidRequestError` (400) in its words, not a
500. `token_list(v)` is a JSON list of integer ids, else None. `echoed_prompt` is the text an
echo answer starts with: the request's own string, or a token-id prompt decoded with its
special tokens written out (vLLM's).
"""

from __future__ import annotations

import contextlib
import functools
import types
from collections.abc import Iterator, Sequence
from typing import Any

from wse_inference.engine import Tokenizer
from wse_inference.hf_tokenizer import TokenizerError, ids_text, text_ids
from wse_inference.serve.admission import encode_prompt, shown_json
from wse_inference.serve.chat_template import chat_prompt, template_kwargs
from wse_inference.serve.openai_fields import flag, invalid

__all__ = ["completion_prompt", "echoed_prompt", "messages_prompt", "text_prompt", "token_list"]


def token_list(v: Any) -> list[int] | None:
    if isinstance(v, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in v):
        return list(v)
    return None


@contextlib.contextmanager
def _encoding(param: str) -> Iterator[None]:
    """A text the tokenizer cannot encode: the client's 400 (hunt 69: a 500)."""
    try:
        yield
    except TokenizerError as e:
        raise invalid(f"{e}.", param) from None


def text_prompt(
    tokenizer: Tokenizer, text: str, *, max_context: int, special: bool = True
) -> list[int]:
    """`text`'s ids, with the tokenizer's special tokens unless `special` is false, after
    `encode_prompt`'s length screen (its bound holds: special tokens only add ids)."""
    with _encoding("prompt"):
        if not special:
            return encode_prompt(tokenizer, text, max_context=max_context)
        with_specials = types.SimpleNamespace(
            encode=functools.partial(text_ids, tokenizer),
            max_token_bytes=getattr(tokenizer, "max_token_bytes", None),
        )
        ids = encode_prompt(with_specials, text, max_context=max_context)
        return ids or text_ids(tokenizer, text)  # "": [bos] where the tokenizer adds one


def _one_prompt(body: dict) -> Any:
    p = body.get("prompt")
    if isinstance(p, list) and len(p) == 1 and isinstance(p[0], str | list):
        p = p[0]  # the client's batch-of-one form
    return p


def echoed_prompt(
    body: dict, tokenizer: Tokenizer, ids: Sequence[int], *, spans: bool
) -> tuple[str, tuple[int, int]]:
    """(the text an echo answer starts with, how many of `ids` the tokenizer added before and
    after that text). As vLLM's completions (`serving_completion`: `prompt_text +
    output.text`, the engine prompt's "prompt"): a text prompt is the string the request sent
    (hunt 82: its ids decoded without special tokens, so "<|im_start|>user..." came back as
    "user..." and `text[len(prompt):]` lost the answer); a token-id prompt is its ids decoded
    with special tokens written out (vLLM's renderer `_detokenize_prompt`: transformers'
    `decode` default). `spans` (echo with logprobs): count the special tokens the tokenizer
    added to a text prompt (its BOS), which the string does not spell (a second encode, with
    none added; (0, 0) otherwise); their logprob texts stay empty."""
    p = _one_prompt(body)
    if not isinstance(p, str):
        return ids_text(tokenizer, ids), (0, 0)
    if not spans or len(plain := text_ids(tokenizer, p, add_special_tokens=False)) == len(ids):
        return p, (0, 0)
    lead = next((k for k in range(len(ids) - len(plain) + 1)
                 if list(ids[k : k + len(plain)]) == plain), 0)  # fmt: skip
    return p, (lead, len(ids) - lead - len(plain))


def completion_prompt(body: dict, tokenizer: Tokenizer, max_context: int) -> list[int]:
    p = _one_prompt(body)
    special = body.get("add_special_tokens")
    special = True if special is None else flag(special, "add_special_tokens")
    if isinstance(p, str):
        return text_prompt(tokenizer, p, max_context=max_context, special=special)
    ids = token_list(p)
    if ids is not None:
        return ids
    if isinstance(p, list) and len(p) > 1 and all(isinstance(x, str | list) for x in p):
        raise invalid("Only one prompt per request is supported; send one request each.", "prompt")
    if isinstance(p, list):  # hunt 56: [1, "a"] and [[1, [2]]] were called several prompts
        bad = next(x for x in p if isinstance(x, bool) or not isinstance(x, int))
        raise invalid(
            f"prompt must be a string or one list of integer token ids; it holds "
            f"{shown_json(bad)}.",
            "prompt",
        )
    raise invalid(f"prompt must be a string or a list of token ids, got {shown_json(p)}.",
                  "prompt")  # fmt: skip


def messages_prompt(body: dict, tokenizer: Tokenizer, **chat: Any) -> list[int]:
    """The chat's ids (`chat_template.chat_prompt(messages, tokenizer, **chat)`), the body's
    chat_template_kwargs among the template's variables (`chat_template.template_kwargs`)."""
    kwargs = template_kwargs(body.get("chat_template_kwargs"))
    if flag(body.get("add_special_tokens"), "add_special_tokens"):
        raise invalid(
            "add_special_tokens true is not supported with messages: the chat template writes "
            "the special tokens (vLLM's default for chat is false); leave it out.",
            "add_special_tokens",
        )
    with _encoding("messages"):
        return chat_prompt(body.get("messages"), tokenizer, template_kwargs=kwargs, **chat)
