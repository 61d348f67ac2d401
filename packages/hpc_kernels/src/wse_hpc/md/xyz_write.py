"""Writing extended XYZ frames (`wse_hpc.md.xyz` reads them; its docstring is the format).

Contract: `write_xyz(path, frames, append=)` writes (or appends) frames, each whole: a write
that fails (a full disk, `ulimit -f`) or is interrupted (Ctrl-C, a signal's exception) cuts
the file back to the end of its last whole frame and raises, an OSError naming the file
(hunt 64: `ulimit -f` left half a line of a frame that neither wse nor ASE could read, and
the error named no file). `frame_bytes(num_atoms)` bounds the size of one frame as written.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from wse_hpc.md.lattice import Structure

__all__ = ["write_xyz", "frame_bytes", "VALUE_CHARS"]

_FIELDS = (
    ("velocities", "velocities_A_ps", 3),
    ("forces", "forces_eV_A", 3),
    ("energies", "energies_eV", 1),
)


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
    """Write (or append) frames, each whole (module docstring); `info` adds key=value pairs
    to every comment line."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)  # the CLI checked the nearest folder
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC), 0o666)
    try:
        whole = os.lseek(fd, 0, os.SEEK_END)  # the end of the last whole frame
        for s in frames:
            try:
                for chunk in _frame_text(s, info or {}):
                    _write_all(fd, chunk.encode())
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


def _frame_text(s: Structure, info: dict[str, object]) -> Iterable[str]:
    cols = [s.positions_A]
    cols += [
        getattr(s, a).reshape(s.num_atoms, n) for _, a, n in _FIELDS if getattr(s, a) is not None
    ]
    data = np.concatenate(cols, axis=1)
    yield f"{s.num_atoms}\n{_comment(s, info)}\n"
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
COMMENT_CHARS = 400  # Lattice, Properties, energy, step and pbc: ~220 measured


def frame_bytes(num_atoms: int, *, symbol_chars: int = 2, values_per_atom: int = 10) -> int:
    """An upper estimate of one frame's size as `write_xyz` writes it (bytes): positions,
    velocities, forces and energies are 10 values an atom."""
    line = symbol_chars + values_per_atom * VALUE_CHARS
    return len(str(num_atoms)) + 1 + COMMENT_CHARS + num_atoms * line
