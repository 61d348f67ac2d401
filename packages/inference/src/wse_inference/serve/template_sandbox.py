"""A chat template compiled and rendered in a Jinja sandbox within bounds.

`compile_chat_template(text)` compiles a template as transformers' `apply_chat_template`
does (a sandboxed environment, trim_blocks and lstrip_blocks, the loopcontrols extension's
`{% break %}` / `{% continue %}`, its `{% generation %}` tag, rendered as its body, the
`raise_exception` and `strftime_now` globals and its `tojson`: json.dumps with non-ASCII kept
and keys in their order; hunt 71: Llama 3.1's template dated every chat "26 Jul 2024" and
Qwen's `{%- break %}` could not be served); `render_bounded(text, **variables)` renders it.

Bounds (`wse_core.host.limits`): one render may run `template_ops` operations (each function
call, each output chunk, each item a `{% for %}` loop or a filter that reads its value item
by item (`list`, `batch`, `map`, `select`, `sort`, ...) takes: a list's, a string's or a
`range`'s whole length when it begins or is made, a generator's as taken; and each piece a
`split` makes, counted before it runs; hunt 71: three nested loops over 800 messages ran
24.6 s, and `s|batch(1)|list` built 2.4 GB before it was charged) and `template_ms`
milliseconds, and build `template_chars` characters (every `*`, `+` and `%` on strings and
lists, charged before it runs, and each call's and filter's result; an integer argument past
what is left is refused before the call: hunt 58b, `'x' * 300000000` was one operation that
held 1.2 GB); past any it stops at once (the budget is checked inside the render, so the
thread that runs it, off the event loop, is freed) and the request is refused with
`InvalidRequestError` (HTTP 400 / gRPC INVALID_ARGUMENT) naming the limit.
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
import json
import re
import time
from datetime import datetime
from typing import Any

from wse_core.host.limits import LIMITS, limit

from wse_inference.serve.admission import InvalidRequestError
from wse_inference.serve.template_budget import (
    _FILTER_CHARS,
    _binop_chars,
    _budget,
    _charge_chars,
    _charged_items,
    _check_int_args,
    _check_int_result,
    _iterated,
    _method_chars,
    _OverBudget,
    _paid,
    _refuse_past_left,
    _sized,
    _split_pieces,
    _text_size,
    _tick,
)

__all__ = ["compile_chat_template", "render_bounded"]


# filters that read their value item by item in one call (a generator, a string's characters)
_ITERATING = frozenset({"batch", "slice", "map", "select", "reject", "selectattr", "rejectattr",
                        "unique", "list", "sort", "groupby", "sum", "min", "max"})  # fmt: skip
_PASSED = ("eval_ctx", "environment", "env", "context")  # what Jinja passes before a value


def _bounded_filter(name: str, fn: Any) -> Any:
    estimate = _FILTER_CHARS.get(name)
    signature = _filter_signature(fn) if estimate or name in _ITERATING else None

    @functools.wraps(fn)  # keeps jinja's pass_context / pass_environment marks
    def bounded(*args: Any, **kwargs: Any) -> Any:
        _tick(1)
        _check_int_args(args, kwargs)
        if signature is not None:
            args, kwargs = _filter_arguments(name, signature, args, kwargs)
        result = fn(*args, **kwargs)
        _charge_chars(_sized(result))
        return result

    return bounded


def _filter_signature(fn: Any) -> inspect.Signature:
    """`fn`'s signature as Jinja calls it: that of an async variant (`list`, `slice`) lacks
    the eval_ctx Jinja passes first."""
    signature = inspect.signature(fn)
    first = next(iter(signature.parameters), None)
    if getattr(fn, "jinja_pass_arg", None) is not None and first not in _PASSED:
        passed = inspect.Parameter("eval_ctx", inspect.Parameter.POSITIONAL_ONLY)
        signature = signature.replace(parameters=[passed, *signature.parameters.values()])
    return signature


def _filter_arguments(name: str, signature: Any, args: tuple, kwargs: dict) -> tuple:
    """A filter's arguments, what it would write refused when past what is left, its value
    read once (join) or charged item by item as the filter takes them (`_ITERATING`: hunt 71,
    `list` built 20 M one-item batches in one C call before anything was charged)."""
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError:
        return args, kwargs  # the filter says what is wrong with its arguments
    bound.apply_defaults()
    key = next(k for k in bound.arguments if k not in _PASSED)
    if name == "join":  # a generator read once, here
        bound.arguments[key] = _iterated(bound.arguments[key])
    if name in _FILTER_CHARS:
        _refuse_past_left(_FILTER_CHARS[name](bound.arguments))
    if name in _ITERATING:
        bound.arguments[key] = _charged_items(bound.arguments[key])
    return bound.args, bound.kwargs


def _bounded_range(*args: int) -> Any:
    steps = range(*args)
    _tick(len(steps))
    return _paid(steps)


def _tojson(
    x: Any,
    ensure_ascii: bool = False,
    indent: Any = None,
    separators: Any = None,
    sort_keys: bool = False,
) -> str:
    """transformers' `tojson`, not Jinja's HTML-safe one (which wrote '<' as \\u003c, every
    non-ASCII character escaped, and keys sorted; hunt 71)."""
    return json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


_now = datetime.now  # the clock strftime_now reads


def _strftime_now(format: str) -> str:  # transformers' name: strftime_now(format=...)
    """transformers' `strftime_now`: the local time now, formatted. A format writes at most
    32 characters per character (%c: 24 from 2)."""
    if isinstance(format, str):
        _refuse_past_left(32 * len(format))
    return _now().strftime(format)


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
def _generation_tag() -> type:
    from jinja2 import nodes
    from jinja2.ext import Extension

    class GenerationTag(Extension):
        """transformers' `{% generation %}...{% endgeneration %}` (its AssistantTracker): the
        body rendered as it is, in a call block as there; the span it marks is a training
        mask, which serving has no use for."""

        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            call = self.call_method("_generation_body")
            return nodes.CallBlock(call, [], [], body).set_lineno(lineno)

        def _generation_body(self, caller: Any) -> str:
            return caller()

    return GenerationTag


@functools.lru_cache(maxsize=1)
def _environment_class() -> type:
    from jinja2 import nodes
    from jinja2.compiler import CodeGenerator
    from jinja2.runtime import LoopContext, markup_join, str_join
    from jinja2.sandbox import (
        ImmutableSandboxedEnvironment,
        SandboxedEscapeFormatter,
        SandboxedFormatter,
    )
    from markupsafe import Markup

    class BoundedCodeGenerator(CodeGenerator):
        def visit_For(self, node: Any, frame: Any) -> None:  # noqa: N802
            """`{% for x in items %}` as `for x in environment.loop_items(items)`: each item a
            loop takes is charged (hunt 71: loops that neither call nor write were never
            charged); a recursive loop's `loop(children)` is, in `call`."""
            take = nodes.EnvironmentAttribute("loop_items", lineno=node.iter.lineno)
            node.iter = nodes.Call(take, [node.iter], [], None, None, lineno=node.iter.lineno)
            super().visit_For(node, frame)

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
            pieces = _split_pieces(__obj, args, kwargs)
            _tick(1 + pieces)  # hunt 71: 'ab ' * 21000000 split into 21 M strings, 1.6 GB
            _check_int_args(args, kwargs)
            estimate, args = _method_chars(__obj, args, kwargs)
            _refuse_past_left(estimate + pieces)
            if isinstance(__obj, LoopContext) and args:  # a recursive loop's loop(children)
                args = (_charged_items(args[0]), *args[1:])
            result = super().call(__context, __obj, *args, **kwargs)
            _charge_chars(_sized(result))
            return result

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            _check_int_result(operator, left, right)
            _charge_chars(_binop_chars(operator, left, right))
            return super().call_binop(context, operator, left, right)

        def loop_items(self, items: Any) -> Any:
            return _charged_items(items)

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
    call, loop item and `range` is charged to the render's budget; `jinja2.TemplateError`
    (e.g. a syntax error, or a constant it would fold past the budget) if it cannot be."""
    import jinja2

    env = _environment_class()(
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=_finalize,
        extensions=["jinja2.ext.loopcontrols", _generation_tag()],
    )
    filters = {**env.filters, "tojson": _tojson}
    env.filters = {name: _bounded_filter(name, fn) for name, fn in filters.items()}
    env.globals.pop("lipsum", None)  # lipsum(n=1000000): 49 s in one call
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
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
