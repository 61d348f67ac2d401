"""Hunt 63 in wse_hpc: a potential's grid line whose knot spacing fp32 cannot invert (dr
1e-300: `1 / dr` overflowed, the run printed `"press": -Infinity` and wrote NaN forces, exit
0), or whose r table ends short of the cutoff (dr 1e-3: 1 A of a 5.7 A cutoff, PE -0.02 eV
without a word; LAMMPS's pair_eam reads such a file and clamps every farther pair to the
table's last value)."""

from __future__ import annotations

import numpy as np
import pytest
from wse_hpc.md.potentials import PotentialError, read_setfl

FP32_TINY = np.finfo(np.float32).tiny  # the oracle: fp32's smallest normal number


def _setfl(tmp_path, grid: str):
    """A one-element setfl with five knots a table and the grid line `grid`."""
    table = "1.0 0.8 0.6 0.4 0.2\n"
    text = "c\nc\nc\n1 Cu\n" + grid + "\n29 63.546 3.615 fcc\n" + table * 3
    path = tmp_path / "p.eam.alloy"
    path.write_text(text)
    return path


@pytest.mark.parametrize("name, grid", [("dr", "5 0.1 5 1e-300 1e-300"),
                                        ("drho", "5 1e-300 5 0.5 1.9"),
                                        ("dr", "5 0.1 5 1e-39 1e-39")])  # fmt: skip
def test_a_spacing_fp32_cannot_invert_is_refused(tmp_path, name, grid):
    spacing = float(grid.split()[1 if name == "drho" else 3])
    with np.errstate(over="ignore", divide="ignore"):  # 1e-300 is 0 in fp32
        assert not np.isfinite(np.float32(1.0) / np.float32(spacing))  # what the tables take
    with pytest.raises(PotentialError, match=f"line 5: {name} = .* below fp32's smallest"):
        read_setfl(_setfl(tmp_path, grid))


def test_the_smallest_normal_spacing_reads_and_inverts(tmp_path):
    dr = float(FP32_TINY)
    pot = read_setfl(_setfl(tmp_path, f"5 0.1 5 {dr!r} {4 * dr!r}"))
    assert np.isfinite(np.float32(1.0) / np.float32(pot.dr))


@pytest.mark.parametrize(
    "grid, ok",
    [("5 0.1 5 0.5 2.0", True),  # (Nr - 1) dr = cutoff: zhou04's files
     ("5 0.1 5 0.5 2.5", True),  # Nr dr = cutoff, one spacing short: Mishin's, Mendelev's
     ("5 0.1 5 0.5 3.0", True),  # two spacings short: a spacing printed with few digits
     ("5 0.1 5 0.5 3.01", False),
     ("5 0.1 5 0.25 5.7", False)],  # 1 A of a 5.7 A cutoff
)  # fmt: skip
def test_an_r_table_short_of_the_cutoff_is_refused(tmp_path, grid, ok):
    path = _setfl(tmp_path, grid)
    if ok:
        assert read_setfl(path).cutoff_A == float(grid.split()[4])
        return
    nr, dr = int(grid.split()[2]), float(grid.split()[3])
    end = f"ends at \\(Nr - 1\\) \\* dr = {(nr - 1) * dr:g} A"
    with pytest.raises(PotentialError, match=end):
        read_setfl(path)


def test_every_eam_potential_lammps_ships_still_reads():
    """The grid checks (1 / dr in fp32, the r table reaching the cutoff but for two spacings)
    refuse none of the EAM files LAMMPS ships: its published tables end one spacing short."""
    from wse_hpc.md.potentials import read_funcfl
    from wse_hpc.md.testing import lammps_potentials_dir

    folder = lammps_potentials_dir()
    if folder is None:
        pytest.skip("no LAMMPS potential directory (apt-get install lammps-data)")
    read = 0
    for path in sorted(folder.iterdir()):
        if path.name.endswith((".eam.alloy", ".eam.fs")):
            pot = read_setfl(path, fs=path.name.endswith(".fs"))
        elif path.name.endswith(".eam"):
            pot = read_funcfl([path], [path.name.split("_")[0]])
        else:
            continue
        assert np.isfinite(np.float32(1.0) / np.float32(pot.dr)), path.name
        read += 1
    assert read >= 10
