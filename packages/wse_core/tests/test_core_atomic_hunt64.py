"""Hunt 64 on `wse_core.host.atomic` and `write_experiment`. Broken before:

- `atomic_path` wrote in place into anything that was not a regular file: a FIFO blocked the
  writer for ever, a folder was an IsADirectoryError traceback (`experiments run` after the
  run, with half the results written).
- an OSError of the writer (`ulimit -f`: "File too large") named no file, so the CLI's line
  was "Error: cannot write: File too large".
- SIGTERM (SLURM, `timeout`, `kill`) while a file was written left its `.NAME.xxxx.part.X`.
- `write_experiment` wrote its files one by one: a run stopped at figure.png left its new
  tables beside an older run's figure; a figure the new run does not draw stayed there.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import threading

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from wse_core.errors import WseError  # noqa: E402
from wse_core.host import atomic  # noqa: E402
from wse_core.host.atomic import atomic_path, write_atomically  # noqa: E402
from wse_core.studies.experiment import ExperimentResult, PredictionRow, write_experiment  # noqa: E402

pytestmark = pytest.mark.timeout(60)  # a FIFO opened for writing blocked for ever


def test_a_fifo_a_folder_or_a_device_is_refused_and_left_as_it_was(tmp_path):
    fifo, folder = tmp_path / "t.md", tmp_path / "r.json"
    os.mkfifo(fifo)
    folder.mkdir()
    (folder / "keep").write_text("mine")
    for path, kind in ((fifo, "a FIFO"), (folder, "a folder"), ("/dev/zero", "a device")):
        with pytest.raises(WseError) as e:
            write_atomically(path, "new")
        assert str(e.value) == (
            f"cannot write {path}: it is {kind}, not a regular file; remove it or give another name"
        )
    assert fifo.is_fifo() and (folder / "keep").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json", "t.md"]
    with atomic_path(os.devnull) as tmp:  # /dev/null alone is written in place, as before
        assert str(tmp) == os.devnull


def test_an_os_error_of_the_writer_names_the_file_not_its_temporary(tmp_path):
    path = tmp_path / "figure.png"
    path.write_bytes(b"old")
    with pytest.raises(OSError) as e, atomic_path(path) as tmp:
        tmp.write_bytes(b"half")
        raise OSError(errno.EFBIG, "File too large")  # what a write past `ulimit -f` raises
    assert e.value.filename == str(path) and str(e.value).endswith(f"File too large: '{path}'")
    assert path.read_bytes() == b"old" and os.listdir(tmp_path) == ["figure.png"]


WRITER = """
import sys, time
from wse_core.host.atomic import atomic_path
with atomic_path(sys.argv[1]) as tmp:
    tmp.write_bytes(b"half")
    print("writing", flush=True)
    time.sleep(60)
"""


def test_sigterm_while_writing_removes_the_temporary_file_and_stops_as_sigterm_does(tmp_path):
    path = tmp_path / "out.png"
    path.write_bytes(b"old")
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdout.readline() == "writing\n"
    assert len(os.listdir(tmp_path)) == 2  # the file and its .part file
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGTERM  # as SIGTERM's default: 143 in a shell
    assert err == "stopped (SIGTERM); the files being written were left as they were\n"
    assert os.listdir(tmp_path) == ["out.png"] and path.read_bytes() == b"old"


def test_the_sigterm_handler_is_held_only_while_writing_and_never_replaces_one(tmp_path):
    before = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        with atomic_path(tmp_path / "a") as tmp:
            tmp.write_text("a")
            assert signal.getsignal(signal.SIGTERM) is atomic._on_stop
            write_atomically(tmp_path / "b", "b")  # nested: the outer write keeps it
            assert signal.getsignal(signal.SIGTERM) is atomic._on_stop
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL

        def own(signum, frame):  # a server's, `wse launch`'s
            pass

        signal.signal(signal.SIGTERM, own)
        with atomic_path(tmp_path / "c") as tmp:
            tmp.write_text("c")
            assert signal.getsignal(signal.SIGTERM) is own
        assert signal.getsignal(signal.SIGTERM) is own
    finally:
        signal.signal(signal.SIGTERM, before)
    done = []  # a thread may not set a handler: its write works all the same
    t = threading.Thread(target=lambda: done.append(write_atomically(tmp_path / "d", "d")))
    t.start()
    t.join()
    assert done and (tmp_path / "d").read_text() == "d"
    assert sorted(os.listdir(tmp_path)) == ["a", "b", "c", "d"]


def _result(seed: int, **figures) -> ExperimentResult:
    row = PredictionRow("t", float(seed + 1), "s", {"case": "x"})
    figure = figures.pop("figure", None)
    return ExperimentResult("exp", seed, {}, [], [row], figure, extra_figures=figures)


def _figure() -> plt.Figure:
    fig, ax = plt.subplots(figsize=(2, 2))
    ax.plot([0, 1])
    return fig


def _too_large(*args, **kwargs):
    raise OSError(errno.EFBIG, "File too large")


def test_an_experiment_is_written_whole_or_leaves_the_older_run_as_it_was(tmp_path):
    folder = write_experiment(_result(0, figure=_figure()), tmp_path)
    (folder / "sweep_clock_hz.md").write_text("a sweep")  # a sweep's file is no run's
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    assert set(before) == {"results.json", "table.csv", "table.md", "figure.png",
                           "sweep_clock_hz.md"}  # fmt: skip
    fig = _figure()
    fig.savefig = _too_large  # `ulimit -f` stops the run at its figure
    with pytest.raises(OSError) as e:
        write_experiment(_result(1, figure=fig), tmp_path)
    assert e.value.filename == str(folder / "figure.png")
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before  # no new table either

    bad = _figure()
    bad.savefig = _too_large
    with pytest.raises(OSError):  # a first run that fails leaves no folder
        write_experiment(ExperimentResult("new", 0, {}, [], [], bad), tmp_path)
    assert not (tmp_path / "new").exists()


def test_a_figure_the_new_run_does_not_draw_is_removed(tmp_path):
    folder = write_experiment(_result(0, figure=_figure(), per_pe=_figure()), tmp_path)
    (folder / "sweep_clock_hz.csv").write_text("a sweep")
    assert {"figure.png", "per_pe.png"} <= set(os.listdir(folder))
    write_experiment(_result(1, figure=_figure()), tmp_path)
    assert sorted(os.listdir(folder)) == ["figure.png", "results.json", "sweep_clock_hz.csv",
                                          "table.csv", "table.md"]  # fmt: skip
    assert '"seed": 1' in (folder / "results.json").read_text()
