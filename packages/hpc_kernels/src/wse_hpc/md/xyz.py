"""Extended XYZ trajectories (the format ASE and OVITO read and write).

Each frame: the atom count; a comment line of key=value pairs with
`Lattice="Lx 0 0 0 Ly 0 0 0 Lz"`, `Properties=species:S:1:pos:R:3[:velocities:R:3]
[:forces:R:3][:energies:R:1]`, `pbc="T T T"` and, when energies are known, `energy=` (eV);
then one line per atom. Units: A, A/ps, eV/A, eV. `write_xyz` appends frames (or writes a
new file), `read_xyz` returns every frame as a `Structure`; only orthorhombic lattices are
accepted (a tilted one is a WseError naming the line).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from pathlib import Path

import numpy as np
from wse_core.errors import WseError

from wse_hpc.md.lattice import Structure

__all__ = ["write_xyz", "read_xyz", "XyzError"]

_FIELDS = (
    ("velocities", "velocities_A_ps", 3),
    ("forces", "forces_eV_A", 3),
    ("energies", "energies_eV", 1),
)


class XyzError(WseError):
    """A malformed extended XYZ file."""


def _comment(s: Structure, info: dict[str, object]) -> str:
    lx, ly, lz = (float(v) for v in s.box_A)
    props = ["species:S:1", "pos:R:3"]
    for name, attr, n in _FIELDS:
        if getattr(s, attr) is not None:
            props.append(f"{name}:R:{n}")
    parts = [
        f'Lattice="{lx:.10g} 0 0 0 {ly:.10g} 0 0 0 {lz:.10g}"',
        f"Properties={':'.join(props)}",
    ]
    if s.energies_eV is not None:
        parts.append(f"energy={float(np.sum(s.energies_eV)):.12g}")
    parts += [f"{k}={v}" for k, v in info.items()]
    parts.append('pbc="T T T"')
    return " ".join(parts)


def write_xyz(
    path: str | Path,
    frames: Iterable[Structure],
    *,
    append: bool = False,
    info: dict[str, object] | None = None,
) -> Path:
    """Write (or append) frames; `info` adds key=value pairs to every comment line."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)  # the CLI checked the nearest folder
    with open(path, "a" if append else "w") as f:
        for s in frames:
            cols = [s.positions_A]
            cols += [
                getattr(s, a).reshape(s.num_atoms, n)
                for _, a, n in _FIELDS
                if getattr(s, a) is not None
            ]
            data = np.concatenate(cols, axis=1)
            f.write(f"{s.num_atoms}\n{_comment(s, info or {})}\n")
            for sym, row in zip(s.symbols.tolist(), data, strict=True):
                f.write(sym + " " + " ".join(f"{v:.10g}" for v in row) + "\n")
    return path


def _parse_comment(line: str, lineno: int) -> dict[str, str]:
    try:
        tokens = shlex.split(line)
    except ValueError as e:
        raise XyzError(f"line {lineno}: cannot parse the comment line ({e})") from None
    out = {}
    for tok in tokens:
        if "=" in tok:
            k, v = tok.split("=", 1)
            out[k.strip().lower()] = v
    return out


def _lattice(info: dict[str, str], lineno: int) -> np.ndarray:
    if "lattice" not in info:
        raise XyzError(f'line {lineno}: no Lattice="..." (a periodic box is needed)')
    try:
        m = np.array([float(v) for v in info["lattice"].split()]).reshape(3, 3)
    except ValueError:
        raise XyzError(f"line {lineno}: Lattice must hold 9 numbers") from None
    if np.any(np.abs(m - np.diag(np.diag(m))) > 1e-9):
        raise XyzError(f"line {lineno}: only orthorhombic lattices are supported")
    return np.diag(m).copy()


def _columns(props: str, lineno: int) -> list[tuple[str, int, int]]:
    """(name, first column, width) per property."""
    parts = props.split(":")
    if len(parts) % 3:
        raise XyzError(f"line {lineno}: Properties must be name:type:count triples")
    out, col = [], 0
    for i in range(0, len(parts), 3):
        try:
            name, n = parts[i].lower(), int(parts[i + 2])
        except ValueError:
            raise XyzError(
                f"line {lineno}: Properties count {parts[i + 2]!r} is not an integer"
            ) from None
        if n < 1:
            raise XyzError(f"line {lineno}: Properties count of {name!r} must be >= 1, got {n}")
        out.append((name, col, n))
        col += n
    if out[0][0] != "species" or out[0][2] != 1:  # the reader takes column 0 as the symbol
        raise XyzError(
            f"line {lineno}: Properties must start with species:S:1 (the element symbol), "
            f"got {props[:60]!r}"
        )
    return out


_WIDTHS = {"pos": 3, "velocities": 3, "vel": 3, "velo": 3, "forces": 3, "energies": 1}


def read_xyz(path: str | Path) -> list[Structure]:
    """Every frame of an extended XYZ file."""
    path = Path(path)
    try:
        lines = path.read_text().splitlines()
    except OSError as e:
        raise XyzError(f"cannot read {str(path)!r}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise XyzError(f"{str(path)!r} is not UTF-8 text: {e.reason}") from None
    frames, i = [], 0
    while i < len(lines) and lines[i].strip():
        frames.append(_frame(lines, i))
        i += 2 + frames[-1].num_atoms
    if not frames:
        raise XyzError(f"{path.name}: no frames")
    return frames


def _frame(lines: list[str], i: int) -> Structure:
    try:
        n = int(lines[i].split()[0])
    except (ValueError, IndexError):
        raise XyzError(f"line {i + 1}: expected the atom count, got {lines[i]!r}") from None
    if n < 1:
        raise XyzError(f"line {i + 1}: the atom count must be >= 1, got {n}")
    if i + 2 + n > len(lines):
        raise XyzError(f"line {i + 1}: {n} atoms announced, the file ends first")
    info = _parse_comment(lines[i + 1], i + 2)
    box = _lattice(info, i + 2)
    cols = _columns(info.get("properties", "species:S:1:pos:R:3"), i + 2)
    rows = [re.split(r"\s+", ln.strip()) for ln in lines[i + 2 : i + 2 + n]]
    width = sum(w for _, _, w in cols)
    for j, r in enumerate(rows):
        if len(r) != width:
            raise XyzError(f"line {i + 3 + j}: {len(r)} fields, Properties announces {width}")
    for name, _, w in cols:
        if _WIDTHS.get(name, w) != w:
            raise XyzError(f"line {i + 2}: {name} needs {_WIDTHS[name]} columns, got {w}")
    symbols = np.array([r[0] for r in rows])
    try:
        data = np.array([[float(v) for v in r[1:]] for r in rows])
    except ValueError:
        raise XyzError(f"lines {i + 3}-{i + 2 + n}: a non-numeric atom field") from None
    found = {name: data[:, c - 1 : c - 1 + w] for name, c, w in cols if name != "species"}
    if "pos" not in found:
        raise XyzError(f"line {i + 2}: Properties has no pos:R:3")
    get = {"velocities": "velocities", "vel": "velocities", "velo": "velocities"}
    vel = next((found[k] for k in get if k in found), None)
    energies = found.get("energies")
    return Structure(
        symbols,
        found["pos"].copy(),
        box,
        vel,
        found.get("forces"),
        None if energies is None else energies[:, 0],
    )
