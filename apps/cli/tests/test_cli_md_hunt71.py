"""`wse hpc md --thermostat nose-hoover` says which LAMMPS fix it is (hunt 71).

Before: the help named "LAMMPS fix nvt" and the run said "Nose-Hoover target 600 K (Tdamp
100 fs)". The integrator is LAMMPS's `fix nvt temp T T Tdamp tchain 1` (one thermostat), and
plain `fix nvt` chains 3: from the same file, 200 steps reach 606.80 K under tchain 1 (which
wse matches to every printed digit) and 218.87 K under the default chain. Now the help and
the run's line both say "LAMMPS fix nvt ... tchain 1". Hunt 74: the chain is --tchain, 3 by
default as LAMMPS's (test_md_nose_hoover_chain_hunt74 matches LAMMPS_TCHAIN_3 below); the
tchain 1 run here passes --tchain 1. The oracle is LAMMPS 29 Sep 2021's
thermo output (`read_data` of the same structure, `pair_style eam/alloy` with the file
`wse hpc md potential --elements Cu` writes, `timestep 0.001`, `fix 1 all nvt temp 600 600 0.1`
with and without `tchain 1`, `thermo_modify format float %.8f`), recorded below.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke

pytestmark = pytest.mark.timeout(300)
ROOT = typer.main.get_command(app)

# step 50 of the run below: (PotEng eV, Temp K, Ecouple eV)
LAMMPS_TCHAIN_1 = (-897.62122129, 92.39626202, -0.62038725)
LAMMPS_TCHAIN_3 = (-897.63449752, 90.14234986, -0.53253659)  # plain `fix nvt`


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> tuple[str, str]:
    """(eq.xyz, Cu.eam.alloy): 256 fcc Cu atoms at 334.9 K (seed 3), and the zhou04 Cu file."""
    from wse_hpc.md import crystal, maxwell_boltzmann, write_xyz

    tmp = tmp_path_factory.mktemp("md71")
    s = crystal("fcc", "Cu", 3.615, (4, 4, 4))
    s.velocities_A_ps = maxwell_boltzmann(np.full(s.num_atoms, 63.546), 334.9, seed=3)
    pot = tmp / "Cu.eam.alloy"
    code, out = invoke(ROOT, ["hpc", "md", "potential", "--elements", "Cu", "--out", str(pot)])
    assert code == 0, out
    return str(write_xyz(tmp / "eq.xyz", [s])), str(pot)


def test_the_help_names_tchain_1_and_lammps_default_chain():
    code, out = invoke(ROOT, ["hpc", "md", "--help"])
    text = "".join(out.split())  # the help wraps at 80 columns, "nose-" "hoover" included
    assert code == 0

    def said(words: str) -> bool:
        return "".join(words.split()) in text

    # hunt 74: the chain is --tchain, LAMMPS's default 3
    assert said("nose-hoover (LAMMPS fix nvt: a chain of --tchain thermostats, 3 as LAMMPS's "
                "default)")  # fmt: skip
    assert said("Nose-Hoover chain length (LAMMPS fix nvt's tchain keyword, default 3; 1: a "
                "single thermostat)")  # fmt: skip
    # --temperature-K no longer names plain "fix nvt" (LAMMPS's chain of 3) as its fix
    assert said("Thermostat target (K; Tstart = Tstop).") and not said("fix nvt / langevin")


def test_the_run_says_tchain_1_and_matches_lammps_tchain_1(files):
    eq, pot = files
    args = ["hpc", "md", "--structure", eq, "--potential", pot, "--thermostat", "nose-hoover",
            "--temperature-K", "600", "--damp-fs", "100", "--steps", "50", "--thermo-every",
            "25", "--preset", "small", "--precision", "fp64", "--tchain", "1"]  # fmt: skip
    code, out = invoke(ROOT, args)
    assert code == 0, out
    lines = out.splitlines()
    assert lines[1] == (
        f"velocities from {Path(eq).name} (334.9 K); Nose-Hoover target 600 K (Tdamp 100 fs, "
        "LAMMPS fix nvt tchain 1: one chain element)"
    )
    head = next(i for i, line in enumerate(lines) if line.split()[:1] == ["Step"])
    names = lines[head].split()
    values = next(r.split() for r in lines[head:] if r.split()[:1] == ["50"])
    row = dict(zip(names, values, strict=True))
    got = tuple(float(row[k]) for k in ("PotEng", "Temp", "Ecouple"))
    # LAMMPS prints 8 decimals, wse 8 (PotEng, Ecouple) and 5 (Temp): a last-digit rounding
    assert got == pytest.approx(LAMMPS_TCHAIN_1, abs=1e-5)
    assert abs(got[1] - LAMMPS_TCHAIN_3[1]) > 2.0  # the default chain is another run
