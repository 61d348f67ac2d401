"""`wse hpc md` of hunt 76, end to end: --potential-knots on a perfect --lattice crystal said
"force 1.6e-15 eV/A" (its forces vanish by symmetry; 0.0034 on a thermalised crystal), and
--out kept wrapped positions alone (no displacement, no MSD)."""

from __future__ import annotations

import re

import numpy as np
import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke
from wse_hpc.md.lattice import crystal
from wse_hpc.md.potentials import read_potential, write_setfl
from wse_hpc.md.reference import eam_reference
from wse_hpc.md.resample import resample, thermal_copy
from wse_hpc.md.xyz import read_xyz
from wse_hpc.md.zhou04 import zhou04

pytestmark = pytest.mark.timeout(300)
ROOT = typer.main.get_command(app)


def test_potential_knots_on_a_lattice_reports_a_copy_displaced_at_the_run_temperature(tmp_path):
    path = write_setfl(zhou04(["Cu"], knots=1000), tmp_path / "Cu.eam.alloy")
    out = tmp_path / "t.xyz"
    lattice = ["--lattice", "fcc", "--element", "Cu", "--a", "3.615", "--cells", "4", "4", "4"]
    run = ["--steps", "0", "--potential-knots", "50", "--temperature-K", "300", "--seed", "4"]
    args = ["hpc", "md", *lattice, "--potential", path, *run, "--preset", "small", "--out", out]
    code, output = invoke(ROOT, args)
    assert code == 0, output[-3000:]
    first = output.splitlines()[0]
    assert (
        "(on a copy displaced 0.07 A rms per axis as at ~300 K, seed 4: on the structure as "
        "given the forces vanish by symmetry)" in first
    ), first
    reported = float(re.search(r"force ([0-9.e+-]+) eV/A", first).group(1))
    # the oracle: the file's own splines and the resampled ones, NumPy's all-pairs EAM, on
    # the lattice displaced as the line says
    s = thermal_copy(crystal("fcc", "Cu", 3.615, (4, 4, 4)), 300.0, 4)
    pot = read_potential(path)
    old, new = (
        eam_reference(p, s.positions_A, s.species(p.elements), s.box_A).forces_eV_A
        for p in (pot, resample(pot, 50))
    )
    assert reported == pytest.approx(np.abs(new - old).max(), rel=0.05)  # printed: 2 digits
    assert reported > 1e-4  # before: 1.6e-15
    frame = read_xyz(out)[-1]  # --out: image flags beside the wrapped positions
    assert ":map_shift:I:3 " in out.read_text().splitlines()[1]
    assert frame.images.shape == (256, 3)
