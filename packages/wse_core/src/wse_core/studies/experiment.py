"""Experiment output in the shape shared/DESIGN.md fixes, written the same way by every package.

An experiment is a function `run(*, quick: bool, seed: int) -> ExperimentResult` registered
by name in the CLI. It returns an `ExperimentResult`; `write_experiment` puts
`results.json`, `table.md`, `table.csv` and `figure.png` into `out_dir/<name>/` (and
`measurements.csv` where it has measurements; the CSVs' numbers are Python's `repr`, which
reads back as the float results.json holds: hunt 71, `.6g` wrote 0.99999995679834 as 1, the
6 digits kept for table.md), and each of `extra_figures` (name -> Figure, e.g. a per-PE view
from `wse_core.trace.png.trace_figure`) as `<name>.png` beside them.

Each prediction row is `{"name", "value", "unit", "params", "published", "source",
"mechanisms", "role", "ratio"}`; `role` says what the row is to the calibration (`row_role`):
"fits K" (a calibration row that fits constant K), "check" (a published figure nothing is
fitted on) or "prediction" (no published figure here); `published` and `source` are filled only
from references/calibration-rows.md (None otherwise); `ratio` is value / published (None
without it; hunt 76: the tables' column alone had it); `mechanisms` (optional) is the row's
predicted cycles by mechanism (`wse_core.cost.perf.Timing.by_mechanism`, per the unit the row's
`params["per"]` names), shown in the tables and drawn as `mechanisms.png` (stacked shares per
row) whenever a row has it. Beside each row, in the tables and as the row's "assumed" in
results.json, the swept constants that move it, with the values priced and their ranges
(`wse_core.cost.listing`): what pricing the row read (`read_by`), else what the whole run read
(`run_experiment`, the shell's call, which keeps the calibration in force too: "assumed" and
"calibration" of results.json), else a guess from its mechanisms. `--quick` may shrink the
measured part; predictions must be the same either way. In a notebook a result shows its tables
and figure (`_repr_html_`, `.plot()`: `wse_core.notebook`).

results.json is strict JSON (hunt 67: NaN and Infinity were written, which jq, JavaScript and
`json.loads(parse_constant=...)` refuse): a number that is not finite (a row's value NaN for
"no GPU count matches", say) is written as null, as pandas' `to_json` writes it, and named
with what it was in a sixth key, `"non_finite": {"predictions[3].value": "nan", ...}`,
present only then. The tables write it as `nan` / `inf`, never as the empty cell of None."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import numbers
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from wse_core.host.atomic import atomic_folder, named_as
from wse_core.studies.mechanism_figure import mechanism_figure, mechanism_text

__all__ = [
    "PredictionRow",
    "ExperimentResult",
    "write_experiment",
    "csv_text",
    "mechanism_figure",
    "table_markdown",
    "table_rows",
    "results_json",
    "row_role",
    "row_assumed",
    "read_by",
    "run_experiment",
    "RESULT_FILES",
]

# The files `write_experiment` always writes (beside them a .png per figure)
RESULT_FILES = ("results.json", "table.csv", "table.md")


@dataclasses.dataclass(frozen=True)
class PredictionRow:
    name: str
    value: float
    unit: str
    params: dict[str, Any]
    published: float | None = None
    source: str | None = None
    mechanisms: dict[str, float] | None = None  # predicted cycles by mechanism
    role: str | None = None  # "fits K", "check" or "prediction" (None: `row_role` decides)
    # what pricing this row read (`wse_core.cost.reads.Reads`, `read_by`); None: not recorded
    assumed: Any = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def ratio(self) -> float | None:
        """value / published; None without a published figure (or with 0)."""
        return self.value / self.published if self.published else None

    def to_dict(self) -> dict[str, Any]:
        """DESIGN.md's row; `mechanisms` only when the row has it; `role` and `ratio` always;
        `assumed` where the row recorded what it read."""
        out = dataclasses.asdict(dataclasses.replace(self, assumed=None))
        if out["mechanisms"] is None:
            del out["mechanisms"]
        out["role"], out["ratio"] = row_role(self), self.ratio
        del out["assumed"]
        if self.assumed is not None:
            out["assumed"] = [e.to_dict() for e in _listed(self.assumed, None)]
        return out


def read_by(reads: Any, *rows: PredictionRow) -> list[PredictionRow]:
    """`rows` with what their pricing read (`wse_core.cost.reads.recording()` around it),
    listed beside each (hunt 69: rows listed `clock_hz` that did not move them, and not the
    GPU kernel cost that did)."""
    return [dataclasses.replace(r, assumed=reads) for r in rows]


def _listed(reads: Any, changed: dict[str, float] | None) -> tuple:
    """`wse_core.cost.listing.listed`, each constant's values distinct beyond float noise (a
    relative 1e-9; hunt 76: two refits agreeing to 1e-14 listed "302.3, 302.3")."""
    from wse_core.cost.listing import listed

    def distinct(v: tuple[float, ...]) -> tuple[float, ...]:  # ascending
        return tuple(x for i, x in enumerate(v) if not i or not math.isclose(x, v[i - 1]))

    return tuple(dataclasses.replace(e, values=distinct(e.values)) for e in listed(reads, changed))


def row_role(p: PredictionRow) -> str:
    """The row's role: its own, else `params["role"]`, else "check" when it has a published
    figure and "prediction" when not."""
    if p.role:
        return p.role
    if p.params.get("role"):
        return str(p.params["role"])
    return "check" if p.published is not None else "prediction"


@dataclasses.dataclass
class ExperimentResult:
    experiment: str
    seed: int
    config: dict[str, Any]
    measurements: list[dict[str, Any]]
    predictions: list[PredictionRow]
    figure: Any = None  # a matplotlib Figure, saved as figure.png
    extra_figures: dict[str, Any] = dataclasses.field(default_factory=dict)  # -> <name>.png
    # what the whole run's pricing read and the calibration in force (`run_experiment`)
    assumed: Any = None
    calibration: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """DESIGN.md's five keys; each row's "assumed" where the tables list it (the same
        entries), and "assumed" and "calibration" of the whole run where it was recorded."""
        rows = []
        for p in self.predictions:
            row = p.to_dict()
            if _assumed_column(self):
                row["assumed"] = row_assumed(p, self)
            rows.append(row)
        out = {
            "experiment": self.experiment,
            "seed": self.seed,
            "config": self.config,
            "measurements": self.measurements,
            "predictions": rows,
        }
        if self.assumed is not None:
            out["assumed"] = [e.to_dict() for e in _listed(self.assumed, self._changed())]
        if self.calibration is not None:
            out["calibration"] = self.calibration
        return out

    def _changed(self) -> dict[str, float]:
        return dict(self.config.get("assume") or {})

    def _repr_html_(self) -> str:
        from wse_core.notebook import experiment_html

        header, rows = table_rows(self)
        title = f"{self.experiment} (seed {self.seed})"
        return experiment_html(title, header, rows, self.measurements, self.plot())

    def plot(self) -> Any:
        """The result's figure, else its rows' mechanism shares (a matplotlib Figure; None
        when it has neither)."""
        return self.figure if self.figure is not None else mechanism_figure(self.predictions)


def run_experiment(fn: Any, *, quick: bool, seed: int) -> ExperimentResult:
    """`fn(quick=, seed=)` with what its pricing reads recorded (`wse_core.cost.reads`) and
    the calibration in force kept with it: the shell's call (`wse experiments run`), inside
    its `assume` block."""
    from wse_core.cost.calibration import current
    from wse_core.cost.reads import recording

    with recording() as got:
        result = fn(quick=quick, seed=seed)
    result.assumed, result.calibration = got, current().to_dict()
    return result


def row_assumed(p: PredictionRow, result: ExperimentResult) -> list[dict[str, Any]]:
    """The swept constants listed beside row `p` as JSON: what pricing it read (`read_by`),
    else what the whole run read (`run_experiment`), else those its mechanisms are priced
    with (`wse_core.cost.mechanisms.mechanism_keys`, no value: nothing was recorded)."""
    reads = p.assumed if p.assumed is not None else result.assumed
    if reads is not None:
        return [e.to_dict() for e in _listed(reads, result._changed())]
    from wse_core.cost.mechanisms import CONSTANTS, mechanism_keys

    keys = [k for k in mechanism_keys(p.mechanisms or {}) if CONSTANTS[k].sweep]
    return [{"name": k, "sweep": [min(CONSTANTS[k].sweep), max(CONSTANTS[k].sweep)],
             "basis": CONSTANTS[k].basis} for k in keys]  # fmt: skip


def _assumed_text(p: PredictionRow, result: ExperimentResult) -> str:
    """The table's cell of `row_assumed`: each constant's line, "; " between them."""
    reads = p.assumed if p.assumed is not None else result.assumed
    if reads is not None:
        return "; ".join(e.line() for e in _listed(reads, result._changed()))
    from wse_core.cost.mechanisms import assumed_beside

    return assumed_beside(p.mechanisms or {})


def _assumed_column(result: ExperimentResult) -> bool:
    """Whether the tables list assumptions: something was recorded, or a row has cycles by
    mechanism."""
    recorded = result.assumed is not None or any(p.assumed is not None for p in result.predictions)
    return recorded or any(p.mechanisms for p in result.predictions)


def _fmt(v: Any, exact: bool = False) -> str:
    """A cell's text; `exact`: a float as `repr`, the shortest text that reads back as it
    (the CSVs'), a whole one without ".0" as `.6g` wrote it (3, not 3.0)."""
    if isinstance(v, float):  # nan and inf as such: an empty cell is None (hunt 67)
        # float(): NumPy's repr names its type (np.float64(0.5))
        return repr(float(v)).removesuffix(".0") if exact else f"{v:.6g}"
    if isinstance(v, dict):
        return ", ".join(f"{k}={_fmt(x, exact)}" for k, x in v.items())
    return "" if v is None else str(v)


def table_rows(
    result: ExperimentResult, *, exact: bool = False
) -> tuple[list[str], list[list[str]]]:
    """The prediction table's header and cells (`exact`: floats in full, as table.csv)."""
    header = ["name", "role", "value", "unit", "params", "published", "ratio", "source"]
    with_mech = any(p.mechanisms for p in result.predictions)
    with_assumed = _assumed_column(result)
    header += ["cycles by mechanism"] if with_mech else []
    header += ["assumed (value, sweep range, basis)"] if with_assumed else []
    rows = []
    for p in result.predictions:
        cells: list[Any] = [p.name, row_role(p), p.value, p.unit, p.params, p.published]
        cells += [p.ratio, p.source]
        cells += [mechanism_text(p.mechanisms)] if with_mech else []
        cells += [_assumed_text(p, result)] if with_assumed else []
        rows.append([_fmt(x, exact) for x in cells])
    return header, rows


def _measurement_rows(result: ExperimentResult, *, exact: bool = False):
    """(keys, cells) of the result's measurements, each key a column in order of appearance."""
    keys = list(dict.fromkeys(k for m in result.measurements for k in m))
    return keys, [[_fmt(m.get(k), exact) for k in keys] for m in result.measurements]


def csv_text(rows: list[list[Any]]) -> str:
    """`rows` as CSV text (`csv.writer`'s dialect), for `write_atomically`."""
    import io

    buf = io.StringIO(newline="")
    csv.writer(buf).writerows(rows)
    return buf.getvalue()


def _require_folder(folder: Path) -> None:
    """A WseError where `folder` is there but no folder (hunt 62: FileExistsError from mkdir),
    for the library's callers: a sweep's write (`atomic_folder` for `write_experiment`)."""
    import os

    from wse_core.errors import WseError

    if os.path.lexists(folder) and not folder.is_dir():
        raise WseError(f"{folder} is there but not a folder; remove it or write elsewhere")


def write_experiment(result: ExperimentResult, out_dir: str | Path) -> Path:
    """Write the result's files into `out_dir/<experiment>/` and return that folder.

    All or none: the files are written into a new folder beside it, which replaces the folder
    whole once every file is written (`atomic_folder`; hunt 64: `ulimit -f` stopped a run at
    figure.png, its new tables beside an older run's figure; hunt 65: so did a SIGTERM between
    two renames). A .png (or measurements.csv) there that this run does not write is an older
    run's and goes with the old folder; other files (a sweep's `sweep_*`) stay."""
    folder = Path(out_dir) / result.experiment  # atomic_folder refuses a file there
    figures = {"figure": result.figure, **result.extra_figures}
    figures.setdefault("mechanisms", mechanism_figure(result.predictions))
    figures = {f"{name}.png": fig for name, fig in figures.items() if fig is not None}
    try:
        with atomic_folder(folder, keep=_kept) as new:
            for name, text in _texts(result).items():
                with named_as(folder / name, new / name):
                    (new / name).write_text(text, encoding="utf-8")
            for name, fig in figures.items():
                with named_as(folder / name, new / name):
                    fig.savefig(new / name, dpi=120, bbox_inches="tight")
    finally:
        _close(figures.values())
    return folder


def _kept(name: str) -> bool:
    """An older run's file that stays: not a figure, nor the measurements.csv this run
    writes only where it has measurements (a sweep's sweep_*.csv stays)."""
    return not name.endswith(".png") and name != "measurements.csv"


def _texts(result: ExperimentResult) -> dict[str, str]:
    """results.json, table.csv and table.md of `result` (and measurements.csv), by name."""
    header, rows = table_rows(result, exact=True)
    texts = {"results.json": results_json(result), "table.csv": csv_text([header, *rows]),
             "table.md": table_markdown(result)}  # fmt: skip
    if result.measurements:  # hunt 71: they were in table.md and results.json alone
        keys, cells = _measurement_rows(result, exact=True)
        texts["measurements.csv"] = csv_text([keys, *cells])
    return texts


def results_json(result: ExperimentResult) -> str:
    """The text of results.json: strict JSON, each non-finite number null and named under
    "non_finite" (the module docstring)."""
    notes: dict[str, str] = {}
    data = _finite_or_null(result.to_dict(), "", notes)
    if notes:
        data["non_finite"] = notes
    return json.dumps(data, indent=2, default=float, allow_nan=False)


def _finite_or_null(value: Any, path: str, notes: dict[str, str]) -> Any:
    """`value` with every non-finite real number (NumPy's too) None, its path in `notes`."""
    if isinstance(value, dict):
        return {k: _finite_or_null(v, f"{path}.{k}" if path else str(k), notes)
                for k, v in value.items()}  # fmt: skip
    if isinstance(value, list | tuple):
        return [_finite_or_null(v, f"{path}[{i}]", notes) for i, v in enumerate(value)]
    if isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral):
        if not math.isfinite(value):
            notes[path] = repr(float(value))
            return None
    return value


def table_markdown(result: ExperimentResult) -> str:
    """The text of the result's table.md: its rows and measurements as Markdown tables (what
    the CLI prints, from here, not read back from the file: hunt 67, under `umask 777` the
    file written could not be read)."""
    header, rows = table_rows(result)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    if result.measurements:
        keys, cells = _measurement_rows(result)
        lines += ["", "Measurements:", "", "| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
        lines += ["| " + " | ".join(r) + " |" for r in cells]
    lines += _run_notes(result)
    return f"# {result.experiment}\n\n" + "\n".join(lines) + "\n"


def _run_notes(result: ExperimentResult) -> list[str]:
    """What the whole run was priced under (results.json's "assumed" and "calibration")."""
    out = []
    if result.assumed is not None:
        listed = [e.line() for e in _listed(result.assumed, result._changed())]
        out += ["", "Assumed constants this run's predictions read (value, sweep range, basis; "
                "`wse experiments assumptions` gives each source):", ""]  # fmt: skip
        out += [f"- {line}" for line in listed] or ["- none"]
    if result.calibration is not None:
        cal = result.calibration
        fitted = ", ".join(f"{k} = {v:.6g}" for k, v in cal["values"].items()) or "nothing"
        out += ["", f"Calibration in force: rows priced on {cal['wafer']} at "
                f"{cal['clock_hz']:g} Hz; fitted {fitted}"]  # fmt: skip
        out += _refit_warnings(cal)
    return out


def _refit_warnings(cal: Mapping[str, Any]) -> list[str]:
    """What a refit under `--assume calibration.KEY=...` could not do (hunt 71: cost-model.md
    promised it, the run printed only the values): rows it misses (`Calibration.misses`) and
    fitted values past the range their predictions are swept over."""
    from wse_core.cost.calibration import Calibration
    from wse_core.cost.mechanisms import CONSTANTS

    out = []
    if missed := Calibration(misses=cal.get("misses") or {}).missed():  # describe()'s words
        out += ["", f"The calibration: {missed}"]
    past = [
        f"{k} = {v:.6g} (swept {min(sw):g}..{max(sw):g})"
        for k, v in cal["values"].items()
        if (sw := CONSTANTS[k].sweep) and not min(sw) <= v <= max(sw)
    ]
    if past:
        out += ["", f"Fitted past the range its predictions are swept over: {'; '.join(past)}"]
    return out


def _close(figures: Any) -> None:
    if figures:
        import matplotlib.pyplot as plt

        for fig in figures:
            plt.close(fig)
