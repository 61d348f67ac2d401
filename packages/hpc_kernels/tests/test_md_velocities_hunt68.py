"""MD velocities and trajectories of hunt 68, against ASE, LAMMPS and an uninterrupted run.
Broken before:

- a run's velocities went to a `velocities:R:3` column that ASE keeps as an unnamed array:
  `ase.io.read(f).get_velocities()` was zero, and the LAMMPS data file ASE writes from it
  had no Velocities (`Temp 0` at step 0 where wse printed 334.9 K);
- the Nosé–Hoover bath (xi, eta) was in no frame, so a run continued from its --out started
  with the bath at rest (and `temperature_K` drew new velocities: the API's run could keep
  them, the CLI's could not, `test_cli_md_hunt68`);
- `write_xyz("t.xyz.gz")` wrote plain text that zcat and ASE refused, and `read_xyz` refused
  a gzip file.
"""

from __future__ import annotations

import dataclasses
import gzip
import shutil
import subprocess

import numpy as np
import pytest
from wse_core import PRESETS
from wse_hpc.md import MdConfig, Thermostat, crystal, run_md, write_setfl, zhou04
from wse_hpc.md.integrate import maxwell_boltzmann
from wse_hpc.md.run_setup import start_bath, start_line
from wse_hpc.md.thermo import kinetic
from wse_hpc.md.xyz import XyzError, read_xyz, write_xyz

POT = zhou04(["Cu"], knots=500)
# a short Tdamp: the bath moves far in 10 steps; tchain 1, the integrator of hunt 68 (hunt 74:
# the default is LAMMPS's chain of 3, continued in test_md_nose_hoover_chain_hunt74)
NH = Thermostat("nose-hoover", 600.0, 20.0, chain=1)


def _hot_crystal(temperature_K: float = 300.0, seed: int = 1):
    s = crystal("fcc", "Cu", 3.615, (4, 4, 4))  # 256 atoms: the box holds twice the cutoff
    s.velocities_A_ps = maxwell_boltzmann(np.full(s.num_atoms, 63.546), temperature_K, seed)
    return s


# -- ASE reads the velocities (and LAMMPS, through ASE's data file) ----------------------------
def test_ase_reads_the_written_velocities(tmp_path):
    ase_io = pytest.importorskip("ase.io")
    from ase.units import fs

    s = _hot_crystal()
    s.masses_amu = np.full(s.num_atoms, 63.55)  # the run's masses (not ASE's 63.546)
    path = write_xyz(tmp_path / "t.xyz", [s])
    atoms = ase_io.read(path)  # before: arrays ['numbers', 'positions', 'velocities'], T 0
    np.testing.assert_allclose(atoms.get_velocities() * (1000 * fs), s.velocities_A_ps,
                               rtol=1e-9, atol=1e-12)  # fmt: skip
    np.testing.assert_array_equal(atoms.get_masses(), s.masses_amu)
    back = read_xyz(path)[-1]  # and wse reads its own file back, masses too
    np.testing.assert_allclose(back.velocities_A_ps, s.velocities_A_ps, rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(back.masses_amu, s.masses_amu)


def test_wse_still_reads_its_old_velocities_column_and_writes_it_without_masses(tmp_path):
    s = _hot_crystal()
    s.symbols = np.array(["A"] * s.num_atoms)  # no element: no mass makes momenta of it
    path = write_xyz(tmp_path / "old.xyz", [s])
    assert "Properties=species:S:1:pos:R:3:velocities:R:3 " in path.read_text()
    np.testing.assert_allclose(read_xyz(path)[-1].velocities_A_ps, s.velocities_A_ps, rtol=1e-9)


@pytest.mark.skipif(shutil.which("lmp") is None, reason="LAMMPS (lmp) is not on PATH")
def test_lammps_reads_the_velocities_of_the_data_file_ase_writes(tmp_path):
    ase_io = pytest.importorskip("ase.io")
    s = _hot_crystal(334.9)
    write_xyz(tmp_path / "eq.xyz", [s])
    ase_io.write(tmp_path / "eq.data", ase_io.read(tmp_path / "eq.xyz"), format="lammps-data",
                 specorder=["Cu"], atom_style="atomic", masses=True, velocities=True,
                 units="metal")  # fmt: skip
    write_setfl(POT, tmp_path / "Cu.eam.alloy", ["a", "b", "c"])
    (tmp_path / "in.x").write_text(
        "units metal\nread_data eq.data\npair_style eam/alloy\n"
        "pair_coeff * * Cu.eam.alloy Cu\nthermo_style custom step temp\n"
        "thermo_modify format float %.10f\nrun 0\n"
    )
    log = subprocess.run(["lmp", "-in", "in.x", "-log", "none"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120).stdout  # fmt: skip
    lines = log.splitlines()
    temp = float(lines[next(i for i, x in enumerate(lines) if x.split() == ["Step", "Temp"]) + 1]
                 .split()[1])  # fmt: skip
    want = kinetic(np.full(s.num_atoms, POT.masses_amu[0]), s.velocities_A_ps)[1]
    assert temp == pytest.approx(want, rel=1e-8)  # before: 0 (no Velocities section)


# -- gzip ------------------------------------------------------------------------------------------
def test_a_gz_name_writes_gzip_one_member_a_frame_that_everyone_reads(tmp_path):
    s = _hot_crystal()
    s.info = {"nose_hoover_xi": -24.439878288055553, "nose_hoover_eta": 0.1}
    plain = write_xyz(tmp_path / "t.xyz", [s])
    packed = write_xyz(tmp_path / "t.xyz.gz", [s])
    write_xyz(packed, [s], append=True)  # a second member, as the trajectory appends
    assert gzip.decompress(packed.read_bytes()) == 2 * plain.read_bytes()  # before: not gzip
    frames = read_xyz(packed)
    assert len(frames) == 2 and frames[1].info == s.info  # the bath, to the bit
    np.testing.assert_array_equal(frames[1].positions_A, read_xyz(plain)[0].positions_A)
    ase_io = pytest.importorskip("ase.io")
    assert len(ase_io.read(packed, index=":")) == 2


def test_a_gzip_structure_that_unpacks_past_the_limit_is_refused(tmp_path, monkeypatch):
    path = write_xyz(tmp_path / "t.xyz.gz", [_hot_crystal()])
    monkeypatch.setenv("WSE_LIMIT_XYZ_BYTES", "10000")  # the frame is ~40 kB of text
    with pytest.raises(XyzError, match=r"t\.xyz\.gz unpacks past 9\.77 KiB"):
        read_xyz(path)
    path.write_bytes(path.read_bytes()[:-20])  # cut: no gzip trailer
    monkeypatch.delenv("WSE_LIMIT_XYZ_BYTES")
    with pytest.raises(XyzError, match=r"t\.xyz\.gz is not a whole gzip file"):
        read_xyz(path)


@pytest.mark.parametrize(
    ("keys", "message"),
    [("nose_hoover_xi=1.5", "nose_hoover_xi without nose_hoover_eta: a Nose-Hoover bath needs "
      "both"),
     ("nose_hoover_xi=nan nose_hoover_eta=0", "nose_hoover_xi='nan' is not a finite number")],
)  # fmt: skip
def test_a_half_or_broken_bath_is_refused(tmp_path, keys, message):
    path = write_xyz(tmp_path / "t.xyz", [_hot_crystal()])
    lines = path.read_text().splitlines()
    lines[1] = lines[1].replace('pbc="T T T"', f'{keys} pbc="T T T"')
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(XyzError, match=f"t.xyz line 2: {message}"):
        read_xyz(path)


# -- where the velocities and the bath come from ----------------------------------------------
def _cfg(**kw) -> MdConfig:
    return MdConfig(thermo_every=10, thermostat=NH, spec=PRESETS["small"], **kw)


def test_the_start_line_says_where_the_velocities_come_from():
    s = _hot_crystal(334.9)
    s.info = {"nose_hoover_xi": -2.5, "nose_hoover_eta": 0.125}
    assert start_line(s, POT, _cfg(), "eq.xyz") == (
        "velocities from eq.xyz (334.9 K) and its Nose-Hoover bath (xi -2.5 1/ps, eta 0.125); "
        "Nose-Hoover target 600 K (Tdamp 20 fs, LAMMPS fix nvt tchain 1: one chain element)"
    )
    drawn = _cfg(temperature_K=600.0, seed=7)
    assert start_line(s, POT, drawn, "eq.xyz") == (
        "velocities drawn at 600 K (seed 7, zero total momentum), replacing eq.xyz's (334.9 K); "
        "Nose-Hoover target 600 K (Tdamp 20 fs, LAMMPS fix nvt tchain 1: one chain element)"
    )
    assert start_bath(s, drawn) is None  # new velocities start a new bath, at rest
    still = dataclasses.replace(s, velocities_A_ps=None, info={})
    nve = MdConfig(spec=PRESETS["small"])
    assert start_line(still, POT, nve) == "velocities zero: the structure has none"


def test_a_continued_nose_hoover_run_equals_an_uninterrupted_one(tmp_path):
    """2N steps against N, the Nth frame written and read back, then N more (fp64: the frame's
    text, %.10g, is the only difference); the bath at rest instead is ~1 eV off."""
    s, cfg, runners = _hot_crystal(), _cfg(steps=20, dtype="float64"), {}
    full = run_md(s, POT, cfg, runners=runners)
    frames = []
    half = dataclasses.replace(cfg, steps=10)
    run_md(s, POT, half, on_frame=lambda step, f: frames.append(f), runners=runners)
    path = write_xyz(tmp_path / "half.xyz", [frames[-1]], info={"step": 10})
    assert "nose_hoover_xi=" in path.read_text().splitlines()[1]
    cont = read_xyz(path)[-1]
    rest = run_md(cont, POT, half, runners=runners)
    a, b = full.thermo[-1], rest.thermo[-1]
    for k in ("pe", "ke", "temp", "press", "ecouple"):
        assert getattr(b, k) == pytest.approx(getattr(a, k), rel=1e-8, abs=1e-8), k
    np.testing.assert_allclose(rest.structure.velocities_A_ps, full.structure.velocities_A_ps,
                               rtol=0, atol=1e-6)  # fmt: skip
    assert rest.structure.info["nose_hoover_xi"] == pytest.approx(
        full.structure.info["nose_hoover_xi"], rel=1e-8
    )
    at_rest = run_md(dataclasses.replace(cont, info={}), POT, half, runners=runners).thermo[-1]
    assert abs(at_rest.etotal - a.etotal) > 0.1  # what a continued run did before
