"""A chat's prompt: its messages checked, rendered through a chat template within bounds.

`chat_prompt(messages, tokenizer, chat_template, max_context=...)` gives a chat's token ids.
The template: one given to the server (`chat_template=`, vLLM's --chat-template) comes first;
then a tokenizer with `apply_chat_template` (transformers) is used as is; then one with a
`chat_template` Jinja string (an HF directory's, see `model_dir`). Jinja templates are
rendered as transformers renders them: a sandboxed environment with trim_blocks and
lstrip_blocks, `messages`, `add_generation_prompt=True`, the tokenizer's bos_token and
eos_token, and `raise_exception(msg)`, whose message (e.g. "roles must alternate") becomes
the 400's. Otherwise the plain template is one line per message, "role: content", followed
by "assistant:" — e.g. [system "Be brief.", user "Hi"] becomes "system: Be brief.\\nuser:
Hi\\nassistant:". Content may be a string or a list of {"type": "text", "text": ...} parts.

Bounds (`wse_core.host.limits`): one render may run `template_ops` operations (each function
call, each output chunk, each step of a `range`, whose whole length is charged when it is
made) and `template_ms` milliseconds, and build `template_chars` characters (every `*`, `+`
and `%` on strings and lists, charged before it runs, and each call's and filter's result; an
integer argument past what is left is refused before the call: hunt 58b, `'x' * 300000000`
was one operation that held 1.2 GB); past any it stops at once (the budget is checked
inside the render, so the thread that runs it, off the event loop, is freed) and the request
is refused with `InvalidRequestError` (HTTP 400 / gRPC INVALID_ARGUMENT) naming the limit.
"""

from __future__ import annotations

import functools
import re
import threading
import time
from typing import Any

from wse_core.host.limits import LIMITS, limit

from wse_inference.engine import Tokenizer
from wse_inference.serve.admission import InvalidRequestError, encode_prompt

__all__ = ["CHAT_ROLES", "MAX_NAME_CHARS", "chat_prompt", "compile_chat_template", "render_bounded"]

CHAT_ROLES = ("system", "developer", "user", "assistant", "tool")
MAX_NAME_CHARS = 64  # a message's `name` (OpenAI documents 64 characters)
_RANGE_CHECK_EVERY = 1024  # range steps between two looks at the clock
_budget = threading.local()  # this thread's render: ops left, deadline (the template is shared)


class _OverBudget(Exception):
    def __init__(self, name: str) -> None:
        self.name = name


def _tick(ops: int) -> None:
    left = getattr(_budget, "ops", None)
    if left is None:  # compiled but not rendered by render_bounded (e.g. a syntax check)
        return
    _budget.ops = left - ops
    if _budget.ops < 0:
        raise _OverBudget("template_ops")
    if time.monotonic() > _budget.deadline:
        raise _OverBudget("template_ms")


def _charge_chars(n: int) -> None:
    """Charge n characters (or list items) a render builds to its `template_chars`. At compile
    time (Jinja folds constants: `{{ 'x' | center(10**9) }}` runs then) there is no render:
    one value past the whole budget is refused as a template error."""
    left = getattr(_budget, "chars", None)
    if left is None:
        if n > limit("template_chars"):
            import jinja2

            raise jinja2.TemplateError(
                f"it builds a value of {n:,} characters, past template_chars "
                f"({limit('template_chars'):,})"
            )
        return
    _budget.chars = left - n
    if _budget.chars < 0:
        raise _OverBudget("template_chars")


def _sized(value: Any) -> int:
    return len(value) if isinstance(value, str | list | tuple) else 0


def _check_int_args(args: tuple, kwargs: dict) -> None:
    """An integer argument past what is left of `template_chars` (a width, a count: 'x'.ljust
    or center(300000000)) is refused before the call builds it."""
    left = getattr(_budget, "chars", None)
    left = limit("template_chars") if left is None else left
    for a in (*args, *kwargs.values()):
        if isinstance(a, int) and not isinstance(a, bool) and a > left:
            _charge_chars(a)


_FORMAT_WIDTHS = re.compile(r"%[-#0 +]*(\d*)(?:\.(\d+))?")


def _binop_chars(operator: str, left: Any, right: Any) -> int:
    """The characters (items) `left operator right` would build, known before it is run."""
    if operator == "*":
        for seq, n in ((left, right), (right, left)):
            if _sized(seq) and isinstance(n, int) and not isinstance(n, bool):
                return len(seq) * max(n, 0)
    if operator == "+":
        return _sized(left) + _sized(right)
    if operator == "%" and isinstance(left, str):
        widths = (int(w or 0) + int(p or 0) for w, p in _FORMAT_WIDTHS.findall(left))
        return len(left) + sum(widths)
    return 0


def _bounded_filter(fn: Any) -> Any:
    @functools.wraps(fn)  # keeps jinja's pass_context / pass_environment marks
    def bounded(*args: Any, **kwargs: Any) -> Any:
        _tick(1)
        _check_int_args(args, kwargs)
        result = fn(*args, **kwargs)
        _charge_chars(_sized(result))
        return result

    return bounded


def _bounded_range(*args: int) -> Any:
    steps = range(*args)
    _tick(len(steps))
    for i, x in enumerate(steps):
        if i % _RANGE_CHECK_EVERY == 0:
            _tick(0)
        yield x


def _raise_exception(message: str) -> None:
    import jinja2

    raise jinja2.TemplateError(message)


@functools.lru_cache(maxsize=8)
def compile_chat_template(template: str) -> Any:
    """A Jinja chat template compiled as transformers compiles it, in a sandbox whose every
    call and `range` is charged to the render's budget; `jinja2.TemplateError` (e.g. a
    syntax error) if it cannot be."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class BoundedEnvironment(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset({"*", "+", "%"})  # not folded at compile time either

        def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
            _tick(1)
            _check_int_args(args, kwargs)
            result = super().call(__context, __obj, *args, **kwargs)
            _charge_chars(_sized(result))
            return result

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            _charge_chars(_binop_chars(operator, left, right))
            return super().call_binop(context, operator, left, right)

    env = BoundedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters = {name: _bounded_filter(fn) for name, fn in env.filters.items()}
    env.globals["raise_exception"] = _raise_exception
    env.globals["range"] = _bounded_range
    return env.from_string(template)


def render_bounded(template: str, **variables: Any) -> str:
    """`template` rendered with `variables` within `template_ops` and `template_ms`
    (InvalidRequestError past either; jinja2.TemplateError from the template itself)."""
    compiled = compile_chat_template(template)
    _budget.ops = limit("template_ops")
    _budget.chars = limit("template_chars")
    _budget.deadline = time.monotonic() + limit("template_ms") / 1e3
    chunks = []
    try:
        for chunk in compiled.generate(**variables):
            _tick(1)
            chunks.append(chunk)
    except _OverBudget as over:
        lim = LIMITS[over.name]
        raise InvalidRequestError(
            f"The chat template needs more than {limit(over.name):,} {lim.unit} ({lim.what}) "
            f"to render these messages; the server's {lim.env} lifts it.",
            param="messages",
        ) from None
    finally:
        _budget.ops = _budget.chars = None
    return "".join(chunks)


def _bad(message: str) -> InvalidRequestError:
    return InvalidRequestError(message, param="messages")


def _content_text(content: Any, i: int) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        parts = []
        for j, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "text" and isinstance(part.get("text"), str):
                parts.append(part["text"])
                continue
            got = (f"a {kind!r:.40} part" if isinstance(kind, str) and kind != "text"
                   else f"{part!r:.60}")  # fmt: skip
            raise _bad(
                f"messages[{i}].content[{j}] is {got}; this model takes text only: give "
                '{"type": "text", "text": "..."} parts or a string.'
            )
        return "".join(parts)
    raise _bad(f"messages[{i}].content must be a string or a list of text parts.")


def _check_message_fields(m: dict, i: int) -> None:
    """OpenAI's types of a message's other fields (hunt 56: a name of 5 or ["a"], tool_calls
    "garbage" and a tool message without tool_call_id were taken)."""
    name = m.get("name")
    if name is not None and not isinstance(name, str):
        raise _bad(f"messages[{i}].name must be a string, got {name!r:.40}.")
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


def chat_prompt(
    messages: Any,
    tokenizer: Tokenizer,
    chat_template: str | None = None,
    *,
    max_context: int | None = None,
) -> list[int]:
    """Token ids of a chat (see the module docstring for the template used); with
    `max_context`, a text that cannot fit is refused before it is encoded (`encode_prompt`)."""
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
        msgs.append({"role": m["role"], "content": _content_text(m.get("content"), i)})
    if chat_template is None and hasattr(tokenizer, "apply_chat_template"):
        return list(tokenizer.apply_chat_template(msgs, tokenize=True, add_generation_prompt=True))
    template = chat_template or getattr(tokenizer, "chat_template", None)
    if isinstance(template, str) and template:
        import jinja2

        variables = getattr(tokenizer, "template_vars", {})
        try:
            text = render_bounded(template, messages=msgs, add_generation_prompt=True, **variables)
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
        text = "".join(f"{m['role']}: {m['content']}\n" for m in msgs) + "assistant:"
    if max_context is None:
        return tokenizer.encode(text)
    return encode_prompt(tokenizer, text, max_context=max_context, param="messages")
