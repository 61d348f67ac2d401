"""`wse hpc md` holes of hunt 68, end to end. Before the fixes:

- `--temperature-K` replaced a structure file's velocities with new random ones without a
  word (`--structure eq.xyz --thermostat nose-hoover --temperature-K 600` printed Temp
  600.00000 where the file holds 334.9 K), and a thermostat needs --temperature-K, so a
  thermostatted run could never continue from a file; nor was the Nose-Hoover bath saved;
- `--out t.xyz.gz`, `t.lammpstrj`, `t.dump` and `t.data` all ran and wrote plain extended
  XYZ (zcat: "not in gzip format"; ASE: `UnknownFileTypeError: lammpstrj`);
- `--seed` was ignored without a word where nothing is drawn, where `--damp-fs` under
  `--thermostat none` is refused.

LAMMPS's rule is the oracle: `read_data` + `fix nvt temp 600 600 0.1` keeps the velocities it
read, and only `velocity all create T seed` draws new ones.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import numpy as np
import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke, refused_in_one_line

pytestmark = pytest.mark.timeout(300)
ROOT = typer.main.get_command(app)
LATTICE = ["--lattice", "fcc", "--element", "Cu", "--a", "3.615", "--cells", "4", "4", "4"]


@pytest.fixture(scope="module")
def eq(tmp_path_factory) -> Path:
    """A 256-atom Cu crystal whose velocities are at 334.9 K (3N - 3, Zhou's 63.546 amu)."""
    from wse_hpc.md import crystal, maxwell_boltzmann, write_xyz

    s = crystal("fcc", "Cu", 3.615, (4, 4, 4))
    s.velocities_A_ps = maxwell_boltzmann(np.full(s.num_atoms, 63.546), 334.9, seed=3)
    return write_xyz(tmp_path_factory.mktemp("md") / "eq.xyz", [s])


def _rows(output: str) -> list[list[str]]:
    lines = output.splitlines()
    head = next(i for i, line in enumerate(lines) if line.split()[:1] == ["Step"])
    return [line.split() for line in lines[head + 1 :] if re.fullmatch(r"\d+", line.split()[0])]


@pytest.mark.parametrize(
    ("extra", "line", "temp"),
    [([], "velocities from eq.xyz (334.9 K); Nose-Hoover target 600 K (Tdamp 100 fs, LAMMPS "
      "fix nvt tchain 3: a chain of 3 thermostats)", "334.90000"),  # before: 600.00000, no line
     (["--create-velocities", "--seed", "7"], "velocities drawn at 600 K (seed 7, zero total "
      "momentum), replacing eq.xyz's (334.9 K); Nose-Hoover target 600 K (Tdamp 100 fs, "
      "LAMMPS fix nvt tchain 3: a chain of 3 thermostats)", "600.00000")],  # hunt 74: LAMMPS's
    # default chain
    ids=["kept", "created"],
)  # fmt: skip
def test_a_thermostat_keeps_the_files_velocities_and_says_which(eq, cu, extra, line, temp):
    args = ["hpc", "md", "--structure", eq, "--potential", cu, "--steps", "0", "--preset",
            "small", "--thermostat", "nose-hoover", "--temperature-K", "600", *extra]  # fmt: skip
    code, output = invoke(ROOT, args)
    assert code == 0, output
    assert output.splitlines()[1] == line
    assert _rows(output)[0][4] == temp


@pytest.mark.parametrize(
    ("extra", "message"),
    [(["--temperature-K", "600"],
      "--temperature-K 600 does nothing here: eq.xyz's velocities are kept (LAMMPS draws new "
      "ones only with `velocity all create`) and --thermostat none has no target; add "
      "--create-velocities to draw new ones at 600 K, or leave --temperature-K out"),
     (["--seed", "5"], "--seed applies to drawn velocities or --thermostat langevin; this run "
      "keeps eq.xyz's velocities and draws nothing"),  # before: exit 0, the same row
     (["--seed", "5", "--thermostat", "nose-hoover", "--temperature-K", "600"],
      "--seed applies to drawn velocities or --thermostat langevin; this run keeps eq.xyz's "
      "velocities and draws nothing"),
     (["--create-velocities"],
      "--create-velocities draws velocities at --temperature-K: give it (e.g. 300)")],
    ids=["nve target", "seed nve", "seed nose-hoover", "create without T"],
)  # fmt: skip
def test_options_that_do_nothing_with_a_files_velocities_are_refused(eq, cu, tmp_path, extra,
                                                                     message):  # fmt: skip
    args = ["hpc", "md", "--structure", eq, "--potential", cu, "--steps", "2", "--preset",
            "small", "--out", tmp_path / "t.xyz", *extra]  # fmt: skip
    assert refused_in_one_line(ROOT, args, message) == f"Error: {message}"
    assert list(tmp_path.iterdir()) == []


def test_seed_of_a_crystal_at_rest_is_refused(cu):
    args = ["hpc", "md", *LATTICE, "--potential", cu, "--steps", "2", "--seed", "5"]
    message = ("--seed applies to drawn velocities or --thermostat langevin; this run starts "
               "from zero velocities and draws nothing")  # fmt: skip
    assert refused_in_one_line(ROOT, args, message) == f"Error: {message}"


@pytest.mark.parametrize("name", ["t.lammpstrj", "t.dump", "t.data", "t.xyz.bz2", "t"])
def test_out_names_only_what_it_writes(cu, tmp_path, name):
    args = ["hpc", "md", *LATTICE, "--potential", cu, "--steps", "2", "--out", tmp_path / name]
    stem = name.split(".")[0]
    message = (
        f"--out {tmp_path / name}: wse writes extended XYZ: name it *.xyz or *.extxyz (*.xyz.gz "
        f"to gzip it), then convert it: a LAMMPS data file of the last frame with `ase convert "
        f"-n -1 -o lammps-data {stem}.xyz {stem}.data --write-args velocities=True`, a LAMMPS "
        "dump with OVITO's export"
    )
    assert refused_in_one_line(ROOT, args, message) == f"Error: {message}"  # before: exit 0
    assert list(tmp_path.iterdir()) == []


def test_help_states_the_velocity_rule():
    code, output = invoke(ROOT, ["hpc", "md", "--help"])
    text = " ".join(output.replace("│", " ").split())
    assert code == 0 and "--create-velocities" in text
    assert "a file's are kept under a thermostat, and NVE with a file's velocities needs " \
        "--create-velocities" in text  # fmt: skip


# 8.4 s: the CLI's round trip of the same continuation test_md_velocities_hunt68 checks in
# the default suite (the Python run), so it runs with the slow tests
@pytest.mark.slow
def test_a_nose_hoover_run_continues_from_its_gzipped_out_as_if_never_stopped(cu, tmp_path):
    """N steps to --out half.xyz.gz, then N more from it, against 2N at once (fp64: the
    frame's %.10g text is the only difference; the bath at rest was ~1 eV off)."""
    bath = ["--thermostat", "nose-hoover", "--temperature-K", "600", "--damp-fs", "20",
            "--precision", "fp64", "--preset", "small", "--json", "--potential", cu]  # fmt: skip
    half = tmp_path / "half.xyz.gz"
    code, output = invoke(ROOT, ["hpc", "md", *LATTICE, *bath, "--steps", "8", "--out", half])
    assert code == 0, output
    text = gzip.decompress(half.read_bytes()).decode()  # before: "not a gzipped file"
    assert "nose_hoover_xi=" in text.splitlines()[-257]
    code, output = invoke(ROOT, ["hpc", "md", "--structure", half, *bath, "--steps", "8"])
    assert code == 0, output
    cont = json.loads(output[output.index("{") :])
    assert cont["velocities"].startswith("velocities from half.xyz.gz (")
    assert "and its Nose-Hoover bath (xi " in cont["velocities"]
    code, output = invoke(ROOT, ["hpc", "md", *LATTICE, *bath, "--steps", "16"])
    assert code == 0, output
    full = json.loads(output[output.index("{") :])
    a, b = full["thermo"][-1], cont["thermo"][-1]
    for k in ("pe", "ke", "temp", "press", "ecouple"):
        assert b[k] == pytest.approx(a[k], rel=1e-8, abs=1e-8), k
    ase_io = pytest.importorskip("ase.io")
    assert len(ase_io.read(half, index=":")) == 2
