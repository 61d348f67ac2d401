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
Also charged to `template_chars` (hunt 62): each `~` (the sum of its parts' text, before the
join: a `CodeGenerator` whose `visit_Concat` calls `BoundedEnvironment.tilde`), each
`{% set %}...{% endset %}` capture, macro, call and filter block (the environment's
`concat`), and each output chunk (a value that is not a string, e.g. a list of one long
string 1,000 times, is sized by walking it before `str()` writes it: the environment's
`finalize`). A call that grows a string by more than its arguments' sizes is sized before it
runs and refused when that is past what is left: `str.replace`, `expandtabs`, `join` and
`translate`, `str.format` (each field's width and precision, `wrap_str_format`), and the
filters `replace`, `join`, `indent`, `wordwrap`, `center`, `format`, `tojson`, `pprint`,
`sum`, `string` and the escapes. `**` and `*` on integers are refused before they run when
the result would have more digits than Python prints (`sys.get_int_max_str_digits()`,
4,300 by default: an int past it cannot even be written out), and are not folded at compile
time; compiling is bounded as a render is (Jinja folds constant filter calls then); the
`lipsum` global is gone (no chat template uses it; `lipsum(n=1000000)` ran for 49 s).
"""

from __future__ import annotations

import functools
import inspect
import math
import re
import sys
import threading
import time
from collections.abc import MappingView
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
    def __init__(self, name: str, message: str | None = None) -> None:
        self.name = name
        self.message = message


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
    """Charge n characters (or list items) a render builds to its `template_chars`. Outside a
    render or a compile (see `compile_chat_template`) one value past the whole budget is
    refused as a template error."""
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


def _chars_left() -> int:
    left = getattr(_budget, "chars", None)
    return limit("template_chars") if left is None else left


def _refuse_past_left(estimate: int) -> None:
    """A value of `estimate` characters (an upper bound, known before it is built) is refused
    when it is past what is left; what it really builds is charged once built."""
    if estimate > _chars_left():
        _charge_chars(estimate)


def _sized(value: Any) -> int:
    return len(value) if isinstance(value, str | list | tuple) else 0


def _check_int_args(args: tuple, kwargs: dict) -> None:
    """An integer argument past what is left of `template_chars` (a width, a count: 'x'.ljust
    or center(300000000)) is refused before the call builds it."""
    left = _chars_left()
    for a in (*args, *kwargs.values()):
        if isinstance(a, int) and not isinstance(a, bool) and a > left:
            _charge_chars(a)


def _str_chars(s: str, quoted: bool) -> int:
    """At most the characters of `s` as str() (quoted: as repr() or JSON) writes it."""
    if not quoted:
        return len(s)
    if s.isascii() and s.isprintable():  # JSON's html-safe escapes: \u003c, 6 characters
        return len(s) + 2 + s.count("\\") + s.count('"') + 5 * sum(map(s.count, "<>&'"))
    return 12 * len(s) + 2  # \ud83d\ude00: a character as 12


def _text_size(value: Any, *, quoted: bool = False, indent: int = 0) -> int:
    """An upper bound on the characters str(value) writes (JSON's and pprint's, with `quoted`
    and `indent`), found by walking lists, tuples, dicts and namespaces without building it
    (a list of one long string 1,000 times is 1,000 items and 1,000 times its text); it
    stops counting once past what is left of `template_chars`."""
    from jinja2.utils import Namespace

    stop = _chars_left()
    total = 0
    nodes = 0
    on_path: set[int] = set()  # a namespace may hold itself

    def walk(v: Any, quoted: bool, depth: int) -> None:
        nonlocal total, nodes
        nodes += 1
        if nodes % 4096 == 0:
            _tick(0)  # a look at the clock
        if total > stop:
            return
        if isinstance(v, str):
            total += _str_chars(v, quoted)
            return
        if v is None or isinstance(v, bool | float):
            total += 24
            return
        if isinstance(v, int):
            total += v.bit_length() * 30103 // 100000 + 2
            return
        if isinstance(v, Namespace):
            total += 13  # <Namespace {...}>
            v = object.__getattribute__(v, "_Namespace__attrs")
        if isinstance(v, list | tuple | dict | set | frozenset | MappingView):
            if id(v) in on_path:
                total += 5
                return
            on_path.add(id(v))
            total += 20  # brackets; dict_items([...])
            pairs = isinstance(v, dict)
            for item in v.items() if pairs else v:
                total += 4 + indent * (depth + 1)
                if pairs:
                    walk(item[0], True, depth + 1)
                    item = item[1]
                walk(item, True, depth + 1)
                if total > stop:
                    break
            on_path.discard(id(v))
            return
        total += 200  # anything else (a macro, a loop, undefined) is written short

    walk(value, quoted, 0)
    return total


_FORMAT_FIELDS = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d*)(?:\.(\*|\d+))?")


def _percent_chars(fmt: Any, values: Any) -> int:
    """At most the characters `fmt % values` writes: fmt, each field's width and precision,
    and each field the size of the largest value (a mapping's key may be used many times)."""
    if not isinstance(fmt, str):
        return 0
    fields = _FORMAT_FIELDS.findall(fmt)
    widths = sum(int(w) if w.isdigit() else 0 for f in fields for w in f)
    items = values if isinstance(values, tuple | list) else [values]
    if isinstance(values, dict):
        items = list(values.values())
    if "*" in fmt:  # a width or precision given as a value
        widths += sum(max(a, 0) for a in items if isinstance(a, int) and not isinstance(a, bool))
    if isinstance(values, tuple):  # one value per field
        return len(fmt) + widths + sum(_text_size(a) for a in items)
    largest = max((_text_size(a) for a in items), default=0)
    return len(fmt) + widths + len(fields) * largest


def _int_digits(n: int) -> float:
    """log10(|n|): about the decimal digits of n."""
    return math.log10(abs(n)) if n else 0.0


def _max_int_digits() -> int:
    return sys.get_int_max_str_digits() or 4300


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_int_result(operator: str, left: Any, right: Any) -> None:
    """`left ** right` and `left * right` on integers are refused before they run when the
    result would have more digits than Python prints (hunt 62: (n + 6) ** 12345678 held the
    GIL for 6.6 s, where template_ms could not stop it)."""
    if not isinstance(left, int) or not isinstance(right, int):  # bools too: True ** n
        return
    if operator == "**":
        if right <= 0 or abs(left) <= 1:
            return
        digits = right * _int_digits(left)
    elif operator == "*":
        digits = _int_digits(left) + _int_digits(right)
    else:
        return
    most = _max_int_digits()
    if digits > most:
        raise _OverBudget(
            "template_chars",
            f"The chat template computes an integer of about {digits:,.0f} digits to render "
            f"these messages, past the {most:,} Python writes out "
            "(sys.get_int_max_str_digits()).",
        )


def _binop_chars(operator: str, left: Any, right: Any) -> int:
    """The characters (items) `left operator right` would build, known before it is run."""
    if operator == "*":
        for seq, n in ((left, right), (right, left)):
            if _sized(seq) and isinstance(n, int) and not isinstance(n, bool):
                return len(seq) * max(n, 0)
    if operator == "+":
        return _sized(left) + _sized(right)
    if operator == "%" and isinstance(left, str):
        return _percent_chars(left, right)
    return 0


def _iterated(value: Any) -> Any:
    """`value` as the list a join makes of it (a generator read once, here)."""
    return value if isinstance(value, list | tuple | str) else list(value)


def _join_chars(sep: Any, items: Any) -> int:
    n = len(items)
    sizes = len(items) if isinstance(items, str) else sum(_text_size(x) for x in items)
    return sizes + _text_size(sep) * max(n - 1, 0)


def _replace_chars(s: Any, old: Any, new: Any, count: Any) -> int:
    s, old, new = (x if isinstance(x, str) else str(x) for x in (s, old, new))
    occurrences = s.count(old) if old else len(s) + 1
    if _is_int(count) and count >= 0:
        occurrences = min(occurrences, count)
    return len(s) + max(len(new) - len(old), 0) * occurrences


def _method_chars(method: Any, args: tuple, kwargs: dict) -> tuple[int, tuple]:
    """(at most the characters a str method that grows its string faster than its arguments
    writes, its arguments: a generator given to join read into a list), or (0, args)."""
    s = getattr(method, "__self__", None)
    name = getattr(method, "__name__", "")
    if not isinstance(s, str) or kwargs and name != "expandtabs":
        return 0, args
    if name == "replace" and len(args) >= 2:
        return _replace_chars(s, args[0], args[1], args[2] if len(args) > 2 else -1), args
    if name == "expandtabs":
        size = args[0] if args else kwargs.get("tabsize", 8)
        size = size if _is_int(size) else 8
        return len(s) + s.count("\t") * max(size - 1, 0), args
    if name == "join" and len(args) == 1:
        items = _iterated(args[0])
        return _join_chars(s, items), (items,)
    if name == "translate" and len(args) == 1 and isinstance(args[0], dict):
        longest = max((_text_size(v) for v in args[0].values()), default=1)
        return len(s) * max(longest, 1), args
    return 0, args


def _filter_value(a: dict) -> Any:
    return next(v for k, v in a.items() if k not in ("eval_ctx", "environment", "context"))


def _escape_chars(factor: int, a: dict) -> int:
    return factor * _text_size(_filter_value(a))


def _wordwrap_chars(a: dict) -> int:
    size = _text_size(a["s"])
    wrap = a["wrapstring"]
    return size + (size + 1) * (len(wrap) if isinstance(wrap, str) else 2)


def _indent_chars(a: dict) -> int:
    s, width = a["s"], a["width"]
    size = _text_size(s)
    lines = (s.count("\n") if isinstance(s, str) else size) + 1
    width = len(width) if isinstance(width, str) else max(width, 0) if _is_int(width) else 0
    return size + lines * width


def _sum_chars(a: dict) -> int:
    """sum(lists, start=[]) copies the total so far at each step: the items it builds."""
    total = _sized(a["start"])
    built = 0
    for x in a["iterable"] if isinstance(a["iterable"], list | tuple) else ():
        total += _sized(x)
        built += total
    return built


_ESCAPES = {"e": 5, "escape": 5, "forceescape": 5, "urlencode": 12, "string": 1, "safe": 1}
_FILTER_CHARS = {  # filter: the characters it writes at most, from its bound arguments
    "replace": lambda a: _replace_chars(a["s"], a["old"], a["new"], a["count"]),
    "join": lambda a: _join_chars(a["d"], a["value"]),
    "indent": _indent_chars,
    "wordwrap": _wordwrap_chars,
    "center": lambda a: max(_text_size(a["value"]), a["width"] if _is_int(a["width"]) else 0),
    "format": lambda a: _percent_chars(
        str(a["value"]) if isinstance(a["value"], str) else "%s",
        a["kwargs"] or tuple(a["args"]),
    ),
    "tojson": lambda a: _text_size(
        a["value"], quoted=True, indent=a["indent"] if _is_int(a["indent"]) else 0
    ),
    "pprint": lambda a: _text_size(a["value"], quoted=True, indent=1),
    "sum": _sum_chars,
    **{name: functools.partial(_escape_chars, k) for name, k in _ESCAPES.items()},
}


def _bounded_filter(name: str, fn: Any) -> Any:
    estimate = _FILTER_CHARS.get(name)
    signature = inspect.signature(fn) if estimate else None

    @functools.wraps(fn)  # keeps jinja's pass_context / pass_environment marks
    def bounded(*args: Any, **kwargs: Any) -> Any:
        _tick(1)
        _check_int_args(args, kwargs)
        if signature is not None:
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError:
                bound = None  # the filter says what is wrong with its arguments
            if bound is not None:
                bound.apply_defaults()
                if name == "join":  # a generator read once, here
                    bound.arguments["value"] = _iterated(bound.arguments["value"])
                    args, kwargs = bound.args, bound.kwargs
                _refuse_past_left(estimate(bound.arguments))
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


def _finalize(value: Any) -> Any:
    """Each `{{ value }}`, before str() writes it: a value that is not a string is sized by
    walking it (what is written is charged as an output chunk, or in its capture)."""
    if not isinstance(value, str):
        _refuse_past_left(_text_size(value))
    return value


_SPEC = re.compile(r"(?:.?[<>=^])?[-+ ]?z?#?0?(\d*)[,_]?(?:\.(\d+))?")


def _bounded_formatter(base: type) -> type:
    class BoundedFormatter(base):  # type: ignore[misc, valid-type]
        """str.format's fields, each width and precision checked before it is written
        ('{:>999999999}'.format('x')) and each field charged once written."""

        def format_field(self, value: Any, format_spec: str) -> Any:
            _tick(1)
            m = _SPEC.match(format_spec)
            width = int(m.group(1) or 0) + int(m.group(2) or 0) if m else 0
            _refuse_past_left(max(width, _text_size(value)))
            out = super().format_field(value, format_spec)
            _charge_chars(_sized(out))
            return out

    return BoundedFormatter


@functools.lru_cache(maxsize=1)
def _environment_class() -> type:
    from jinja2.compiler import CodeGenerator
    from jinja2.runtime import markup_join, str_join
    from jinja2.sandbox import (
        ImmutableSandboxedEnvironment,
        SandboxedEscapeFormatter,
        SandboxedFormatter,
    )
    from markupsafe import Markup

    class BoundedCodeGenerator(CodeGenerator):
        def visit_Concat(self, node: Any, frame: Any) -> None:  # noqa: N802
            """`a ~ b` as `environment.tilde(markup, (a, b))`: charged before the join (and,
            unlike Jinja's, not folded at compile time)."""
            if frame.eval_ctx.volatile:
                markup = "context.eval_ctx.volatile"
            else:
                markup = "True" if frame.eval_ctx.autoescape else "False"
            self.write(f"environment.tilde({markup}, (")
            for arg in node.nodes:
                self.visit(arg, frame)
                self.write(", ")
            self.write("))")

    class BoundedEnvironment(ImmutableSandboxedEnvironment):
        code_generator_class = BoundedCodeGenerator
        # not folded at compile time either; ** and * on integers sized before they run
        intercepted_binops = frozenset({"*", "+", "%", "**"})

        def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
            _tick(1)
            _check_int_args(args, kwargs)
            estimate, args = _method_chars(__obj, args, kwargs)
            _refuse_past_left(estimate)
            result = super().call(__context, __obj, *args, **kwargs)
            _charge_chars(_sized(result))
            return result

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            _check_int_result(operator, left, right)
            _charge_chars(_binop_chars(operator, left, right))
            return super().call_binop(context, operator, left, right)

        def concat(self, parts: Any) -> str:  # captures, macros, call and filter blocks
            parts = _iterated(parts)
            _charge_chars(sum(map(len, parts)))
            return "".join(parts)

        def tilde(self, markup: bool, parts: tuple) -> str:
            _refuse_past_left(sum(_text_size(p) for p in parts))
            out = markup_join(parts) if markup else str_join(parts)
            _charge_chars(len(out))
            return out

        def wrap_str_format(self, value: Any) -> Any:
            """Jinja's, with each field bounded (`_bounded_formatter`)."""
            if super().wrap_str_format(value) is None:  # not a str's format / format_map
                return None
            f_self = value.__self__
            base = SandboxedEscapeFormatter if isinstance(f_self, Markup) else SandboxedFormatter
            kw = {"escape": f_self.escape} if isinstance(f_self, Markup) else {}
            formatter = _bounded_formatter(base)(self, **kw)
            is_map = value.__name__ == "format_map"

            def bounded(*args: Any, **kwargs: Any) -> str:
                if is_map:
                    if kwargs or len(args) != 1:
                        raise TypeError("format_map() takes exactly one argument")
                    args, kwargs = (), args[0]
                return type(f_self)(formatter.vformat(f_self, args, kwargs))

            return functools.update_wrapper(bounded, value)

    return BoundedEnvironment


@functools.lru_cache(maxsize=8)
def compile_chat_template(template: str) -> Any:
    """A Jinja chat template compiled as transformers compiles it, in a sandbox whose every
    call and `range` is charged to the render's budget; `jinja2.TemplateError` (e.g. a
    syntax error, or a constant it would fold past the budget) if it cannot be."""
    import jinja2

    env = _environment_class()(trim_blocks=True, lstrip_blocks=True, finalize=_finalize)
    env.filters = {name: _bounded_filter(name, fn) for name, fn in env.filters.items()}
    env.globals.pop("lipsum", None)  # lipsum(n=1000000): 49 s in one call
    env.globals["raise_exception"] = _raise_exception
    env.globals["range"] = _bounded_range
    _start_budget()  # Jinja folds constant calls while it compiles: bounded as a render
    try:
        return env.from_string(template)
    except _OverBudget as over:
        raise jinja2.TemplateError(_over_message(over)) from None
    finally:
        _budget.ops = _budget.chars = None


def _start_budget() -> None:
    _budget.ops = limit("template_ops")
    _budget.chars = limit("template_chars")
    _budget.deadline = time.monotonic() + limit("template_ms") / 1e3


def _over_message(over: _OverBudget) -> str:
    if over.message:
        return over.message
    lim = LIMITS[over.name]
    return (
        f"The chat template needs more than {limit(over.name):,} {lim.unit} ({lim.what}) "
        f"to render these messages; the server's {lim.env} lifts it."
    )


def render_bounded(template: str, **variables: Any) -> str:
    """`template` rendered with `variables` within `template_ops`, `template_ms` and
    `template_chars` (InvalidRequestError past any; jinja2.TemplateError from the template
    itself)."""
    compiled = compile_chat_template(template)
    _start_budget()
    chunks = []
    try:
        for chunk in compiled.generate(**variables):
            _tick(1)
            _charge_chars(len(chunk))
            chunks.append(chunk)
    except _OverBudget as over:
        raise InvalidRequestError(_over_message(over), param="messages") from None
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
