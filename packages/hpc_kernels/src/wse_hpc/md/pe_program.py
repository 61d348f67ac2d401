"""What one PE executes in an EAM step, counted instruction by instruction, and the rebuild
cadence a skin allows: the tables `wse_hpc.md.perf` prices.

Contract. Each table maps a DSD operation kind (`wse_core.cost.perf.Op`) to how many
instructions of that kind one item needs; the item is one candidate pair (every table
`PAIR_*`, `DENSITY`, `SLOPE`, `FORCE`: vectors of the plan's M candidates, one DSD per
entry), one atom (`INTEGRATE`, `EMBED`: vectors of 3 or 1 elements) or one window slot of a
list build (`BUILD_SLOT`: vectors of the window's 2 k_cols + 1 columns, one per row offset).
`GATHER` entries are indexed loads (a candidate's value out of a received slab, a spline's
coefficients at the pair's knot): a DSD walks memory at a fixed stride, so an indexed load
is priced as a move at the worst stride (`GATHER_STRIDE`: one element per cycle).
`ops(table, length, dtype)` gives a table's `Op`s over vectors of `length`. Per-atom work
(`INTEGRATE`'s three components, `INTEGRATE_SCALAR`, `EMBED`) is scalar work: the PE runs
it as scalar instructions (`scalar_count`: one instruction per entry and component, an
indexed load one), never as length-1 or length-3 DSDs that would each pay a DSD's set-up.

The pair's arithmetic is the list kernel's (`wse_hpc.md.neighbours`), as a PE runs it:
- geometry once per pair (phase 1) and kept in SRAM for phase 2: displacement, minimum
  image, r^2, the cutoff mask, 1/r, r = r^2 / r, the knot interval;
- 1/r is an inverse square root by Newton's method on the FMAC datapath: a seed from the
  float's bits (a shift and an integer subtract: relative error <= 3.4%), then
  NEWTON_ITERATIONS of y <- y (1.5 - (r^2 / 2) y^2) (2 mul + 1 fmac each): errors 1.8e-3,
  4.6e-6, 3.2e-11 after 1, 2, 3, so 3 reach fp32's 6e-8. No square root and no division
  per pair (a table seed would need an indexed load per pair and still 2 iterations). The
  emulator takes XLA's rsqrt (the same value to within rounding);
- the density spline (4 coefficients by Horner) and its slope (from the same coefficients),
  summed; phase 2 the pair spline z2r, psi', the force, pair energy and virial sums.

Rebuild cadence (`ballistic_every`): the lists are exact while no atom moves more than
skin / 2 from its build position. An atom at speed v crosses skin / 2 in skin / (2 v dt)
steps; the fastest of N atoms of mass m at temperature T moves at sigma_v chi3(N) with
sigma_v = sqrt(kB T / m) and chi3(N) the speed (in sigma_v) that one atom in N exceeds
under Maxwell-Boltzmann. Rebuilding that often is safe whatever the atoms do within it
(a crystal's atoms vibrate and turn back, so the real cadence can be longer: this is the
cadence a run with no per-step check may assume).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from scipy import stats
from wse_core.cost.perf import Op

__all__ = [
    "GATHER_STRIDE",
    "NEWTON_ITERATIONS",
    "RSQRT",
    "PAIR_GEOMETRY",
    "DENSITY",
    "SLOPE",
    "FORCE",
    "INTEGRATE",
    "INTEGRATE_SCALAR",
    "EMBED",
    "BUILD_SLOT",
    "SWAP",
    "ops",
    "scalar_count",
    "ballistic_every",
]

GATHER_STRIDE = 8  # a stride with stride % 8 == 0: width 1 (the SDK's bank rule)
NEWTON_ITERATIONS = 3
# 1/r from r^2: seed (shift, integer subtract), h = -r^2 / 2 (scale), then per iteration
# a = y y (mul), b = 1.5 + h a (fmac), y = y b (mul)
RSQRT = {
    "shift": 1,
    "sub": 1,
    "scale": 1,
    "mul": 2 * NEWTON_ITERATIONS,
    "fmac": NEWTON_ITERATIONS,
}
# per candidate, phase 1 only: d = x_j - x_i (3 sub), minimum image d - b round(d / b)
# (3 mul, 3 round, 3 fmac), r^2 (mul, 2 fmac), r^2 < c^2 (sub), r^2 masked (move), 1/r
# (RSQRT), r = r^2 (1/r) (mul), knot p = r / dr + 1 (fmac), floor (convert), clamp (2 max),
# p - m (sub), min(p, 1) (max), int (convert). Gathered operands: x_j, y_j, z_j.
PAIR_GEOMETRY = {
    "sub": 3 + 1 + 1 + RSQRT["sub"],
    "mul": 3 + 1 + 1 + RSQRT["mul"],
    "convert": 3 + 2,
    "fmac": 3 + 2 + 1 + RSQRT["fmac"],
    "move": 1,
    "max": 3,
    "shift": RSQRT["shift"],
    "scale": RSQRT["scale"],
    "gather": 3,
}
# the density of j at i: 4 coefficients at the knot, value by Horner (3 fmac), mask (move),
# sum (add)
DENSITY = {"gather": 4, "fmac": 3, "move": 1, "add": 1}
# its slope from the same coefficients: (3 c0 p + 2 c1) p + c2, / dr (3 scale, 2 fmac)
SLOPE = {"scale": 3, "fmac": 2}
# phase 2 per candidate (the geometry and the slope kept from phase 1): F'_j and z2r's 4
# coefficients (5 gathers), value (3 fmac), phi = v / r (mul), phi' = (slope - phi) / r (3
# scale, 2 fmac, sub, mul), psi' = F'_i rho' + F'_j rho' + phi' (scale, fmac, add), mask
# (move), psi' / r (mul), the force sums (3 fmac), pair energy (mask, add), virial (fmac)
FORCE = {
    "gather": 5,
    "fmac": 3 + 2 + 1 + 3 + 1,
    "mul": 1 + 1 + 1,
    "scale": 3 + 1,
    "sub": 1,
    "add": 1 + 1,
    "move": 1 + 1,
}
# per atom, vectors of 3: two half kicks v += (dt / 2 / m) F with the PE's constant
# (2 fmac), drift x += dt v (fmac), force store (move), the displacement check d = x - x_b
# (sub) and |d|^2 (fmac into a scalar); then its running maximum (max, 1 element)
INTEGRATE = {"fmac": 2 + 1 + 1, "move": 1, "sub": 1}
INTEGRATE_SCALAR = {"max": 1}
# per atom (length 1): F(rho) and F'(rho): locate (fmac, convert, 2 max, sub, max,
# convert), 4 coefficients, slope (3 scale, 2 fmac), value (3 fmac), linear extension
# (sub, fmac, move); the pair energy's 1/2 (scale)
EMBED = {"fmac": 1 + 2 + 3 + 1, "convert": 2, "max": 3, "sub": 2, "gather": 4, "move": 1}
EMBED |= {"scale": 4}
# per window slot of a build (`neighbours.build.select`): the geometry without 1/r and knot (3
# sub, 3 mul, 3 round, 3 fmac; r^2: mul, 2 fmac), reach, species and self tests (3 sub),
# the slot's bit (shift)
BUILD_SLOT = {"sub": 6, "mul": 4, "convert": 3, "fmac": 5, "shift": 1}
# per odd-even phase of a swap sweep: compare the keys (2 sub); taking a neighbour's record
# (2 moves of the packed record, NFIELDS words) is counted by `perf` over NFIELDS
SWAP = {"sub": 2}


def ops(table: Mapping[str, float], length: float, dtype: str, count: float = 1.0):
    """The `Op`s of `table` over vectors of `length` (each entry `count` times): a
    "gather" entry is a move at GATHER_STRIDE."""
    out = []
    for kind, n in table.items():
        if not n:
            continue
        if kind == "gather":
            out.append(Op("move", dtype, length, n * count, stride=GATHER_STRIDE))
        else:
            out.append(Op(kind, dtype, length, n * count))
    return tuple(out)


def scalar_count(table: Mapping[str, float], components: int = 1) -> float:
    """Scalar instructions of `table` on `components` values each (a gather: one load)."""
    return float(sum(table.values()) * components)


def ballistic_every(
    skin_A: float, temperature_K: float, mass_amu: float, n_atoms: int, dt_fs: float
) -> float:
    """Steps the fastest of `n_atoms` atoms takes to move skin / 2 (at least 1): the module
    docstring's cadence. kB T / m in A^2/ps^2 (LAMMPS metal units)."""
    from wse_hpc.md.integrate import BOLTZ_EV_K, MVV2E

    sigma_A_ps = math.sqrt(BOLTZ_EV_K * temperature_K / (mass_amu * MVV2E))
    fastest = float(stats.chi(3).isf(1.0 / max(n_atoms, 2))) * sigma_A_ps
    return max(1.0, math.floor(0.5 * skin_A / (fastest * dt_fs * 1e-3)))
