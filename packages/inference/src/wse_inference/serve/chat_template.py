"""A chat's prompt: its messages checked, rendered through a chat template within bounds.

`chat_prompt(messages, tokenizer, chat_template, max_context=...)` gives a chat's token ids.
The template: one given to the server (`chat_template=`, vLLM's --chat-template) comes first;
then a tokenizer with `apply_chat_template` (transformers) is used as is; then one with a
`chat_template` Jinja string (an HF directory's, see `model_dir`). Jinja templates are
rendered as transformers renders them: a sandboxed environment with trim_blocks and
lstrip_blocks, `messages`, `add_generation_prompt` (True unless /tokenize asks otherwise),
the tokenizer's bos_token and eos_token, and `raise_exception(msg)`, whose message (e.g.
"roles must alternate") becomes the 400's. Otherwise the plain template is one line per
message, "role: content", followed by "assistant:" (left out without a generation prompt) —
e.g. [system "Be brief.", user "Hi"] becomes "system: Be brief.\\nuser: Hi\\nassistant:".
Content may be a string or a non-empty list of {"type": "text", "text": ...} parts.

Each message reaches the template as {"role", "content"} (content as one string) and its
`name` when it has one, so a template that renders names (or `apply_chat_template`) sees it;
the plain template leaves names out. This server serves no tools, so a history holding tool
calls (`tool_calls`, `function_call`, `tool_call_id`, a "tool" message) is refused with a 400
naming the field (hunt 65: they were checked, then dropped from the prompt, and the model
answered a conversation silently changed).

The template is compiled and rendered within bounds by `wse_inference.serve.template_sandbox`
(`compile_chat_template`, `render_bounded`: re-exported here).
"""

from __future__ import annotations

from typing import Any

from wse_inference.engine import Tokenizer
from wse_inference.serve.admission import InvalidRequestError, encode_prompt, shown_json
from wse_inference.serve.template_sandbox import compile_chat_template, render_bounded

__all__ = ["CHAT_ROLES", "MAX_NAME_CHARS", "SAMPLE_CHAT", "chat_prompt", "compile_chat_template",
           "render_bounded", "template_problem"]  # fmt: skip

CHAT_ROLES = ("system", "developer", "user", "assistant", "tool")
MAX_NAME_CHARS = 64  # a message's `name` (OpenAI documents 64 characters)
SAMPLE_CHAT = [{"role": "user", "content": "Hi"}]  # what a server's template is tried on


def _bad(message: str) -> InvalidRequestError:
    return InvalidRequestError(message, param="messages")


def _content_text(content: Any, i: int) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if content == []:  # OpenAI refuses an empty array (hunt 65: it was taken as "")
        raise _bad(f"messages[{i}].content is an empty list; give a string or at least one "
                   '{"type": "text", "text": "..."} part.')  # fmt: skip
    if isinstance(content, list):
        parts = []
        for j, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "text" and isinstance(part.get("text"), str):
                parts.append(part["text"])
                continue
            got = (f"a {shown_json(kind, head=40)} part" if isinstance(kind, str) and kind != "text"
                   else shown_json(part, head=60))  # fmt: skip
            raise _bad(
                f"messages[{i}].content[{j}] is {got}; this model takes text only: give "
                '{"type": "text", "text": "..."} parts or a string.'
            )
        return "".join(parts)
    raise _bad(f"messages[{i}].content must be a string or a list of text parts.")


def _check_message_fields(m: dict, i: int) -> None:
    """OpenAI's types of a message's other fields (hunt 56: a name of 5 or ["a"], tool_calls
    "garbage" and a tool message without tool_call_id were taken), then the tool calls this
    server cannot serve refused (`_refuse_tool_history`)."""
    name = m.get("name")
    if name is not None and not isinstance(name, str):
        raise _bad(f"messages[{i}].name must be a string, got {shown_json(name, head=40)}.")
    if name is not None and len(name) > MAX_NAME_CHARS:  # hunt 57: 1 MB names were taken
        raise _bad(
            f"messages[{i}].name must be at most {MAX_NAME_CHARS} characters (OpenAI's limit), "
            f"got {len(name):,}."
        )
    calls = m.get("tool_calls")
    if calls is not None and not (
        m["role"] == "assistant"
        and isinstance(calls, list)
        and all(isinstance(c, dict) for c in calls)
    ):
        raise _bad(f"messages[{i}].tool_calls must be a list of objects, on an assistant message.")
    if m["role"] == "tool" and not isinstance(m.get("tool_call_id"), str):
        raise _bad(f"messages[{i}] (tool) needs a tool_call_id (a string): the call it answers.")
    _refuse_tool_history(m, i)


def _refuse_tool_history(m: dict, i: int) -> None:
    """A history of tool calls: refused, as `tools` is (hunt 65: the calls were dropped from
    the prompt and their assistant turns rendered empty). Empty lists hold no call."""
    if m["role"] == "tool":
        call = shown_json(m["tool_call_id"], head=40)
        raise _bad(
            f"messages[{i}] is a tool message (the result of the call {call}); this server "
            "serves no tools, so it takes no tool results; leave it out."
        )
    for field in ("tool_calls", "function_call", "tool_call_id"):
        if m.get(field) not in (None, []):
            raise _bad(
                f"messages[{i}].{field} is not supported by this server (it serves no tools); "
                "leave it out."
            )


def _message(m: dict, i: int) -> dict:
    """What a template sees of message `m`: its role, its content as one string, its name."""
    msg = {"role": m["role"], "content": _content_text(m.get("content"), i)}
    if m.get("name") is not None:
        msg["name"] = m["name"]
    return msg


def chat_prompt(
    messages: Any,
    tokenizer: Tokenizer,
    chat_template: str | None = None,
    *,
    max_context: int | None = None,
    add_generation_prompt: bool = True,
) -> list[int]:
    """Token ids of a chat (see the module docstring for the template used); with
    `max_context`, a text that cannot fit is refused before it is encoded (`encode_prompt`).
    `add_generation_prompt` False (vLLM's /tokenize) leaves out the opening of the
    assistant's turn, to count a chat's own tokens."""
    if not isinstance(messages, list) or not messages:
        raise _bad("messages must be a non-empty list.")
    msgs = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in CHAT_ROLES:
            raise _bad(f"messages[{i}] needs a role among {', '.join(CHAT_ROLES)}.")
        if m.get("content") is None and not (
            m["role"] == "assistant" and (m.get("tool_calls") or m.get("function_call"))
        ):  # as OpenAI and vLLM: only an assistant message with tool calls may omit it
            raise _bad(f"messages[{i}] ({m['role']}) needs a content.")
        _check_message_fields(m, i)
        msgs.append(_message(m, i))
    generation = {"add_generation_prompt": add_generation_prompt}
    if chat_template is None and hasattr(tokenizer, "apply_chat_template"):
        return list(tokenizer.apply_chat_template(msgs, tokenize=True, **generation))
    template = chat_template or getattr(tokenizer, "chat_template", None)
    if isinstance(template, str) and template:
        import jinja2

        variables = getattr(tokenizer, "template_vars", {})
        try:
            text = render_bounded(template, messages=msgs, **generation, **variables)
        except InvalidRequestError:
            raise
        except jinja2.TemplateError as e:  # hunt 60: raise_exception's text whole, newlines too
            why = " ".join(str(e).split())
            why = why if len(why) <= 200 else f"{why[:200]}... ({len(why):,} characters)"
            raise _bad(f"The chat template cannot render these messages: {why}") from e
        except (ArithmeticError, LookupError, TypeError, ValueError, RuntimeError) as e:
            # the template's own Python error on these messages (10 // 0, '%d' % 'x', a macro
            # calling itself): a 400 as vLLM answers, not a 500 (hunt 58b)
            why = " ".join(str(e).split())[:200]
            raise _bad(
                f"The chat template cannot render these messages: {type(e).__name__}: {why}"
            ) from None
    else:
        text = "".join(f"{m['role']}: {m['content']}\n" for m in msgs)
        text += "assistant:" if add_generation_prompt else ""
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


def template_problem(tokenizer: Any, template: str | None, option: str | None) -> str | None:
    """Why the template a server will use (`template`, from `option` when given, else the
    tokenizer's) cannot render SAMPLE_CHAT through `chat_prompt`, in one line naming its
    source; None when it can or there is no Jinja template. A template that compiles but
    cannot render (an `{% include %}`, a model folder's missing `{% endfor %}`) made every
    chat request a 400 that blamed the client (hunt 62)."""
    source = _template_source(option, tokenizer)
    if source is None:
        return None
    import jinja2

    prefix = "The chat template cannot render these messages: "
    try:
        chat_prompt(SAMPLE_CHAT, tokenizer, template)
    except InvalidRequestError as e:
        why = str(e).removeprefix(prefix)
    except (jinja2.TemplateError, ArithmeticError, LookupError, TypeError, ValueError,
            RuntimeError) as e:  # fmt: skip
        why = f"{type(e).__name__}: {' '.join(str(e).split())[:200]}"
    else:
        return None
    return f"{source} cannot render a sample chat (one user message, 'Hi'): {why}"
