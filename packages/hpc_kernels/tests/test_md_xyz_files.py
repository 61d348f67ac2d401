"""Extended XYZ files as users write them (hostile inputs, hunt 56 (files)): each malformed
file is refused naming the file, the line, the field and what is expected; the edge cases a
careful user writes (a byte-order mark, CRLF, tabs, trailing blank lines) are read."""

from __future__ import annotations

import numpy as np
import pytest
from wse_hpc.md.xyz import XyzError, read_xyz

HEAD = '4\nLattice="3.615 0 0 0 3.615 0 0 0 3.615" Properties=species:S:1:pos:R:3 pbc="T T T"\n'
ATOMS = "Cu 0 0 0\nCu 1.8075 1.8075 0\nCu 1.8075 0 1.8075\nCu 0 1.8075 1.8075\n"
GOOD = HEAD + ATOMS
LAMMPS = (
    "LAMMPS data file\n\n4 atoms\n1 atom types\n\n0 3.615 xlo xhi\n0 3.615 ylo yhi\n"
    "0 3.615 zlo zhi\n\nMasses\n\n1 63.546\n\nAtoms # atomic\n\n1 1 0 0 0\n"
)


def _vel(text: str) -> str:
    head = HEAD.replace("pos:R:3", "pos:R:3:velocities:R:3")
    return head + "".join(ln + " 0 0 0\n" for ln in ATOMS.splitlines()).replace(
        "Cu 0 0 0 0 0 0", text, 1
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "x.xyz is empty: an extended XYZ file holds at least one frame"),
        ("\n \n", "x.xyz is empty"),
        (b"\x00\x01\xff\xfe" * 8, "x.xyz line 1: not UTF-8 text (invalid start byte at byte 2)"),
        (GOOD.encode().replace(b"Cu 0 0 0", b"Cu 0 0 0\xe9"), "x.xyz line 3: not UTF-8 text"),
        (LAMMPS, "looks like a LAMMPS data file (read_data format)"),
        (LAMMPS, "ase convert -i lammps-data x.xyz x-extended.xyz`"),
        ("x" * 10_000 + "\n", "got '" + "x" * 80 + "...' (an extended XYZ frame starts with"),
        (GOOD.replace("4\n", "3\n", 1), "line 6: expected the atom count, got 'Cu 0 1.8075 "
         "1.8075' (the frame before announced 3 atoms: is its count right?)"),
        (GOOD.replace("4\n", "10**12\n", 1), "line 1: expected the atom count, got '10**12'"),
        (GOOD.replace("4\n", "1000000000000\n", 1),  # hunt 57: the bound, before the lines
         "line 1: the atom count must be in [1, 100,000,000] (set WSE_LIMIT_XYZ_ATOMS to lift it), "
         "got 1,000,000,"),
        (GOOD.replace("4\n", "5\n", 1),
         "line 1: 5 atoms announced, the file ends first (4 lines follow"),
        (GOOD + "\n" + GOOD, "line 8: text after the blank line 7 ('4'); frames must follow"),
        ("\n" + GOOD, "line 2: text after the blank line 1"),
        (GOOD.replace("Cu 1.8075 1.8075 0", "Cu 1.8075 one 0"),
         "x.xyz line 4 field 3: 'one' is not a number"),
        (GOOD.replace("Cu 0 0 0", "Cu 0 0 inf"), "line 3 field 4: 'inf' is not a finite number"),
        (_vel("Cu 0 0 0 nan 0 0"), "line 3 field 5: 'nan' is not a finite number"),
        (GOOD.replace('pbc="T T T"', 'pbc="F F F"'),
         "line 2: pbc=\"F F F\": only periodic boxes are supported"),
        (GOOD.replace("0 0 0 3.615 0 0 0 3.615", "0 0 0 3.615 0 0 0"),
         "Lattice must hold 9 numbers (3 cell vectors), got '3.615 0 0 0 3.615 0 0 0'"),
        (GOOD.replace("3.615 0 0 0 3.615", "3.615 0 0 1 3.615"),
         'only orthorhombic lattices are supported (Lattice="Lx 0 0 0 Ly 0 0 0 Lz")'),
        (GOOD.replace("pos:R:3", "pos:R:3:x:R:1000000000000"),  # was a 29 TiB np.empty
         "line 3: 4 fields, Properties announces 1000000000004"),
        (GOOD.replace("pos:R:3", "pos:S:3"), "Properties type of 'pos' is 'S'"),
        (GOOD.replace("pos:R:3", "pos:R:3:pos:R:3"), "Properties names 'pos' twice"),
        (GOOD.replace("pos:R:3", "pos:R:2"), "line 2: pos needs 3 columns, got 2"),
    ],
)  # fmt: skip
def test_malformed_xyz_is_refused_by_line_and_field(tmp_path, content, message):
    path = tmp_path / "x.xyz"
    (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
    with pytest.raises(XyzError) as e:
        read_xyz(path)
    assert message in str(e.value), str(e.value)
    assert "\n" not in str(e.value) and len(str(e.value)) < 400


@pytest.mark.parametrize(
    "content",
    [
        GOOD.encode("utf-8-sig"),  # a byte-order mark (Notepad)
        GOOD.replace("\n", "\r\n"),
        GOOD.replace(" 0 0\n", "\t0\t0\n"),
        GOOD + "\n\n  \n",
        GOOD.replace('pbc="T T T"', 'pbc="True True True"'),
        GOOD.replace(' pbc="T T T"', ""),
    ],
)
def test_accepted_edge_cases_read_the_same_structure(tmp_path, content):
    path = tmp_path / "x.xyz"
    (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
    (s,) = read_xyz(path)
    assert s.symbols.tolist() == ["Cu"] * 4
    np.testing.assert_array_equal(s.box_A, [3.615] * 3)
    np.testing.assert_array_equal(s.positions_A[1], [1.8075, 1.8075, 0])


def test_velocities_are_read(tmp_path):
    path = tmp_path / "x.xyz"
    path.write_text(_vel("Cu 0 0 0 1.5 -2 0.25"))
    (s,) = read_xyz(path)
    np.testing.assert_array_equal(s.velocities_A_ps[0], [1.5, -2, 0.25])
    np.testing.assert_array_equal(s.velocities_A_ps[1], [0, 0, 0])
