"""Hunt 75: `run_cfd(restart=True)` continued a run with other physics without a word (a Re
100 cavity went on at Re 400, a Ra 1e4 convection at 2e4; --pr, --time-scheme and the step
alike), and neither the step files nor the report recorded them. Now each step file holds
the run's physics (ra and pr or re, time_scheme, dt), the report all of them, and a restart
that changes one is refused naming it, the step file's value and this run's; a step file
from before (none of them) is accepted as it was. Oracles: the settings the run was given
(a round trip through the step file) and the one-line refusal's values.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from wse_core import PRESETS
from wse_hpc.fields import FieldError
from wse_hpc.fields.runs import CfdConfig, run_cfd

GRIDS = {"cavity": (8, 8, 1), "rayleigh-benard": (8, 4, 1)}


def _cfd(case="cavity", **kw):
    cfg = CfdConfig(case=case, grid=GRIDS[case], spec=PRESETS["tiny"], steps=2, **kw)
    return run_cfd(cfg)


def _scalars(path):
    with np.load(path) as z:
        return {k: z[k].item() for k in z.files if z[k].shape == ()}


def test_step_files_and_report_record_the_physics(tmp_path):
    run = _cfd(re=250.0, time_scheme="rk3", dt=0.004, out_dir=tmp_path)
    x = run.report.extra
    want = {"re": 250.0, "time_scheme": "rk3", "dt": 0.004}
    assert {k: x[k] for k in want} == want
    assert x["ra"] is None and x["pr"] is None and x["aspect"] is None
    held = _scalars(tmp_path / "step_0000002.npz")
    assert {k: held[k] for k in want} == want and "ra" not in held
    rb = _cfd("rayleigh-benard", ra=3e4, pr=0.7, aspect=2.0, out_dir=tmp_path / "rb").report
    assert (rb.extra["ra"], rb.extra["pr"], rb.extra["aspect"], rb.extra["re"]) == (
        3e4, 0.7, 2.0, None,
    )  # fmt: skip
    held = _scalars(tmp_path / "rb" / "step_0000002.npz")
    assert (held["ra"], held["pr"], held["time_scheme"]) == (3e4, 0.7, "euler")
    assert held["dt"] == rb.extra["dt"] and "re" not in held


@pytest.mark.parametrize(
    ("case", "first", "then", "shown"),
    [
        ("cavity", {"re": 100.0}, {"re": 400.0}, ("--re", "100", "400")),
        ("cavity", {}, {"time_scheme": "rk3"}, ("--time-scheme", "euler", "rk3")),
        ("rayleigh-benard", {"ra": 1e4}, {"ra": 2e4}, ("--ra", "10000", "20000")),
        ("rayleigh-benard", {"pr": 1.0}, {"pr": 0.7}, ("--pr", "1", "0.7")),
    ],
)
def test_a_restart_with_other_physics_is_refused(tmp_path, case, first, then, shown):
    _cfd(case, out_dir=tmp_path, **first)
    option, old, new = shown
    path = tmp_path / "step_0000002.npz"
    message = (
        f"--restart: {path} was run with {option} {old}; this run's is {new} (restart with "
        f"{option} {old}, or give a new --out)"
    )
    with pytest.raises(FieldError, match=f"^{re.escape(message)}$"):
        _cfd(case, out_dir=tmp_path, restart=True, **then)
    assert sorted(p.name for p in tmp_path.glob("*.npz")) == ["step_0000002.npz"]


def test_a_default_step_other_than_the_runs_is_refused_a_given_one_is_kept(tmp_path):
    first = _cfd(dt=0.001, out_dir=tmp_path).report.extra
    default = _cfd(out_dir=tmp_path / "b").report.extra["dt"]
    path = tmp_path / "step_0000002.npz"
    message = (
        f"--restart: {path} was run with --dt 0.001; this run's default step is {default:.6g} "
        "(give --dt 0.001 to continue it, another --dt to change it on purpose, or a new --out)"
    )
    with pytest.raises(FieldError, match=f"^{re.escape(message)}$"):
        _cfd(out_dir=tmp_path, restart=True)
    same = _cfd(out_dir=tmp_path, restart=True, dt=0.001).report.extra
    assert same["restarted_from_dt"] == first["dt"] == same["dt"] == 0.001
    halved = _cfd(out_dir=tmp_path, restart=True, dt=0.0005).report.extra
    assert (halved["restarted_from_dt"], halved["dt"]) == (0.001, 0.0005)
    assert _scalars(tmp_path / "step_0000006.npz")["dt"] == 0.0005


def test_a_step_file_from_before_is_accepted_unchecked(tmp_path):
    _cfd(out_dir=tmp_path)
    path = tmp_path / "step_0000002.npz"
    with np.load(path) as z:
        older = {k: z[k] for k in z.files if k not in ("re", "time_scheme", "dt")}
    np.savez(path, **older)
    run = _cfd(out_dir=tmp_path, restart=True, re=400.0, dt=0.001)
    assert run.report.extra["restarted_from_step"] == 2
    assert run.report.extra["restarted_from_dt"] is None
