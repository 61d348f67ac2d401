"""A chat's prompt: its messages checked, rendered through a chat template within bounds.

`chat_prompt(messages, tokenizer, chat_template, content_format=..., max_context=...)` gives a
chat's token ids (`chat_text`: the text a Jinja or the plain template renders).
The template: one given to the server (`chat_template=`, vLLM's --chat-template) comes first;
then a tokenizer with `apply_chat_template` (transformers) renders the text, which its own
`encode` tokenizes without special tokens, as vLLM does (review 82); then one with a
`chat_template` Jinja string (an HF directory's, see `model_dir`). Jinja templates are
rendered as transformers renders them: a sandboxed environment with trim_blocks and
lstrip_blocks, `messages`, `tools` and `documents` (None: this server takes neither),
`add_generation_prompt` (True unless /tokenize asks otherwise), a request's
`chat_template_kwargs` (vLLM's: more variables, e.g. Qwen3's `enable_thinking`, names in
`RESERVED_KWARGS` refused, transformers' tokenizer-call parameters `CALL_KWARGS` left out:
`template_kwargs`), the tokenizer's special
tokens (transformers' special_tokens_map: bos_token, eos_token, unk_token, pad_token, ...;
hunt 71: `tools is not none` held for an undefined `tools` and told a trimmed Llama template
"Environment: ipython"), and `raise_exception(msg)`, whose message (e.g. "roles must
alternate") becomes the 400's (`template_sandbox`: the rest of the environment).
Otherwise the plain template is one line per message, "role: content", followed by
"assistant:" (left out without a generation prompt) — e.g. [system "Be brief.", user "Hi"]
becomes "system: Be brief.\\nuser: Hi\\nassistant:".

Messages are checked and laid out for the template by `wse_inference.serve.chat_messages`
(their content parts, names, reasoning, refused tool histories), in the content format of
`wse_inference.serve.chat_format` (vLLM's --chat-template-content-format, "auto" detected).

The template is compiled and rendered within bounds by `wse_inference.serve.template_sandbox`
(`compile_chat_template`, `render_bounded`: re-exported here).

Contract: this module owns a chat's text and token ids (`chat_text`, `chat_prompt`), the
request's template variables (`template_kwargs`, `RESERVED_KWARGS`, `CALL_KWARGS`) and the
server's start-up check of its template (`template_problem`, `SAMPLE_CHAT`); the names of
`chat_messages`, `chat_format` and `template_sandbox` its callers import are re-exported here.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator, Mapping
from typing import Any

from wse_inference.engine import Tokenizer
from wse_inference.serve.admission import InvalidRequestError, encode_prompt, shown_json
from wse_inference.serve.chat_format import CONTENT_FORMATS, detect_content_format, resolved_format
from wse_inference.serve.chat_messages import (
    CHAT_ROLES,
    MAX_NAME_CHARS,
    TEXT_PARTS,
    bad_messages,
    checked_messages,
    template_messages,
)
from wse_inference.serve.template_sandbox import compile_chat_template, render_bounded

__all__ = ["CALL_KWARGS", "CHAT_ROLES", "CONTENT_FORMATS", "MAX_NAME_CHARS", "RESERVED_KWARGS",
           "SAMPLE_CHAT", "TEXT_PARTS", "chat_prompt", "chat_text", "compile_chat_template",
           "detect_content_format", "render_bounded", "template_kwargs",
           "template_problem"]  # fmt: skip

SAMPLE_CHAT = [{"role": "user", "content": "Hi"}]  # what a server's template is tried on


# chat_template_kwargs a request may not set, with why: the variables this server sets itself
# from the request (vLLM refuses chat_template and tokenize, "Found unexpected chat template
# kwargs from request", and lets the others override the request's own fields)
RESERVED_KWARGS = {
    "messages": "the template's messages are the request's messages",
    "add_generation_prompt": "give the request's own add_generation_prompt (/tokenize)",
    "continue_final_message": "continuing the final message is not supported by this server",
    "tools": "this server serves no tools",
    "documents": "this server takes no documents",
    "chat_template": "the server's template is rendered (vLLM refuses it too)",
    "tokenize": "the rendered text is tokenized by the server (vLLM refuses it too)",
}


# transformers' `apply_chat_template` parameters (v5.x) past RESERVED_KWARGS: its own, read by
# its tokenizer call, never a template's variables (review 82: they reached it, so a request's
# {"truncation": true, "max_length": 2} cut the server's prompt). vLLM renders the text
# (tokenize=False), where they change nothing (vllm/renderers/hf.py,
# `resolve_chat_template_kwargs`, `safe_apply_chat_template`); here they are left out
CALL_KWARGS = frozenset({"conversation", "sanitize_control_tokens", "padding", "truncation",
                         "max_length", "return_tensors", "return_dict",
                         "return_assistant_tokens_mask", "tokenizer_kwargs"})  # fmt: skip


def template_kwargs(value: Any) -> dict[str, Any]:
    """vLLM's chat_template_kwargs: more variables of the chat template's render (Qwen3's
    {"enable_thinking": false}); null is none. Not an object, or a name in
    `RESERVED_KWARGS`, is a 400 naming it (hunt 81: every one was refused, so a vLLM client
    that switches thinking off failed on every request). Like vLLM, a name the template does
    not read changes nothing, and a name of transformers' tokenizer call (`CALL_KWARGS`:
    truncation, max_length, return_dict...) is no variable: it is left out."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidRequestError(
            "chat_template_kwargs must be an object of template variables (e.g. "
            f'{{"enable_thinking": false}}), got {shown_json(value, head=60)}.',
            param="chat_template_kwargs",
        )
    for name in value:
        if name in RESERVED_KWARGS:
            raise InvalidRequestError(
                f"chat_template_kwargs cannot set {shown_json(name)}: {RESERVED_KWARGS[name]}.",
                param="chat_template_kwargs",
            )
    return {k: v for k, v in value.items() if k not in CALL_KWARGS}


def _template_text(tokenizer: Tokenizer, chat_template: str | None) -> str | None:
    """The Jinja template a chat is rendered with: the server's, else the tokenizer's."""
    template = chat_template or getattr(tokenizer, "chat_template", None)
    return template if isinstance(template, str) and template else None


def chat_text(
    messages: Any,
    tokenizer: Tokenizer,
    chat_template: str | None = None,
    *,
    content_format: str = "auto",
    add_generation_prompt: bool = True,
    template_kwargs: Mapping[str, Any] | None = None,
) -> str:
    """The text of a chat: its Jinja template's render (the server's `chat_template`, else the
    tokenizer's), else the plain "role: content" lines; see the module docstring.
    `template_kwargs` (vLLM's chat_template_kwargs, checked: `template_kwargs`) are more
    variables of the render, over the tokenizer's special tokens as transformers lays them."""
    checked = checked_messages(messages)
    template = _template_text(tokenizer, chat_template)
    msgs = template_messages(checked, resolved_format(content_format, template))
    if template is None:
        text = "".join(f"{m['role']}: {m['content']}\n" for m in msgs)
        return text + ("assistant:" if add_generation_prompt else "")
    # transformers' apply_chat_template: {**special_tokens_map, **kwargs}, then its own
    variables = {**getattr(tokenizer, "template_vars", {}), **(template_kwargs or {})}
    with _render_errors():  # what transformers' apply_chat_template passes its template
        return render_bounded(template, messages=msgs, tools=None, documents=None,
                              add_generation_prompt=add_generation_prompt, **variables)  # fmt: skip


@contextlib.contextmanager
def _render_errors() -> Iterator[None]:
    """A template's error on these messages as the 400 vLLM answers, in one line."""
    import jinja2

    try:
        yield
    except InvalidRequestError:
        raise
    except jinja2.TemplateError as e:  # hunt 60: raise_exception's text whole, newlines too
        why = " ".join(str(e).split())
        why = why if len(why) <= 200 else f"{why[:200]}... ({len(why):,} characters)"
        raise bad_messages(f"The chat template cannot render these messages: {why}") from e
    except (ArithmeticError, LookupError, TypeError, ValueError, RuntimeError) as e:
        # the template's own Python error on these messages (10 // 0, '%d' % 'x', a macro
        # calling itself): a 400 as vLLM answers, not a 500 (hunt 58b)
        why = " ".join(str(e).split())[:200]
        raise bad_messages(
            f"The chat template cannot render these messages: {type(e).__name__}: {why}"
        ) from None


def _transformers_ids(tokenizer: Any, msgs: list[dict], add_generation_prompt: bool,
                      kwargs: Mapping[str, Any]) -> list[int]:  # fmt: skip
    """A transformers tokenizer's chat as vLLM renders it: `apply_chat_template` to text
    (tokenize=False) with the request's template variables alone (`CALL_KWARGS` and the
    tokenizer's own parameters left out), then the text's tokens without special tokens, as
    transformers' tokenize=True and vLLM's chat (add_special_tokens False) take them (review
    82: tokenize=True returns a BatchEncoding in transformers 5, whose keys were taken as the
    prompt, ['input_ids', 'attention_mask'])."""
    own = inspect.signature(tokenizer.apply_chat_template).parameters
    variables = {k: v for k, v in kwargs.items() if k not in CALL_KWARGS and (
        k not in own or own[k].kind is inspect.Parameter.VAR_KEYWORD)}  # fmt: skip
    with _render_errors():
        text = tokenizer.apply_chat_template(
            msgs, tokenize=False, add_generation_prompt=add_generation_prompt, **variables
        )
    if not text:
        return []
    takes = inspect.signature(tokenizer.encode).parameters  # a duck without the flag adds none
    plain = "add_special_tokens" in takes or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in takes.values())  # fmt: skip
    return list(tokenizer.encode(text, add_special_tokens=False) if plain else (
        tokenizer.encode(text)))  # fmt: skip


def chat_prompt(
    messages: Any,
    tokenizer: Tokenizer,
    chat_template: str | None = None,
    *,
    content_format: str = "auto",
    max_context: int | None = None,
    add_generation_prompt: bool = True,
    template_kwargs: Mapping[str, Any] | None = None,
) -> list[int]:
    """Token ids of a chat (see the module docstring for the template used); with
    `max_context`, a text that cannot fit is refused before it is encoded (`encode_prompt`).
    `add_generation_prompt` False (vLLM's /tokenize) leaves out the opening of the
    assistant's turn, to count a chat's own tokens. `content_format`: see CONTENT_FORMATS.
    `template_kwargs`: more variables of the template (`chat_text`)."""
    kwargs = dict(template_kwargs or {})
    if chat_template is None and hasattr(tokenizer, "apply_chat_template"):
        checked = checked_messages(messages)
        form = resolved_format(content_format, _template_text(tokenizer, None))
        msgs = template_messages(checked, form)
        return _transformers_ids(tokenizer, msgs, add_generation_prompt, kwargs)
    text = chat_text(messages, tokenizer, chat_template, content_format=content_format,
                     add_generation_prompt=add_generation_prompt,
                     template_kwargs=kwargs)  # fmt: skip
    if max_context is None:
        return tokenizer.encode(text)
    return encode_prompt(tokenizer, text, max_context=max_context, param="messages")


def _template_source(chat_template: str | None, tokenizer: Any) -> str | None:
    """Where the Jinja template a server will render comes from (the option's, else the
    model folder's file), or None when there is none (the plain "role: content" lines)."""
    from pathlib import Path

    if chat_template is not None:
        return f"--chat-template {chat_template!r}" if Path(chat_template).is_file() else (
            "--chat-template")  # fmt: skip
    template = getattr(tokenizer, "chat_template", None)
    if not isinstance(template, str) or not template:
        return None
    path = getattr(tokenizer, "path", None)
    if path is None:
        return "the model's chat template"
    folder = Path(path).parent
    name = "chat_template.jinja" if (folder / "chat_template.jinja").is_file() else (
        "tokenizer_config.json")  # fmt: skip
    return f"the chat template of {str(folder / name)!r}"


def _text_lost(rendered: str, text: str, content_format: str) -> str:
    """The line for a template that rendered the sample chat as `text`, without its message:
    what it rendered, and the other content format to try."""
    from wse_core.errors import shown

    string, parts = "a string", 'a list of {"type": "text", "text": ...} parts'
    given, other, reads = (
        (parts, "string", string) if content_format == "openai" else (string, "openai", parts)
    )
    return (
        f"{rendered} as {shown(text, head=120)}, without the message's text (its content given "
        f"as {given}): every chat would reach the model without its messages; if the template "
        f"reads message['content'] as {reads}, give --chat-template-content-format {other}, "
        "else fix the template"
    )


# the chats a server's template is tried on at start: one user message, and, for a template
# that requires one (raise_exception), a system message before it (hunt 71)
_SAMPLES = (SAMPLE_CHAT, [{"role": "system", "content": "You are a helpful assistant."},
                          *SAMPLE_CHAT])  # fmt: skip


def _sample_problem(tokenizer: Any, template: str | None, content_format: str,
                    sample: list[dict]) -> tuple[str, str] | None:  # fmt: skip
    """None when the template renders `sample` with its last message's text, else (what
    went wrong, the text it rendered; "" when it raised). The text counts as there when it
    is, or when another of its length in its place changes the render (hunt 71: a template
    that writes it `| lower` was refused as losing it)."""
    import jinja2

    prefix = "The chat template cannot render these messages: "
    said = sample[-1]["content"]
    other = [*sample[:-1], {**sample[-1], "content": "Yo"}]  # as long as "Hi", no letter shared
    try:
        chat_prompt(sample, tokenizer, template, content_format=content_format)
        text = chat_text(sample, tokenizer, template, content_format=content_format)
        kept = said in text or text != chat_text(other, tokenizer, template,
                                                 content_format=content_format)  # fmt: skip
    except InvalidRequestError as e:
        return str(e).removeprefix(prefix), ""
    except (jinja2.TemplateError, ArithmeticError, LookupError, TypeError, ValueError,
            RuntimeError) as e:  # fmt: skip
        return f"{type(e).__name__}: {' '.join(str(e).split())[:200]}", ""
    return None if kept else ("", text)


def template_problem(
    tokenizer: Any, template: str | None, option: str | None, content_format: str = "auto"
) -> str | None:
    """Why the template a server will use (`template`, from `option` when given, else the
    tokenizer's, in `content_format`) cannot render SAMPLE_CHAT through `chat_prompt`, or
    renders it without the sample's text, in one line naming its source and what it
    rendered; None when it can, or renders a system message and SAMPLE_CHAT (a template may
    require one), or there is no Jinja template. A template that compiles but cannot render
    (an `{% include %}`, a model folder's missing `{% endfor %}`) made every chat request a
    400 that blamed the client (hunt 62); one that loops over content parts given a string
    rendered every chat empty, and served it (hunt 68). A chat a template refuses once
    served is a 400 with its words, as vLLM answers."""
    source = _template_source(option, tokenizer)
    if source is None:
        return None
    problems = []
    for sample in _SAMPLES:
        problem = _sample_problem(tokenizer, template, content_format, sample)
        if problem is None:
            return None
        problems.append(problem)
    why, text = problems[0]  # told for the one user message
    sample = "(one user message, 'Hi')"
    if why:
        return f"{source} cannot render a sample chat {sample}: {why}"
    form = resolved_format(content_format, _template_text(tokenizer, template))
    return _text_lost(f"{source} renders a sample chat {sample}", text, form)
