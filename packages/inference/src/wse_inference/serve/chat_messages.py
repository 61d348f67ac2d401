"""A chat request's messages checked, and what a chat template sees of each.

Contract: this module owns the messages' rules (`CHAT_ROLES`, `MAX_NAME_CHARS`, `TEXT_PARTS`):
`checked_messages` returns each message with its content's texts or raises the 400
(`InvalidRequestError`, param "messages") naming the message and field; `template_messages`
lays them out for a template in a content format (`wse_inference.serve.chat_format`). The
template's render is `wse_inference.serve.chat_template`'s.

Content may be a string or a non-empty list of text parts, each read as vLLM reads it
(`TEXT_PARTS`): {"type": "text", "text": ...} and the Responses API's "input_text" and
"output_text" by their `text`, OpenAI's "refusal" by its `refusal`, "thinking" by its
`thinking`; a "text" or "refusal" part whose text is null or missing is skipped, as vLLM
skips it. Any other part (an image, audio) is refused: these models take text only.

Each message reaches the template as {"role", "content"} and its `name` when it has one, so a
template that renders names (or `apply_chat_template`) sees it; the plain template leaves
names out. An assistant message's reasoning (`reasoning`, else `reasoning_content`: a
string) reaches it as vLLM passes it, under both names, and as `thinking`, the name
transformers adds for templates that read that (hunt 71: it was dropped without a word, and
Qwen3's `<think>` blocks of earlier turns rendered empty); another role's is left out, as
vLLM leaves it.

This server serves no tools, so a history holding tool calls (`tool_calls`, `function_call`,
`tool_call_id`, a "tool" message, or a "function" message, OpenAI's deprecated tool result,
which vLLM passes to the template) is refused with a 400 naming the field (hunt 65: they were
checked, then dropped from the prompt, and the model answered a conversation silently
changed).
"""

from __future__ import annotations

from typing import Any

from wse_inference.serve.admission import InvalidRequestError, shown_json

__all__ = ["CHAT_ROLES", "MAX_NAME_CHARS", "TEXT_PARTS", "bad_messages", "checked_messages",
           "template_messages"]  # fmt: skip

CHAT_ROLES = ("system", "developer", "user", "assistant", "tool")
MAX_NAME_CHARS = 64  # a message's `name` (OpenAI documents 64 characters)
_REASONING = ("reasoning", "reasoning_content")  # an assistant's, in vLLM's order of choice
# The content parts read as text, each by its field: vLLM's MM_PARSER_MAP and
# `_parse_chat_message_content_part` (vllm/entrypoints/chat_utils.py): the Responses API's
# input_text and output_text (agent frameworks replay them into chat histories), OpenAI's
# assistant refusal part (the openai client puts it back into a history) and thinking; each
# joined as text parts are (hunt 81: refused as "not text")
TEXT_PARTS = {"text": "text", "input_text": "text", "output_text": "text",
              "refusal": "refusal", "thinking": "thinking"}  # fmt: skip
# parts vLLM skips (a warning) when their text is missing or null: PART_TYPES_TO_SKIP_NONE_CONTENT
_SKIPPED_WHEN_NULL = ("text", "refusal")


def bad_messages(message: str) -> InvalidRequestError:
    return InvalidRequestError(message, param="messages")


def _part_text(part: Any, i: int, j: int) -> str | None:
    """The text of part `j` of message `i` (None: a part vLLM skips), or a 400 naming it."""
    kind = part.get("type") if isinstance(part, dict) else None
    field = TEXT_PARTS.get(kind) if isinstance(kind, str) else None
    if field is None:  # not a text part: an image, audio, a part without a type...
        got = (f"a {shown_json(kind, head=40)} part" if isinstance(kind, str)
               else shown_json(part, head=60))  # fmt: skip
        raise bad_messages(
            f"messages[{i}].content[{j}] is {got}; this model takes text only: give text "
            f"parts ({', '.join(TEXT_PARTS)}) or a string."
        )
    text = part.get(field)
    if isinstance(text, str):
        return text
    if text is None and kind in _SKIPPED_WHEN_NULL:  # vLLM's: skipped, with a warning
        return None
    raise bad_messages(f"messages[{i}].content[{j}] is a {shown_json(kind)} part; its {field!r} "
                       f"must be a string, got {shown_json(text, head=40)}.")  # fmt: skip


def _content_texts(content: Any, i: int) -> list[str]:
    """The texts of message `i`'s content: a string is one; a list, its text parts'
    (`TEXT_PARTS`, as vLLM reads them)."""
    if content is None or isinstance(content, str):
        return [content or ""]
    if content == []:  # OpenAI refuses an empty array (hunt 65: it was taken as "")
        raise bad_messages(f"messages[{i}].content is an empty list; give a string or at least one "
                   '{"type": "text", "text": "..."} part.')  # fmt: skip
    if isinstance(content, list):
        texts = (_part_text(part, i, j) for j, part in enumerate(content))
        return [t for t in texts if t is not None]
    raise bad_messages(f"messages[{i}].content must be a string or a list of text parts.")


def _check_message_fields(m: dict, i: int) -> None:
    """OpenAI's types of a message's other fields (hunt 56: a name of 5 or ["a"], tool_calls
    "garbage" and a tool message without tool_call_id were taken), then the tool calls this
    server cannot serve refused (`_refuse_tool_history`)."""
    name = m.get("name")
    if name is not None and not isinstance(name, str):
        raise bad_messages(f"messages[{i}].name must be a string, got {shown_json(name, head=40)}.")
    if name is not None and len(name) > MAX_NAME_CHARS:  # hunt 57: 1 MB names were taken
        raise bad_messages(
            f"messages[{i}].name must be at most {MAX_NAME_CHARS} characters (OpenAI's limit), "
            f"got {len(name):,}."
        )
    calls = m.get("tool_calls")
    if calls is not None and not (
        m["role"] == "assistant"
        and isinstance(calls, list)
        and all(isinstance(c, dict) for c in calls)
    ):
        raise bad_messages(
            f"messages[{i}].tool_calls must be a list of objects, on an assistant message."
        )
    if m["role"] == "tool" and not isinstance(m.get("tool_call_id"), str):
        raise bad_messages(
            f"messages[{i}] (tool) needs a tool_call_id (a string): the call it answers."
        )
    for field in _REASONING:  # vLLM's type, where it reads them
        value = m.get(field)
        if m["role"] == "assistant" and value is not None and not isinstance(value, str):
            raise bad_messages(
                f"messages[{i}].{field} must be a string, got {shown_json(value, head=40)}."
            )
    _refuse_tool_history(m, i)


def _refuse_tool_history(m: dict, i: int) -> None:
    """A history of tool calls: refused, as `tools` is (hunt 65: the calls were dropped from
    the prompt and their assistant turns rendered empty). Empty lists hold no call."""
    if m["role"] == "tool":
        call = shown_json(m["tool_call_id"], head=40)
        raise bad_messages(
            f"messages[{i}] is a tool message (the result of the call {call}); this server "
            "serves no tools, so it takes no tool results; leave it out."
        )
    for field in ("tool_calls", "function_call", "tool_call_id"):
        if m.get(field) not in (None, []):
            raise bad_messages(
                f"messages[{i}].{field} is not supported by this server (it serves no tools); "
                "leave it out."
            )


def _of_call(m: dict) -> str:
    """ ", of the call NAME" for a function message naming its function, else ""."""
    name = m.get("name")
    return f" of the call {shown_json(name, head=40)}" if isinstance(name, str) else ""


def checked_messages(messages: Any) -> list[tuple[dict, list[str]]]:
    """Each message of a chat request, checked, with its content's texts."""
    if not isinstance(messages, list) or not messages:
        raise bad_messages("messages must be a non-empty list.")
    checked = []
    for i, m in enumerate(messages):
        if isinstance(m, dict) and m.get("role") == "function":  # hunt 81: "needs a role"
            raise bad_messages(
                f"messages[{i}] is a function message (OpenAI's deprecated form of a tool "
                f"result{_of_call(m)}); this server serves no tools, so it takes no function "
                "results; leave it out."
            )
        if not isinstance(m, dict) or m.get("role") not in CHAT_ROLES:
            raise bad_messages(f"messages[{i}] needs a role among {', '.join(CHAT_ROLES)}.")
        if m.get("content") is None and not (
            m["role"] == "assistant" and (m.get("tool_calls") or m.get("function_call"))
        ):  # as OpenAI and vLLM: only an assistant message with tool calls may omit it
            raise bad_messages(f"messages[{i}] ({m['role']}) needs a content.")
        _check_message_fields(m, i)
        checked.append((m, _content_texts(m.get("content"), i)))
    return checked


def template_messages(checked: list[tuple[dict, list[str]]], content_format: str) -> list[dict]:
    """What a template sees of each message: its role, its content in `content_format`
    ("openai": a list of text parts; "string": the texts joined with "\\n", as vLLM joins
    them), an assistant's reasoning, its name; in vLLM's order, then transformers'."""
    msgs = []
    for m, texts in checked:
        content: Any = "\n".join(texts)
        if content_format == "openai":
            content = [{"type": "text", "text": t} for t in texts]
        msg = {"role": m["role"], "content": content}
        reasoning = next((m[f] for f in _REASONING if m.get(f) is not None), None)
        if m["role"] == "assistant" and reasoning is not None:  # vLLM's, then transformers'
            msg = {"thinking": reasoning, **msg, "reasoning": reasoning,
                   "reasoning_content": reasoning}  # fmt: skip
        if m.get("name") is not None:
            msg["name"] = m["name"]
        msgs.append(msg)
    return msgs
