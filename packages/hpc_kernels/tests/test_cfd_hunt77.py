"""Hunt 77 in `run_cfd` (the shell of `wse hpc cfd`), as a CFD engineer found it. Broken before:

- a restart that ran no step (`steps=0`, a new `dt`) rewrote the step file it had read,
  recording a dt the state was never run at, and the next restart was refused for it;
- the output cadence counted from the restart: 30 steps at `output_every=20`, then 30 more
  restarted, wrote steps 20, 30, 50, 60, where OpenFOAM's writeInterval and LAMMPS's
  `dump N` write the multiples of the absolute step (and the last): 20, 30, 40, 60;
- `run_cfd` took a str `out_dir` and failed (AttributeError) only after running every step,
  `grid=(8, 8)` was an IndexError, `spec="wse2"` an AttributeError, `grid=(8.0, 8, 1)` ran
  and `ra=1e-100` ran 5.9 s, then "blew up ... give a smaller --dt".

Oracles: the files on disk (their names, their bytes, the dt they record), an uninterrupted
run of the same steps (a restart equals it bit for bit), the CLI's ranges as declared
(`wse hpc cfd --help`), and a refusal raised before the case is built (`_build` replaced by
one that fails the test).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pytest
from wse_core import PRESETS
from wse_hpc.fields import FieldError, runs
from wse_hpc.fields.runs import CfdConfig, run_cfd

pytestmark = pytest.mark.timeout(300)
KW = dict(case="cavity", grid=(8, 8, 1), spec=PRESETS["small"])


def _names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def _arrays(path: Path) -> dict[str, np.ndarray]:
    with np.load(path) as z:
        return dict(z)


def _same(a: Path, b: Path) -> None:
    got, want = _arrays(a), _arrays(b)
    assert sorted(got) == sorted(want)
    for name in "uvwp":
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


# -- 1. a restart of no step writes nothing ------------------------------------------------
def test_a_restart_of_no_step_writes_nothing_and_the_next_restart_runs(tmp_path):
    out = tmp_path / "r"
    first = run_cfd(CfdConfig(steps=4, out_dir=out, **KW))
    dt = first.report.extra["dt"]
    step4 = out / "step_0000004.npz"
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    idle = run_cfd(CfdConfig(steps=0, out_dir=out, restart=True, dt=dt / 2, **KW))
    assert idle.written == () and idle.report.extra["steps"] == 0
    assert idle.report.extra["step_files"] == 0 and idle.report.predicted_s == 0
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # untouched
    assert float(_arrays(step4)["dt"]) == dt  # the dt its state was run at
    # the next restart, --dt left out, continues it (it was refused: "was run with --dt")
    run_cfd(CfdConfig(steps=4, out_dir=out, restart=True, **KW))
    straight = tmp_path / "s"
    run_cfd(CfdConfig(steps=8, out_dir=straight, **KW))
    _same(out / "step_0000008.npz", straight / "step_0000008.npz")


def test_a_new_run_of_no_step_still_writes_its_initial_state(tmp_path):
    """Not a restart: step 0 is the run's initial state (OpenFOAM's 0/), written as before."""
    run = run_cfd(CfdConfig(steps=0, out_dir=tmp_path, **KW))
    assert _names(tmp_path) == ["step_0000000.npz", "step_0000000.vtk"]
    assert [p.name for p in run.written] == _names(tmp_path)
    assert np.abs(_arrays(tmp_path / "step_0000000.npz")["u"]).max() == 0  # at rest


# -- 2. the output cadence counts the absolute step ----------------------------------------
def test_output_every_writes_multiples_of_the_absolute_step_across_a_restart(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    kw = dict(output_every=20, **KW)
    straight = run_cfd(CfdConfig(steps=60, out_dir=a, **kw))
    assert [p.name for p in straight.written[::2]] == [f"step_{n:07d}.npz" for n in (20, 40, 60)]
    run_cfd(CfdConfig(steps=30, out_dir=b, **kw))  # 20, and the last: 30
    again = run_cfd(CfdConfig(steps=30, out_dir=b, restart=True, **kw))
    assert [p.name for p in again.written] == [
        "step_0000040.npz", "step_0000040.vtk", "step_0000060.npz", "step_0000060.vtk",
    ]  # fmt: skip
    steps = sorted(int(p.stem[5:]) for p in b.glob("*.npz"))
    assert steps == [20, 30, 40, 60]
    assert sorted(int(p.stem[5:]) for p in b.glob("*.vtk")) == steps
    for n in (20, 40, 60):  # chunks of 10 + 20 after the restart, 20 + 20 + 20 straight
        _same(b / f"step_{n:07d}.npz", a / f"step_{n:07d}.npz")
    assert again.report.extra["step_files"] == 2


# -- 3. the API checks its settings up front ------------------------------------------------
@pytest.fixture
def unbuilt(monkeypatch):
    """`run_cfd` with a case build that fails the test: a refusal must come before it."""

    def build(cfg):
        raise AssertionError(f"the case was built for {cfg}")

    monkeypatch.setattr(runs, "_build", build)


GRID = "grid must be three positive integers (NX, NY, NZ; NZ 1: 2D), got "


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"grid": (8, 8)}, GRID + "(8, 8)"),
        ({"grid": (8.0, 8, 1)}, GRID + "(8.0, 8, 1)"),
        ({"grid": (0, 8, 1)}, GRID + "(0, 8, 1)"),
        ({"grid": (True, 8, 1)}, GRID + "(True, 8, 1)"),
        ({"grid": "8 8 1"}, GRID + "'8 8 1'"),
        ({"spec": "wse2"},
         "spec must be a WaferSpec (wse_core.preset(NAME) gives one), got str 'wse2'"),
        ({"ra": 1e-100}, "ra must be a finite number in [1, 1e+17] (as --ra), got 1e-100"),
        ({"ra": 1e18}, "ra must be a finite number in [1, 1e+17] (as --ra), got 1e+18"),
        ({"pr": 1e-7}, "pr must be a finite number in [1e-06, 1e+06] (as --pr), got 1e-07"),
        ({"aspect": 1e4},
         "aspect must be a finite number in [0.001, 1000] (as --aspect), got 10000.0"),
        ({"re": 1e10},
         "re must be a finite number in [0.001, 1e+09] (as --re), got 10000000000.0"),
        ({"dt": 1e-10},
         "dt must be a finite number >= 1e-09 (None: the case's default), got 1e-10"),
        ({"case": "cavty"},
         "unknown case 'cavty' (did you mean 'cavity'?); use one of rayleigh-benard, cavity"),
        ({"time_scheme": "rk4"}, "unknown time_scheme 'rk4'; use 'euler' or 'rk3'"),
        ({"out_dir": 5},
         "out_dir must be a folder's path (a str or pathlib.Path) or None, got int 5"),
    ],
)  # fmt: skip
def test_a_bad_setting_is_refused_before_the_case_is_built(unbuilt, kw, message):
    cfg = CfdConfig(**{**KW, "steps": 300, **kw})
    with pytest.raises(FieldError, match=f"^{re.escape(message)}$"):
        run_cfd(cfg)


def test_the_ranges_are_the_cli_ones_and_their_ends_are_taken(unbuilt):
    """Each range's ends pass the checks (they reach the build); the CLI declares the same
    ranges (apps/cli/tests/test_cfd_cli_hunt77.py holds the two equal)."""
    from wse_hpc.fields.run_config import DT_MIN, RANGES

    for name, ends in RANGES.items():
        for value in ends:
            with pytest.raises(AssertionError, match="the case was built"):
                run_cfd(CfdConfig(**{**KW, "steps": 1, name: value}))
    with pytest.raises(AssertionError, match="the case was built"):
        run_cfd(CfdConfig(**{**KW, "steps": 1, "dt": DT_MIN}))


class _Folder(os.PathLike):
    def __init__(self, path: Path) -> None:
        self.path = path

    def __fspath__(self) -> str:
        return str(self.path)


@pytest.mark.parametrize("kind", [str, _Folder], ids=["str", "PathLike"])
def test_out_dir_as_a_str_or_pathlike_writes_what_a_path_does(tmp_path, kind):
    """The round trip: the same run into a Path and into a str / PathLike folder writes the
    same files, the same arrays; numpy integers for the grid are taken."""
    grid = tuple(np.int64(n) for n in KW["grid"])
    base = {**KW, "grid": grid, "steps": 3}
    want = run_cfd(CfdConfig(out_dir=tmp_path / "p", **base))
    got = run_cfd(CfdConfig(out_dir=kind(tmp_path / "s"), **base))
    assert isinstance(got.config.out_dir, Path) and got.config.grid == (8, 8, 1)
    assert _names(tmp_path / "s") == _names(tmp_path / "p") == [p.name for p in want.written]
    _same(tmp_path / "s" / "step_0000003.npz", tmp_path / "p" / "step_0000003.npz")
    again = run_cfd(CfdConfig(out_dir=kind(tmp_path / "s"), restart=True, **base))
    assert again.report.extra["restarted_from_step"] == 3


def test_the_limits_of_the_cli_bind_the_api(unbuilt, tmp_path):
    """`--steps` past time_steps and `--output-every` writing past step_files are refused by
    the CLI; `run_cfd` refuses them too (wse_core.host.limits: the one table), unbuilt."""
    from wse_core.host.limits import LimitError, limit

    with pytest.raises(LimitError, match="time_steps|TIME_STEPS"):
        run_cfd(CfdConfig(**{**KW, "steps": limit("time_steps") + 1}))
    files = limit("step_files")
    cfg = CfdConfig(**{**KW, "steps": files, "output_every": 1, "out_dir": tmp_path / "o"})
    with pytest.raises(LimitError, match="step_files|STEP_FILES"):
        run_cfd(cfg)  # steps // output_every + 1 files at most, as the CLI counts them
    assert not (tmp_path / "o").exists()
