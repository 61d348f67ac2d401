"""The Nosé–Hoover chain of LAMMPS's `fix nvt temp T T Tdamp tchain M` (M = 3 by default,
as LAMMPS's; `tchain 1` is one thermostat): its masses, its energy and its half step.

Contract: the bath is `state.Bath` with `xi` (1/ps) and `eta` each of shape (M,), element 0
the thermostat on the atoms. `chain_masses(...)` -> `ChainMasses` (LAMMPS's `eta_mass`:
Q_0 = Nf kB T Tdamp^2, Q_k = kB T Tdamp^2 for k >= 1, Nf = 3N - 3); `chain_energy(xi, eta,
masses)` -> LAMMPS's `ecouple` in eV, Nf kB T eta_0 + Q_0 xi_0^2 / 2 + sum_k (kB T eta_k +
Q_k xi_k^2 / 2); `chain_half(xi, eta, ke2, masses, dt_ps)` -> (xi, eta, scale) is one call of
`FixNH::nhc_temp_integrate` (nc_tchain 1, no drag) given 2 KE (eV) of the atoms: the chain
from its end down to element 0 by quarter steps, each element's velocity scaled by
exp(-dt/8 xi_{k+1}) around its kick, the atoms' velocities by `scale` = exp(-dt/2 xi_0),
every eta by dt/2 xi, then the chain back up with the forces of the updated elements. The
forces on element k >= 1, G_k = (Q_{k-1} xi_{k-1}^2 - kB T) / Q_k, are functions of the
bath, so nothing but xi and eta is carried (LAMMPS's `eta_dotdot` holds the same values).
Written over `jnp` (NumPy arrays work too); M is static: the chain unrolls.
With M = 1 it is exactly the one-element step `integrate` ran before (each exp(-dt/8 * 0)
is skipped, not multiplied in).
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp

__all__ = ["TCHAIN_DEFAULT", "ChainMasses", "chain_masses", "chain_energy", "chain_half"]

TCHAIN_DEFAULT = 3  # LAMMPS fix nvt/npt/nph: "tchain value = N ... default 3"


class ChainMasses(NamedTuple):
    ke_target: float  # Nf kB T, eV
    kt: float  # kB T, eV
    q: tuple[float, ...]  # (M,) eV ps^2


def chain_masses(
    temperature_K: float, damp_fs: float, n_atoms: int, chain: int, boltz_eV_K: float
) -> ChainMasses:
    """LAMMPS's `eta_mass` of fix nvt (t_freq = 1 / Tdamp) for `n_atoms` atoms, 3N - 3
    degrees of freedom (at least 1)."""
    kt = boltz_eV_K * temperature_K
    ke_target = max(3 * n_atoms - 3, 1) * boltz_eV_K * temperature_K
    tau2 = (damp_fs / 1000.0) ** 2
    return ChainMasses(ke_target, kt, (ke_target * tau2,) + (kt * tau2,) * (chain - 1))


def chain_energy(xi, eta, masses: ChainMasses) -> float:
    """LAMMPS's `ecouple` (eV) of the bath (xi, eta: (M,) floats)."""
    total = masses.ke_target * float(eta[0]) + 0.5 * masses.q[0] * float(xi[0]) ** 2
    for k in range(1, len(masses.q)):
        total += masses.kt * float(eta[k]) + 0.5 * masses.q[k] * float(xi[k]) ** 2
    return total


def _link_force(xi: list, k: int, masses: ChainMasses):
    """Q_k G_k of element k >= 1: Q_{k-1} xi_{k-1}^2 - kB T."""
    return masses.q[k - 1] * xi[k - 1] * xi[k - 1] - masses.kt


def chain_half(xi, eta, ke2, masses: ChainMasses, dt_ps: float):
    """One half step of the chain (module docstring): (xi, eta, scale), `scale` the factor
    of the atoms' velocities; `ke2` is their 2 KE (eV) before it."""
    m = len(masses.q)
    dt4, dt8 = 0.25 * dt_ps, 0.125 * dt_ps
    x = [xi[k] for k in range(m)]

    def outer(k):  # exp(-dt/8 xi_{k+1}); the chain's last element has none above it
        return None if k + 1 >= m else jnp.exp(-dt8 * x[k + 1])

    def kick(k, q_force):  # xi_k += dt/4 G_k (G_k Q_k given: one division, as before)
        f, step = outer(k), dt4 * q_force / masses.q[k]
        x[k] = x[k] + step if f is None else (x[k] * f + step) * f

    for k in range(m - 1, 0, -1):
        kick(k, _link_force(x, k, masses))
    kick(0, ke2 - masses.ke_target)
    scale = jnp.exp(-0.5 * dt_ps * x[0])
    ke2 = ke2 * scale * scale
    eta = jnp.stack([eta[k] + 0.5 * dt_ps * x[k] for k in range(m)])
    kick(0, ke2 - masses.ke_target)
    for k in range(1, m):
        kick(k, _link_force(x, k, masses))
    return jnp.stack(x), eta, scale
