"""What one PE executes in an EAM step, as the published program runs it, counted
instruction by instruction; and the rebuild cadence a skin allows.

Source: the PE program Cerebras released with Santos et al. (arXiv:2405.07898), a Tungsten
(Cerebras's PE language) EAM kernel and its header, BSD-3, (c) 2024 Cerebras Systems Inc.,
read from the public-code index (its repository was not resolved there; nothing of it is
copied here): docs/references/md-pe-program.md. How its PE walks its neighbours:

- a "neighborhood multicast" of the position (a payload of 4 wavelets: x, y, z, pad) over a
  candidate window of W x H = (2 rW - 1) x (2 rH - 1) PEs, an X stage then a Y stage of the
  received rows: N_c = W H - 1 candidates;
- EVERY step, over all candidates: one vector subtract per component (at the payload's
  stride), then a loop per candidate with a scalar body (the squared distance, the cutoff
  test; on a hit the copy of its displacement, r^2 and slot index, and the hit count);
- then every per-pair statement is a vector over the N_h hits, not over the candidates:
  1/r (a bit-trick seed and 2 Newton iterations per element, a loop with a scalar body),
  r = r^2 / r, the spline coordinate (scalar body), the coefficients looked up by index (a
  quadratic segment for rho, 3 words, a linear one for phi, 2), rho = x (b + x a) + c and
  its sum into the PE's rho-bar, rho' and phi' = (b + 2 x a) / dx;
- per atom, scalar: F'(rho-bar) from one segment of its spline, the drift and the kick;
- the same multicast of F', then per hit f = phi' + rho' F'_i (vectors), the neighbour's F'
  by its slot index (a loop with a scalar body), f / r and the three force sums (vectors
  reduced into the PE's force).
No neighbour list outlives a step, no energy or virial is summed, no atom swap is in this
source (the paper's swaps are priced by `perf` at their cadence), and no thermostat: the
source is NVE. A thermostat's work is counted as the emulator's step runs it
(`wse_hpc.md.integrate`), in the same scalar terms as the drift and the kick
(`NOSE_HOOVER_HALF`, `LANGEVIN_FORCE`, `UNIFORM_SCALAR`; `wse_hpc.md.thermostat_perf` prices
them with the Nosé–Hoover kinetic-energy sums).

Pricing rule (what the source leaves to the compiler, stated): a `forall` whose body is one
vector statement is one DSD instruction over its elements (`Op`, each at the slowest of its
own bounds); a `forall` whose body holds several statements or scalar temporaries is a loop
of scalar instructions, one per operation in the body (a word copied or loaded by index is
one). Tables: `PAIR_DSDS` (DSDs over the hits, per step), `CANDIDATE_DSDS` (over the
candidates), `*_SCALAR` (scalar instructions per candidate, per hit, per atom).

Rebuild cadence (`ballistic_every`): the lists are exact while no atom moves more than
skin / 2 from its build position. An atom at speed v crosses skin / 2 in skin / (2 v dt)
steps; the fastest of N atoms of mass m at temperature T moves at sigma_v chi3(N) with
sigma_v = sqrt(kB T / m) and chi3(N) the speed (in sigma_v) that one atom in N exceeds
under Maxwell-Boltzmann. (The published step filters its window every step; the emulator's
list kernel uses this cadence, and `perf` prices the swap sweep at it.)
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from scipy import special
from wse_core.cost.perf import Op

__all__ = [
    "PAYLOAD_WORDS",
    "NEWTON_ITERATIONS",
    "CANDIDATE_DSDS",
    "CANDIDATE_SCALAR",
    "HIT_SCALAR",
    "DENSITY_DSDS",
    "FORCE_DSDS",
    "PAIR_DSDS",
    "ATOM_SCALAR",
    "SWAP",
    "EXP_SCALAR",
    "NOSE_HOOVER_HALF",
    "NOSE_HOOVER_LINK",
    "LANGEVIN_UNIFORMS",
    "LANGEVIN_FORCE",
    "UNIFORM_SCALAR",
    "pair_ops",
    "candidate_ops",
    "scalar_count",
    "ballistic_every",
]

PAYLOAD_WORDS = 4  # wavelets per candidate in the multicast (x, y, z, pad): the subtract's stride
NEWTON_ITERATIONS = 2  # the header's invsqrt: "sufficient to run only two iterations"
# per candidate, every step: r0[d] - c[i][d] for d = x, y, z: one DSD each over the
# candidates at stride PAYLOAD_WORDS (one vector operand read: r0[d] is a scalar)
CANDIDATE_DSDS = (("sub", 3, {"stride": PAYLOAD_WORDS, "mem_reads": 1}),)
# the candidate loop's scalar body: dist <-+ c*c (3 fmac), the compare, the branch
CANDIDATE_SCALAR = {"fmac": 3, "compare": 1, "branch": 1}
# per hit, scalar bodies: detect's copies (3 displacement words, r^2, the slot index) and
# the count (add); invsqrt: -r^2/2 (mul), the seed (move, shift, sub, move), per Newton
# iteration y y (mul), * (-r^2/2) + 1.5 (fmac), * y (mul), the store (move);
# get_spline_coord: x r / dx (mul), to int (convert), back (convert), the offset (sub);
# the lookups: 3 + 2 coefficient words; the force loop: the slot index (load), the
# neighbour's F' by it (load), f <-+ rho' F'_j (fmac)
HIT_SCALAR = {
    "detect": {"move": 5, "add": 1},
    "invsqrt": {"mul": 1 + 2 * NEWTON_ITERATIONS, "move": 3, "shift": 1, "sub": 1,
                "fmac": NEWTON_ITERATIONS},
    "spline_coord": {"mul": 1, "convert": 2, "sub": 1},
    "lookup": {"move": 3 + 2},
    "force_gather": {"load": 2, "fmac": 1},
}  # fmt: skip
# DSDs over the hits, per step, in program order: (kind, count, Op keywords). mem_reads: the
# vector operands read per element (a multiplier that is a scalar register is not read);
# accumulate: reduced into one scalar (one element per cycle). Struct strides (cf: 5 words,
# spline_coord: 2, r-vec: 3) are full-width strides by the bank rule.
DENSITY_DSDS = (
    ("mul", 1, {}),  # r = r^2 r^-1
    ("fmac", 2, {"mem_reads": 3}),  # rho = x (b + x a) + c: two vector-vector FMACs
    ("add", 1, {"mem_reads": 1, "accumulate": True, "mem_writes": 0}),  # rho-bar <-+ rho
    ("mul", 2, {}),  # rho', phi': x a
    ("fmac", 2, {}),  # (x a) 2 + b
    ("scale", 2, {}),  # * 1/dx
)
FORCE_DSDS = (
    ("move", 1, {}),  # f <- phi'
    ("fmac", 1, {}),  # f <-+ rho' F'_i (a scalar multiplier)
    ("mul", 1, {}),  # f <- f r^-1
    ("fmac", 3, {"stride": 3, "accumulate": True, "mem_writes": 0}),  # f0[d] <-+ r[k][d] f
)
PAIR_DSDS = DENSITY_DSDS + FORCE_DSDS
# per atom, scalar: the drift r0 <-+ v dt (3 fmac); rho-bar's spline coordinate (mul, 2
# convert, sub), its segment (2 loads) and F' = (b + 2 x a) / drho (mul, mul, add, mul),
# rho-bar's reset (move); f0 <- 0 (3 moves), F'_i to a register (load); the kick: f0 * -1/m
# (3 mul), v <-+ f0 dt (3 fmac)
ATOM_SCALAR = {
    "integrate": {"fmac": 3 + 3, "mul": 3},
    "embed": {"mul": 1 + 3, "convert": 2, "sub": 1, "load": 2, "add": 1, "move": 1},
    "force_init": {"move": 3, "load": 1},
}
# per odd-even phase of a swap sweep (the paper's atom swaps, not in the source): compare the
# keys (2 sub); taking a neighbour's record (2 moves of NFIELDS words) is counted by `perf`
SWAP = {"sub": 2}

# Thermostats, per atom on its PE (not in the source; as `integrate` runs them). exp(x) of
# the bath's velocity scale (no exp instruction in the SDK's tables, `wse_core.hw.simd`): the
# textbook fp32 routine, Cody-Waite range reduction (x / ln 2 (mul), to int and back (2
# convert), r = x - n ln 2 (fmac)), a degree-6 polynomial in r by Horner (6 fmac; |r| <=
# ln 2 / 2 leaves a truncation error of ~1e-7, fp32's) and 2^n into the exponent field
# (shift, add)
EXP_SCALAR = {"mul": 1, "convert": 2, "fmac": 1 + 6, "shift": 1, "add": 1}
# one Nosé–Hoover half step (`integrate._nose_hoover_fn`, LAMMPS FixNH::nhc_temp_integrate,
# the chain's first element), around the kinetic-energy sum `thermostat_perf` prices: before it the
# PE's term m v.v (mul, 2 fmac, mul); after it 2 KE = mvv2e sum (mul), xi += dt/4 (2 KE -
# Nf kB T) / Q (sub, fmac), the argument -dt/2 xi (mul) and its exp, v *= scale (3 mul),
# 2 KE *= scale^2 (2 mul), eta += dt/2 xi (fmac), xi's second quarter step (sub, fmac)
NOSE_HOOVER_HALF = {
    "kinetic": {"mul": 2, "fmac": 2},
    "bath": {"mul": 1 + 1 + 3 + 2, "sub": 2, "fmac": 3},
    "exp": EXP_SCALAR,
}
# what each further element k of a chain (LAMMPS tchain M: M - 1 of them, `nose_hoover.
# chain_half`) adds to a half step: the factor exp(-dt/8 xi_k) of element k - 1 (mul and
# its exp), which that element's two kicks multiply in before and after (4 mul); element
# k's own two kicks, each its force Q_{k-1} xi_{k-1}^2 - kB T (2 mul, sub), times dt/4 / Q_k
# (mul) added to xi_k (fmac); and eta_k += dt/2 xi_k (fmac)
NOSE_HOOVER_LINK = {
    "bath": {"mul": 1 + 4 + 2 * (2 + 1), "sub": 2, "fmac": 2 + 1},
    "exp": EXP_SCALAR,
}
# Langevin (`integrate._langevin_fn`, LAMMPS fix langevin): 3 uniform numbers per atom per
# step (u in [0, 1), one per component), each `UNIFORM_SCALAR`; the force per component
# f <-+ gamma1 v (fmac), f <-+ gamma2 (u - 1/2) (sub, fmac). gamma1 and gamma2 depend on the
# species only: two words the PE keeps, as it keeps 1/m for the kick
LANGEVIN_UNIFORMS = 3
LANGEVIN_FORCE = {"sub": 3, "fmac": 3 + 3}
# one uniform fp32 number on a PE, the ASSUMED generator (the SDK documents no random-number
# instruction; `thermostat_perf.UNIFORM` is the constant with its source and sweep):
# Marsaglia's xorshift32 on a word of state per PE (x ^= x << 13; x ^= x >> 17;
# x ^= x << 5: 3 shifts, 3 xors), then [0, 1): x >> 8 (shift), to fp32 (convert), * 2^-24 (mul).
# The emulator's draws are keyed by (seed, step, atom id) (`integrate.atom_uniforms`, so a
# trajectory does not depend on where atoms sit); the price keeps this generator's count
UNIFORM_SCALAR = {"shift": 3 + 1, "xor": 3, "convert": 1, "mul": 1}


def _ops(table, length: float, dtype: str) -> tuple[Op, ...]:
    return tuple(Op(kind, dtype, length, n, **kw) for kind, n, kw in table if n)


def pair_ops(hits: float, table=PAIR_DSDS, dtype: str = "fp32") -> tuple[Op, ...]:
    """The DSDs of `table` (default: the step's PAIR_DSDS) over `hits` neighbours."""
    return _ops(table, hits, dtype)


def candidate_ops(candidates: float, dtype: str = "fp32") -> tuple[Op, ...]:
    """The DSDs of one step over `candidates` window slots (CANDIDATE_DSDS)."""
    return _ops(CANDIDATE_DSDS, candidates, dtype)


def scalar_count(table: Mapping[str, float], components: int = 1) -> float:
    """Scalar instructions of `table` on `components` values each; a nested table (name:
    table) is summed over its parts."""
    return float(
        sum(scalar_count(v) if isinstance(v, Mapping) else v * components for v in table.values())
    )


def ballistic_every(
    skin_A: float, temperature_K: float, mass_amu: float, n_atoms: int, dt_fs: float
) -> float:
    """Steps the fastest of `n_atoms` atoms takes to move skin / 2 (at least 1): the module
    docstring's cadence. kB T / m in A^2/ps^2 (LAMMPS metal units)."""
    from wse_hpc.md.integrate import BOLTZ_EV_K, MVV2E

    sigma_A_ps = math.sqrt(BOLTZ_EV_K * temperature_K / (mass_amu * MVV2E))
    # the chi distribution's (3 degrees of freedom) inverse survival function, written with
    # scipy.special (the same value as scipy.stats.chi(3).isf, without stats' ~0.5 s import)
    fastest = math.sqrt(2.0 * special.gammainccinv(1.5, 1.0 / max(n_atoms, 2))) * sigma_A_ps
    return max(1.0, math.floor(0.5 * skin_A / (fastest * dt_fs * 1e-3)))
