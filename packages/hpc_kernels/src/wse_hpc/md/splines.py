"""The EAM potential's splines as the kernels evaluate them, per pair and per atom.

Contract: `splines_for(pot, dtype) -> Splines`: LAMMPS's interpolation (the same knots, the
same clamps: `interpolate` and `array2spline` of pair_eam.cpp) of F(rho), rho(r) and
z2r = r phi(r), as cubic coefficients per knot in the plan's dtype (`SplineTables`, 4 columns
of knots), and the pure functions every kernel evaluates them with: the knot interval of r,
the density and its slope, the embedding energy and its slope, and psi' and phi of a pair.
Shared by the full-window kernel (`eam`), the neighbour-list kernel (`neighbours`) and the PEs'
own pair kernels on a CPU (`pe_pairs`, which read `Splines.tables`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from wse_hpc.md.potentials import EamPotential

__all__ = ["SplineTables", "Splines", "spline_tables", "splines_for"]


class SplineTables(NamedTuple):
    """Cubic coefficients (c3, c4, c5, c6) of LAMMPS's splines as 4 columns of knots; the
    slope's (c0, c1, c2) = (3 c3, 2 c4, c5) / delta are derived, not stored."""

    frho: jax.Array  # (4, ne * nrho)
    rhor: jax.Array  # (4, ne * ne * nr): knot (a * ne + b) * nr + k, by a on b
    z2r: jax.Array  # (4, ne * ne * nr)


def spline_tables(pot: EamPotential, dtype) -> SplineTables:
    f, rho, z2 = pot.splines()

    def cols(s):
        return jnp.asarray(s.reshape(-1, 7)[:, 3:].T, dtype)

    return SplineTables(cols(f), cols(rho), cols(z2))


def _locate(x, inv_delta: float, n: int):
    """LAMMPS: p = x / delta + 1, m = int(p) clamped to [1, n - 1], p -= m, p <= 1."""
    p = x * inv_delta + 1.0
    m = jnp.clip(jnp.floor(p), 1, n - 1)
    return m.astype(jnp.int32) - 1, jnp.minimum(p - m, 1.0)


def _coeffs(table: jax.Array, index: jax.Array, count: int = 4) -> list[jax.Array]:
    """The first `count` columns of `table` at `index` (a gather per column is cheaper than
    a gather of rows here); the slope needs only c3, c4, c5."""
    return [jnp.take(table[i], index, mode="clip") for i in range(count)]


def _value(c, p):
    return ((c[0] * p + c[1]) * p + c[2]) * p + c[3]


def _slope(c, p, inv_delta: float):
    return ((3.0 * c[0] * p + 2.0 * c[1]) * p + c[2]) * inv_delta


class Splines(NamedTuple):
    """The potential's spline physics per pair and per atom, shared by the full-window kernel
    and the neighbour-list kernel (species as int32 indices into the potential's elements)."""

    locate_r: Callable[[jax.Array], tuple[jax.Array, jax.Array]]  # r -> knot interval k, p
    density: Callable[..., jax.Array]  # (sp_j, sp_i, k, p) -> rho of j at i
    density_slope: Callable[..., jax.Array]  # (sp_j, sp_i, k, p) -> d(rho of j at i)/dr
    embed: Callable[..., tuple[jax.Array, jax.Array]]  # (rho, sp_i) -> F'(rho), F(rho)
    # (fp_i, fp_j, sp_i, sp_j, k, p, 1/r[, (rho_j', rho_i') when known]) -> psi', phi
    pair: Callable[..., tuple[jax.Array, jax.Array]]
    tables: SplineTables  # the coefficients the functions read


def splines_for(pot: EamPotential, dtype) -> Splines:
    tab = spline_tables(pot, dtype)
    ne, nr, nrho = len(pot.elements), pot.nr, pot.nrho
    inv_dr, inv_drho, rhomax = 1.0 / pot.dr, 1.0 / pot.drho, pot.rhomax

    def knot(a, b, k):
        return (a * ne + b) * nr + k if ne > 1 else k

    def locate_r(r):
        return _locate(r, inv_dr, nr)

    def density(sp_j, sp_i, k, p):
        return _value(_coeffs(tab.rhor, knot(sp_j, sp_i, k)), p)  # on i from j

    def density_slope(sp_j, sp_i, k, p):
        return _slope(_coeffs(tab.rhor, knot(sp_j, sp_i, k), 3), p, inv_dr)

    def embed(rho, sp_i):
        kf, pf = _locate(rho, inv_drho, nrho)
        cf = _coeffs(tab.frho, sp_i * nrho + kf if ne > 1 else kf)
        fp = _slope(cf, pf, inv_drho)
        return fp, _value(cf, pf) + jnp.where(rho > rhomax, fp * (rho - rhomax), 0.0)

    def pair(fp_i, fp_j, sp_i, sp_j, k, p, inv_r, slopes=None):
        """d(pair energy)/dr of i and j, psi' = F'_i rho_j' + F'_j rho_i' + phi', and phi
        (`slopes` = (rho_j', rho_i') when the density phase kept them). Takes 1 / r, one
        inverse square root of r^2 per pair, which serves r, phi, phi' and the force: no
        division (a PE divides in ~50 cycles)."""
        if slopes is not None:
            rhojp, rhoip = slopes
        else:
            rhojp = density_slope(sp_j, sp_i, k, p)
            rhoip = density_slope(sp_i, sp_j, k, p) if ne > 1 else rhojp
        cz = _coeffs(tab.z2r, knot(sp_i, sp_j, k))
        phi = _value(cz, p) * inv_r
        phip = (_slope(cz, p, inv_dr) - phi) * inv_r
        return fp_i * rhojp + fp_j * rhoip + phip, phi

    return Splines(locate_r, density, density_slope, embed, pair, tab)
