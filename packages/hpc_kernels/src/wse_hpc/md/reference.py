"""A plain NumPy all-pairs EAM, the oracle for the wafer kernel on small systems.

`eam_reference(pot, positions_A, species, box_A)` returns per-atom energies (eV), forces
(eV/A) and the virial sum (eV) of an orthorhombic periodic box (minimum image, so every box
side must exceed twice the cutoff), with LAMMPS's spline evaluation and cutoff rule
(`r^2 < cutoff^2`). float64 throughout; O(N^2) memory, for N up to a few thousand.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from wse_hpc.md.potentials import EamPotential, PotentialError

__all__ = ["EamResult", "eam_reference", "spline_value", "spline_slope"]


@dataclasses.dataclass(frozen=True)
class EamResult:
    energy_eV: np.ndarray  # (N,) per-atom energies
    forces_eV_A: np.ndarray  # (N, 3)
    virial_eV: float  # sum over pairs of r_ij . f_ij
    rho: np.ndarray  # (N,) host densities

    @property
    def total_eV(self) -> float:
        return float(self.energy_eV.sum())


def _locate(x: np.ndarray, delta: float, n: int, lo: int) -> tuple[np.ndarray, np.ndarray]:
    """LAMMPS's knot index (0-based) and fraction: p = x/delta + 1, m = int(p) clamped."""
    p = x * (1.0 / delta) + 1.0
    m = np.clip(p.astype(np.int64), lo, n - 1)
    return m - 1, np.minimum(p - m, 1.0)


def spline_value(c: np.ndarray, p: np.ndarray) -> np.ndarray:
    return ((c[..., 3] * p + c[..., 4]) * p + c[..., 5]) * p + c[..., 6]


def spline_slope(c: np.ndarray, p: np.ndarray) -> np.ndarray:
    return (c[..., 0] * p + c[..., 1]) * p + c[..., 2]


def _min_image(positions: np.ndarray, box: np.ndarray) -> np.ndarray:
    d = positions[None, :, :] - positions[:, None, :]  # d[i, j] = x_j - x_i
    return d - box * np.round(d / box)


def eam_reference(
    pot: EamPotential, positions_A: np.ndarray, species: np.ndarray, box_A
) -> EamResult:
    """Energies, forces and virial of atoms `species` (indices into pot.elements)."""
    x = np.asarray(positions_A, dtype=np.float64)
    sp = np.asarray(species, dtype=np.int64)
    box = np.asarray(box_A, dtype=np.float64)
    if np.any(box <= 2 * pot.cutoff_A):
        raise PotentialError(
            f"the reference EAM needs every box side > 2 x cutoff ({2 * pot.cutoff_A:.3f} A)"
        )
    fspl, rspl, zspl = pot.splines()
    d = _min_image(x, box)
    r2 = (d * d).sum(-1)
    n = x.shape[0]
    pair = (r2 < pot.cutoff_A**2) & ~np.eye(n, dtype=bool)
    r = np.sqrt(np.where(pair, r2, 1.0))
    k, p = _locate(r, pot.dr, pot.nr, 1)
    si, sj = sp[:, None], sp[None, :]
    # density on i from j uses rhor[elem j, elem i]
    rho_ji = np.where(pair, spline_value(rspl[sj, si, k], p), 0.0)
    rho = rho_ji.sum(1)
    kf, pf = _locate(rho, pot.drho, pot.nrho, 1)
    cf = fspl[sp, kf]
    fp = spline_slope(cf, pf)
    emb = spline_value(cf, pf) + np.where(rho > pot.rhomax, fp * (rho - pot.rhomax), 0.0)
    rhojp = spline_slope(rspl[sj, si, k], p)  # d rho_i / dr from j
    rhoip = spline_slope(rspl[si, sj, k], p)  # d rho_j / dr from i
    z2 = spline_value(zspl[si, sj, k], p)
    z2p = spline_slope(zspl[si, sj, k], p)
    phi = z2 / r
    phip = z2p / r - phi / r
    psip = np.where(pair, fp[:, None] * rhojp + fp[None, :] * rhoip + phip, 0.0)
    forces = (psip[..., None] * d / r[..., None]).sum(1)
    energy = emb + 0.5 * np.where(pair, phi, 0.0).sum(1)
    virial = -0.5 * float((psip * r).sum())
    return EamResult(energy, forces, virial, rho)
