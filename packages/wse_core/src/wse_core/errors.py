"""The errors of the stack: problems that can be known before running are raised at plan time.

Every error here subclasses `WseError` (itself a `ValueError`), so the `wse` command can turn
any of them into exit code 2 and one readable line. Messages say what is wrong and what would
be right (the PE or region, the bytes asked and the bytes free, the nearest valid name).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = [
    "WseError",
    "SpecError",
    "SramBudgetError",
    "PlacementError",
    "DefectError",
    "suggest",
    "yaml_problem",
]


class WseError(ValueError):
    """Base class: a user-facing error whose message is one readable line."""


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


def yaml_problem(e: Exception) -> str:
    """A PyYAML error as one line: the problem and where ('line 4, column 2: could not find
    expected ':''); PyYAML's own message spans several lines with a caret under the text."""
    problem = getattr(e, "problem", None) or getattr(e, "context", None)
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    if problem is None:
        return " ".join(str(e).split())
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return f"{where}{problem}"
