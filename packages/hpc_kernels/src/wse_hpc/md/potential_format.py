"""The text of LAMMPS potential files (`wse_hpc.md.potentials`), read and written as LAMMPS
does: a line cursor that takes the leading comment lines as they are, then header lines one
at a time and tables of n values from as many whole lines as it takes, the grid and element
header lines, element symbols by atomic number, and tables written five values a line;
a file's format by its name (`format_by_name`; a setfl or fs file is `given_alone`) and, for
a file that failed as funcfl, why it was read so (`read_as_funcfl`).

Past the leading comment lines (setfl's 3, funcfl's 1) a `#` starts a comment to the end of
its line and lines left blank are skipped, as LAMMPS's `PotentialFileReader` reads them
(hunt 68: a blank line after the grid line, or a `# F(rho) of Cu` line before a table, was
refused while LAMMPS read both). A header must still be on one line: LAMMPS would join a
short one with the next line's values, which only hides a malformed file.

Contract: every malformed field raises `PotentialError` naming the file, the line (1-based)
and the field (1-based); numbers may use Fortran's `D` exponent and must be finite.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from wse_core.errors import WseError

from wse_hpc.md.elements import SYMBOLS

__all__ = [
    "PotentialError",
    "PotentialLines",
    "header_numbers",
    "grid_line",
    "r_table_reach",
    "element_line",
    "element_symbol",
    "funcfl_elements",
    "table_text",
    "SETFL_SUFFIXES",
    "format_by_name",
    "given_alone",
    "read_as_funcfl",
]


class PotentialError(WseError):
    """A potential file is malformed or does not fit the system."""


# -- a line cursor with line numbers --------------------------------------------------------
FP32_MAX = float(np.finfo(np.float32).max)  # the tables run in fp32 by default
FP32_TINY = float(np.finfo(np.float32).tiny)  # 1.2e-38, fp32's smallest normal: 1 / it is finite
# How far the r table may end short of the cutoff: published files end one spacing short
# (Nr * dr = cutoff: Mishin's Cu01, Mendelev's Fe_mm, Cai & Ye's AlCu), and a spacing printed
# with few digits loses a little more
R_TABLE_SHORT_SPACINGS = 2


class PotentialLines:
    """A potential file read as LAMMPS does: comment lines as they are; then header lines one
    at a time and a table of n values from as many whole lines as it takes (values left on
    its last line are dropped), so every header and table starts on a fresh line; `#...` is
    dropped and blank lines are skipped (module docstring)."""

    def __init__(self, path: Path):
        from wse_core.host.readers import read_text

        self.path = path
        try:  # at most the file_bytes limit (hunt 57: a 9 GiB file was read whole)
            self.lines = read_text(path, "potential file").splitlines()
        except OSError as e:
            raise PotentialError(f"cannot read potential file {str(path)!r}: {e.strerror}") from e
        except UnicodeDecodeError:
            from wse_core.host.readers import packed_hint

            with open(path, "rb") as f:
                how = packed_hint(f.read(8))
            raise PotentialError(f"potential file {str(path)!r} is not a text file{how}") from None
        self.at = 0  # 0-based index of the next line
        self.chars_from = np.cumsum([0, *(len(line) + 1 for line in reversed(self.lines))])[::-1]

    def error(self, lineno: int, field: int, tok: str, what: str) -> PotentialError:
        return PotentialError(
            f"{self.path.name} line {lineno} field {field}: {tok!r} is not {what}"
        )

    def comment(self, what: str) -> None:
        """Take the next line as it is (a leading comment line: LAMMPS's `skip_line`)."""
        if self.at >= len(self.lines):
            raise PotentialError(
                f"{self.path.name}: file ends at line {len(self.lines)}; expected {what}"
            )
        self.at += 1

    def _fields(self) -> tuple[int, list[str]] | None:
        """(1-based line number, fields) of the next line with fields once `#...` is cut
        (LAMMPS's `next_line`), or None at the end of the file."""
        while self.at < len(self.lines):
            self.at += 1
            fields = self.lines[self.at - 1].split("#", 1)[0].split()
            if fields:
                return self.at, fields
        return None

    def header(self, what: str) -> tuple[int, list[str]]:
        """(1-based line number, fields) of the next line that has any."""
        found = self._fields()
        if found is None:
            raise PotentialError(
                f"{self.path.name}: file ends at line {len(self.lines)}; expected {what}"
            )
        return found

    def numbers(self, count: int, what: str) -> np.ndarray:
        # A header may claim 10^12 values: allocate only what the rest of the file can hold
        # (a value and its separator take two characters); short of `count`, it ends early.
        rest = self.chars_from[self.at]  # hunt 61: summed per table, 10^5 tables took minutes
        out = np.empty(max(0, min(count, rest // 2 + 1)))
        n = 0
        while n < count:
            if (found := self._fields()) is None:
                raise PotentialError(
                    f"{self.path.name}: file ends early: expected {count} values of {what}, "
                    f"found {n}"
                )
            lineno, fields = found
            for k, tok in enumerate(fields[: count - n], 1):
                try:
                    out[n] = float(tok.replace("D", "E").replace("d", "e"))
                except ValueError:
                    raise self.error(lineno, k, tok, f"a number (reading {what})") from None
                if not abs(out[n]) <= FP32_MAX:  # NaN, inf, and what fp32 tables cannot hold
                    raise self.error(
                        lineno, k, tok, f"a finite number within +-3.4e38 (reading {what})"
                    )
                n += 1
        return out


def header_numbers(
    src: PotentialLines, types: str, what: str, least: int | None = None
) -> tuple[int, list[float | int], list[str]]:
    """The next line parsed as numbers of the given types ('i' int, 'f' float); with
    `least`, a line of at least that many fields is enough (those it has are parsed)."""
    lineno, fields = src.header(what)
    need = len(types) if least is None else least
    if len(fields) < need:
        raise PotentialError(
            f"{src.path.name} line {lineno}: expected {'at least ' if least else ''}{need} "
            f"fields ({what}), found {len(fields)}"
        )
    out: list[float | int] = []
    for k, (t, s) in enumerate(zip(types, fields, strict=False), 1):
        try:
            v = int(s) if t == "i" else float(s.replace("D", "E").replace("d", "e"))
        except ValueError:
            kind = "an integer" if t == "i" else "a number"
            raise src.error(lineno, k, s, f"{kind} ({what})") from None
        if t == "f" and not abs(v) <= FP32_MAX:  # hunt 61: dr inf, mass inf ran (and blew up)
            raise src.error(lineno, k, s, f"a finite number within +-3.4e38 ({what})")
        out.append(v)
    return lineno, out, fields


def grid_line(src: PotentialLines) -> tuple[int, float, int, float, float]:
    """The grid line: (Nrho, drho, Nr, dr, cutoff), Nrho and Nr >= 5, the rest > 0."""
    lineno, vals, _ = header_numbers(src, "ififf", "Nrho drho Nr dr cutoff")
    nrho, drho, nr, dr, cut = vals
    for name, v in (("Nrho", nrho), ("Nr", nr)):
        if v < 5:
            raise PotentialError(f"{src.path.name} line {lineno}: {name} = {v}; need >= 5")
    for name, v in (("drho", drho), ("dr", dr), ("cutoff", cut)):
        if not v > 0:
            raise PotentialError(f"{src.path.name} line {lineno}: {name} = {v} must be positive")
    for name, v in (("drho", drho), ("dr", dr)):  # hunt 63: dr 1e-300 printed "press": -inf
        if v < FP32_TINY:  # the splines multiply by 1 / spacing, in fp32: inf, then NaN forces
            raise PotentialError(
                f"{src.path.name} line {lineno}: {name} = {v:.3g} is below fp32's smallest "
                f"normal number {FP32_TINY:.3g}: the fp32 tables take 1 / {name}, which "
                f"overflows; give a knot spacing of at least {FP32_TINY:.3g}"
            )
    for name, n, d in (("rho", nrho, drho), ("r", nr, dr)):  # hunt 61: drho 1e308 ran
        if not (n - 1) * d <= FP32_MAX:
            raise PotentialError(
                f"{src.path.name} line {lineno}: the {name} table spans (N{name} - 1) * d{name}"
                f" = {(n - 1) * d:.3g}; it must stay within 3.4e38 (fp32)"
            )
    return int(nrho), float(drho), int(nr), float(dr), float(cut)


def r_table_reach(src: PotentialLines, lineno: int, nr: int, dr: float, cut: float) -> None:
    """The r tables, read, must reach the cutoff of the grid line `lineno` (checked after
    the tables, so a malformed file is told so first).

    Hunt 63: dr 1e-3 made the r table span 1 A of a 5.7 A cutoff and the run gave PE -0.02
    eV: every pair past the table's end takes its last knot's value (LAMMPS's pair_eam clamps
    so too, and reads such a file without a word). The rho table is not held to the
    densities: they depend on the structure, and F extends linearly past rhomax (LAMMPS)."""
    if (nr - 1) * dr < cut - R_TABLE_SHORT_SPACINGS * dr:
        raise PotentialError(
            f"{src.path.name} line {lineno}: the r table ends at (Nr - 1) * dr = "
            f"{(nr - 1) * dr:.4g} A, short of the cutoff {cut:.4g} A: every pair between "
            f"would take the table's last value; give Nr and dr with Nr * dr >= cutoff"
        )


def element_line(src: PotentialLines) -> tuple[int, float, float, str]:
    """An element line: (atomic number, mass amu > 0, lattice constant A or 0, lattice or "?").
    Only the first two are needed, as LAMMPS's pair_eam and pair_eam_alloy read them
    (`next_values(2)`, the rest ignored; hunt 73: "29 63.546" was refused); a lattice
    constant given is still checked as a number."""
    what = "atomic number, mass, lattice constant, lattice"
    lineno, vals, fields = header_numbers(src, "iff", what, least=2)
    number, mass = vals[0], vals[1]
    if not mass > 0:
        raise PotentialError(f"{src.path.name} line {lineno} field 2: mass {mass} must be > 0")
    alat = float(vals[2]) if len(vals) > 2 else 0.0
    return int(number), float(mass), alat, fields[3] if len(fields) > 3 else "?"


def element_symbol(number: int, path: Path, line: int = 2) -> str:
    """The symbol of atomic number `number` (1 .. 118), read from `path`'s `line` (else
    PotentialError: LAMMPS ignores a funcfl file's number, its element comes from pair_coeff,
    so `read_funcfl` may name the file otherwise; hunt 73: 0 and U's 92 were refused)."""
    if 0 < number < len(SYMBOLS):
        return SYMBOLS[number]
    raise PotentialError(
        f"{path.name} line {line} field 1: atomic number {number} names no element"
    )


def funcfl_elements(files: list[tuple[Path, int, int]], species: Sequence[str]) -> list[str]:
    """The element of each funcfl file, given as (path, atomic number, its line), by its
    number. LAMMPS ignores the number (pair_coeff names the element), so a file whose number
    names no element (0, a placeholder) takes the one element of `species`, the structure's
    symbols, that no other file names; else PotentialError says what to set."""
    named: list[str | None] = []
    unnamed: list[PotentialError] = []
    for path, number, line in files:
        try:
            named.append(element_symbol(number, path, line))
        except PotentialError as e:
            named.append(None)
            unnamed.append(e)
    left = [e for e in dict.fromkeys(species) if e not in named]
    if len(unnamed) == 1 and len(left) == 1:
        return [left[0] if e is None else e for e in named]
    if unnamed:
        those = f" (the structure's {', '.join(left[:5])})" if left else ""
        raise PotentialError(
            f"{unnamed[0]}: wse names a funcfl file's element by it; set it to the atomic "
            f"number of the element the file is for{those}, e.g. 29 for Cu"
        )
    return [e for e in named if e is not None]


def table_text(values: np.ndarray) -> str:
    """A table as LAMMPS writes one: five values a line, 17 significant digits."""
    rows = [" ".join(f"{v:.16e}" for v in values[i : i + 5]) for i in range(0, len(values), 5)]
    return "\n".join(rows) + "\n"


# -- formats by name ---------------------------------------------------------------------------
SETFL_SUFFIXES = (".eam.alloy", ".setfl", ".eam.fs")  # else funcfl, as the name says
_WHOLE = {"setfl": "a setfl (eam/alloy)", "fs": "a Finnis-Sinclair (eam/fs) file"}


def format_by_name(path: Path) -> str:
    """The format of `path` by its name: "setfl", "fs" or "funcfl" (hunt 68: each file's
    own; the first file's name decided for all)."""
    name = path.name.lower()
    if name.endswith(".eam.fs"):
        return "fs"
    return "setfl" if name.endswith(SETFL_SUFFIXES) else "funcfl"


def given_alone(paths: list[Path]) -> str | None:
    """Why a setfl or fs file among `paths` must be given alone, or None when all are funcfl
    (hunt 68: a setfl after a funcfl was read as funcfl and told to be named *.eam.alloy,
    which it was; each file's format is its own name's)."""
    kinds = [format_by_name(p) for p in paths]
    whole = next((k for k in kinds if k != "funcfl"), None)
    if whole is None:
        return None
    first = paths[kinds.index(whole)]
    funcfl = [p.name for p, k in zip(paths, kinds, strict=True) if k == "funcfl"]
    if not funcfl:
        return (
            f"{first.name} holds every element of its potential: give it alone (funcfl .eam "
            f"files are the ones given one per element), got {len(paths)} files"
        )
    names = ", ".join(funcfl[:3]) + (f", ... ({len(funcfl)} in all)" if len(funcfl) > 3 else "")
    return (
        f"{first.name} is {_WHOLE[whole]}, which holds every element of its potential: give "
        f"it alone, not with funcfl files ({names}); LAMMPS's pair_style eam reads funcfl "
        "files only"
    )


def read_as_funcfl(path: Path) -> str:
    """For a file that failed as funcfl and looks like a setfl (its line 4 is a setfl's
    element line), why it was read as funcfl and how a setfl is named, as "; ..." to append
    to the error; else "" (hunt 64: a setfl named Cu_zhou04.alloy failed on its comment
    line 2, read as a funcfl element line; hunt 73: the hint followed every funcfl error,
    real funcfl files' too)."""
    with contextlib.suppress(OSError, UnicodeDecodeError):  # the file was read once already
        with open(path, encoding="utf-8") as f:
            line4 = [f.readline() for _ in range(4)][3].split()
        if len(line4) > 1 and line4[0].isdigit() and int(line4[0]) == len(line4) - 1:
            return (
                "; the file was read as funcfl (LAMMPS pair_style eam) by its name: name a "
                "setfl (eam/alloy) *.eam.alloy or *.setfl, a Finnis-Sinclair file (eam/fs) "
                f"*.eam.fs; its line 4 {' '.join(line4)[:40]!r} is a setfl's element line"
            )
    return ""
