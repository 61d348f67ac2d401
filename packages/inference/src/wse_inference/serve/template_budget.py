"""The budget of one chat-template render and the sizes of what its calls would build.

A render's budget (`template_ops`, `template_ms`, `template_chars`; thread-local: the
compiled template is shared) is charged by `_tick` and `_charge_chars`; `_text_size` and the
`*_chars` estimates bound what a value, a `%` format, a str method or a filter would write,
before it is built (`wse_inference.serve.template_sandbox` calls them); `_charged_items`
and `_split_pieces` the items a loop, a filter or a split takes or makes, as operations.
"""

from __future__ import annotations

import functools
import math
import re
import sys
import threading
import time
from collections.abc import MappingView
from typing import Any

from wse_core.host.limits import limit

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


def _paid(items: Any) -> Any:
    """`items`, charged already (a range's steps, charged when it was made; a list's items,
    charged as the loop or filter began): taken with a look at the clock every
    `_RANGE_CHECK_EVERY`; `_charged_items` charges them no more."""
    for i, x in enumerate(items):
        if i % _RANGE_CHECK_EVERY == 0:
            _tick(0)
        yield x


def _each_charged(items: Any) -> Any:
    """A generator's items, charged `_RANGE_CHECK_EVERY` at a time (and what is left when it
    ends): a per-item charge cost more than the filters it bounds."""
    n = 0
    for item in items:
        n += 1
        if n == _RANGE_CHECK_EVERY:
            _tick(n)
            n = 0
        yield item
    _tick(n)


def _charged_items(items: Any) -> Any:
    """`items` with each item charged one operation (a loop's iteration, an item a filter
    reads), so a render stops at `template_ops` or `template_ms` inside any loop: a sized
    iterable (a list, a string) all at once, refused before it is taken when past what is
    left (`loop.length` lists the rest: no more than that), a generator as taken."""
    if getattr(items, "gi_code", None) is _paid.__code__:
        return items
    if not hasattr(type(items), "__len__"):
        return _each_charged(items)
    _tick(len(items))
    return _paid(items)


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


# str.isspace's characters and str.splitlines' line breaks
_SPACES = ("\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005"
           "\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")  # fmt: skip
_LINE_BREAKS = "\n\x0b\x0c\r\x1c\x1d\x1e\x85\u2028\u2029"
_SPLITS = ("split", "rsplit", "splitlines")
_COUNT_CHUNK = 1 << 20  # characters counted at a time: a bounded copy, one pass in C


def _count_marks(s: str, marks: str) -> int:
    """How many characters of `s` are in `marks`: a chunk whose characters all fit a byte in
    one `bytes.translate` pass (a `str.count` pass a mark took 0.55 s on 63 MB, hunt 78)."""
    n, one_byte = 0, "".join(c for c in marks if c < "\u0100").encode("latin-1")
    for i in range(0, len(s), _COUNT_CHUNK):
        chunk = s[i : i + _COUNT_CHUNK]
        try:
            b = chunk.encode("latin-1")
            n += len(b) - len(b.translate(None, one_byte))
        except UnicodeEncodeError:  # a character past one byte: a `str.count` pass a mark
            n += sum(map(chunk.count, marks))
    return n


def _split_pieces(method: Any, args: tuple, kwargs: dict) -> int:
    """At most the pieces `s.split`, `rsplit` or `splitlines` makes (its separators counted,
    `_count_marks`, before it runs); 0 for any other call, or arguments it refuses itself."""
    s = getattr(method, "__self__", None)
    name = getattr(method, "__name__", "")
    if not isinstance(s, str) or name not in _SPLITS:
        return 0
    names = ("keepends",) if name == "splitlines" else ("sep", "maxsplit")
    given = dict(zip(names, args, strict=False)) | kwargs
    sep, most = given.get("sep"), given.get("maxsplit", -1)
    if sep is None:
        n = _count_marks(s, _LINE_BREAKS if name == "splitlines" else _SPACES)
    elif isinstance(sep, str) and sep:
        n = s.count(sep)
    else:
        return 0
    return n + 1 if not _is_int(most) or most < 0 else min(n, most) + 1


def _method_chars(method: Any, args: tuple, kwargs: dict) -> tuple[int, tuple]:
    """(at most the characters a str method that grows its string faster than its arguments
    writes, or that copies it into pieces; its arguments: a generator given to join read
    into a list), or (0, args)."""
    s = getattr(method, "__self__", None)
    name = getattr(method, "__name__", "")
    if isinstance(s, str) and name in (*_SPLITS, "partition", "rpartition"):
        return len(s), args
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


def _tojson_chars(a: dict) -> int:
    """json.dumps' characters at most: each item indented by `indent` (a count or a string)
    and written with `separators` (counted as more indent: an item has at least one)."""
    indent, seps = a["indent"], a["separators"]
    width = len(indent) if isinstance(indent, str) else max(indent, 0) if _is_int(indent) else 0
    if isinstance(seps, list | tuple):
        width += sum(len(x) for x in seps if isinstance(x, str))
    return _text_size(_filter_value(a), quoted=True, indent=width)


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
    "tojson": _tojson_chars,
    "pprint": lambda a: _text_size(a["value"], quoted=True, indent=1),
    "sum": _sum_chars,
    **{name: functools.partial(_escape_chars, k) for name, k in _ESCAPES.items()},
}
