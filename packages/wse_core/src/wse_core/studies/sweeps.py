"""Sensitivity: how each prediction of an experiment moves over one assumption's range.

Contract. `sweep(predict_fn, key, values, seed=...)` calls `predict_fn(seed=seed)` (a list
of `PredictionRow`) once per value inside `wse_core.cost.assumptions.assume(key=value)` (the
calibration is refitted under each) and returns a `Sweep`: one line per prediction (its
name and the params that say which case it is) with its value at each setting, and the
relative change from the first setting. `values=None` takes the constant's plausible range
(`wse_core.cost.mechanisms.CONSTANTS[key].sweep`). `Sweep.markdown()` / `write(folder)` give the
table `wse experiments run NAME --sweep KEY=a,b,c` prints and saves as
`sweep_<key>.md` / `.csv`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path

from wse_core.errors import SpecError, shown
from wse_core.studies.experiment import PredictionRow

__all__ = ["Sweep", "sweep", "parse_sweep", "sweep_values", "CASE_KEYS"]

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
    "bytes",
    "precision",
)


@dataclasses.dataclass(frozen=True)
class Sweep:
    key: str
    values: tuple[float, ...]
    lines: tuple[tuple[str, str, tuple[float, ...]], ...]  # (label, unit, value per setting)

    def markdown(self) -> str:
        head = ["prediction", "unit", *(f"{self.key}={v:g}" for v in self.values), "range"]
        out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for label, unit, vals in self.lines:
            base = vals[0]
            cells = [
                f"{v:.5g}" + (f" ({v / base - 1:+.1%})" if base and i else "")
                for i, v in enumerate(vals)
            ]
            out.append("| " + " | ".join([label, unit, *cells, _spread(vals)]) + " |")
        return "\n".join(out) + "\n"

    def write(self, folder: Path) -> Path:
        from wse_core.studies.experiment import _require_folder

        _require_folder(folder)  # hunt 62: FileExistsError from mkdir
        # the folder is made by the first write, and removed again if it fails (hunt 65)
        path = folder / f"sweep_{self.key}.md"
        from wse_core.host.atomic import write_atomically
        from wse_core.studies.experiment import csv_text

        write_atomically(path, f"# sweep of {self.key}\n\n" + self.markdown())
        head = ["prediction", "unit", *(f"{v:g}" for v in self.values)]
        rows = [[label, unit, *vals] for label, unit, vals in self.lines]
        write_atomically(folder / f"sweep_{self.key}.csv", csv_text([head, *rows]))
        return path


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
        from wse_core.cost.mechanisms import CONSTANTS

        low = CONSTANTS[key].limits[0] if key in CONSTANTS else 0.0
        parse_assumptions([f"{key}={low!r}"])  # the key must be a known assumption
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
    return key, values


def sweep_values(key: str, values: Sequence[float] | None) -> tuple[float, ...]:
    """The values a sweep of `key` runs: `values`, or the constant's plausible range."""
    from wse_core.cost.mechanisms import CONSTANTS

    out = tuple(CONSTANTS[key].sweep if values is None else values)
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

    values = sweep_values(key, values)
    table: dict[str, tuple[str, list[float]]] = {}
    for v in values:
        with assume(**{key: v}):
            rows = predict_fn(seed=seed)
        seen: dict[str, int] = {}
        for row in rows:
            label = _label(row)
            seen[label] = seen.get(label, 0) + 1
            label += f" #{seen[label]}" if seen[label] > 1 else ""
            unit, vals = table.setdefault(label, (row.unit, []))
            vals.append(float(row.value))
    lines = tuple((lab, unit, tuple(vals)) for lab, (unit, vals) in table.items())
    return Sweep(key, tuple(float(v) for v in values), lines)
