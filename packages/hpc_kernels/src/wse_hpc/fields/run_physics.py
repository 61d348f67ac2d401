"""The physics a CFD run steps with: recorded in its step files and report, kept on a restart.

`physics(cfg, dt) -> dict` is what defines the equations a `run_cfd` run steps and how:
`ra`, `pr` and `aspect` (rayleigh-benard), `re` (cavity), `time_scheme` and the step `dt`
it ran at, None where the case has no such setting. The report's `extra` holds all of them;
each step file holds those that are not None and not already there (`aspect` is its
`lengths`), as 0-d arrays (`stored`).

`check_restart(path, data, now, dt_given)` refuses (FieldError, one line naming the
setting, the step file's value and this run's) a restart that would continue a run with
other physics (hunt 75: `--restart --re 400` continued a Re 100 cavity silently, as did a
new --ra, --pr or --time-scheme, and the step files recorded none of them), as
`wse_hpc.cfd_steps.read_step` refuses another case or domain. The step `dt` is refused only
where this run's comes from the default: an explicit `--dt` is a deliberate change (what
the run's CFL and blow-up refusals ask for) and the report's `restarted_from_dt` keeps the
step file's. A step file written before hunt 75 holds none of them: accepted, unchecked.
A value no run could have been given (outside the CLI's range, `RANGES` and `DT_MIN`, or an
unknown time scheme) marks a damaged step file, refused as one naming the setting and its
range (hunt 78: a dt of 0 or nan, an ra of nan asked for "--dt 0" or "--ra nan", which the
CLI refuses).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from wse_hpc.cfd_steps import shown_array
from wse_hpc.fields.grid import FieldError
from wse_hpc.fields.run_config import DT_MIN, RANGES, TIME_SCHEMES

__all__ = ["CHECKED", "check_restart", "physics", "recorded_dt", "stored"]

# the settings a restart keeps, by their CLI spelling (`aspect` is checked as the domain's
# `lengths` by `read_step`)
CHECKED = {"ra": "--ra", "pr": "--pr", "re": "--re", "time_scheme": "--time-scheme"}


def physics(cfg: Any, dt: float) -> dict[str, Any]:
    """The run's physical settings and its step (a `CfdConfig` and the step it runs at);
    None where `cfg.case` has no such setting."""
    heat = cfg.case == "rayleigh-benard"
    return {
        "ra": float(cfg.ra) if heat else None,
        "pr": float(cfg.pr) if heat else None,
        "aspect": float(cfg.aspect) if heat else None,
        "re": None if heat else float(cfg.re),
        "time_scheme": cfg.time_scheme,
        "dt": float(dt),
    }


def stored(now: dict[str, Any]) -> dict[str, np.ndarray]:
    """The arrays a step file adds for `physics(...)`: each setting that is not None, but
    `aspect` (the file's `lengths` hold it)."""
    return {k: np.asarray(v) for k, v in now.items() if v is not None and k != "aspect"}


def _value(path: Path, data: dict[str, np.ndarray], key: str) -> float | str | None:
    """The step file's `key` (None where it holds none), or FieldError for one not a single
    number (a string for time_scheme) a run could have been given (the CLI's range)."""
    if key not in data:
        return None
    a = np.asarray(data[key])
    text = key == "time_scheme"
    if a.shape != () or a.dtype.kind not in ("U" if text else "iuf"):
        kind = "one string" if text else "one number"
        raise FieldError(f"--restart: {path}'s {key} must be {kind}, got {shown_array(a)}")
    value = str(a) if text else float(a)
    if text:
        ok, allowed = value in TIME_SCHEMES, f"one of {', '.join(TIME_SCHEMES)}"
    elif key == "dt":
        ok, allowed = math.isfinite(value) and value >= DT_MIN, f"a finite number >= {DT_MIN:g}"
    else:
        low, high = RANGES[key]
        ok, allowed = low <= value <= high, f"a finite number in [{low:g}, {high:g}]"
    if not ok:
        option = "--dt" if key == "dt" else CHECKED[key]
        raise FieldError(
            f"--restart: {path} is a damaged step file: its {key} must be {allowed} (as "
            f"{option}), got {shown_array(a)}"
        )
    return value


def _same(old: float | str, new: float | str) -> bool:
    if isinstance(old, str) or isinstance(new, str):
        return old == new
    return math.isclose(old, new, rel_tol=1e-9)


def _shown(v: float | str) -> str:
    return v if isinstance(v, str) else f"{v:.6g}"


def recorded_dt(path: Path, data: dict[str, np.ndarray]) -> float | None:
    """The step the step file's run ran at, or None (a file from before hunt 75)."""
    dt = _value(path, data, "dt")
    return None if dt is None else float(dt)


def check_restart(
    path: Path, data: dict[str, np.ndarray], now: dict[str, Any], dt_given: bool
) -> None:
    """FieldError when the step file `path` (its arrays `data`) was written with other
    physics than `now` (`physics(...)`); see the module docstring."""
    for key, option in CHECKED.items():
        old, new = _value(path, data, key), now[key]
        if old is None or new is None or _same(old, new):
            continue
        raise FieldError(
            f"--restart: {path} was run with {option} {_shown(old)}; this run's is "
            f"{_shown(new)} (restart with {option} {_shown(old)}, or give a new --out)"
        )
    old_dt = recorded_dt(path, data)
    if old_dt is None or dt_given or _same(old_dt, now["dt"]):
        return
    raise FieldError(
        f"--restart: {path} was run with --dt {_shown(old_dt)}; this run's default step is "
        f"{_shown(now['dt'])} (give --dt {_shown(old_dt)} to continue it, another --dt to "
        "change it on purpose, or a new --out)"
    )
