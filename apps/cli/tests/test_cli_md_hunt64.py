"""`wse hpc md` holes of hunt 64, end to end. Before the fixes: an ASE-written structure's
momenta were dropped (a 300 K crystal ran at `Temp 0.00000`, exit 0); SIGTERM on `--out
EXISTING` left a hidden `.NAME.part` that grew with the run and printed nothing, and Ctrl-C
kept a new --out's frames but threw an existing one's away; `ulimit -f` left half a frame
(`t.xyz line 1291: 256 atoms announced, the file ends first`) after `Error: cannot write:
File too large`, naming no file; `--steps 10000000 --thermo-every 1` started writing ~386 GB;
a Lattice of NaN tilts ran (exit 0); a setfl named `Cu_zhou04.alloy` failed as funcfl with
no word of why it was read so."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import clean_env, invoke, refused_in_one_line

pytestmark = pytest.mark.timeout(300)
ROOT = typer.main.get_command(app)
LATTICE = ["--lattice", "fcc", "--element", "Cu", "--a", "3.615", "--cells", "4", "4", "4"]


# `wse ARGS` with a setting made first in the child (no preexec_fn: forking a process that
# runs JAX's threads may deadlock): SIGINT raises KeyboardInterrupt as a terminal's Ctrl-C
# does (a job started in the background inherits it ignored), RLIMIT_FSIZE is `ulimit -f`
PRELUDE = """import resource, runpy, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
{}
sys.argv = ["wse", *sys.argv[1:]]
runpy.run_module("wse_cli", run_name="__main__", alter_sys=True)
"""


def _wse(args: list, setup: str = "") -> list[str]:
    return [sys.executable, "-c", PRELUDE.format(setup), *map(str, args)]


def _md(pot: Path, *extra) -> list:
    return ["hpc", "md", *LATTICE, "--potential", pot, "--preset", "small", *extra]


def _thermalize(atoms, temperature_K: float, kB: float) -> None:
    """Maxwell-Boltzmann momenta in ASE's units (p = sqrt(m kB T) N(0, 1))."""
    m = atoms.get_masses()[:, None]
    rng = np.random.default_rng(0)
    atoms.set_momenta(rng.normal(size=(len(atoms), 3)) * np.sqrt(m * kB * temperature_K))


def test_md_starts_an_ase_structure_at_the_temperature_ase_reads(tmp_path, cu):
    pytest.importorskip("ase")
    from ase.build import bulk
    from ase.io import read
    from ase.units import kB

    atoms = bulk("Cu", "fcc", a=3.615, cubic=True).repeat((4, 4, 4))
    _thermalize(atoms, 300.0, kB)  # as ase.md.velocitydistribution does
    atoms.write(tmp_path / "ase.xyz")  # Properties=species:S:1:pos:R:3:momenta:R:3
    args = ["hpc", "md", "--structure", tmp_path / "ase.xyz", "--potential", cu, "--steps", "0",
            "--json", "--preset", "small"]  # fmt: skip
    code, output = invoke(ROOT, args)
    assert code == 0, output
    row = json.loads(output[output.index("{") :])["thermo"][0]
    # ASE counts 3N degrees of freedom, LAMMPS (and wse) 3N - 3; fp32 kinetic energy
    n = len(atoms)
    expected = read(tmp_path / "ase.xyz").get_temperature() * 3 * n / (3 * n - 3)
    assert row["temp"] == pytest.approx(expected, rel=1e-5)  # before: 0.0


# -- SIGTERM and Ctrl-C keep the frames written so far, as LAMMPS keeps its dump --------------
def _stopped(tmp_path: Path, cu: Path, signum: int, existed: bool) -> tuple[int, str, Path]:
    """`wse hpc md --out t.xyz` stopped by `signum` once a few frames are written."""
    out = tmp_path / "t.xyz"
    if existed:
        out.write_text("an earlier trajectory\n")
    args = _md(cu, "--steps", "100000", "--thermo-every", "20", "--temperature-K", "300",
               "--out", out)  # fmt: skip
    proc = subprocess.Popen(
        _wse(args), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=clean_env()
    )
    growing = tmp_path / ".t.xyz.part" if existed else out
    t0 = time.monotonic()
    # ~34 KB a frame: past 150 KB at least 3 are whole whatever the 4th (stop 69: at 100 KB
    # the signal could land while the 3rd was written, and 2 were kept, under load)
    while not (growing.exists() and growing.stat().st_size > 150_000):
        assert proc.poll() is None and time.monotonic() - t0 < 200, "no frames came"
        time.sleep(0.05)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err, out


@pytest.mark.parametrize(
    ("signum", "existed"),
    [(signal.SIGTERM, True), (signal.SIGTERM, False), (signal.SIGINT, True)],
    ids=["SIGTERM existing", "SIGTERM new", "Ctrl-C existing"],
)
def test_md_stopped_keeps_its_frames_under_out_and_says_so(tmp_path, cu, signum, existed):
    from wse_hpc.md import read_xyz

    code, err, out = _stopped(tmp_path, cu, signum, existed)
    name = "SIGTERM" if signum == signal.SIGTERM else r"Ctrl-C \(SIGINT\)"
    line = err.strip().splitlines()[-1]
    assert code == 128 + signum and "Traceback" not in err, err[-2000:]
    found = re.fullmatch(
        rf"stopped by {name} after step ([\d,]+); --out {re.escape(str(out))} keeps the "
        r"([\d,]+) frames up to step ([\d,]+), as LAMMPS keeps its dump",
        line,
    )
    assert found, line
    frames = read_xyz(out)  # whole frames only, the old content replaced as LAMMPS's dump does
    assert len(frames) == int(found[2].replace(",", "")) >= 3
    comments = [ln for ln in out.read_text().splitlines() if ln.startswith("Lattice=")]
    assert re.search(r" step=(\d+) ", comments[-1])[1] == found[3].replace(",", "")
    assert [p.name for p in tmp_path.iterdir()] == ["t.xyz"]  # before: .t.xyz.part stayed


# -- a file-size limit: whole frames, and a line naming --out -----------------------------------
@pytest.mark.parametrize("existed", [False, True], ids=["new", "existing"])
def test_md_past_a_file_size_limit_keeps_whole_frames_and_names_out(tmp_path, cu, existed):
    from wse_hpc.md import read_xyz

    out = tmp_path / "t.xyz"
    if existed:
        out.write_text("an earlier trajectory\n")
    limit = 200 * 1024  # `ulimit -f 200`
    args = _md(cu, "--steps", "20", "--thermo-every", "2", "--temperature-K", "300",
               "--out", out)  # fmt: skip
    setup = f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))"
    done = subprocess.run(
        _wse(args, setup), capture_output=True, text=True, env=clean_env(), timeout=240
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    found = re.fullmatch(
        rf"Error: --out {re.escape(str(out))}: cannot write \(File too large\) at step (\d+); "
        r"it keeps the (\d+) whole frames up to step (\d+)",
        lines[-1],
    )
    assert found, lines[-1]
    frames = read_xyz(out)  # before: "line 1291: 256 atoms announced, the file ends first"
    assert len(frames) == int(found[2]) >= 2 and out.stat().st_size <= limit
    assert int(found[3]) == 2 * (len(frames) - 1) and int(found[1]) == int(found[3]) + 2
    assert [p.name for p in tmp_path.iterdir()] == ["t.xyz"]


# -- a trajectory past the limit xyz_bytes, refused before it starts -------------------------------
def test_md_refuses_a_trajectory_past_xyz_bytes_up_front(tmp_path, cu):
    out = tmp_path / "t.xyz"
    refused_in_one_line(
        ROOT,
        _md(cu, "--steps", "10000000", "--thermo-every", "1", "--out", out),
        # hunt 68: 11 values an atom (momenta and masses for ASE), 444,360,044,436 with 10
        "the size of the --out trajectory of --steps 10000000 --thermo-every 1 (10,000,001 "
        "frames of 256 atoms) is 487,880,048,788, over the limit of 8,589,934,592 bytes (an "
        "extended XYZ file read); set WSE_LIMIT_XYZ_BYTES to lift it",
    )
    assert list(tmp_path.iterdir()) == []


def test_md_size_bound_holds_for_a_real_trajectory(tmp_path, cu):
    # the bound refuses no more than it must: 11 frames pass under a limit of their bound,
    # and the file written stays under it
    from wse_hpc.md.xyz import frame_bytes

    bound = 11 * frame_bytes(256)
    env = {"WSE_LIMIT_XYZ_BYTES": str(bound)}
    args = _md(cu, "--steps", "10", "--thermo-every", "1", "--temperature-K", "300")
    code, output = invoke(ROOT, [*args, "--out", tmp_path / "t.xyz", "--json"], env)
    assert code == 0, output
    assert (tmp_path / "t.xyz").stat().st_size <= bound
    env = {"WSE_LIMIT_XYZ_BYTES": str(bound - 1)}
    refused_in_one_line(ROOT, [*args, "--out", tmp_path / "u.xyz"], "(11 frames of 256 atoms)",
                        env)  # fmt: skip


# -- structure and potential files ---------------------------------------------------------------
def test_md_refuses_a_lattice_of_nan_tilts(tmp_path, cu):
    from wse_hpc.md import crystal, write_xyz

    path = write_xyz(tmp_path / "c.xyz", [crystal("fcc", "Cu", 3.615, (4, 4, 4))])
    lines = path.read_text().splitlines()
    lines[1] = lines[1].replace('Lattice="14.46 0 0', 'Lattice="14.46 nan nan')
    path.write_text("\n".join(lines) + "\n")
    refused_in_one_line(
        ROOT,
        ["hpc", "md", "--structure", path, "--potential", cu, "--steps", "0"],
        'c.xyz line 2: only orthorhombic lattices are supported (Lattice="Lx 0 0 0 Ly 0 0 0 '
        "Lz\"), got '14.46 nan nan 0 14.46 0 0 0 14.46'",
    )


def test_md_says_a_potential_was_read_as_funcfl_by_its_name(tmp_path, cu):
    pot = tmp_path / "Cu_zhou04.alloy"
    pot.write_bytes(cu.read_bytes())
    refused_in_one_line(
        ROOT,
        _md(pot, "--steps", "0"),
        "Cu_zhou04.alloy line 2 field 1: 'X.' is not an integer (atomic number, mass, lattice "
        "constant, lattice); the file was read as funcfl (LAMMPS pair_style eam) by its name: "
        "name a setfl (eam/alloy) *.eam.alloy or *.setfl, a Finnis-Sinclair file (eam/fs) "
        "*.eam.fs; its line 4 '1 Cu' is a setfl's element line",
    )


# -- the trajectory's edges, without a run -------------------------------------------------------
class _DiskFull:
    """A frame whose text cannot be made: as a disk full at its first bytes."""

    num_atoms = 1

    @property
    def positions_A(self):
        raise OSError(28, "No space left on device")


@pytest.mark.parametrize("existed", [False, True], ids=["new", "existing"])
def test_a_first_frame_that_cannot_be_written_leaves_nothing_new(tmp_path, existed):
    from wse_cli.commands.hpc_md_trajectory import Trajectory
    from wse_core.errors import RunFault

    out = tmp_path / "t.xyz"
    if existed:
        out.write_text("an earlier trajectory\n")
    traj = Trajectory(out)
    with pytest.raises(RunFault) as e, traj.kept():
        traj.write(0, _DiskFull())
    assert str(e.value) == (
        f"--out {out}: cannot write (No space left on device) at step 0; no frame was written"
        + (f" (--out {out} is as it was)" if existed else "")
    )
    assert [p.name for p in tmp_path.iterdir()] == (["t.xyz"] if existed else [])
    assert not existed or out.read_text() == "an earlier trajectory\n"


def test_sigterm_before_the_first_frame_leaves_an_existing_out(tmp_path, capsys):
    import os

    from wse_cli.commands.hpc_md_trajectory import Trajectory, _raise_stopped

    out = tmp_path / "t.xyz"
    out.write_text("an earlier trajectory\n")
    traj = Trajectory(out)
    with pytest.raises(typer.Exit) as e, traj.kept():
        assert signal.getsignal(signal.SIGTERM) is _raise_stopped  # else the kill ends pytest
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises here
    assert e.value.exit_code == 143 and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    assert capsys.readouterr().err == (
        f"stopped by SIGTERM before step 0; no frame was written (--out {out} is as it was)\n"
    )
    assert out.read_text() == "an earlier trajectory\n" and len(list(tmp_path.iterdir())) == 1
