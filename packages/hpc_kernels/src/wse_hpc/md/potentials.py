"""EAM potentials from LAMMPS files: funcfl (`*.eam`), setfl (`*.eam.alloy`) and
Finnis–Sinclair (`*.eam.fs`), held and interpolated exactly as LAMMPS's `pair_style eam*`.

Contract:
- `read_potential(paths)` parses one setfl / fs file, or one or more funcfl files (one per
  element, LAMMPS `pair_coeff i i file`), into an `EamPotential` on LAMMPS's internal grid
  (funcfl files are put on a common grid with LAMMPS's 4-point Lagrange rule; their effective
  charges become `z2r = 27.2 * 0.529 * Z_i Z_j`, LAMMPS's constant). Each file's format is
  its name's (`*.eam.alloy` / `*.setfl`, `*.eam.fs`, else funcfl); a setfl or fs file is
  given alone, and two funcfl files for one element are refused.
- `EamPotential.restricted(symbols)` keeps the elements a structure uses (their tables are
  the ones the PEs hold); `wse_hpc.md.resample` resamples the tables to fewer knots.
- `EamPotential` tables: `frho[a]` F(rho) on `nrho` points of `drho`; `rhor[a, b]` the density
  an atom of element a puts on an atom of element b, on `nr` points of `dr`; `z2r[a, b]`
  r * phi(r) (symmetric). All float64, energies in eV, distances in Angstrom.
- `spline_coeffs` builds LAMMPS's 7-coefficient cubic splines (`PairEAM::interpolate`);
  `EamPotential.evaluate_*` (NumPy, float64) and `wse_hpc.md.eam` (JAX) evaluate them with
  LAMMPS's index and clamp rules, including F's linear extension above `rhomax`.
- `write_setfl(pot, path)` writes a setfl file that LAMMPS reads.
- A malformed file raises `PotentialError` naming the file, the line and the field (the
  files' text, line by line as LAMMPS reads it: `wse_hpc.md.potential_format`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from wse_core.host.readers import not_regular

from wse_hpc.md.potential_format import (
    PotentialError,
    PotentialLines,
    element_line,
    format_by_name,
    funcfl_elements,
    given_alone,
    grid_line,
    r_table_reach,
    read_as_funcfl,
    table_text,
)

__all__ = [
    "MIN_KNOTS",
    "PotentialError",
    "EamPotential",
    "read_potential",
    "read_funcfl",
    "read_setfl",
    "write_setfl",
    "spline_coeffs",
    "FUNCFL_CHARGE_EV_A",
]

MIN_KNOTS = 5  # LAMMPS's splines take the 5 knots around an interval (a table's least)
FUNCFL_CHARGE_EV_A = 27.2 * 0.529  # LAMMPS's Hartree * Bohr for funcfl charges (ASE: 14.4)


@dataclasses.dataclass(frozen=True, eq=False)
class EamPotential:
    """An EAM potential on LAMMPS's internal grid (see the module docstring)."""

    kind: str  # "funcfl", "setfl" or "fs"
    elements: tuple[str, ...]
    masses_amu: tuple[float, ...]
    numbers: tuple[int, ...]
    lattice_A: tuple[float, ...]
    structures: tuple[str, ...]
    nrho: int
    drho: float
    nr: int
    dr: float
    cutoff_A: float
    frho: np.ndarray  # (ne, nrho)
    rhor: np.ndarray  # (ne, ne, nr): by an atom of element a on one of element b
    z2r: np.ndarray  # (ne, ne, nr), symmetric
    source: str = ""  # the file name(s) it was read from, for messages
    funcfl_rhomax: float | None = None  # LAMMPS's funcfl rhomax (`rhomax`)

    @property
    def rhomax(self) -> float:
        """Where F extends linearly: the table's end, (nrho - 1) * drho; for funcfl files
        LAMMPS's `file2array` rhomax, the files' largest (Nrho - 1) * drho, which it keeps
        after setting nrho = rhomax / drho, so its table ends a drho before it (hunt 73:
        an alloy at rho 45-61 over Cu_u3-like tables to 40 differed by 8 eV)."""
        if self.funcfl_rhomax is not None:
            return self.funcfl_rhomax
        return (self.nrho - 1) * self.drho

    def element_index(self, symbol: str) -> int:
        if symbol not in self.elements:
            raise PotentialError(
                f"element {symbol!r} is not in this potential (it has {', '.join(self.elements)})"
            )
        return self.elements.index(symbol)

    def restricted(self, symbols) -> EamPotential:
        """This potential with only its elements in `symbols`, in its own order (hunt 68:
        NiAlH_jea on pure Ni was refused for the SRAM of Al's and H's tables, which no atom
        reads). Every kept table is the same; so is the grid (LAMMPS's, of every file)."""
        keep = [i for i, e in enumerate(self.elements) if e in set(symbols)]
        if not keep or len(keep) == len(self.elements):
            return self
        ix = np.array(keep)

        def pick(values: tuple) -> tuple:
            return tuple(values[i] for i in keep)

        return dataclasses.replace(
            self,
            elements=pick(self.elements),
            masses_amu=pick(self.masses_amu),
            numbers=pick(self.numbers),
            lattice_A=pick(self.lattice_A),
            structures=pick(self.structures),
            frho=self.frho[ix],
            rhor=self.rhor[np.ix_(ix, ix)],
            z2r=self.z2r[np.ix_(ix, ix)],
        )

    def splines(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(F, rho, z2r) spline coefficients: (ne, nrho, 7), (ne, ne, nr, 7), (ne, ne, nr, 7)."""
        return (
            spline_coeffs(self.frho, self.drho),
            spline_coeffs(self.rhor, self.dr),
            spline_coeffs(self.z2r, self.dr),
        )


# -- LAMMPS's splines ----------------------------------------------------------------------
def spline_coeffs(f: np.ndarray, delta: float) -> np.ndarray:
    """LAMMPS `PairEAM::interpolate` on the last axis: (..., n) -> (..., n, 7).

    Coefficients 3..6 give the value ((c3 p + c4) p + c5) p + c6, 0..2 the derivative
    (c0 p + c1) p + c2 (per unit of x, not of p), p in [0, 1] within a knot interval.
    """
    f = np.asarray(f, dtype=np.float64)
    n = f.shape[-1]
    if n < 5:
        raise PotentialError(f"a potential table needs at least 5 points, got {n}")
    s = np.zeros(f.shape + (7,))
    s[..., 6] = f
    d = s[..., 5]
    d[..., 0] = f[..., 1] - f[..., 0]
    d[..., 1] = 0.5 * (f[..., 2] - f[..., 0])
    d[..., n - 2] = 0.5 * (f[..., n - 1] - f[..., n - 3])
    d[..., n - 1] = f[..., n - 1] - f[..., n - 2]
    d[..., 2 : n - 2] = (
        (f[..., : n - 4] - f[..., 4:]) + 8.0 * (f[..., 3 : n - 1] - f[..., 1 : n - 3])
    ) / 12.0
    df = f[..., 1:] - f[..., :-1]
    s[..., : n - 1, 4] = 3.0 * df - 2.0 * d[..., :-1] - d[..., 1:]
    s[..., : n - 1, 3] = d[..., :-1] + d[..., 1:] - 2.0 * df
    s[..., 2] = s[..., 5] / delta
    s[..., 1] = 2.0 * s[..., 4] / delta
    s[..., 0] = 3.0 * s[..., 3] / delta
    return s


# -- funcfl ---------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class _Funcfl:
    number: int
    mass: float
    alat: float
    structure: str
    nrho: int
    drho: float
    nr: int
    dr: float
    cut: float
    frho: np.ndarray
    zr: np.ndarray
    rhor: np.ndarray
    line: int  # the element line's number, for messages


def _read_one_funcfl(path: Path) -> _Funcfl:
    """One funcfl file; a malformed one that looks like a setfl says it was read as funcfl
    by its name (a file that is no text says only that: hunt 68, a .gz was told to be renamed
    as a setfl)."""
    src = PotentialLines(path)
    try:
        src.comment("a comment line")
        number, mass, alat, lat = element_line(src)
        line = src.at
        nrho, drho, nr, dr, cut = grid_line(src)
        grid_at = src.at  # the grid line's number, for the r table's reach (hunt 63)
        frho = src.numbers(nrho, "F(rho)")
        zr = src.numbers(nr, "Z(r)")
        rhor = src.numbers(nr, "rho(r)")
        r_table_reach(src, grid_at, nr, dr, cut)
    except PotentialError as e:
        raise PotentialError(f"{e}{read_as_funcfl(path)}") from None
    return _Funcfl(number, mass, alat, lat, nrho, drho, nr, dr, cut, frho, zr, rhor, line)


def _lagrange(values: np.ndarray, step: float, n_new: int, new_step: float) -> np.ndarray:
    """LAMMPS's 4-point Lagrange resampling of a funcfl table onto the common grid."""
    n = values.shape[0]
    x = np.arange(n_new) * new_step
    p = x / step + 1.0
    k = np.clip(p.astype(np.int64), 2, n - 2)
    p = np.minimum(p - k, 2.0)
    c1 = -p * (p - 1.0) * (p - 2.0) / 6.0
    c2 = 0.5 * (p * p - 1.0) * (p - 2.0)
    c3 = -0.5 * p * (p + 1.0) * (p - 2.0)
    c4 = p * (p * p - 1.0) / 6.0
    f = np.concatenate([[0.0], values])  # 1-based like LAMMPS
    return c1 * f[k - 1] + c2 * f[k] + c3 * f[k + 1] + c4 * f[k + 2]


def read_funcfl(
    paths: Sequence[str | Path],
    elements: Sequence[str] | None = None,
    *,
    species: Sequence[str] = (),
) -> EamPotential:
    """One funcfl file per element, on LAMMPS's common grid (`PairEAM::file2array`);
    `elements` names them (default: by each file's atomic number, `funcfl_elements`)."""
    ps = [Path(p) for p in paths]
    files = [_read_one_funcfl(p) for p in ps]
    if elements is None:
        elements = funcfl_elements(
            [(p, f.number, f.line) for p, f in zip(ps, files, strict=True)], species
        )
    _one_file_per_element(ps, elements, files)
    drho = max(f.drho for f in files)
    dr = max(f.dr for f in files)
    rhomax = max((f.nrho - 1) * f.drho for f in files)
    rmax = max((f.nr - 1) * f.dr for f in files)
    nrho = int(rhomax / drho + 0.5)
    nr = int(rmax / dr + 0.5)
    frho = np.stack([_lagrange(f.frho, f.drho, nrho, drho) for f in files])
    rho1 = np.stack([_lagrange(f.rhor, f.dr, nr, dr) for f in files])
    zr = np.stack([_lagrange(f.zr, f.dr, nr, dr) for f in files])
    ne = len(files)
    rhor = np.repeat(rho1[:, None, :], ne, axis=1)
    z2r = FUNCFL_CHARGE_EV_A * zr[:, None, :] * zr[None, :, :]
    return EamPotential(
        kind="funcfl",
        elements=tuple(elements),
        masses_amu=tuple(f.mass for f in files),
        numbers=tuple(f.number for f in files),
        lattice_A=tuple(f.alat for f in files),
        structures=tuple(f.structure for f in files),
        nrho=nrho,
        drho=drho,
        nr=nr,
        dr=dr,
        cutoff_A=max(f.cut for f in files),
        frho=frho,
        rhor=rhor,
        z2r=z2r,
        source=", ".join(p.name for p in ps),
        funcfl_rhomax=rhomax,
    )


def _one_file_per_element(paths: list[Path], elements: Sequence[str], files) -> None:
    """Hunt 68: with Cu_u3.eam and Cu_u6.eam the last was used and the first dropped
    without a word (a setfl's `2 Cu Cu` is refused): one funcfl file per element."""
    first: dict[str, int] = {}
    for i, e in enumerate(elements):
        j = first.setdefault(e, i)
        if j == i:
            continue
        a, b = paths[j], paths[i]
        if a.resolve() == b.resolve():
            raise PotentialError(f"{a.name} is given twice; give one funcfl file per element")
        raise PotentialError(
            f"{a.name} and {b.name} are both for {e} (atomic number {files[j].number}); "
            "give one funcfl file per element"
        )


# -- setfl and Finnis-Sinclair ---------------------------------------------------------------
def read_setfl(path: str | Path, *, fs: bool = False) -> EamPotential:
    """A setfl (`eam/alloy`) or, with `fs=True`, a Finnis–Sinclair (`eam/fs`) file."""
    path = Path(path)
    src = PotentialLines(path)
    for _ in range(3):
        src.comment("three comment lines")
    lineno, head = src.header("the element line 'N el1 ... elN'")
    try:
        ne = int(head[0])
    except (ValueError, IndexError):
        raise PotentialError(
            f"{path.name} line {lineno} field 1: {head[0] if head else ''!r} is not an element "
            "count (setfl line 4 is 'N el1 ... elN')"
        ) from None
    if ne < 1 or len(head) != ne + 1:  # LAMMPS: "Incorrect element names in EAM potential"
        raise PotentialError(
            f"{path.name} line {lineno}: says {ne} elements but names {len(head) - 1}"
        )
    elements = tuple(head[1 : ne + 1])
    seen: set[str] = set()  # hunt 61: "2 Cu Cu" failed later, on a table value
    if (twice := next((e for e in elements if e in seen or seen.add(e)), None)) is not None:
        raise PotentialError(
            f"{path.name} line {lineno}: element {twice!r} is named twice; name each once"
        )
    nrho, drho, nr, dr, cut = grid_line(src)
    grid_at = src.at  # the grid line's number, for the r table's reach (hunt 63)
    # Tables are read before they are stacked: each read is bounded by the rest of the file
    # (hunt 61: np.zeros((N, N, Nr)) up front was 2.9 TiB for a line 4 naming 20,000
    # elements, 75 GiB for Nr 10^10: a MemoryError traceback before a value was read).
    meta, frho, rho = [], [], []
    for a in range(ne):
        meta.append(element_line(src))
        frho.append(src.numbers(nrho, f"F(rho) of {elements[a]}"))
        if fs:
            rho.append([src.numbers(nr, f"rho_{elements[a]}{e}(r)") for e in elements])
        else:
            rho.append([src.numbers(nr, f"rho(r) of {elements[a]}")] * ne)
    phi = [[src.numbers(nr, f"r*phi(r) of {elements[a]}-{elements[b]}") for b in range(a + 1)]
           for a in range(ne)]  # fmt: skip
    r_table_reach(src, grid_at, nr, dr, cut)
    rhor = np.array(rho)
    z2r = np.array([[phi[max(a, b)][min(a, b)] for b in range(ne)] for a in range(ne)])
    return EamPotential(
        kind="fs" if fs else "setfl",
        elements=elements,
        masses_amu=tuple(m[1] for m in meta),
        numbers=tuple(m[0] for m in meta),
        lattice_A=tuple(m[2] for m in meta),
        structures=tuple(m[3] for m in meta),
        nrho=nrho,
        drho=drho,
        nr=nr,
        dr=dr,
        cutoff_A=cut,
        frho=np.stack(frho),
        rhor=rhor,
        z2r=z2r,
        source=path.name,
    )


def read_potential(
    paths: str | Path | Sequence[str | Path],
    elements: Sequence[str] | None = None,
    *,
    species: Sequence[str] = (),
) -> EamPotential:
    """A potential by file name: `*.eam.alloy` setfl, `*.eam.fs` Finnis–Sinclair, else funcfl.

    funcfl files carry no element symbol: `elements` names them (default: from the atomic
    number in the file; one that names no element takes the one of `species`, the
    structure's symbols, no other file names). A file that fails as funcfl and looks like
    a setfl says it was read so by its name.
    """
    ps = [Path(paths)] if isinstance(paths, str | Path) else [Path(p) for p in paths]
    if not ps:
        raise PotentialError("no potential file given")
    for p in ps:
        if not p.is_file():
            why = not_regular(p) or "does not exist"
            raise PotentialError(f"potential file {str(p)!r} {why}")
    if len(ps) > 1 and (why := given_alone(ps)):  # hunt 61: the files after it were ignored
        raise PotentialError(why)
    if (kind := format_by_name(ps[0])) != "funcfl":
        return read_setfl(ps[0], fs=kind == "fs")
    return read_funcfl(ps, elements, species=species)


# -- writing --------------------------------------------------------------------------------
def write_setfl(pot: EamPotential, path: str | Path, comments: Sequence[str] = ()) -> Path:
    """Write `pot` as a setfl (`eam/alloy`) file LAMMPS reads; fs tables are refused."""
    if pot.kind == "fs" and not np.allclose(pot.rhor, pot.rhor[:, :1, :]):
        raise PotentialError(
            "a Finnis-Sinclair potential with pair-specific densities cannot be written as setfl"
        )
    lines = [*(re.sub(r"\s+", " ", c) for c in comments)][:3]
    lines += ["wse-stack setfl"] * (3 - len(lines))
    out = [
        "\n".join(lines) + "\n",
        f"{len(pot.elements)} {' '.join(pot.elements)}\n",
        f"{pot.nrho} {pot.drho:.16e} {pot.nr} {pot.dr:.16e} {pot.cutoff_A:.16e}\n",
    ]
    for a in range(len(pot.elements)):
        out.append(
            f"{pot.numbers[a]} {pot.masses_amu[a]:.10g} {pot.lattice_A[a]:.10g} "
            f"{pot.structures[a]}\n"
        )
        out.append(table_text(pot.frho[a]))
        out.append(table_text(pot.rhor[a, 0]))
    for a in range(len(pot.elements)):
        for b in range(a + 1):
            out.append(table_text(pot.z2r[a, b]))
    from wse_core.host.atomic import write_atomically

    return write_atomically(path, "".join(out))  # the CLI checked the nearest folder
