"""`wse hpc md --out` when its surroundings fail mid-run, hunt 69. Before the fixes:
- an existing --out that could not be replaced at the end (its folder made read-only, --out
  made a folder) was a 65-line traceback (`os.replace` unguarded), the `.NAME.part` left;
- SIGHUP (a closed terminal, a dropped ssh) exited 129 with nothing said and left a
  multi-MB `.NAME.part` beside an existing --out (only SIGTERM and Ctrl-C were handled);
- `| head -1` stopped the run at its next thermo row, exit 1 and nothing said;
- a new --out removed mid-run was made again without its first frames (exit 0, `wrote`); one
  replaced by a folder was said to keep the frames that were gone.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import typer
from wse_cli.testing import clean_env

pytestmark = pytest.mark.timeout(300)
LATTICE = ["--lattice", "fcc", "--element", "Cu", "--a", "3.615", "--cells", "4", "4", "4"]

# `wse ARGS` as the console script runs it; SIGINT and SIGHUP as a terminal's (a background
# job inherits SIGINT ignored, nohup SIGHUP)
PRELUDE = """import runpy, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
signal.signal(signal.SIGHUP, signal.SIG_DFL)
sys.argv = ["wse", *sys.argv[1:]]
runpy.run_module("wse_cli", run_name="__main__", alter_sys=True)
"""


def _md(pot: Path, out: Path, steps: int, stdout=subprocess.DEVNULL) -> subprocess.Popen:
    args = ["hpc", "md", *LATTICE, "--potential", pot, "--preset", "small", "--steps", steps,
            "--thermo-every", "10", "--temperature-K", "300", "--out", out]  # fmt: skip
    return subprocess.Popen([sys.executable, "-c", PRELUDE, *map(str, args)], stdout=stdout,
                            stderr=subprocess.PIPE, text=True, env=clean_env())  # fmt: skip


def _frame():
    from wse_hpc.md.lattice import crystal

    return crystal("fcc", "Cu", 3.615, (1, 1, 1))  # 4 atoms


def _steps(path: Path) -> list[int]:
    """The step of each whole frame of the trajectory at `path`."""
    from wse_hpc.md import read_xyz

    read_xyz(path)  # whole frames only
    return [int(m) for m in re.findall(r" step=(\d+) ", path.read_text())]


# -- hole 11: the file the frames go to, removed or replaced mid-run ---------------------------
@pytest.mark.parametrize("how", ["removed", "a folder"])
def test_a_new_out_removed_mid_run_stops_it_saying_the_frames_are_gone(tmp_path, how):
    from wse_cli.commands.hpc_md_trajectory import Trajectory
    from wse_core.errors import RunFault

    out = tmp_path / "n.xyz"
    traj = Trajectory(out)
    with pytest.raises(RunFault) as e, traj.kept():
        traj.write(0, _frame())
        traj.write(10, _frame())
        out.unlink()
        if how == "a folder":
            out.mkdir()
        traj.write(20, _frame())
    # before: made again with the frames from step 20 on, exit 0 (or, a folder there, "it
    # keeps the 2 whole frames up to step 10", which were gone)
    assert str(e.value) == (
        f"--out {out} was removed or replaced while the run wrote it (seen at step 20): the 2 "
        "frames written up to step 10 are gone; the run was stopped"
    )
    assert out.is_dir() if how == "a folder" else not out.exists()


# -- hole 4: an existing --out that cannot be replaced at the end ------------------------------
def test_an_existing_out_that_cannot_be_replaced_names_the_part_file(tmp_path):
    from wse_cli.commands.hpc_md_trajectory import Trajectory
    from wse_core.errors import RunFault

    out = tmp_path / "e.xyz"
    out.write_text("an earlier trajectory\n")
    traj = Trajectory(out)
    with pytest.raises(RunFault) as e, traj.kept():
        traj.write(0, _frame())
        traj.write(10, _frame())
        out.unlink()
        out.mkdir()  # as the hunt's `rm d/e.xyz; mkdir d/e.xyz` (root passes a read-only folder)
    part = tmp_path / ".e.xyz.part"
    # before: IsADirectoryError (PermissionError) from `os.replace`, a 65-line traceback
    assert str(e.value) == (
        f"--out {out}: cannot replace it with the new trajectory (Is a directory); the 2 whole "
        f"frames up to step 10 are in {part}"
    )
    assert _steps(part) == [0, 10]


# -- hole 5: SIGHUP keeps the frames as SIGTERM does -------------------------------------------
def test_sighup_keeps_the_frames_under_an_existing_out(tmp_path, capsys):
    from wse_cli.commands.hpc_md_trajectory import Trajectory, _raise_stopped

    out = tmp_path / "e.xyz"
    out.write_text("an earlier trajectory\n")
    traj = Trajectory(out)
    with pytest.raises(typer.Exit) as e, traj.kept():
        traj.write(0, _frame())
        traj.write(10, _frame())
        traj.reached(10)
        assert signal.getsignal(signal.SIGHUP) is _raise_stopped  # else the kill ends pytest
        os.kill(os.getpid(), signal.SIGHUP)
        time.sleep(5)  # the handler raises here
    assert e.value.exit_code == 129 and signal.getsignal(signal.SIGHUP) == signal.SIG_DFL
    assert capsys.readouterr().err == (
        f"stopped by SIGHUP after step 10; --out {out} keeps the 2 frames up to step 10, as "
        "LAMMPS keeps its dump\n"
    )
    assert _steps(out) == [0, 10] and sorted(os.listdir(tmp_path)) == ["e.xyz"]


def test_sighup_to_the_wse_process_keeps_the_frames_and_says_so(tmp_path, cu):
    out = tmp_path / "e.xyz"
    out.write_text("an earlier trajectory\n")
    proc = _md(cu, out, 100_000)
    try:
        part = tmp_path / ".e.xyz.part"
        t0 = time.monotonic()
        while not (part.exists() and len(_steps_so_far(part)) >= 2):
            assert proc.poll() is None and time.monotonic() - t0 < 200, proc.stderr.read()
            time.sleep(0.05)
        proc.send_signal(signal.SIGHUP)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    # before: exit 129, nothing said, a growing `.e.xyz.part` left and e.xyz as it was
    line = err.strip().splitlines()[-1]
    found = re.fullmatch(rf"stopped by SIGHUP after step [\d,]+; --out {re.escape(str(out))} "
                         r"keeps the ([\d,]+) frames up to step ([\d,]+), as LAMMPS keeps its "
                         r"dump", line)  # fmt: skip
    assert proc.returncode == 129 and found and err.count("stopped") == 1, err[-2000:]
    steps = _steps(out)
    assert (len(steps), steps[-1]) == (int(found[1].replace(",", "")), int(found[2]))
    assert sorted(os.listdir(tmp_path)) == ["e.xyz"]


def _steps_so_far(path: Path) -> list[str]:
    return re.findall(r" step=(\d+) ", path.read_text(errors="replace"))


# -- hole 10: a closed stdout (`| head -1`) ------------------------------------------------------
def test_a_closed_stdout_stops_the_run_keeping_its_frames_and_says_so(tmp_path, cu):
    out = tmp_path / "t.xyz"
    proc = _md(cu, out, 3000, stdout=subprocess.PIPE)
    try:
        for row in proc.stdout:  # `| head`: the lines up to step 20's row, then the pipe closed
            if row.split()[:1] == ["20"]:
                break
        proc.stdout.close()
        err = proc.stderr.read()
        proc.wait(timeout=120)
    finally:
        proc.kill()
    # before: exit 1 and nothing said
    line = err.strip().splitlines()[-1]
    found = re.fullmatch(rf"stopped by a closed stdout \(broken pipe\) after step [\d,]+; --out "
                         rf"{re.escape(str(out))} keeps the ([\d,]+) frames up to step ([\d,]+), "
                         r"as LAMMPS keeps its dump", line)  # fmt: skip
    assert proc.returncode == 141 and found and "Traceback" not in err, err[-2000:]
    steps = _steps(out)
    assert (len(steps), steps[-1]) == (int(found[1].replace(",", "")), int(found[2]))
    assert 20 <= steps[-1] < 3000  # stopped, not run to its end
