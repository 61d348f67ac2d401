"""The one numeric option type of the `wse` command: finite, in range, with units.

Every numeric option of every command is declared with `number` (a `typer.Option`), so
inf, NaN, text, a fraction given to an integer, a negative count or a port past 65535 is
refused before the command does any work, with one line and exit code 2:

    Error: --port must be an integer in [0, 65535], got 99999
    Error: --tokens must be a finite number > 0 (tokens), got inf

How to declare one (keywords after the option's names, like `typer.Option`'s):

    from wse_cli.options import number

    port: int = number(8000, "--port", kind=int, ge=0, le=65535, help="HTTP port.")
    tokens: float = number(..., "--tokens", gt=0, unit="tokens", help="Training tokens.")
    usd_kwh: float = number(None, "--usd-per-kwh", ge=0, unit="USD/kWh", help="...")
    grid: tuple[int, int, int] = number(..., "--grid", kind=int, ge=1, help="NX NY NZ")

- `kind`: `float` (default; any finite real; "-0" is read as 0, never a negative zero) or
  `int` (a whole number of at most 64 bits, read exactly: "12", "1e3" and "1000.0" are
  1000; "2.5" and 2**70 are refused). Digits are ASCII, without `_` grouping ("1_0" is
  refused, not read as 10).
- Bounds: `gt`, `ge`, `lt`, `le` (strict or not); leave them out for no bound. A value
  that is finite is always required: inf and NaN never pass.
- `unit`: said in the error and appended to the help with the range.
- `limit`: the name of a size limit in `wse_core.host.limits.LIMITS` (`"serve_slots"`,
  `"devices"`, ...) checked after the range, before any work: a larger value is refused with
  the limit and the variable that lifts it (docs/limits.md). The help shows the range as
  enforced, its top the limit in force where that is below `le` / `lt`, and the variable
  (`[0, 10000000]; WSE_LIMIT_TIME_STEPS lifts the top`), so the help's largest value is the
  largest one accepted (hunt 66: `--steps` showed [0, 2147483647] and refused 10,000,001).
  A value past the limit is refused naming the limit and its variable even where it is past
  the option's own bound too (hunt 67: `--steps 1e12` was refused as outside
  [0, 2147483647], the type's range, not the limit of 10,000,000).
- Tuples (`--grid NX NY NZ`) check every element. `None` (an option left out) passes, so
  "default: the config's" options keep `None` as their default.
- Anything else `typer.Option` takes (`envvar`, `show_default`, ...) passes through.

The check runs in the option's callback, where the option's name is known; it raises
`wse_cli.errors.UserInputError`, which `wse_cli.errors.WseGroup` prints as one line.
Commands still check what depends on several options together (before their first line of
output). Each option's callback carries its `NumberSpec` under the attribute `NUMBER_MARK`,
so a test can find every option declared this way and what it accepts.
"""

from __future__ import annotations

import decimal
import math
from typing import Any, NamedTuple

import typer

from wse_cli.errors import UserInputError

__all__ = [
    "number",
    "NumberSpec",
    "NUMBER_MARK",
    "PORT",
    "SEED",
    "SEED_MAX",
    "GPUS",
    "INT32_MAX",
    "typed",
]

NUMBER_MARK = "wse_number"  # the callback's attribute holding its NumberSpec
INT_MAX = 2**63 - 1  # every integer option is a 64-bit signed integer
SEED_MAX = INT_MAX  # seeds are 64-bit signed integers everywhere (jax.random.key, numpy)
PORT = {"kind": int, "ge": 0, "le": 65535}  # TCP ports; 0 asks the system for a free one
SEED = {"kind": int, "ge": 0}  # every command's seeds: `number(0, "--seed", **SEED)` (64-bit)
GPUS = {"kind": int, "ge": 1, "limit": "gpus"}  # GPU counts: `number(None, "--gpus", **GPUS)`


class NumberSpec(NamedTuple):
    """What a `number` option accepts: a finite `kind` within the bounds (None: unbounded)."""

    kind: type
    gt: float | None
    ge: float | None
    lt: float | None
    le: float | None
    unit: str
    limit: str | None = None  # a wse_core.host.limits.LIMITS name, checked after the range


class _NotANumber:
    """What the parser returns for text that is not a number of the kind (the callback,
    which knows the option's name, refuses it)."""

    def __init__(self, text: str, past_64_bits: bool = False) -> None:
        self.text = text
        self.past_64_bits = past_64_bits  # a whole number too wide for an integer option


class _TypedFloat(float):
    """A float option's value with its `text` as typed: the callback refuses one out of range
    showing that text, never Python's rendering of it (hunt 78: 1e309 came back as "inf";
    hunt 79: `1e5` as "100000.0", `1e-400` as "0.0", `-1` as "-1.0"), and hands the command a
    plain float (a command that takes +inf, `--request-rate`, reads it as one)."""

    text: str

    def __new__(cls, x: float, text: str) -> _TypedFloat:
        self = super().__new__(cls, x)
        self.text = text
        return self


class _TypedInt(int):
    """An integer option's value with its `text` as typed (`--port 1e5` is refused as "got
    1e5", not 100000), as `_TypedFloat`; the command gets a plain int."""

    text: str

    def __new__(cls, x: int, text: str) -> _TypedInt:
        self = super().__new__(cls, x)
        self.text = text
        return self


def _plain(x: Any) -> Any:
    """A parsed value as the command takes it: a plain float or int, without its text."""
    if isinstance(x, _TypedFloat):
        return float(x)
    if isinstance(x, _TypedInt):
        return int(x)
    return x


def _parse(kind: type) -> Any:
    def parse(value: Any) -> Any:
        if value is None or isinstance(value, _NotANumber):
            return value
        if isinstance(value, bool):
            return _NotANumber(str(value))
        text = str(value).strip()
        # hunt 61: Python reads '١٠' and '１０' as 10; a number is ASCII. Hunt 69: and '1_0'
        # as 10 (PEP 515's digit grouping, in float() and Decimal() alike): a mistyped
        # `--threshold 1_0e-3` became 0.01 without a word
        if not text.isascii() or "_" in text:
            return _NotANumber(str(value))
        if kind is float:
            try:
                x = float(text)  # "inf", "nan" and "1e999" parse; the callback refuses them
            except ValueError:
                return _NotANumber(str(value))  # as given: ' ' is shown as ' ', not ''
            # -0 is 0, as numpy and argparse users read it (hunt 67: `-0` passed `ge=0` and
            # came back as "$-0" and "rate -0" in reports, -0.0 in their JSON); inf, NaN and
            # every other value keep their text for a refusal (hunt 78, hunt 79)
            return _TypedFloat(0.0 if x == 0 else x, str(value))
        try:  # exactly: "4.12e16" is 41200000000000000, not the nearest double
            d = decimal.Decimal(text)
            whole = d.is_finite() and d.adjusted() <= 18 and d == d.to_integral_value()
            wide = d.is_finite() and d.adjusted() > 18 and d == d.to_integral_value()
        except decimal.DecimalException:  # not a number, or an exponent past any context
            whole = wide = False
        if whole and abs(d) <= INT_MAX:
            return _TypedInt(int(d), str(value))
        return _NotANumber(str(value), past_64_bits=wide or whole)  # whole: past INT_MAX

    return parse


def _range_text(kind: type, gt: Any, ge: Any, lt: Any, le: Any, unit: str) -> str:
    what = "an integer" if kind is int else "a finite number"
    lo, hi = (ge, "[") if ge is not None else (gt, "(")
    top, end = (le, "]") if le is not None else (lt, ")")
    if lo is not None and top is not None:
        what += f" in {hi}{lo}, {top}{end}"
    elif lo is not None:
        what += f" {'>=' if ge is not None else '>'} {lo}"
    elif top is not None:
        what += f" {'<=' if le is not None else '<'} {top}"
    return what + (f" ({unit})" if unit else "")


def _top_in_force(limit: str, lt: Any, le: Any) -> int | None:
    """The limit in force, where it is below the option's own top (`lt` / `le`), else None.
    Read as the option is declared, at the import of its command's module: in the `wse`
    process that is the value its check reads (wse_core.host.limits imports no JAX)."""
    from wse_core.host.limits import LIMITS
    from wse_core.host.limits import limit as in_force

    try:
        top = in_force(limit)
    except ValueError:  # a malformed WSE_LIMIT_*: the root callback refuses it in one line
        try:
            top = int(LIMITS[limit].value())
        except ValueError:  # a default read from a malformed variable (WSE_HOST_MEMORY_BYTES)
            return None
    bound = le if le is not None else lt
    return None if bound is not None and bound <= top else top


def _variable(limit: Any) -> str:
    from wse_core.host.limits import LIMITS

    return LIMITS[limit].env


def _finite(x: Any) -> bool:
    return not isinstance(x, _NotANumber) and not (isinstance(x, float) and not math.isfinite(x))


def _fits(x: Any, gt: Any, ge: Any, lt: Any, le: Any) -> bool:
    if not _finite(x):
        return False
    return not (
        (gt is not None and not x > gt)
        or (ge is not None and not x >= ge)
        or (lt is not None and not x < lt)
        or (le is not None and not x <= le)
    )


def typed(ctx: typer.Context, name: str) -> bool:
    """Whether the option `name` (its parameter's name) was given on the command line, not
    taken from its default or a variable (typer's click's enum, not click's own)."""
    return getattr(ctx.get_parameter_source(name), "name", "") == "COMMANDLINE"


def _source(ctx: typer.Context, param: typer.CallbackParam) -> str:
    """The option's name, or its variable's when the value came from there (WSE_DEVICES)."""
    source = ctx.get_parameter_source(str(param.name))
    if param.envvar and getattr(source, "name", "") == "ENVIRONMENT":  # typer's click's enum
        envvar = param.envvar if isinstance(param.envvar, str) else param.envvar[0]
        return envvar
    return param.opts[0] if param.opts else str(param.name)


def _check_limit(limit: str, x: Any, ctx: typer.Context, param: typer.CallbackParam) -> None:
    from wse_core.host.limits import check

    try:
        check(limit, x, _source(ctx, param))
    except ValueError as e:  # LimitError, or a malformed WSE_LIMIT_* variable
        raise UserInputError(str(e)) from None


INT32_MAX = 2**31 - 1  # step counts and the like travel as int32 into jitted code


def number(
    default: Any,
    *names: str,
    kind: type = float,
    gt: float | None = None,
    ge: float | None = None,
    lt: float | None = None,
    le: float | None = None,
    unit: str = "",
    limit: str | None = None,
    help: str | None = None,  # noqa: A002 (typer's name)
    **option: Any,
) -> Any:
    """A `typer.Option` whose value (each element of a tuple) must be a finite `kind` within
    the bounds; see the module docstring."""
    if kind not in (int, float):
        raise TypeError(f"kind must be int or float, not {kind!r}")
    wanted = _range_text(kind, gt, ge, lt, le, unit)
    top = None if limit is None else _top_in_force(limit, lt, le)

    def check(ctx: typer.Context, param: typer.CallbackParam, value: Any) -> Any:
        values = value if isinstance(value, tuple | list) else (value,)
        for x in values:
            if x is not None and limit is not None and _finite(x):
                # the limit first: a value past it and past the type's range too is refused
                # naming the limit and its variable (hunt 67: 1e12 named [0, 2147483647])
                _check_limit(limit, x, ctx, param)
            if x is not None and not _fits(x, gt, ge, lt, le):
                got = x.text if isinstance(x, _NotANumber | _TypedFloat | _TypedInt) else x
                if isinstance(got, str):  # hunt 59: a 6,000-character value came back whole
                    from wse_core.errors import shown

                    # blank or padded (WSE_DEVICES=' '): quoted, so the spaces are seen
                    got = shown(got, quote=got != got.strip() or not got)
                if isinstance(x, _NotANumber) and x.past_64_bits:  # the bound no option states
                    got = f"{got} (integers are 64-bit: at most {INT_MAX} in size)"
                raise UserInputError(f"{_source(ctx, param)} must be {wanted}, got {got}")
        if isinstance(value, tuple | list):
            return type(value)(_plain(x) for x in value)
        return _plain(value)

    setattr(check, NUMBER_MARK, NumberSpec(kind, gt, ge, lt, le, unit, limit))
    shown = wanted
    if top is not None:  # the range as enforced: the limit's top, below the option's own
        shown = f"{_range_text(kind, gt, ge, None, top, unit)}; {_variable(limit)} lifts the top"
    text = f"{help} ({shown})" if help else shown
    return typer.Option(default, *names, parser=_parse(kind), callback=check, help=text, **option)
