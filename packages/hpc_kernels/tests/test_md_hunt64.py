"""MD files of hunt 64, against ASE (the oracle) and the files themselves. Before the fixes:
an ASE-written extended XYZ file's `momenta:R:3` were dropped without a word (a 300 K
crystal ran at 0 K); GPUMD's `vel:R:3` (A/fs) was read as A/ps (300 K became 0.016 K) and a
`velo` column of unknown unit was taken as A/ps; a Lattice with NaN tilts was accepted;
`write_xyz` stopped by a file-size limit left half a frame that neither wse nor ASE could
read, in an OSError naming no file; a setfl under any other name failed as funcfl on its
comment line, with no word of why it was read as funcfl."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from wse_hpc.md import crystal, read_potential, write_setfl, zhou04
from wse_hpc.md.elements import SYMBOLS, ase_mass_amu
from wse_hpc.md.potential_format import element_symbol
from wse_hpc.md.xyz import XyzError, frame_bytes, read_xyz, write_xyz

HEAD = '4\nLattice="3.615 0 0 0 3.615 0 0 0 3.615" Properties=species:S:1:pos:R:3{} pbc="T T T"\n'
POSITIONS = ["0 0 0", "1.8075 1.8075 0", "1.8075 0 1.8075", "0 1.8075 1.8075"]
V = np.array([[1.0, -2.0, 0.5], [0.0, 3.0, -1.0], [-4.0, 0.25, 2.0], [0.1, 0.2, 0.3]])
A_PS_PER_ASE = 98.22694788464063  # 1000 * ase.units.fs (CODATA 2014): A/ps per A/ASE-time


def _file(tmp_path: Path, props: str, rows: list[str], symbols=("Cu",) * 4) -> Path:
    path = tmp_path / "x.xyz"
    body = "".join(f"{s} {p} {r}\n" for s, p, r in zip(symbols, POSITIONS, rows, strict=True))
    path.write_text(HEAD.format(props) + body)
    return path


def _rows(values: np.ndarray) -> list[str]:
    return [" ".join(repr(float(v)) for v in row) for row in values]


def _thermalize(atoms, temperature_K: float, kB: float) -> None:
    """Maxwell-Boltzmann momenta in ASE's units (p = sqrt(m kB T) N(0, 1))."""
    m = atoms.get_masses()[:, None]
    rng = np.random.default_rng(0)
    atoms.set_momenta(rng.normal(size=(len(atoms), 3)) * np.sqrt(m * kB * temperature_K))


# -- velocities from every writer's column ------------------------------------------------------
def test_ase_momenta_become_the_velocities_ase_reads(tmp_path):
    pytest.importorskip("ase")
    from ase.build import bulk
    from ase.io import read
    from ase.units import fs, kB

    atoms = bulk("Cu", "fcc", a=3.615, cubic=True).repeat((2, 2, 2))
    _thermalize(atoms, 300.0, kB)  # as ase.md.velocitydistribution does
    atoms.write(tmp_path / "ase.xyz")
    assert "momenta:R:3" in (tmp_path / "ase.xyz").read_text().splitlines()[1]
    s = read_xyz(tmp_path / "ase.xyz")[-1]
    oracle = read(tmp_path / "ase.xyz").get_velocities() * (1000 * fs)  # A/ps
    assert s.velocities_A_ps is not None  # before: dropped, the run started at 0 K
    np.testing.assert_allclose(s.velocities_A_ps, oracle, rtol=1e-14, atol=0)
    assert 1000 * fs == pytest.approx(A_PS_PER_ASE, rel=1e-15)


def test_an_ase_masses_column_divides_the_momenta_as_ase_does(tmp_path):
    pytest.importorskip("ase")
    from ase.build import bulk
    from ase.io import read
    from ase.units import fs

    atoms = bulk("Cu", "fcc", a=3.615, cubic=True)
    atoms.set_masses([60.0, 61.0, 62.0, 63.0])
    atoms.set_momenta(np.arange(12.0).reshape(4, 3))
    atoms.write(tmp_path / "m.xyz")
    s = read_xyz(tmp_path / "m.xyz")[-1]
    oracle = read(tmp_path / "m.xyz").get_velocities() * (1000 * fs)
    np.testing.assert_allclose(s.velocities_A_ps, oracle, rtol=1e-14, atol=0)


def test_momenta_without_ase_use_its_standard_masses(tmp_path):
    # Cu 63.546 and Ni 58.6934 (IUPAC 2016, ASE's table): v = p / m in A/ASE-time
    path = _file(tmp_path, ":momenta:R:3", _rows(V), ("Cu", "Ni", "Cu", "Ni"))
    m = np.array([63.546, 58.6934, 63.546, 58.6934])
    np.testing.assert_allclose(
        read_xyz(path)[-1].velocities_A_ps, V / m[:, None] * A_PS_PER_ASE, rtol=1e-14
    )


def test_gpumd_vel_is_read_in_angstrom_per_fs(tmp_path):
    path = _file(tmp_path, ":vel:R:3", _rows(V * 1e-3))  # 1 A/ps is 1e-3 A/fs
    np.testing.assert_allclose(read_xyz(path)[-1].velocities_A_ps, V, rtol=1e-14)
    path = _file(tmp_path, ":velocities:R:3", _rows(V))  # wse's own column stays A/ps
    np.testing.assert_array_equal(read_xyz(path)[-1].velocities_A_ps, V)


@pytest.mark.parametrize(
    ("props", "symbols", "message"),
    [(":velo:R:3", None, "line 2: Properties has 'velo', a velocity column of no known unit; "
      "wse reads velocities:R:3 (A/ps), vel:R:3 (A/fs, GPUMD's) or momenta:R:3 (ASE's)"),
     (":velocity:R:3", None, "Properties has 'velocity', a velocity column of no known unit"),
     (":momentum:R:3", None, "Properties has 'momentum', a velocity column of no known unit"),
     (":momenta:R:3:velocities:R:3", None, "Properties has both momenta and velocities; give one"),
     (":momenta:R:3", ("Cu", "Cu", "Qq", "Cu"), "x.xyz line 5 field 1: momenta need each "
      "atom's mass, and 'Qq' is no element (ASE's masses): add a masses:R:1 column"),
     (":masses:R:1:momenta:R:3", None, "x.xyz line 4: mass 0 must be > 0")],
    ids=["velo", "velocity", "momentum", "two columns", "no mass", "zero mass"],
)  # fmt: skip
def test_a_velocity_column_of_unknown_unit_or_mass_is_refused(tmp_path, props, symbols, message):
    width = 6 if "velocities" in props else 3
    rows = _rows(np.ones((4, width)))
    if props.startswith(":masses"):
        rows = [f"{m} 1 1 1" for m in (63.5, 0, 63.5, 63.5)]
    path = _file(tmp_path, props, rows, symbols or ("Cu",) * 4)
    with pytest.raises(XyzError) as e:
        read_xyz(path)
    assert message in str(e.value), str(e.value)


def test_element_table_is_ases():
    ase_data = pytest.importorskip("ase.data")
    assert list(SYMBOLS) == list(ase_data.chemical_symbols)
    for z, symbol in enumerate(SYMBOLS[1:], 1):
        assert ase_mass_amu(symbol) == ase_data.atomic_masses[z]
    assert element_symbol(29, Path("cu.eam")) == "Cu" and element_symbol(83, Path("x")) == "Bi"


# -- lattices ------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", ["nan nan", "0 nan", "inf 0", "-inf 0"])
def test_a_lattice_of_nan_or_inf_tilts_is_refused_as_tilted(tmp_path, bad):
    path = _file(tmp_path, "", [""] * 4)
    text = path.read_text().replace('Lattice="3.615 0 0', f'Lattice="3.615 {bad}')
    path.write_text(text)
    with pytest.raises(XyzError) as e:
        read_xyz(path)
    assert str(e.value) == (
        'x.xyz line 2: only orthorhombic lattices are supported (Lattice="Lx 0 0 0 Ly 0 0 0 '
        f"Lz\"), got '3.615 {bad} 0 3.615 0 0 0 3.615'"
    )


# -- writing whole frames ------------------------------------------------------------------------
def _frame(seed: int = 0):
    s = crystal("fcc", "Cu", 3.615, (3, 3, 3))  # 108 atoms, thermal values as a run's
    rng = np.random.default_rng(seed)
    s.positions_A = np.mod(s.positions_A + rng.normal(0, 0.1, s.positions_A.shape), s.box_A)
    s.velocities_A_ps = rng.normal(0, 2, (s.num_atoms, 3))
    s.forces_eV_A = rng.normal(0, 0.5, (s.num_atoms, 3))
    s.energies_eV = -3.54 + rng.normal(0, 1e-2, s.num_atoms)
    return s


def test_frame_bytes_bounds_a_written_frame(tmp_path):
    path = write_xyz(tmp_path / "f.xyz", [_frame()], info={"step": 123456789})
    size = path.stat().st_size
    assert size <= frame_bytes(108) < 1.4 * size, (size, frame_bytes(108))


def test_a_file_size_limit_leaves_whole_frames_and_names_the_file(tmp_path):
    # `ulimit -f`: the writes past the limit fail (EFBIG; Python ignores SIGXFSZ)
    one = write_xyz(tmp_path / "one.xyz", [_frame()]).stat().st_size
    limit = int(3.5 * one)  # the fourth frame crosses it
    script = textwrap.dedent(f"""
        import resource, sys
        sys.path[:0] = {sys.path!r}
        resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))
        from test_md_hunt64 import _frame
        from wse_hpc.md.xyz import write_xyz
        for step in range(10):
            try:
                write_xyz(sys.argv[1], [_frame(step)], append=step > 0, info={{"step": step}})
            except OSError as e:
                print(step, e.errno, e.filename, e.strerror)
                break
    """)
    out = tmp_path / "t.xyz"
    done = subprocess.run([sys.executable, "-c", script, str(out)], capture_output=True,
                          text=True, timeout=120, cwd=Path(__file__).parent)  # fmt: skip
    assert done.returncode == 0, done.stderr
    step, _, name, why = done.stdout.split(maxsplit=3)
    assert (step, name, why.strip()) == ("3", str(out), "File too large")
    frames = read_xyz(out)  # before: "line 328: 108 atoms announced, the file ends first"
    assert [f.num_atoms for f in frames] == [108] * 3
    assert out.stat().st_size < limit
    np.testing.assert_allclose(frames[2].velocities_A_ps, _frame(2).velocities_A_ps, rtol=1e-9)
    ase_io = pytest.importorskip("ase.io")
    assert len(ase_io.read(out, index=":")) == 3


# -- potentials named as the other format ---------------------------------------------------------
ZHOU04_COMMENTS = [  # as `wse hpc md potential` writes them: line 2 starts 'X.'
    "Generated by wse hpc md potential from the parameter table of",
    "X. W. Zhou, R. A. Johnson, H. N. G. Wadley, PRB 69, 144113 (2004)",
    "elements Cu, 200 knots",
]


@pytest.mark.parametrize("name", ["Cu_zhou04.alloy", "Cu.eam.alloy.txt", "Cu.eam"])
def test_a_setfl_under_another_name_says_it_was_read_as_funcfl(tmp_path, name):
    pot = zhou04(["Cu"], knots=200)
    path = write_setfl(pot, tmp_path / "Cu.eam.alloy", ZHOU04_COMMENTS)
    with pytest.raises(Exception) as e:
        read_potential(path.rename(tmp_path / name))
    assert str(e.value) == (
        f"{name} line 2 field 1: 'X.' is not an integer (atomic number, mass, lattice "
        "constant, lattice); the file was read as funcfl (LAMMPS pair_style eam) by its name: "
        "name a setfl (eam/alloy) *.eam.alloy or *.setfl, a Finnis-Sinclair file (eam/fs) "
        "*.eam.fs; its line 4 '1 Cu' is a setfl's element line"
    )
    back = read_potential((tmp_path / name).rename(tmp_path / "Cu.setfl"))  # named: read
    np.testing.assert_array_equal(back.z2r, read_potential(write_setfl(pot, path)).z2r)
