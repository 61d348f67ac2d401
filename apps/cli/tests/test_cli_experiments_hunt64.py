"""Hunt 64 on `wse experiments run`. Broken before:

- only `--out/NAME` itself was checked: a folder at `NAME/results.json` was an
  IsADirectoryError traceback after the whole run (exit 1), a FIFO at `NAME/table.md` hung
  for ever after the run with results.json and table.csv already new; `--sweep`'s
  `sweep_KEY.md` likewise.
- under `ulimit -f` the run ended "Error: cannot write: File too large", naming no file, and
  left its new results.json, table.csv and table.md beside the older run's figure.png.
"""

from __future__ import annotations

import os
import subprocess
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import typer  # noqa: E402
from wse_cli.app import app  # noqa: E402
from wse_cli.commands import experiments  # noqa: E402
from wse_cli.testing import clean_env, invoke, refused_in_one_line  # noqa: E402
from wse_core.cost.reads import read  # noqa: E402
from wse_core.studies.experiment import ExperimentResult, PredictionRow, write_experiment  # noqa: E402

pytestmark = pytest.mark.timeout(120)  # a FIFO hung the writer for ever
ROOT = typer.main.get_command(app)


@pytest.fixture
def never_run(monkeypatch):
    """The experiment, standing in for wafer-yield: the refusals come before it runs."""
    runs = []
    monkeypatch.setattr(experiments, "load", lambda name: lambda **kw: runs.append(kw))
    return runs


@pytest.mark.parametrize(
    ("entry", "kind", "args"),
    [
        ("results.json", "a folder", []),
        ("table.md", "a FIFO", []),
        ("mechanisms.png", "a FIFO", []),
        ("old.png", "a folder", []),  # a figure this run may replace
        ("sweep_clock_hz.md", "a FIFO", ["--sweep", "clock_hz=1e9,2e9"]),
        ("sweep_clock_hz.csv", "a folder", ["--sweep", "clock_hz"]),
    ],
)
def test_an_entry_that_is_no_file_is_refused_before_the_run(tmp_path, never_run, entry, kind,
                                                            args):  # fmt: skip
    folder = tmp_path / "d2" / "wafer-yield"
    folder.mkdir(parents=True)
    (os.mkfifo if kind == "a FIFO" else os.mkdir)(folder / entry)
    line = refused_in_one_line(
        ROOT, ["experiments", "run", "wafer-yield", "--quick", "--out", tmp_path / "d2", *args],
        f"holds wafer-yield/{entry}",
    )  # fmt: skip
    assert line == (f"Error: --out {tmp_path / 'd2'} holds wafer-yield/{entry}, which is {kind}, "
                    "not a regular file; remove it or give another --out")  # fmt: skip
    assert never_run == [] and os.listdir(folder) == [entry]


def fake(*, quick: bool, seed: int) -> ExperimentResult:
    """An experiment standing in for wafer-yield (its sweep takes the quick run's rows); it
    reads clock_hz, as a wafer's prediction does (a sweep of a key nothing reads is refused)."""
    read("clock_hz", 1e9)
    return ExperimentResult("wafer-yield", seed, {}, [], [PredictionRow("t", 1.0, "s", {})])


def test_a_sweep_passes_over_a_picture_it_does_not_write(tmp_path, monkeypatch):
    (tmp_path / "wafer-yield" / "old.png").mkdir(parents=True)  # a run's figure: no sweep's
    monkeypatch.setattr(experiments, "load", lambda name: fake)
    args = ["experiments", "run", "wafer-yield", "--out", tmp_path, "--sweep", "clock_hz=1e9,2e9"]
    code, output = invoke(ROOT, args)
    assert code == 0, output
    assert sorted(os.listdir(tmp_path / "wafer-yield")) == [
        "old.png", "sweep_clock_hz.csv", "sweep_clock_hz.md"]  # fmt: skip


# `wse ARGS` under a file-size limit (`ulimit -f`), set in the child: no preexec_fn fork of
# this process, whose JAX threads could deadlock it
LIMITED = """import resource, runpy, sys
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]),) * 2)
sys.argv = ["wse", *sys.argv[2:]]
runpy.run_module("wse_cli", run_name="__main__", alter_sys=True)
"""


def test_a_file_size_limit_names_the_file_and_leaves_the_older_run_whole(tmp_path):
    fig, ax = plt.subplots(figsize=(2, 2))
    ax.plot([0, 1])
    old = ExperimentResult("wafer-yield", 7, {}, [], [PredictionRow("t", 1.0, "s", {})], fig)
    folder = write_experiment(old, tmp_path / "o")
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    args = ["experiments", "run", "wafer-yield", "--quick", "--out", "o"]
    done = subprocess.run([sys.executable, "-c", LIMITED, "40000", *args], cwd=tmp_path,
                          env=clean_env(), capture_output=True, text=True, timeout=110)  # fmt: skip
    # each table (results.json ~18 kB the largest) fits in 40 kB, the figure (~88 kB) does not
    assert done.returncode == 1, done.stderr[-2000:]
    assert done.stderr == "Error: cannot write o/wafer-yield/figure.png: File too large\n"
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
