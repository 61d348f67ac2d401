"""The errors of the stack: problems that can be known before running are raised at plan time.

Every error here subclasses `WseError` (itself a `ValueError`), so the `wse` command can turn
any of them into exit code 2 and one readable line. Messages say what is wrong and what would
be right (the PE or region, the bytes asked and the bytes free, the nearest valid name).
"""

from __future__ import annotations

import datetime
import difflib
import json
import math
import numbers
import struct
import zipfile
import zlib
from collections.abc import Iterable
from typing import Any

__all__ = [
    "WseError",
    "RunFault",
    "SpecError",
    "SramBudgetError",
    "PlacementError",
    "DefectError",
    "suggest",
    "shown",
    "shown_int",
    "shown_setting",
    "shown_value",
    "is_int",
    "is_finite",
    "require_int",
    "SHOWN_CHARS",
    "not_utf8",
    "ascii_only",
    "yaml_problem",
    "quoted_number",
    "NUMPY_FILE_ERRORS",
    "numpy_file_problem",
]


class WseError(ValueError):
    """Base class: a user-facing error whose message is one readable line."""


class RunFault(WseError):
    """A fault found while a run works (a full disk at a checkpoint, a solver's NaN): one
    line as every WseError, but exit code 1 (`exit_code`), not 2: the input was valid."""

    exit_code = 1


class SpecError(WseError):
    """A wafer spec, preset name or spec file is invalid."""


class SramBudgetError(WseError):
    """An allocation does not fit in the SRAM of the PEs it is placed on."""


class PlacementError(WseError):
    """Data or a region cannot be placed on the PE grid as asked."""


class DefectError(WseError):
    """A wafer's dead PEs exceed what its spare rows and columns can repair."""


def suggest(name: str, choices: Iterable[str]) -> str:
    """Return ' (did you mean X?)' for the closest choice, or '' when none is close."""
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.5)
    return f" (did you mean {close[0]!r}?)" if close else ""


# Characters of a user's input an error line repeats: enough to recognise it, never a 1 MB
# argument echoed whole (hunt 59: --prompt-ids of 6,000 characters came back whole).
SHOWN_CHARS = 60


def shown(value: object, *, quote: bool = True, head: int = SHOWN_CHARS) -> str:
    """A user's input as an error line repeats it: whole when at most `head` characters,
    else its first `head` characters and its length ('QQQQ'... (3,000 characters)); quoted
    as `repr` does unless `quote` is False. Every echo of input in a refusal ("got
    {value!r}") goes through it."""
    text = value if isinstance(value, str) else str(value)
    if len(text) <= head:
        return repr(text) if quote else text
    start = repr(text[:head]) if quote else text[:head]
    return f"{start}... ({len(text):,} characters)"


def shown_int(value: int) -> str:
    """An integer for an error line: as is below 1e15, then as 1.000e+18, and past a float's
    range by its digits, "a 401-digit integer" (hunt 63: `.3e` of one was an OverflowError;
    past int -> str's 4,300 digits it is counted from its logarithm)."""
    if abs(value) < 10**15:
        return str(value)
    if abs(value) < 10**308:
        return f"{value:.3e}"
    sign = "a negative " if value < 0 else ""
    try:
        return f"{sign or 'a '}{len(str(abs(value))):,}-digit integer"
    except ValueError:
        return f"{sign or 'an '}integer of about {int(math.log10(abs(value))) + 1:,} digits"


def is_int(value: object) -> bool:
    """An integer of any kind (Python's, NumPy's), not a bool: what a count or index takes."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_finite(value: object) -> bool:
    """A finite real number (not a bool, a str, NaN or inf)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def shown_setting(value: object) -> str:
    """An API argument as a refusal repeats it: a str quoted (so '1e-3' reads as text), an
    integer of any size short (`shown_int`), anything else as printed (`shown`)."""
    if is_int(value):
        return shown_int(value)  # type: ignore[arg-type]
    return shown(value, quote=isinstance(value, str))


def shown_value(value: object) -> str:
    """A value read from a YAML or JSON file as the file spells it, for a refusal ("must be
    int, got ..."): true, false and null as YAML and JSON write them (not Python's True,
    None), a date or time in ISO 8601 (YAML's timestamp, 2020-01-01), YAML's `!!binary` as
    "binary data (N bytes)", an integer in its digits (past what Python writes out, as
    `shown_int` counts it), a list or mapping in JSON's spelling with each key and item
    spelled as it would be alone (hunt 79: a date key was `datetime.date(2020, 1, 1)`, 10**40
    was 1.000e+40 alone and in full in a list), text quoted; shortened as `shown` does (hunt
    78: `got datetime.date(2020, 1, 1)`, `got b'hello'`, `got True`)."""
    if isinstance(value, str):
        return shown(value)
    try:
        text = _spelled(value, set())
    except RecursionError:  # nested past Python's stack (YAML builds such a value)
        text = f"a {type(value).__name__} nested too deep to show"
    return shown(text, quote=False)


def _spelled(value: object, within: set[int]) -> str:
    """`value` in `shown_value`'s words; `within`: the ids of the lists and mappings it is
    inside (a YAML anchor can hold itself: `&a [*a]` is shown as `[[...]]`, as repr does)."""
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if is_int(value):
        try:
            return str(int(value))  # type: ignore[call-overload]
        except ValueError:  # past int -> str's 4,300 digits
            return shown_int(int(value))  # type: ignore[call-overload]
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, bytes | bytearray):
        return f"binary data ({len(value):,} byte{'' if len(value) == 1 else 's'})"
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, list | tuple | dict):
        if id(value) in within:
            return "{...}" if isinstance(value, dict) else "[...]"
        inner = within | {id(value)}
        if isinstance(value, dict):
            items = (f"{_spelled(k, inner)}: {_spelled(v, inner)}" for k, v in value.items())
            return "{" + ", ".join(items) + "}"
        return "[" + ", ".join(_spelled(v, inner) for v in value) + "]"
    return str(value)  # a float (nan, inf as Python writes them), anything else as printed


def require_int(
    name: str, value: object, low: int, high: int | None = None, error: type = WseError
) -> None:
    """Refuse (`error`, naming `name`) a `value` that is not an integer in low..high (>= low
    without `high`)."""
    if is_int(value) and low <= value and (high is None or value <= high):  # type: ignore[operator]
        return
    allowed = f"in {low}..{high}" if high is not None else f">= {low}"
    raise error(f"{name} must be an integer {allowed}, got {shown_setting(value)}")


def not_utf8(text: str) -> str | None:
    """None when `text` encodes as UTF-8, else where it does not ("byte 0xff at character
    3"): bytes the shell passed undecoded arrive from argv as lone surrogates ($'\\xff' is
    '\\udcff', surrogateescape's mapping of the byte), which no tokenizer encodes."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        byte = (ord(e.object[e.start]) - 0xDC00) & 0xFF
        return f"byte 0x{byte:02x} at character {e.start:,}"
    return None


def ascii_only(value: Any) -> Any:
    """`value` as given, unless it is text outside ASCII: ValueError then. Python's int() and
    float() read any script's digits ('١٠' and '１０' are 10) where a number a user means is
    written in ASCII digits (hunt 61); wrap user text in it where int() or float() reads it."""
    if isinstance(value, str) and not value.isascii():
        raise ValueError(f"{value!r} is not written in ASCII")
    return value


def yaml_problem(e: Exception) -> str:
    """A PyYAML error as one line: the problem and where ('line 4, column 2: could not find
    expected ':''); PyYAML's own message spans several lines with a caret under the text."""
    problem = getattr(e, "problem", None) or getattr(e, "context", None)
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    if problem is None:
        return " ".join(str(e).split())
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return f"{where}{problem}"


def quoted_number(where: str, key: str, value: str, *, json: bool = False) -> str:
    """The refusal of text in a file's number field (`d_model: "128"`), one wording for spec
    files, params files, model sections and config.json (`json`: the advice in JSON's
    spelling): `where` names the field (and the file), `key` is the name as the file writes
    it. Text Python reads as inf or NaN is refused as not finite instead (YAML reads `inf`,
    unlike `.inf`, as text). Unquoting is advised only for text that is a number (Python's
    float() reads it), written as JSON's number grammar (RFC 8259, section 6; YAML 1.2 reads
    it the same), so the advice loads; other text (`clock_hz: 1.1 GHz`, hunt 72: told to
    "write it unquoted (clock_hz: 1.1 GHz)") is told to drop its unit, the field's unit
    named when its name carries one (STYLE.md: units in names, `clock_hz`, `wall_s`)."""
    import re

    try:
        number: float | None = float(value)
    except ValueError:
        number = None
    if number is not None and not math.isfinite(number):
        return f"{where} must be a finite number, got {value!r:.40}"
    spelled = f'"{key}"' if json else key
    if not value.isascii():  # hunt 61: '３００' was told to be written unquoted, as it was
        return f"{where} must be a number in ASCII digits, got the text {value!r:.40}"
    if not value.strip():
        return f"{where} must be a number, got the empty text {value!r:.40}"
    if number is None:
        # the unit a field's name ends in (longest first), as the wafer spec's fields spell it
        units = (("_bytes_per_pe", "bytes per PE"), ("_bytes_per_cycle", "bytes per cycle"),
                 ("_bytes_per_s", "bytes per second"), ("_usd_per_hour", "US dollars per hour"),
                 ("_bytes", "bytes"), ("_cycles", "cycles"), ("_hz", "Hz"),
                 ("_w", "watts"), ("_s", "seconds"))  # fmt: skip
        unit = next((u for end, u in units if key.lower().endswith(end)), None)
        bare = f"{key} is in {unit}" if unit else "a bare number"
        return f"{where} must be a number without a unit ({bare}), got the text {value!r:.40}"
    text = value.strip()  # as written if JSON reads it whole, else as float() read it
    if len(text) > 24 or not re.fullmatch(
        r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?", text
    ):
        text = str(int(number)) if number.is_integer() and abs(number) < 2**53 else repr(number)
    return (
        f"{where} must be a number, got the text {value!r:.40}; "
        f"write it unquoted ({spelled}: {text})"
    )


# What `np.load` raises on a damaged or foreign file (inside numpy or zipfile): an empty or cut
# file, a bad zip directory or member header, a truncated member, an unknown compression
# method, a bad array header, pickled data refused by allow_pickle=False.
NUMPY_FILE_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    ValueError,
    EOFError,
    KeyError,
    NotImplementedError,
    RuntimeError,
    struct.error,
    zipfile.BadZipFile,
    zlib.error,
)


def numpy_file_problem(e: BaseException) -> str:
    """A `NUMPY_FILE_ERRORS` error as one line. Never NumPy's advice to pass allow_pickle
    (loading a pickle runs the file's code): a file NumPy reads as a pickle is named as
    what it is, not NumPy arrays."""
    if isinstance(e, EOFError):
        return "the file is empty or cut short"
    if isinstance(e, KeyError):
        what = e.args[0] if e.args else repr(e)
        if isinstance(what, str) and what.endswith(" is not a file in the archive"):
            return f"array {what.removesuffix(' is not a file in the archive')!r} is missing"
        zip_said = ("There is no item named ", " in the archive")  # zipfile's (hunt 77)
        if isinstance(what, str) and what.startswith(zip_said[0]) and what.endswith(zip_said[1]):
            return f"member {what[len(zip_said[0]) : -len(zip_said[1])]} is missing"
        if isinstance(what, str) and " " in what.strip():  # another sentence: as it is
            return " ".join(what.split())
        return f"{what} is missing"
    text = " ".join(str(e).split())
    if "pickle" in text:
        return "it holds no NumPy arrays (another kind of file)"
    return text or type(e).__name__
