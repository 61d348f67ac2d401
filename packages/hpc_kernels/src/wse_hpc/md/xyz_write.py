"""Writing extended XYZ frames (`wse_hpc.md.xyz` reads them; its docstring is the format).

Contract: `write_xyz(path, frames, append=)` writes (or appends) frames, each whole: a write
that fails (a full disk, `ulimit -f`) or is interrupted (Ctrl-C, a signal's exception) cuts
the file back to the end of its last whole frame and raises, an OSError naming the file
(hunt 64: `ulimit -f` left half a line of a frame that neither wse nor ASE could read, and
the error named no file). A path ending in `.gz` (or `compress=True`) is written as gzip,
one member per frame (`zcat`, Python's gzip and ASE read the members as one text; hunt 68:
`--out t.xyz.gz` was plain text that zcat and ASE refused). `frame_bytes(num_atoms)` bounds
the size of one frame as written (uncompressed).

Velocities are written as ASE reads them (hunt 68: a `velocities:R:3` column was kept by ASE
as an unnamed array, so `get_temperature()` was 0 and an ASE-written LAMMPS data file had no
Velocities): `momenta:R:3` in ASE's units beside `masses:R:1` (the structure's masses, else
ASE's standard ones), so `ase.io.read(f).get_velocities()` is the velocities / (1000 ASE_FS).
A structure whose symbols are no elements and that has no masses keeps `velocities:R:3`
(A/ps), which `xyz.read_xyz` reads as before. A structure's `info` (the Nosé–Hoover bath)
goes on its comment line, each value as `repr` prints it (read back to the bit); a chain's
values (a sequence) quoted together, `nose_hoover_xi="x0 x1 x2"`; its step
(`Structure.step`) as `step=N`, unless `info` gives one. A structure's image flags
(`Structure.images`, LAMMPS's ix iy iz) are the column `map_shift:I:3`, last: the unwrapped
position is pos + map_shift x the box side (OVITO's Periodic Image; hunt 76: frames held
wrapped positions alone, and no displacement could be computed from them).
"""

from __future__ import annotations

import contextlib
import math
import os
import zlib
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from wse_hpc.md.elements import ase_mass_amu
from wse_hpc.md.lattice import Structure

__all__ = ["write_xyz", "frame_bytes", "VALUE_CHARS", "ASE_FS", "IMAGES"]

# the image flags' column: OVITO reads and writes its Periodic Image property under this name
# in extended XYZ (as libAtoms/QUIP name it); ASE keeps it as the array `map_shift`
IMAGES = "map_shift"

# ASE's unit of time is A sqrt(amu / eV); ase.units.fs = 1e-15 s in it, from CODATA 2014
# (ase.units' default): a velocity of 1 A per ASE time unit is 1000 * ASE_FS A/ps
_E_C, _AMU_KG = 1.6021766208e-19, 1.66053904e-27
ASE_FS = 1e-15 * (1e10 * math.sqrt(_E_C / _AMU_KG))  # as ase.units computes it, to the bit


def _masses(s: Structure) -> np.ndarray | None:
    """The (N,) masses (amu) the momenta are written with: the structure's, else ASE's
    standard ones; None when a symbol is no element."""
    if s.masses_amu is not None:
        return np.asarray(s.masses_amu, dtype=np.float64)
    table = {sym: ase_mass_amu(sym) for sym in set(s.symbols.tolist())}
    if any(m is None for m in table.values()):
        return None
    return np.array([table[sym] for sym in s.symbols.tolist()])


def _columns(s: Structure) -> list[tuple[str, np.ndarray]]:
    """(Properties name:type:count, (N, k) values) of every column after species and pos."""
    masses, cols = _masses(s), []
    v = s.velocities_A_ps
    if v is not None and masses is None:  # no mass to make momenta with: wse's own column
        cols.append(("velocities:R:3", np.asarray(v).reshape(-1, 3)))
    elif v is not None:
        momenta = np.asarray(v, dtype=np.float64).reshape(-1, 3) * masses[:, None]
        cols.append(("momenta:R:3", momenta / (1000.0 * ASE_FS)))
    if masses is not None and (v is not None or s.masses_amu is not None):
        cols.append(("masses:R:1", masses[:, None]))
    if s.forces_eV_A is not None:
        cols.append(("forces:R:3", np.asarray(s.forces_eV_A).reshape(-1, 3)))
    if s.energies_eV is not None:
        cols.append(("energies:R:1", np.asarray(s.energies_eV).reshape(-1, 1)))
    if s.images is not None:
        cols.append((f"{IMAGES}:I:3", np.asarray(s.images, dtype=np.int64).reshape(-1, 3)))
    return cols


def _info_value(v) -> str:
    """A number as `repr` prints it; several (a Nosé–Hoover chain's) quoted, as ASE writes
    an array of `Atoms.info`."""
    values = np.asarray(v, dtype=np.float64).reshape(-1)
    if np.ndim(v) == 0:
        return repr(float(values[0]))
    return '"' + " ".join(repr(float(x)) for x in values) + '"'


def _comment(s: Structure, names: list[str], info: dict[str, object]) -> str:
    lx, ly, lz = (float(v) for v in s.box_A)
    parts = [
        f'Lattice="{lx:.10g} 0 0 0 {ly:.10g} 0 0 0 {lz:.10g}"',
        f"Properties={':'.join(['species:S:1', 'pos:R:3', *names])}",
    ]
    if s.energies_eV is not None:
        parts.append(f"energy={float(np.sum(s.energies_eV)):.12g}")
    parts += [f"{k}={_info_value(v)}" for k, v in s.info.items()]
    if s.step is not None and "step" not in info:  # a run's frame: `info` names it too
        parts.append(f"step={int(s.step)}")
    parts += [f"{k}={v}" for k, v in info.items()]
    parts.append('pbc="T T T"')
    return " ".join(parts)


def write_xyz(
    path: str | Path,
    frames: Iterable[Structure],
    *,
    append: bool = False,
    info: dict[str, object] | None = None,
    compress: bool | None = None,
) -> Path:
    """Write (or append) frames, each whole (module docstring); `info` adds key=value pairs
    to every comment line; `compress` gzips each frame (None: when the name ends in .gz)."""
    path = Path(path)
    if compress is None:
        compress = path.name.lower().endswith(".gz")
    path.parent.mkdir(parents=True, exist_ok=True)  # the CLI checked the nearest folder
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC), 0o666)
    try:
        whole = os.lseek(fd, 0, os.SEEK_END)  # the end of the last whole frame
        for s in frames:
            try:
                _write_frame(fd, s, info or {}, compress)
            except BaseException as e:  # a full disk, a file-size limit, Ctrl-C, SIGTERM
                with contextlib.suppress(OSError):  # /dev/null cannot be truncated
                    os.ftruncate(fd, whole)
                if isinstance(e, OSError) and e.filename is None:  # a write names no file
                    e.filename = str(path)
                raise
            whole = os.lseek(fd, 0, os.SEEK_CUR)
    finally:
        os.close(fd)
    return path


ROWS_PER_CHUNK = 4096  # atom lines joined per write: a 900,000-atom frame is never one string


def _write_frame(fd: int, s: Structure, info: dict[str, object], compress: bool) -> None:
    """One frame's text, as it is or as one gzip member (wbits 31: gzip's header)."""
    packer = zlib.compressobj(6, zlib.DEFLATED, 31) if compress else None
    for chunk in _frame_text(s, info):
        data = chunk.encode()
        _write_all(fd, data if packer is None else packer.compress(data))
    if packer is not None:
        _write_all(fd, packer.flush())


def _frame_text(s: Structure, info: dict[str, object]) -> Iterable[str]:
    positions = s.positions_A  # first: a frame that cannot be made fails before any byte
    cols = _columns(s)
    data = np.concatenate([positions, *(c for _, c in cols)], axis=1)
    yield f"{s.num_atoms}\n{_comment(s, [n for n, _ in cols], info)}\n"
    symbols = s.symbols.tolist()
    for i in range(0, s.num_atoms, ROWS_PER_CHUNK):
        rows = zip(symbols[i : i + ROWS_PER_CHUNK], data[i : i + ROWS_PER_CHUNK], strict=True)
        yield "".join(sym + " " + " ".join(f"{v:.10g}" for v in row) + "\n" for sym, row in rows)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:  # a write may take part of the bytes (a signal, the last bytes before a limit)
        view = view[os.write(fd, view) :]


# The widest value `write_xyz` prints below 1e100 in magnitude, with its separator:
# "-1.234567891e-05 " (%.10g); a frame's lines are bounded by it (a 300 K Cu run's lines of
# 10 values measured 135-151 bytes; the bound is 172)
VALUE_CHARS = 17
# Lattice, Properties, energy, the bath (2 x ~40), step and pbc: ~300 measured
COMMENT_CHARS = 400
IMAGE_CHARS = 8  # an image flag and its separator: within +-999,999 boxes


def frame_bytes(
    num_atoms: int, *, symbol_chars: int = 2, values_per_atom: int = 11, images: bool = False
) -> int:
    """An upper estimate of one frame's size as `write_xyz` writes it, uncompressed (bytes):
    positions, momenta, masses, forces and energies are 11 values an atom; `images`: and
    the 3 image flags a run's frames carry."""
    line = symbol_chars + values_per_atom * VALUE_CHARS + (3 * IMAGE_CHARS if images else 0)
    return len(str(num_atoms)) + 1 + COMMENT_CHARS + num_atoms * line
