"""Hunt 67 (the option fuzzer): output paths the up-front check let through.

Broken before:
- an output file that is there, in a folder that takes no new file (/proc/self/mem; for a
  user other than root, a writable file in a read-only folder), passed the check: the
  atomic writer, which replaces a file through a new one beside it, then failed after the
  work (`view --out`, `train --trace`, `infer bench --out`, `--trace` of `hpc tlrmvm run`,
  `hpc stencil`, `hpc cfd`: a FileNotFoundError traceback, exit 1), and such a fault in the
  writer was a traceback too;
- `hpc tlrmvm compress --out /dev/null` compressed, then failed with a TypeError traceback
  (/dev/null meant "no picture" for every output with a suffix, a required one included);
- `--png /dev/zero` (a device or FIFO, on an option that adds a suffix) wrote /dev/zero.png
  beside it: the suffix was added before the device check;
- output names holding a newline (or another control character), or of only spaces, were
  taken: `--out $'a\\nb.json'` split the one-line report, `--png ' '` wrote ' .png';
- under `umask 777`, for a user other than root with no MPLCONFIGDIR, matplotlib made its
  folders mode 000 and failed at its import (a PermissionError traceback).

Oracles: the exit code and the exact one line; the files there before, byte for byte; the
folder's entries (nothing written, nothing left).
"""

from __future__ import annotations

import os
import stat
import subprocess

import pytest
import typer
from wse_cli import outputs
from wse_cli.app import app
from wse_cli.testing import WSE, clean_env, invoke, refused_in_one_line, unprivileged
from wse_core.testing import tiny_trace

pytestmark = pytest.mark.timeout(120)
ROOT = typer.main.get_command(app)
MEM = "/proc/self/mem"
STENCIL = ["hpc", "stencil", "--kind", "jacobi", "--grid", "4", "4", "4", "--steps", "1",
           "--preset", "tiny"]  # fmt: skip
NO_NEW_FILE = (
    "cannot write {}: {} took no new file (No such file or directory); give a path in a "
    "writable folder"
)


def _replaced_line(option: str, path: str, folder: str, why: str) -> str:
    return (
        f"Error: {option} {path} cannot be written: {folder} takes no new files ({why}), and "
        "the file is replaced through a new one beside it; give a path in a writable folder"
    )


def _unprivileged() -> list[str]:
    """`wse_cli.testing.unprivileged`'s prefix; the test skips where none is at hand."""
    prefix = unprivileged()
    if prefix is None:
        pytest.skip("root, without setpriv to drop CAP_DAC_OVERRIDE")
    return prefix


# --- hole 2: a file there, in a folder that takes no new file ---------------------------------
@pytest.mark.parametrize(
    ("args", "option"),
    [(["view", "{trace}", "--out"], "--out"),
     (["train", "tiny", "--validate-only", "-o", "{tmp}/r", "--trace"], "--trace"),
     (["infer", "bench", "--url", "http://127.0.0.1:1", "-n", "1", "--out"], "--out"),
     (["hpc", "tlrmvm", "run", "--operator", "{tmp}/op.npz", "--preset", "tiny", "--trace"],
      "--trace"),
     ([*STENCIL, "--trace"], "--trace"),
     (["hpc", "cfd", "--grid", "8", "8", "1", "--trace"], "--trace")],
    ids=["view", "train", "bench", "tlrmvm run", "stencil", "cfd"],
)  # fmt: skip
def test_a_file_in_a_folder_taking_no_new_file_is_refused_before_the_work(tmp_path, args, option):
    trace = tiny_trace()[0].save(tmp_path / "t.npz")
    argv = [a.format(trace=trace, tmp=tmp_path) for a in args]
    line = refused_in_one_line(ROOT, [*argv, MEM], "takes no new files")
    assert line == _replaced_line(option, MEM, "/proc/self", "No such file or directory")
    assert sorted(os.listdir(tmp_path)) == ["t.npz"]


def test_a_writable_file_in_a_read_only_folder_is_refused_and_kept(tmp_path):
    prefix = _unprivileged()  # root's writes ignore the folder's mode
    ro = tmp_path / "ro"
    ro.mkdir()
    (ro / "a.png").write_bytes(b"before")
    ro.chmod(0o555)
    done = subprocess.run(
        [*prefix, *WSE, "wafer", "defects", "--preset", "tiny", "--png", str(ro / "a.png")],
        capture_output=True, text=True, timeout=90, env=clean_env(),
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.splitlines() == [
        _replaced_line("--png", str(ro / "a.png"), str(ro), "Permission denied")
    ]
    assert os.listdir(ro) == ["a.png"] and (ro / "a.png").read_bytes() == b"before"


def test_a_folder_taking_no_new_file_while_writing_is_one_line_exit_1(tmp_path, monkeypatch):
    # the folder refuses new files only after the check (as a mount turned read-only would)
    monkeypatch.setattr(outputs, "_probe", lambda *a, **k: None)
    trace = tiny_trace()[0].save(tmp_path / "t.npz")
    code, output = invoke(ROOT, ["view", trace, "--out", MEM])
    folder = f"/proc/{os.getpid()}"  # the writer follows the link /proc/self
    assert code == 1, output[-2000:]
    assert output.strip().splitlines()[-1] == "Error: " + NO_NEW_FILE.format(MEM, folder)
    assert "Traceback" not in output and os.listdir(tmp_path) == ["t.npz"]


# --- hole 3: /dev/null as the one file a command makes -----------------------------------------
def test_compress_refuses_dev_null_before_compressing(tmp_path):
    args = ["hpc", "tlrmvm", "compress", "--n", "64", "--nb", "16", "--out", os.devnull]
    line = refused_in_one_line(ROOT, args, "would keep nothing")
    assert line == (
        "Error: --out /dev/null would keep nothing, and this file is what the command makes; "
        "give a file name, e.g. output.npz"
    )
    assert not os.path.exists(os.devnull + ".npz")


# --- hole 6: a device or FIFO as given, before a suffix is added -------------------------------
def _zero_device(path) -> None:
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 5))  # as /dev/zero
    except PermissionError:
        pytest.skip("no mknod here")


@pytest.mark.parametrize(
    ("args", "what"),
    [(["wafer", "defects", "--preset", "tiny", "--png"], "FIFO"),
     (["wafer", "defects", "--preset", "tiny", "--png"], "device"),
     (["hpc", "tlrmvm", "compress", "--n", "64", "--nb", "16", "--out"], "FIFO")],
    ids=["png FIFO", "png device", "compress FIFO"],
)  # fmt: skip
def test_a_device_or_fifo_is_refused_not_written_beside(tmp_path, args, what):
    special = tmp_path / "z"
    os.mkfifo(special) if what == "FIFO" else _zero_device(special)
    option = args[-1]
    line = refused_in_one_line(ROOT, [*args, special], "not a regular file")
    article = "a FIFO" if what == "FIFO" else "a device"
    assert line == f"Error: {option} {special} is {article}, not a regular file; give a file name"
    assert os.listdir(tmp_path) == ["z"]


# --- hole 9: names holding a newline or a control character, or of only spaces ----------------
@pytest.mark.parametrize(
    ("args", "value", "line"),
    [(["wafer", "defects", "--preset", "tiny", "--png"], "a\nb.png",
      "--png 'a\\nb.png' contains a newline; give a file name of printable characters, "
      "e.g. output.png"),
     (["infer", "bench", "--url", "http://127.0.0.1:1", "-n", "1", "--out"], "a\nb.json",
      "--out 'a\\nb.json' contains a newline; give a file name of printable characters, "
      "e.g. output"),
     (["wafer", "defects", "--preset", "tiny", "--png"], "a\x1b[2J.png",
      "--png 'a\\x1b[2J.png' contains a control character (\\x1b); give a file name of "
      "printable characters, e.g. output.png"),
     (["hpc", "cfd", "--grid", "8", "8", "1", "--out"], "x\ny",
      "--out 'x\\ny' contains a newline; give a folder name of printable characters, e.g. out"),
     (["wafer", "defects", "--preset", "tiny", "--png"], " ",
      "--png ' ' names a file or folder of only spaces; give a file name, e.g. output.png"),
     ([*STENCIL, "--trace"], "  /t.npz",
      "--trace '  /t.npz' names a file or folder of only spaces; give a file name, "
      "e.g. output")],
    ids=["png newline", "bench newline", "png ESC", "cfd dir newline", "png space",
         "trace spaces folder"],
)  # fmt: skip
def test_an_odd_output_name_is_refused_in_one_line(tmp_path, monkeypatch, args, value, line):
    monkeypatch.chdir(tmp_path)
    assert refused_in_one_line(ROOT, [*args, value], "") == "Error: " + line
    assert os.listdir(tmp_path) == []


# --- extra: matplotlib under `umask 777` -------------------------------------------------------
def test_a_png_is_drawn_under_umask_777_without_mplconfigdir(tmp_path):
    prefix = _unprivileged()  # root's reads ignore the mode-000 folders matplotlib made
    home, work, tmp = tmp_path / "home", tmp_path / "w", tmp_path / "tmp"
    for d in (home, work, tmp):
        d.mkdir()
    env = {k: v for k, v in clean_env().items() if not k.startswith(("MPL", "XDG_"))}
    env.update(HOME=str(home), TMPDIR=str(tmp))
    done = subprocess.run(
        [*prefix, *WSE, "wafer", "defects", "--preset", "tiny", "--png", "a.png"],
        capture_output=True, text=True, timeout=90, env=env, cwd=work,
        preexec_fn=lambda: os.umask(0o777),
    )  # fmt: skip
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert (work / "a.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert os.listdir(home) == [] and os.listdir(tmp) == []  # its private folder removed
