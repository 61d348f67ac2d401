"""Sensitivity: how each prediction of an experiment moves over one assumption's range.

Contract. `sweep(predict_fn, key, values, seed=...)` calls `predict_fn(seed=seed)` (a list
of `PredictionRow`) once per value inside `wse_core.cost.assumptions.assume(key=value)` and
returns a `Sweep`: one line per prediction (its name and the params that say which case it
is) with its value at each setting, and the relative change from the first setting, and
the calibration in force at each setting. A wafer field (`clock_hz`) moves the wafers being
priced, not the calibration; `calibration.clock_hz`, a setting or a fitted constant refits
it, and the table shows how its constants moved and any row it could not meet (hunt 66:
a WSE-3 clock sweep refitted the WSE-2 rows, and only a long column of the measurement table
said so). `values=None` takes the constant's plausible range
(`wse_core.cost.assumptions.constant_of(key).sweep`: a wafer's or another system's).
`Sweep.markdown()` / `write(folder)` give the table `wse experiments run NAME --sweep
KEY=a,b,c` prints and saves as `sweep_<key>.md` / `.csv` (the .csv: the predictions).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from wse_core.errors import DefectError, PlacementError, SpecError, SramBudgetError, shown
from wse_core.studies.experiment import PredictionRow

if TYPE_CHECKING:
    from wse_core.cost.calibration import Calibration

__all__ = ["Sweep", "sweep", "parse_sweep", "sweep_values", "CASE_KEYS"]

# Plan-time refusals a setting of the sweep may meet (STYLE: an SRAM budget, a placement, a
# repair); the sweep keeps the other settings and says which one was refused (hunt 82 L1).
REFUSALS = (SramBudgetError, PlacementError, DefectError)

# Params that say which case a row is (never results): a row's identity across settings.
CASE_KEYS = (
    "case",
    "model",
    "wafer",
    "wafers",
    "grid",
    "nz",
    "block_z",
    "layout",
    "kernel",
    "systems",
    "copies",  # hunt 76: a slice alone and a system filled with 551 copies were both "#2"
    "bytes",
    "precision",
    # hunt 81: fabric-collectives' four ops on a grid were "#2" .. "#4"; wafer-yield's spares
    # and rates, netl-rayleigh-benard's GPU codes and the GPUs beside a wafer likewise
    "op",
    "gpu",
    "gpu_code",
    "spare_rows",
    "spare_cols",
    "defect_rate",
)


# A value of a sweep's line at one setting; None where the case does not occur there.
Cell = float | None


@dataclasses.dataclass(frozen=True)
class Sweep:
    key: str
    values: tuple[float, ...]
    lines: tuple[tuple[str, str, tuple[Cell, ...]], ...]  # (label, unit, value per setting)
    calibrations: tuple[Calibration, ...] = ()  # in force at each setting (none: not shown)
    refused: tuple[tuple[int, str], ...] = ()  # (setting index, the refusal's line)

    def markdown(self) -> str:
        table = _table(self.key, self.values, "prediction", self.lines)
        return table + self._where() + self._calibration()

    def _where(self) -> str:
        """Below the table: the settings refused, each with its line, and the cases that
        occur at only some settings, with those settings (their params changed between)."""
        heads = _labels(self.values)
        out = [
            f"at {self.key}={heads[i]} the predictions were refused (no value in its column): {why}"
            for i, why in self.refused
        ]
        gone = {i for i, _ in self.refused}
        for label, _, vals in self.lines:
            at = [heads[i] for i, v in enumerate(vals) if v is not None]
            if len(at) < len(vals) - len(gone):
                out.append(f"{label} occurs only at {self.key}={', '.join(at)} (a dash at the "
                           "others: no prediction there has these params)")  # fmt: skip
        return "".join(f"\n{line}\n" for line in out)

    def _calibration(self) -> str:
        """What the calibration was at each setting: one line where it never moved, else
        its wafer's clock and fitted constants by setting and the rows it missed."""
        cals = self.calibrations
        if not cals:
            return ""
        first = cals[0]
        if all(_fit_of(c) == _fit_of(first) for c in cals):
            fitted = ", ".join(f"{k} = {v:.4g}" for k, v in first.values.items())
            return (f"\ncalibration: the same at every setting ({self.key} does not move it):"
                    f" rows priced on {first.on_wafer()}; {fitted}\n")  # fmt: skip
        from wse_core.cost.mechanisms import CONSTANTS

        keys = dict.fromkeys(k for c in cals for k in c.values)  # a held one is not fitted
        lines = [(f"{first.wafer} clock_hz", "Hz", tuple(c.clock_hz for c in cals))]
        lines += [(k, CONSTANTS[k].units, tuple(c.values.get(k, 0.0) for c in cals)) for k in keys]
        missed = [
            f"at {self.key}={v:g}: " + ", ".join(f"{k} {100 * m:+.1f}%" for k, m in miss.items())
            for v, miss in zip(self.values, (c.misses for c in cals), strict=True) if miss
        ]  # fmt: skip
        note = ("\nrows the fit could not meet (a constant held at 0; by the constant each "
                f"fits): {'; '.join(missed)}\n") if missed else ""  # fmt: skip
        table = _table(self.key, self.values, "calibration", lines)
        return f"\ncalibration refitted at each setting ({self.key} moves it):\n\n{table}{note}"

    def write(self, folder: Path) -> Path:
        from wse_core.studies.experiment import _require_folder

        _require_folder(folder)  # hunt 62: FileExistsError from mkdir
        # the folder is made by the first write, and removed again if it fails (hunt 65)
        path = folder / f"sweep_{self.key}.md"
        from wse_core.host.atomic import write_atomically
        from wse_core.studies.experiment import csv_text

        write_atomically(path, f"# sweep of {self.key}\n\n" + self.markdown())
        head = ["prediction", "unit", *_labels(self.values)]
        # an empty cell where the case does not occur at that setting (never a neighbour's)
        rows = [[label, unit, *("" if v is None else v for v in vals)]
                for label, unit, vals in self.lines]  # fmt: skip
        write_atomically(folder / f"sweep_{self.key}.csv", csv_text([head, *rows]))
        return path


def _table(key: str, values: Sequence[float], what: str, lines) -> str:
    """A markdown table: one line per (label, unit, value per setting), each value with its
    change from the first setting, and the range."""
    head = [what, "unit", *(f"{key}={v}" for v in _labels(values)), "range"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, unit, vals in lines:
        kept = [v for v in vals if v is not None]
        out.append("| " + " | ".join([label, unit, *_cells(vals), _spread(kept)]) + " |")
    return "\n".join(out) + "\n"


def _cells(vals: Sequence[Cell]) -> list[str]:
    """Each setting's value with its change from the first setting that has one; a dash
    where the line has none."""
    first = next((i for i, v in enumerate(vals) if v is not None), len(vals))
    base = vals[first] if first < len(vals) else None
    return [
        "-" if v is None else f"{v:.5g}" + (f" ({v / base - 1:+.1%})" if base and i > first else "")
        for i, v in enumerate(vals)
    ]


def _labels(values: Sequence[float]) -> list[str]:
    """The values as column heads, with the fewest digits (6 at least, as %g) that tell them
    apart (hunt 68: 1000000001 and 1000000002 were both `1e+09`)."""
    for digits in range(6, 18):
        labels = [f"{v:.{digits}g}" for v in values]
        if len(set(labels)) == len(labels):
            break
    return labels


def _fit_of(cal: Calibration) -> tuple:
    return dict(cal.values), cal.clock_hz, dict(cal.wafer_assumed), dict(cal.misses)


def _spread(vals: Sequence[float]) -> str:
    """The range column: max / min - 1 of positive values, 0.0% of values that never move
    (zeros included), else a dash (hunt 63: a prediction of 0 printed `nan%`; from 0 or
    across it no relative range exists)."""
    low, high = min(vals), max(vals)
    if low == high:
        return f"{0:.1%}"
    return f"{high / low - 1:.1%}" if low > 0 else "-"


def _label(row: PredictionRow) -> str:
    bits = [f"{k}={row.params[k]}" for k in CASE_KEYS if k in row.params]
    return f"{row.name} " + " ".join(bits)


def parse_sweep(item: str) -> tuple[str, tuple[float, ...] | None]:
    """ "KEY=a,b,c" -> (KEY, values); "KEY" -> (KEY, None: the constant's range)."""
    from wse_core.cost.assumptions import parse_assumptions
    from wse_core.host.limits import check

    key, sep, rest = item.partition("=")
    key = key.strip()
    if not key:
        raise SpecError(f"--sweep takes KEY=a,b,c or KEY, got {shown(item)}")
    if not sep:
        from wse_core.cost.assumptions import constant_of

        low = constant_of(key).limits[0]  # the key must be a known assumption
        parse_assumptions([f"{key}={low!r}"])
        return key, None
    parts = [v.strip() for v in rest.split(",")]
    if not any(parts):
        raise SpecError(f"--sweep takes KEY=a,b,c, got {shown(item)}")
    check("sweep_values", len(parts), "--sweep's number of values")  # each reruns everything
    if "" in parts:  # "1e9,,2e9" or a trailing comma is a typo, not a shorter sweep
        meant = ",".join(v for v in parts if v)
        raise SpecError(
            f"--sweep's value {parts.index('') + 1} of {len(parts)} is empty in {item!r}: "
            f"give a number between every two commas (did you mean {key}={meant}?)"
        )
    values = tuple(parse_assumptions([f"{key}={v}"])[key] for v in parts)
    if len(set(values)) < len(values):  # hunt 68: run again, printed as identical columns
        i = next(n for n, v in enumerate(values) if values.index(v) < n)
        j = values.index(values[i])
        raise SpecError(f"--sweep gives {key}={parts[j]} twice (values {j + 1} and {i + 1}); "
                        "give each value once")  # fmt: skip
    return key, values


def sweep_values(key: str, values: Sequence[float] | None) -> tuple[float, ...]:
    """The values a sweep of `key` runs: `values`, or the constant's plausible range."""
    from wse_core.cost.assumptions import constant_of

    out = tuple(constant_of(key).sweep if values is None else values)
    if not out:
        raise SpecError(f"{key} has no plausible range to sweep: give KEY=a,b,c")
    return out


def sweep(
    predict_fn: Callable[..., list[PredictionRow]],
    key: str,
    values: Sequence[float] | None = None,
    *,
    seed: int = 0,
) -> Sweep:
    """Every prediction of `predict_fn` at each value of the assumption `key`."""
    from wse_core.cost.assumptions import assume
    from wse_core.cost.calibration import current

    values = sweep_values(key, values)
    table: dict[str, tuple[str, dict[int, float]]] = {}  # label -> (unit, {setting: value})
    cals = []
    refused: list[tuple[int, Exception]] = []
    for i, v in enumerate(values):
        with assume(**{key: v}):
            try:
                rows = predict_fn(seed=seed)
            except REFUSALS as error:  # that setting's plan does not fit: the others run
                refused.append((i, error))
                rows = []
            cals.append(current())  # the one the predictions priced with (cached)
        seen: dict[str, int] = {}
        for row in rows:
            label = _label(row)
            seen[label] = seen.get(label, 0) + 1
            label += f" #{seen[label]}" if seen[label] > 1 else ""
            table.setdefault(label, (row.unit, {}))[1][i] = float(row.value)
    if len(refused) == len(values):  # nothing to show: the first refusal, its setting named
        at, first = refused[0]
        raise type(first)(
            f"--sweep {key}: refused at every value; at {key}={_labels(values)[at]}: {first}"
        )
    lines = tuple(
        (lab, unit, tuple(got.get(i) for i in range(len(values))))
        for lab, (unit, got) in table.items()
    )
    why = tuple((at, str(error)) for at, error in refused)
    return Sweep(key, tuple(float(v) for v in values), lines, tuple(cals), why)
