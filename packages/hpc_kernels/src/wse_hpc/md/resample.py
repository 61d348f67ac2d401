"""Resampling an EAM potential's tables to fewer knots, and what that costs a structure.

A PE holds the potential's tables in its SRAM (`eam.sram_plan`); most EAM files LAMMPS ships
have tables of 3,000-10,000 knots that do not fit one (hunt 68: 18 of its 29 were refused,
and the advice named `wse hpc md potential --knots`, which writes Zhou's 2004 potential, not
the user's file resampled).

Contract:
- `resample(pot, knots)` cuts every table of more than `knots` knots to `knots` knots over
  the same range ((n - 1) * delta is kept, so the r tables still reach the cutoff): each new
  knot is the old table's own spline at that point (LAMMPS's `interpolate`, the spline the
  kernels and LAMMPS evaluate), and the kernels spline the new knots the same way. Tables
  of `knots` knots or fewer are kept; nothing to cut gives `pot` itself.
- `resample_cost(old, new, structure, temperature_K=, seed=) -> ResampleCost`: the largest
  difference the resampling makes where the structure's atoms are: of the force (eV/A) and
  the energy (eV) of each atom (SAMPLE_ATOMS atoms spread over a larger structure), of the
  pressure (bar; from the sample's virials scaled to every atom in a larger one), and of
  each table and its slope over the distances (closest pair .. cutoff) and host densities
  its atoms have. Not over the whole tables: they run to r = 0 and far past any density
  (Mendelev's r phi is 1e12 below 0.5 A, Al_mm's F 2e13 at its rhomax), where differences
  are large and no atom goes. A structure whose forces vanish by symmetry (a perfect
  `--lattice` crystal: ~1e-15 eV/A) would say the force changes by nothing, though a run
  leaves the lattice at once (hunt 76: 1.6e-15 eV/A printed, 0.0034 on a thermalised
  crystal): it is measured on `thermal_copy`, every atom displaced as at the run's
  temperature (seeded), and the line says on what (`measured_on`). `ResampleCost.line()`
  says it in one line. NumPy and SciPy's cKDTree (neighbours within the cutoff, minimum
  image), float64, with LAMMPS's index and clamp rules.
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import numpy as np

from wse_hpc.md.lattice import Structure
from wse_hpc.md.potentials import MIN_KNOTS, EamPotential, PotentialError
from wse_hpc.md.reference import spline_slope, spline_value

__all__ = [
    "resample",
    "resample_cost",
    "ResampleCost",
    "spline_at",
    "thermal_copy",
    "thermal_sigma_A",
    "MIN_KNOTS",
    "SAMPLE_ATOMS",
    "THERMAL_SIGMA_A",
]

SAMPLE_ATOMS = 1024  # atoms whose forces are compared (every atom of a smaller structure)
ROWS_PER_CHUNK = 4096  # atoms whose neighbours are held at once (densities)
POINTS_PER_KNOT = 8  # points per old knot interval where the tables are compared
# A crystal's thermal displacements, rms per axis: 0.07 A at 300 K (Cu's Debye-Waller
# B = 8 pi^2 <u_x^2> ~ 0.55 A^2 gives 0.083 A; W's ~0.05): what `samples` displaces its
# crystals by and what the forces are measured on where a structure's vanish by symmetry
THERMAL_SIGMA_A, THERMAL_K = 0.07, 300.0
FORCE_VANISH_EV_A = 1e-6  # every sampled force below this: a lattice's symmetry (~1e-15 seen)


def resample(pot: EamPotential, knots: int) -> EamPotential:
    """`pot` with every table of more than `knots` knots cut to `knots` (module docstring)."""
    if knots < MIN_KNOTS:
        raise PotentialError(f"a table needs at least {MIN_KNOTS} knots, got {knots}")
    nrho, drho = _grid(pot.nrho, pot.drho, knots)
    nr, dr = _grid(pot.nr, pot.dr, knots)
    if (nrho, nr) == (pot.nrho, pot.nr):
        return pot
    return dataclasses.replace(
        pot,
        nrho=nrho,
        drho=drho,
        nr=nr,
        dr=dr,
        frho=_knots(pot.frho, pot.drho, nrho, drho),
        rhor=_knots(pot.rhor, pot.dr, nr, dr),
        z2r=_knots(pot.z2r, pot.dr, nr, dr),
    )


def _grid(n: int, delta: float, knots: int) -> tuple[int, float]:
    return (n, delta) if n <= knots else (knots, (n - 1) * delta / (knots - 1))


def _knots(table: np.ndarray, delta: float, n: int, new_delta: float) -> np.ndarray:
    if n == table.shape[-1]:
        return table
    return spline_at(table, delta, np.arange(n) * new_delta)[0]


def _locate(x: np.ndarray, delta: float, n: int) -> tuple[np.ndarray, np.ndarray]:
    """LAMMPS's knot (0-based) and fraction: p = x / delta + 1, m = int(p) in [1, n - 1]."""
    p = x * (1.0 / delta) + 1.0
    m = np.clip(p.astype(np.int64), 1, n - 1)
    return m - 1, np.minimum(p - m, 1.0)


def spline_at(table: np.ndarray, delta: float, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """LAMMPS's spline of `table` (..., n) at the points `x` (M,): value and slope (..., M)."""
    from wse_hpc.md.potentials import spline_coeffs

    k, p = _locate(np.asarray(x, dtype=np.float64), delta, table.shape[-1])
    c = spline_coeffs(table, delta)[..., k, :]
    return spline_value(c, p), spline_slope(c, p)


# -- what it costs a structure --------------------------------------------------------------
class ResampleCost(NamedTuple):
    """The largest differences a resampling makes (module docstring); 0 when none was made."""

    source: str  # the file(s)
    before: tuple[int, int]  # (Nrho, Nr) knots
    after: tuple[int, int]
    atoms: int  # atoms compared
    of_atoms: int  # atoms in the structure
    force_eV_A: float
    energy_eV: float
    press_bar: float
    r_A: tuple[float, float]  # the distances compared
    rho: tuple[float, float]  # the host densities compared
    table: dict[str, float]  # F, F', rho, rho', phi, phi'
    measured_on: str = "the structure as given"  # or a displaced copy (`resample_cost`)

    def line(self) -> str:
        """One line: what was cut, and what it costs."""
        name = self.source or "the potential"
        if self.before == self.after:
            return (
                f"{name}: its tables have {self.before[0]} x {self.before[1]} knots (rho x r), "
                "none more than asked: kept as they are"
            )
        t = self.table
        on, about = f"{self.atoms}", ""
        if self.atoms < self.of_atoms:
            on, about = f"{self.atoms} of {self.of_atoms}", "~"
        return (
            f"{name}: tables resampled from {self.before[0]} x {self.before[1]} to "
            f"{self.after[0]} x {self.after[1]} knots (rho x r) with LAMMPS's splines; max abs "
            f"change on {on} atoms: force {self.force_eV_A:.2g} eV/A, energy "
            f"{self.energy_eV:.2g} eV/atom, pressure {about}{self.press_bar:.2g} bar (on "
            f"{self.measured_on}); of the "
            f"tables for r in [{self.r_A[0]:.3g}, {self.r_A[1]:.3g}] A and rho in "
            f"[{self.rho[0]:.3g}, {self.rho[1]:.3g}] (its atoms'): F {t['F']:.2g} eV "
            f"(F' {t['dF']:.2g}), rho {t['rho']:.2g} (rho' {t['drho']:.2g} /A), phi "
            f"{t['phi']:.2g} eV (phi' {t['dphi']:.2g} eV/A)"
        )


def resample_cost(
    old: EamPotential,
    new: EamPotential,
    s: Structure,
    *,
    temperature_K: float | None = None,
    seed: int = 0,
) -> ResampleCost:
    """What `new` (`resample(old, ...)`) changes on `s`, or, where the forces on `s` vanish
    (a perfect lattice), on `thermal_copy(s, T, seed)` at the run's `temperature_K` (None:
    the kinetic temperature of `s`'s velocities, else 300 K) (module docstring)."""
    if new is old:
        grids, n = ((old.nrho, old.nr), (new.nrho, new.nr)), s.num_atoms
        return ResampleCost(old.source, *grids, 0, n, 0.0, 0.0, 0.0, (0.0, 0.0), (0.0, 0.0), {})
    cost, force_max = _cost_on(old, new, s)
    if force_max >= FORCE_VANISH_EV_A:
        return cost
    t = temperature_K or _kinetic_K(s, old) or THERMAL_K
    copy = thermal_copy(s, t, seed)
    on = (
        f"a copy displaced {thermal_sigma_A(t):.2g} A rms per axis as at ~{t:.0f} K, seed "
        f"{seed}: on the structure as given the forces vanish by symmetry"
    )
    return _cost_on(old, new, copy)[0]._replace(measured_on=on)


def thermal_sigma_A(temperature_K: float) -> float:
    """The rms displacement per axis (A) of a crystal's atoms at `temperature_K`: THERMAL_SIGMA_A
    at THERMAL_K, as the square root of T (the harmonic, classical crystal)."""
    return THERMAL_SIGMA_A * math.sqrt(max(temperature_K, 0.0) / THERMAL_K)


def thermal_copy(s: Structure, temperature_K: float, seed: int) -> Structure:
    """`s` with every atom displaced by N(0, thermal_sigma_A(T)^2) per axis (NumPy's
    default_rng(seed)), wrapped into the box: a crystal as a run at T soon holds it."""
    rng = np.random.default_rng(seed)
    box = np.asarray(s.box_A, dtype=np.float64)
    moved = s.positions_A + rng.normal(0.0, thermal_sigma_A(temperature_K), s.positions_A.shape)
    return dataclasses.replace(s, positions_A=np.mod(moved, box), images=None)


def _kinetic_K(s: Structure, pot: EamPotential) -> float | None:
    """The temperature of `s`'s velocities (3N - 3 degrees of freedom, LAMMPS's), else None."""
    if s.velocities_A_ps is None or s.num_atoms < 2:
        return None
    from wse_hpc.md.integrate import BOLTZ_EV_K, MVV2E  # JAX's import: the run's next step

    m = np.asarray(pot.masses_amu, dtype=np.float64)[s.species(pot.elements)]
    v = np.asarray(s.velocities_A_ps, dtype=np.float64)
    ke = 0.5 * MVV2E * float((m[:, None] * v * v).sum())
    return 2.0 * ke / ((3 * s.num_atoms - 3) * BOLTZ_EV_K) or None


def _cost_on(old: EamPotential, new: EamPotential, s: Structure) -> tuple[ResampleCost, float]:
    """The cost on `s` as it is, and the largest force the old tables give its sampled atoms."""
    grids = (old.nrho, old.nr), (new.nrho, new.nr)
    n = s.num_atoms
    x, box = np.mod(s.positions_A, s.box_A), np.asarray(s.box_A, dtype=np.float64)
    sp = s.species(old.elements).astype(np.int64)
    from scipy.spatial import cKDTree

    tree = cKDTree(x, boxsize=box)
    rows = np.unique(np.linspace(0, n - 1, min(n, SAMPLE_ATOMS)).round().astype(np.int64))
    near = _pairs(tree, x, box, rows, old.cutoff_A)
    hosts = np.unique(np.concatenate([rows, near[1]]))  # whose F'(rho) the forces take
    (e0, f0, w0, rho0, r_lo), (e1, f1, w1, *_) = (
        _atoms(p, tree, x, box, sp, near, hosts) for p in (old, new)
    )
    rho_range = (float(rho0[hosts].min()), float(min(rho0[hosts].max(), old.rhomax)))
    r_range = (min(r_lo, old.cutoff_A), old.cutoff_A)
    cost = ResampleCost(
        old.source,
        *grids,
        len(rows),
        n,
        float(np.abs(f1[rows] - f0[rows]).max()),
        float(np.abs(e1[rows] - e0[rows]).max()),
        _press_bar(abs(float((w1 - w0)[rows].sum())) * n / len(rows), float(np.prod(box))),
        r_range,
        rho_range,
        _table_errors(old, new, r_range, rho_range),
    )
    return cost, float(np.abs(f0[rows]).max())


def _press_bar(virial_eV: float, volume_A3: float) -> float:
    from wse_hpc.md.integrate import NKTV2P  # JAX's import: the run's next step anyway

    return virial_eV / (3.0 * volume_A3) * NKTV2P


def _pairs(tree, x: np.ndarray, box: np.ndarray, rows: np.ndarray, cutoff: float):
    """(i, j, d = x_j - x_i, r) of every pair with i in `rows` and r < cutoff (LAMMPS)."""
    hits = tree.query_ball_point(x[rows], cutoff)
    i = np.repeat(rows, [len(h) for h in hits])
    j = np.concatenate([np.asarray(h, dtype=np.int64) for h in hits])
    d = x[j] - x[i]
    d -= box * np.round(d / box)
    r2 = np.einsum("pk,pk->p", d, d)
    keep = (r2 > 0) & (r2 < cutoff * cutoff)  # not i itself (an overlap is the run's to refuse)
    return i[keep], j[keep], d[keep], np.sqrt(r2[keep])


def _atoms(pot: EamPotential, tree, x, box, sp, near, hosts):
    """Per-atom energies, forces and virials (N,), (N, 3), (N,) of the atoms `near` starts
    from (LAMMPS's: the virial of a pair split between its atoms), the densities (N,) of
    `hosts` and the closest distance seen."""
    fspl, rspl, zspl = pot.splines()
    n, rho, r_lo = len(x), np.zeros(len(x)), np.inf
    for lo in range(0, len(hosts), ROWS_PER_CHUNK):
        i, j, _, r = _pairs(tree, x, box, hosts[lo : lo + ROWS_PER_CHUNK], pot.cutoff_A)
        k, p = _locate(r, pot.dr, pot.nr)
        rho += np.bincount(i, spline_value(rspl[sp[j], sp[i], k], p), minlength=n)
        r_lo = min(r_lo, r.min(initial=np.inf))
    kf, pf = _locate(rho, pot.drho, pot.nrho)
    fp = spline_slope(fspl[sp, kf], pf)
    emb = spline_value(fspl[sp, kf], pf) + np.where(rho > pot.rhomax, fp * (rho - pot.rhomax), 0)
    i, j, d, r = near
    si, sj = sp[i], sp[j]
    k, p = _locate(r, pot.dr, pot.nr)
    z2, z2p = spline_value(zspl[si, sj, k], p), spline_slope(zspl[si, sj, k], p)
    phi = z2 / r
    psip = (
        fp[i] * spline_slope(rspl[sj, si, k], p)
        + fp[j] * spline_slope(rspl[si, sj, k], p)
        + (z2p / r - phi / r)
    )
    forces = np.stack([np.bincount(i, psip * d[:, a] / r, minlength=n) for a in range(3)], 1)
    virial = -0.5 * np.bincount(i, psip * r, minlength=n)
    return emb + 0.5 * np.bincount(i, phi, minlength=n), forces, virial, rho, r_lo


def _table_errors(old, new, r_range, rho_range) -> dict[str, float]:
    """Largest |new - old| of each table and its slope over the ranges (phi = r phi / r)."""
    rho = np.linspace(*rho_range, POINTS_PER_KNOT * old.nrho + 1)
    r = np.linspace(*r_range, POINTS_PER_KNOT * old.nr + 1)
    out = {}
    for key, name, x, table in (
        ("F", "frho", rho, "d"),
        ("rho", "rhor", r, "r"),
        ("phi", "z2r", r, "r"),
    ):
        delta = (old.drho, new.drho) if table == "d" else (old.dr, new.dr)
        v0, s0 = spline_at(getattr(old, name), delta[0], x)
        v1, s1 = spline_at(getattr(new, name), delta[1], x)
        dv, ds = v1 - v0, s1 - s0
        if key == "phi":  # phi = z2r / r, phi' = z2r' / r - z2r / r^2
            dv, ds = dv / x, (ds - dv / x) / x
        out[key], out[f"d{key}"] = float(np.abs(dv).max()), float(np.abs(ds).max())
    return out
