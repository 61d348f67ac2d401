"""Experiment output in the shape shared/DESIGN.md fixes, written the same way by every package.

An experiment is a function `run(*, quick: bool, seed: int) -> ExperimentResult` registered
by name in the CLI. It returns an `ExperimentResult`; `write_experiment` puts
`results.json`, `table.md`, `table.csv` and `figure.png` into `out_dir/<name>/`, and each of
`extra_figures` (name -> Figure, e.g. a per-PE view from `wse_core.trace_png.trace_figure`)
as `<name>.png` beside them.

Each prediction row is `{"name", "value", "unit", "params", "published", "source"}`;
`published` and `source` are filled only from shared/REFERENCES.md (None otherwise).
`--quick` may shrink the measured part; predictions must be the same either way.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
from pathlib import Path
from typing import Any

__all__ = ["PredictionRow", "ExperimentResult", "write_experiment"]


@dataclasses.dataclass(frozen=True)
class PredictionRow:
    name: str
    value: float
    unit: str
    params: dict[str, Any]
    published: float | None = None
    source: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class ExperimentResult:
    experiment: str
    seed: int
    config: dict[str, Any]
    measurements: list[dict[str, Any]]
    predictions: list[PredictionRow]
    figure: Any = None  # a matplotlib Figure, saved as figure.png
    extra_figures: dict[str, Any] = dataclasses.field(default_factory=dict)  # -> <name>.png

    def to_dict(self) -> dict[str, Any]:
        return {
            "experiment": self.experiment,
            "seed": self.seed,
            "config": self.config,
            "measurements": self.measurements,
            "predictions": [p.to_dict() for p in self.predictions],
        }


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return "" if math.isnan(v) else f"{v:.6g}"
    if isinstance(v, dict):
        return ", ".join(f"{k}={_fmt(x)}" for k, x in v.items())
    return "" if v is None else str(v)


def _rows(result: ExperimentResult) -> tuple[list[str], list[list[str]]]:
    header = ["name", "value", "unit", "params", "published", "ratio", "source"]
    rows = []
    for p in result.predictions:
        ratio = p.value / p.published if p.published else None
        rows.append(
            [_fmt(x) for x in (p.name, p.value, p.unit, p.params, p.published, ratio, p.source)]
        )
    return header, rows


def write_experiment(result: ExperimentResult, out_dir: str | Path) -> Path:
    """Write the result's four files into `out_dir/<experiment>/` and return that folder."""
    folder = Path(out_dir) / result.experiment
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.json").write_text(json.dumps(result.to_dict(), indent=2, default=float))
    header, rows = _rows(result)
    with open(folder / "table.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    if result.measurements:
        keys = list(dict.fromkeys(k for m in result.measurements for k in m))
        lines += ["", "Measurements:", "", "| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
        lines += [
            "| " + " | ".join(_fmt(m.get(k)) for k in keys) + " |" for m in result.measurements
        ]
    (folder / "table.md").write_text(f"# {result.experiment}\n\n" + "\n".join(lines) + "\n")
    figures = {"figure": result.figure, **result.extra_figures}
    for name, fig in figures.items():
        if fig is None:
            continue
        fig.savefig(folder / f"{name}.png", dpi=120, bbox_inches="tight")
        import matplotlib.pyplot as plt

        plt.close(fig)
    return folder
