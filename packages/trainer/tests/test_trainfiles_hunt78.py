"""Hunt 78's `wse train` run-folder holes at resume (tag trainfiles78).

Before the fixes:
- `<run>/train/params_train.yaml` was written by a plain `write_text`: a symlink there
  overwrote the file it named (rc 0), a FIFO hung the run, a folder was a 64-line
  IsADirectoryError and a kill mid-write left half a file;
- an entry named `events.out.tfevents.*` in train/ or eval/ that was a FIFO hung a resume
  (killed at 300 s), a folder or a dangling link was a 72-line traceback; event files were
  read whole with no bound;
- params refusals showed Python reprs: `got datetime.date(2020, 1, 1)`, `got b'hello'`,
  `got True`.
The oracles: the outside file's bytes, os.stat kinds, a subprocess's exit status, lines and
time, YAML's and JSON's own reading of the value a message shows.
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml
from wse_core.errors import shown_value
from wse_trainer.config import ConfigError, load_config
from wse_trainer.run_entries import write_entry
from wse_trainer.run_folder import check_model_dir
from wse_trainer.tensorboard_events import EventFile, trim_events

OUTSIDE = b"someone's file\n"


def _run_folder(tmp_path: Path) -> Path:
    """A run folder a resume takes for one (metrics.jsonl, train/ and eval/)."""
    run = tmp_path / "run"
    for mode in ("train", "eval"):
        (run / mode).mkdir(parents=True)
    (run / "metrics.jsonl").write_text("")
    (run / "train" / "params_train.yaml").write_text("runconfig: {}\n")
    return run


def _outside(tmp_path: Path) -> Path:
    path = tmp_path / "p.txt"
    path.write_bytes(OUTSIDE)
    return path


def _make(kind: str, path: Path, tmp_path: Path) -> None:
    """`path` made as `kind`: a FIFO, a folder, a link to a regular file, a dangling link
    or a socket (what a hostile user can leave in a run folder)."""
    path.unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    elif kind == "link":
        path.symlink_to(_outside(tmp_path))
    elif kind == "dangling":
        path.symlink_to(tmp_path / "nothing-there")
    else:
        sock = socket.socket(socket.AF_UNIX)
        here = os.getcwd()
        os.chdir(path.parent)  # bound by its short name: a socket's path holds <= 107 bytes
        try:
            sock.bind(path.name)
        finally:
            os.chdir(here)
        sock.close()


KINDS = {"fifo": "is a FIFO, not a regular file", "folder": "is a folder, not a regular file",
         "link": "is a symlink (to ", "dangling": "is a symlink (to ",
         "socket": "is a socket, not a regular file"}  # fmt: skip
EVENTS = "events.out.tfevents.9.host.1"
ENTRIES = ["train/params_train.yaml", "eval/params_eval.yaml", f"train/{EVENTS}.000",
           f"eval/{EVENTS}.001"]  # fmt: skip


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_special_params_or_event_file_is_refused_before_the_run_in_one_line(
    tmp_path, entry, kind
):
    run = _run_folder(tmp_path)
    _make(kind, run / entry, tmp_path)
    before = os.lstat(run / entry).st_mode
    with pytest.raises(ConfigError) as e:
        check_model_dir(run)
    line = str(e.value)
    assert "\n" not in line and line.startswith(f"{str(run / entry)!r} {KINDS[kind]}")
    assert line.endswith("; move it away, or give a new model_dir (-o)")
    assert os.lstat(run / entry).st_mode == before  # the entry left as it was
    if kind == "link":
        assert (tmp_path / "p.txt").read_bytes() == OUTSIDE


def test_a_regular_params_and_event_file_pass(tmp_path):
    run = _run_folder(tmp_path)
    EventFile(run / "train").close()
    (run / "eval" / "params_eval.yaml").write_text("a: 1\n")
    check_model_dir(run)


def test_params_are_never_written_through_a_link(tmp_path):
    run = _run_folder(tmp_path)
    path = run / "train" / "params_train.yaml"
    _make("link", path, tmp_path)
    with pytest.raises(ConfigError, match="is a symlink"):
        write_entry(path, "runconfig: {max_steps: 3}\n")
    assert (tmp_path / "p.txt").read_bytes() == OUTSIDE
    assert path.is_symlink()


_FULL_DISK = """
import resource, sys
from pathlib import Path
from wse_trainer.run_entries import write_entry
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))  # a write past it: EFBIG
try:
    write_entry(Path(sys.argv[1]), "x: " + "y" * 100_000 + "\\n")
except OSError as e:
    print("refused", e.errno)
"""


def test_a_write_cut_short_leaves_the_old_params_whole(tmp_path):
    run = _run_folder(tmp_path)
    path = run / "train" / "params_train.yaml"
    old = path.read_bytes()
    out = subprocess.run([sys.executable, "-c", _FULL_DISK, str(path)], capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert out.stdout.split()[0] == "refused", out.stderr[-2000:]
    assert path.read_bytes() == old
    assert os.listdir(path.parent) == ["params_train.yaml"]  # no half-written part left


def test_params_are_written_whole_and_read_back(tmp_path):
    run = _run_folder(tmp_path)
    path = run / "eval" / "params_eval.yaml"
    settings = {"runconfig": {"max_steps": 3, "mode": "eval"}}
    write_entry(path, yaml.safe_dump(settings))
    assert yaml.safe_load(path.read_text()) == settings
    assert stat.S_ISREG(os.lstat(path).st_mode)


@pytest.mark.parametrize("kind", ["fifo", "folder", "dangling", "link"])
def test_trim_refuses_a_special_event_file_without_waiting(tmp_path, kind):
    folder = tmp_path / "train"
    folder.mkdir()
    entry = folder / "events.out.tfevents.9.host.1.000"
    _make(kind, entry, tmp_path)
    got: list[BaseException] = []

    def trim() -> None:
        try:
            trim_events(folder, 1)
        except BaseException as e:  # noqa: BLE001 (handed to the test)
            got.append(e)

    worker = threading.Thread(target=trim, daemon=True)
    worker.start()
    worker.join(timeout=30)
    assert not worker.is_alive(), "trim_events waited on the entry"
    assert isinstance(got[0], ConfigError) and "\n" not in str(got[0])
    assert str(got[0]).startswith(f"{str(entry)!r} {KINDS[kind]}")
    if kind == "link":
        assert (tmp_path / "p.txt").read_bytes() == OUTSIDE


def test_an_event_file_past_the_bound_is_left_as_it_is_with_a_note(tmp_path, monkeypatch):
    folder = tmp_path / "train"
    events = EventFile(folder)
    for step in range(1, 6):
        events.add_scalars(step, {"loss": float(step)})
    events.close()
    data = events.path.read_bytes()
    monkeypatch.setenv("WSE_LIMIT_FILE_BYTES", str(len(data) - 1))
    notes = trim_events(folder, 2)
    assert events.path.read_bytes() == data  # every step kept, past the resume's too
    assert len(notes) == 1 and f"over {len(data) - 1:,} bytes" in notes[0]
    assert "WSE_LIMIT_FILE_BYTES" in notes[0]
    monkeypatch.setenv("WSE_LIMIT_FILE_BYTES", str(len(data)))  # at the bound: trimmed
    assert trim_events(folder, 2) == [] and len(events.path.read_bytes()) < len(data)


def _wse_train(run: Path) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable,
        "-m",
        "wse_cli",
        "train",
        "tiny",
        "runconfig.max_steps=3",
        "-o",
        str(run),
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("kind", ["link", "fifo"])
def test_wse_train_resume_refuses_a_special_params_file_with_exit_2(tmp_path, kind):
    run = _run_folder(tmp_path)
    entry = run / "train" / "params_train.yaml"
    _make(kind, entry, tmp_path)
    out = _wse_train(run)  # the timeout: before, a FIFO hung it, a link trained on (rc 0)
    assert out.returncode == 2, out.stderr[-2000:]
    assert out.stderr.strip().splitlines() == [
        f"Error: {str(entry)!r} {KINDS[kind]}"
        + (f"{str(tmp_path / 'p.txt')!r}), not a regular file" if kind == "link" else "")
        + "; move it away, or give a new model_dir (-o)"
    ]
    if kind == "link":
        assert (tmp_path / "p.txt").read_bytes() == OUTSIDE
    assert stat.S_ISFIFO(os.stat(entry).st_mode) if kind == "fifo" else entry.is_symlink()


WRONG = [
    ("runconfig.max_steps=2020-01-01", datetime.date(2020, 1, 1)),
    ("optimizer.learning_rate=2020-01-01T10:00:00", datetime.datetime(2020, 1, 1, 10)),
    ("runconfig.max_steps=true", True),
    ("runconfig.max_steps=[1, true, null]", [1, True, None]),
    ("runconfig.max_steps={a: null}", {"a": None}),
]


@pytest.mark.parametrize(("override", "value"), WRONG)
def test_a_wrong_type_is_shown_as_the_file_spells_it(override, value):
    with pytest.raises(ConfigError) as e:
        load_config("tiny", [override])
    shown = str(e.value).rsplit(", got ", 1)[1]
    assert yaml.safe_load(shown) == value  # YAML reads back what the file held
    assert "datetime" not in shown and "True" not in shown and "None" not in shown


def test_binary_is_named_not_shown_as_python_bytes():
    with pytest.raises(ConfigError) as e:
        load_config("tiny", ["runconfig.sample_prompt=!!binary aGVsbG8="])
    assert str(e.value) == "runconfig.sample_prompt must be str, got binary data (5 bytes)"


@pytest.mark.parametrize("value", [True, False, None, [1, "a", None], {"k": [True]}, 3, "x"])
def test_json_values_read_back_from_their_shown_spelling(value):
    shown = shown_value(value)
    assert yaml.safe_load(shown) == value
    if not isinstance(value, str):
        assert json.loads(shown) == value
