"""Extended XYZ trajectories (the format ASE and OVITO read and write).

Each frame: the atom count; a comment line of key=value pairs with
`Lattice="Lx 0 0 0 Ly 0 0 0 Lz"`, `Properties=species:S:1:pos:R:3[:momenta:R:3][:masses:R:1]
[:forces:R:3][:energies:R:1][:map_shift:I:3]`, `pbc="T T T"`, when energies are known
`energy=` (eV), and after a Nosé–Hoover run its bath, `nose_hoover_xi=` (1/ps) and
`nose_hoover_eta=` (LAMMPS fix nvt's eta_dot and eta: one number each, or a chain's quoted,
`nose_hoover_xi="x0 x1 x2"`;
`Structure.info`, read back so a run continued from the frame goes on as if never stopped);
then one line per atom. Units: A, ASE's momenta, amu, eV/A, eV; `map_shift` holds each atom's
image flags (LAMMPS's ix iy iz, OVITO's Periodic Image: the unwrapped position is pos +
map_shift x the box side; a run's frames write them, `Structure.images`, and a run continued
from a frame counts on from them; whole numbers, else a WseError naming the line). `write_xyz`
(`wse_hpc.md.xyz_write`) appends frames, each whole, or writes a new file (gzip for a name
ending in .gz); `read_xyz` returns every frame as a `Structure` (a gzip file
is unpacked, up to the limit `xyz_bytes` of text); only orthorhombic lattices are accepted
(a tilted one, NaN tilts too, is a WseError naming the line; the file's text, its limits
and gzip are `xyz_text`'s); `read_frames` gives each frame with the origin its positions
were shifted by.

A box that does not start at 0 (OVITO's `Origin="x y z"`, what it writes for a LAMMPS box
of `region block -2 2 ...`) is read shifted by -Origin into [0, L): the run is periodic, so
nothing physical changes (hunt 68: the key was ignored and atoms inside the declared box
were refused as outside [0, L)).

Velocities are read from whichever column the writer used (hunt 64: ASE's momenta were
dropped without a word, a 300 K crystal ran at 0 K): `velocities:R:3` in A/ps (wse's own,
LAMMPS metal units), `vel:R:3` in A/fs (GPUMD's model.xyz and dump_exyz) or, in a frame whose
comment line has LAMMPS's `Timestep=` key, in A/ps (`XyzFrame.lammps_dump`), `momenta:R:3` in
ASE's units (velocities = momenta / masses as `ase.Atoms.get_velocities` gives them, from the
file's `masses:R:1` or ASE's standard masses, `wse_hpc.md.elements`; what wse writes since
hunt 68, `velocities:R:3` before). Another column named
like a velocity (`velo`, `velocity`, `momentum`, ...) is refused: its unit is unknown. Other
columns (`id`, `charge`, ...) are not used; LAMMPS's `mass:R:1` is read as `masses:R:1`.

LAMMPS's own `dump extxyz` (EXTRA-DUMP, `dump_extxyz.cpp`) writes `Timestep=N` first on the
comment line, `Time=`, and `Temperature=` (thermo's, 3N - 3 degrees of freedom) when thermo
has one, and atom->v as `vel:R:3` in the run's units: A/ps under `units metal`, the units of
the EAM files wse reads; GPUMD's `dump_exyz` (`Time=`, `energy=`, `virial=`, `stress=`) and
model.xyz write no Timestep= (hunt 82: a LAMMPS dump's 300 K read as 3e8 K, and the refusal
told the user to give A/ps, which the file held). A LAMMPS frame whose Temperature= is not
within LAMMPS_TEMPERATURE_FACTOR of its velocities' (in A/ps, with the file's or ASE's masses)
is refused: it was written under other units (`units real`: A/fs, 1e-6 x the temperature).

A frame's step (`Structure.step`) is its `step=` key (what `write_xyz` writes of a run's
frames) or LAMMPS's `Timestep=`: a run continued from the frame counts on from it (hunt 82).
"""

from __future__ import annotations

import math
import shlex
from pathlib import Path
from typing import NamedTuple

import numpy as np
from wse_core.host.limits import lift, limit

from wse_hpc.md.elements import ase_mass_amu
from wse_hpc.md.lattice import Structure
from wse_hpc.md.units import kinetic
from wse_hpc.md.xyz_text import XyzError, read_lines
from wse_hpc.md.xyz_write import ASE_FS, IMAGES, frame_bytes, write_xyz

__all__ = [
    "write_xyz",
    "read_xyz",
    "read_frames",
    "XyzFrame",
    "frame_bytes",
    "XyzError",
    "NOSE_HOOVER_KEYS",
]

# the comment-line keys of a Nosé–Hoover run's bath: xi (1/ps), eta (`state.Bath`)
NOSE_HOOVER_KEYS = ("nose_hoover_xi", "nose_hoover_eta")
# LAMMPS's dump extxyz writes this key first (dump_extxyz.cpp, `write_header`); GPUMD never
LAMMPS_KEY = "timestep"
# A LAMMPS frame's velocities (A/ps) and its Temperature= agree to the dump's 6 digits and the
# masses (a potential file's 63.55 amu against ASE's 63.546: 6e-5); `units real` (A/fs) reads
# 1e6 x colder. A thermo temperature of a group, or with fewer degrees of freedom, is not off
# by 2 for a group of most of the atoms: outside this factor the unit is not A/ps.
LAMMPS_TEMPERATURE_FACTOR = 2.0
QUOTE_CHARS = 80  # characters of a file's text quoted in an error line
MAX_IMAGE = 2.0**31 - 1  # an image flag's bound: an int32, as LAMMPS's ix iy iz dump columns


class XyzFrame(NamedTuple):
    """A frame's structure (positions in [0, L)) and the Origin they were shifted by (A)."""

    structure: Structure
    origin_A: np.ndarray  # (3,), zeros when the file names none
    # the frame is LAMMPS's dump extxyz (its Timestep= key): vel:R:3 was read in A/ps
    lammps_dump: bool = False


def _quote(text: str) -> str:
    """`text` quoted for an error line, cut to QUOTE_CHARS characters."""
    return repr(text if len(text) <= QUOTE_CHARS else text[:QUOTE_CHARS] + "...")


def _parse_comment(line: str, where: str) -> dict[str, str]:
    try:
        tokens = shlex.split(line)
    except ValueError as e:
        raise XyzError(f"{where}: cannot parse the comment line ({e})") from None
    out = {}
    for tok in tokens:
        if "=" in tok:
            k, v = tok.split("=", 1)
            out[k.strip().lower()] = v
    return out


def _lattice(info: dict[str, str], where: str) -> np.ndarray:
    if "lattice" not in info:
        raise XyzError(f'{where}: no Lattice="..." (a periodic box is needed)')
    try:
        m = np.array([float(v) for v in info["lattice"].split()]).reshape(3, 3)
    except ValueError:
        raise XyzError(
            f"{where}: Lattice must hold 9 numbers (3 cell vectors), got {_quote(info['lattice'])}"
        ) from None
    # the tilts must be 0; written so that NaN fails as inf does (hunt 64: NaN > 1e-9 is
    # False, and NaN tilts were taken); a NaN side is refused by check_box
    if not np.all(np.abs(m[~np.eye(3, dtype=bool)]) <= 1e-9):
        raise XyzError(
            f"{where}: only orthorhombic lattices are supported "
            f'(Lattice="Lx 0 0 0 Ly 0 0 0 Lz"), got {_quote(info["lattice"])}'
        )
    pbc = info.get("pbc", "T T T").split()
    if [v.upper() for v in pbc] not in (["T"] * 3, ["TRUE"] * 3, ["1"] * 3):
        raise XyzError(
            f'{where}: pbc="{info["pbc"][:20]}": only periodic boxes are supported '
            '(pbc="T T T", LAMMPS\'s boundary p p p)'
        )
    return np.diag(m).copy()


def _origin(info: dict[str, str], where: str) -> np.ndarray:
    """OVITO's `Origin="x y z"`: the box's lower corner (A); zeros when absent."""
    if "origin" not in info:
        return np.zeros(3)
    try:
        origin = np.array([float(v) for v in info["origin"].split()])
    except ValueError:
        origin = np.array([])
    if origin.shape != (3,) or not np.all(np.isfinite(origin)):
        raise XyzError(
            f"{where}: Origin must hold 3 finite numbers (the box's lower corner), got "
            f"{_quote(info['origin'])}"
        )
    return origin


def _shifted(pos: np.ndarray, origin: np.ndarray, box: np.ndarray) -> np.ndarray:
    """Positions relative to the box's lower corner; one in [o, o + L) whose difference
    rounds up to L is put at 0, its periodic image (atoms outside are `check_box`'s)."""
    if not origin.any():
        return pos.copy()
    out = pos - origin
    return np.where(out == box, 0.0, out)


def _columns(props: str, where: str) -> list[tuple[str, int, int]]:
    """(name, first column, width) per property."""
    parts = props.split(":")
    if len(parts) % 3:
        raise XyzError(f"{where}: Properties must be name:type:count triples, got {_quote(props)}")
    if parts[0].lower() != "species" or parts[2] != "1":  # column 0 is the symbol
        raise XyzError(
            f"{where}: Properties must start with species:S:1 (the element symbol), "
            f"got {_quote(props)}"
        )
    out, col = [], 0
    for i in range(0, len(parts), 3):
        try:
            name, n = parts[i].lower(), int(parts[i + 2])
        except ValueError:
            raise XyzError(
                f"{where}: Properties count {_quote(parts[i + 2])} is not an integer"
            ) from None
        if n < 1:
            raise XyzError(f"{where}: Properties count of {name!r} must be >= 1, got {n}")
        if any(name == o for o, _, _ in out):
            raise XyzError(f"{where}: Properties names {_quote(name)} twice")
        if i and parts[i + 1].upper() not in ("R", "I", "L"):
            raise XyzError(
                f"{where}: Properties type of {_quote(name)} is {_quote(parts[i + 1])}; "
                "only the species may be text (S): the other columns are read as numbers "
                "(R, I or L)"
            )
        out.append((name, col, n))
        col += n
    return out


_WIDTHS = {"pos": 3, "velocities": 3, "vel": 3, "momenta": 3, "masses": 1, "mass": 1,
           "forces": 3, "energies": 1, IMAGES: 3}  # fmt: skip
# The velocity columns read and their unit in A/ps (module docstring); momenta: ASE's
_VELOCITY_A_PS = {"velocities": 1.0, "vel": 1000.0}


def _velocity_column(cols: list[tuple[str, int, int]], where: str) -> str | None:
    """The one column the velocities come from (a name of _VELOCITY_A_PS or "momenta")."""
    names = [c for c, _, _ in cols]
    odd = [c for c in names if c.startswith(("vel", "momen")) and c not in _WIDTHS]
    if odd:
        raise XyzError(
            f"{where}: Properties has {_quote(odd[0])}, a velocity column of no known unit; "
            "wse reads velocities:R:3 (A/ps), vel:R:3 (A/fs, GPUMD's) or momenta:R:3 (ASE's): "
            "convert it to one of them"
        )
    given = [c for c in names if c in _VELOCITY_A_PS or c == "momenta"]
    if len(given) > 1:
        raise XyzError(f"{where}: Properties has both {given[0]} and {given[1]}; give one")
    return given[0] if given else None


def _ase_velocities(momenta, masses, symbols, name: str, first_line: int) -> np.ndarray:
    """A/ps velocities of ASE's momenta, divided by the masses ASE would use."""
    if masses is None:
        table = {s: ase_mass_amu(s) for s in set(symbols)}
        if (unknown := next((s for s, m in table.items() if m is None), None)) is not None:
            j = symbols.index(unknown)
            raise XyzError(
                f"{name} line {first_line + j} field 1: momenta need each atom's mass, and "
                f"{_quote(unknown)} is no element (ASE's masses): add a masses:R:1 column"
            )
        masses = np.array([table[s] for s in symbols])
    else:
        masses = masses[:, 0]
        if (bad := np.nonzero(~(masses > 0))[0]).size:
            raise XyzError(
                f"{name} line {first_line + int(bad[0])}: mass {masses[bad[0]]:g} must be > 0 "
                "(momenta are divided by it)"
            )
    return momenta / masses[:, None] * (1000.0 * ASE_FS)


def _not_xyz(path: Path, lines: list[str]) -> str:
    """What the file looks like, when its first line is not an atom count."""
    if any(ln.startswith(("ITEM: TIMESTEP", "ITEM: NUMBER OF ATOMS")) for ln in lines[:10]):
        return (  # hunt 68: a dump had no hint where a data file had one
            ": it looks like a LAMMPS dump file (dump atom/custom); --structure reads extended "
            f"XYZ: convert it, e.g. `ase convert -i lammps-dump-text {path.name} "
            f"{path.stem}.xyz` or with OVITO (ASE makes type 1 H, type 2 He, ... unless the "
            "dump has an element column: dump_modify element)"
        )
    words = {" ".join(ln.split()[1:3]) for ln in lines[:40]}
    if {"atoms", "xlo xhi"} & words or "atom types" in words:
        out = f"{path.stem}-extended.xyz" if path.suffix == ".xyz" else f"{path.stem}.xyz"
        return (
            ": it looks like a LAMMPS data file (read_data format); --structure reads extended "
            f"XYZ: convert it, e.g. `ase convert -i lammps-data {path.name} {out}`"
        )
    return " (an extended XYZ frame starts with its atom count)"


def read_xyz(path: str | Path) -> list[Structure]:
    """Every frame of an extended XYZ file. Frames follow each other; blank lines may only
    end the file. Errors name the file, the line (1-based) and the field."""
    return [frame.structure for frame in read_frames(path)]


def read_frames(path: str | Path) -> list[XyzFrame]:
    """`read_xyz`'s frames, each with the Origin its positions were shifted by."""
    path = Path(path)
    lines = read_lines(path)
    frames, i = [], 0
    while i < len(lines) and lines[i].strip():
        frames.append(_frame(path, lines, i, frames[-1].structure.num_atoms if frames else 0))
        i += 2 + frames[-1].structure.num_atoms
    rest = next((j for j in range(i, len(lines)) if lines[j].strip()), None)
    if rest is not None:
        raise XyzError(
            f"{path.name} line {rest + 1}: text after the blank line {i + 1} "
            f"({_quote(lines[rest].strip())}); frames must follow each other without blank "
            "lines (the frames after it would be dropped)"
        )
    if not frames:
        raise XyzError(f"{path.name} is empty: an extended XYZ file holds at least one frame")
    return frames


def _frame(path: Path, lines: list[str], i: int, before: int) -> XyzFrame:
    """The frame starting at line i + 1 (0-based i); `before`: the previous frame's atom count."""
    name = path.name
    try:
        n = int(lines[i].split()[0])
    except (ValueError, IndexError):
        why = (
            f" (the frame before announced {before:,} atoms: is its count right?)"
            if before
            else _not_xyz(path, lines)
        )
        raise XyzError(
            f"{name} line {i + 1}: expected the atom count, got {_quote(lines[i].strip())}{why}"
        ) from None
    if not 1 <= n <= limit("xyz_atoms"):
        raise XyzError(
            f"{name} line {i + 1}: the atom count must be in [1, {limit('xyz_atoms'):,}] "
            f"({lift('xyz_atoms')}), got {n:,}"
        )
    if i + 2 + n > len(lines):
        raise XyzError(
            f"{name} line {i + 1}: {n:,} atoms announced, the file ends first "
            f"({max(0, len(lines) - i - 2):,} lines follow the comment line)"
        )
    where = f"{name} line {i + 2}"
    info = _parse_comment(lines[i + 1], where)
    box, origin = _lattice(info, where), _origin(info, where)
    cols = _columns(info.get("properties", "species:S:1:pos:R:3"), where)
    width = sum(w for _, _, w in cols)
    for name_, _, w in cols:
        if _WIDTHS.get(name_, w) != w:
            raise XyzError(f"{where}: {name_} needs {_WIDTHS[name_]} columns, got {w}")
    if not any(c == "pos" for c, _, _ in cols):
        raise XyzError(f"{where}: Properties has no pos:R:3")
    vel_column = _velocity_column(cols, where)
    rows = [ln.split() for ln in lines[i + 2 : i + 2 + n]]
    for j, r in enumerate(rows):  # every row's width before the table is allocated
        if len(r) != width:
            raise XyzError(
                f"{name} line {i + 3 + j}: {len(r)} fields, Properties announces {width}"
                + (" (is the atom count on the frame's first line right?)" if j else "")
            )
    symbols, data = [], np.empty((n, width - 1))
    for j, r in enumerate(rows):
        symbols.append(r[0])
        for k, tok in enumerate(r[1:], 2):
            try:
                data[j, k - 2] = v = float(tok)
            except ValueError:
                raise XyzError(
                    f"{name} line {i + 3 + j} field {k}: {_quote(tok)} is not a number"
                ) from None
            if not math.isfinite(v):
                raise XyzError(
                    f"{name} line {i + 3 + j} field {k}: {_quote(tok)} is not a finite number"
                )
    found = {c: data[:, s - 1 : s - 1 + w] for c, s, w in cols if c != "species"}
    if "masses" not in found and "mass" in found:  # LAMMPS's dump_modify mass yes
        found["masses"] = found["mass"]
    vel = None if vel_column is None else found[vel_column]
    lammps = LAMMPS_KEY in info
    if vel_column == "momenta":
        vel = _ase_velocities(vel, found.get("masses"), symbols, name, i + 3)
    elif vel is not None:
        vel = vel * (1.0 if lammps else _VELOCITY_A_PS[vel_column])
        if lammps:
            _check_lammps_temperature(vel, found.get("masses"), symbols, info, where)
    energies, masses = found.get("energies"), found.get("masses")
    structure = Structure(
        np.array(symbols),
        _shifted(found["pos"], origin, box),
        box,
        vel,
        None if found.get("forces") is None else found["forces"].copy(),
        None if energies is None else energies[:, 0].copy(),
        None if masses is None else masses[:, 0].copy(),
        _bath_info(info, where),
        _images(found.get(IMAGES), name, i + 3),
        _step(info, where),
    )
    return XyzFrame(structure, origin, lammps)


def _step(info: dict[str, str], where: str) -> int | None:
    """The frame's step: wse's `step=` or LAMMPS's `Timestep=` (both: the same), a whole
    number >= 0; None when the frame has neither."""
    given = {k: info[k] for k in ("step", LAMMPS_KEY) if k in info}
    steps = set()
    for k, v in given.items():
        try:
            n = int(v)
        except ValueError:
            n = -1
        if n < 0:
            raise XyzError(f"{where}: {k}={_quote(v)} must be a whole number >= 0 (a time step)")
        steps.add(n)
    if len(steps) > 1:
        raise XyzError(f"{where}: step={info['step']} and Timestep={info[LAMMPS_KEY]} differ")
    return steps.pop() if steps else None


def _check_lammps_temperature(vel, masses, symbols, info: dict[str, str], where: str) -> None:
    """A LAMMPS dump's Temperature= against its velocities read in A/ps (module docstring);
    nothing to check without the key or where a symbol is no element and no masses are given."""
    if "temperature" not in info or len(symbols) < 2:
        return
    try:
        said = float(info["temperature"])
    except ValueError:
        return  # not a number: nothing that says the unit
    if masses is None:
        table = {s: ase_mass_amu(s) for s in set(symbols)}
        if any(m is None for m in table.values()):
            return
        masses = np.array([table[s] for s in symbols])
    else:
        masses = masses[:, 0]
    with np.errstate(over="ignore", invalid="ignore"):
        got = kinetic(masses, vel)[1]
    f = LAMMPS_TEMPERATURE_FACTOR
    if said == got or (said > 0 and got > 0 and said / f <= got <= said * f):
        return
    raise XyzError(
        f"{where}: a LAMMPS dump extxyz (Timestep=) whose Temperature={info['temperature']} K "
        f"disagrees with its vel:R:3 read in A/ps, LAMMPS units metal ({got:.4g} K): was it "
        "written under other units (units real: A/fs)? wse reads a LAMMPS dump's velocities "
        "in units metal, as its EAM files"
    )


def _images(flags: np.ndarray | None, name: str, first_line: int) -> np.ndarray | None:
    """The image flags (n, 3) int64 of a map_shift column: whole numbers within MAX_IMAGE."""
    if flags is None:
        return None
    bad = np.nonzero((flags != np.rint(flags)) | (np.abs(flags) > MAX_IMAGE))[0]
    if bad.size:
        j = int(bad[0])
        raise XyzError(
            f"{name} line {first_line + j}: {IMAGES} {flags[j].tolist()} must be 3 whole numbers "
            f"within +-{MAX_IMAGE:g} (the boxes an atom crossed, LAMMPS's ix iy iz)"
        )
    return flags.astype(np.int64)


def _bath_info(info: dict[str, str], where: str) -> dict[str, float | tuple[float, ...]]:
    """The Nosé–Hoover bath's keys of a comment line (both or neither), as finite floats:
    one number each (a single thermostat) or a chain's, quoted, as many for both."""
    given = [k for k in NOSE_HOOVER_KEYS if k in info]
    if not given:
        return {}
    if len(given) == 1:
        other = next(k for k in NOSE_HOOVER_KEYS if k not in given)
        raise XyzError(
            f"{where}: {given[0]} without {other}: a Nose-Hoover bath needs both (a "
            "--thermostat nose-hoover run's --out writes them)"
        )
    out: dict[str, float | tuple[float, ...]] = {}
    for k in NOSE_HOOVER_KEYS:
        try:
            values = tuple(float(v) for v in info[k].split())
        except ValueError:
            values = (math.nan,)
        if not values or not all(math.isfinite(v) for v in values):
            raise XyzError(f"{where}: {k}={_quote(info[k])} is not a finite number")
        out[k] = values[0] if len(values) == 1 and len(info[k].split()) == 1 else values
    xi, eta = (np.atleast_1d(out[k]).size for k in NOSE_HOOVER_KEYS)
    if xi != eta:
        raise XyzError(
            f"{where}: {NOSE_HOOVER_KEYS[0]} has {xi} values and {NOSE_HOOVER_KEYS[1]} {eta}: "
            "a Nose-Hoover chain has one of each per element"
        )
    return out
