"""LAMMPS's `units metal` constants and the kinetic energy and temperature of velocities, in
NumPy only (the extended XYZ reader checks a LAMMPS dump's Temperature= with them before any
JAX import; `integrate` and `thermo` use the same).

Units: A, ps, amu, eV, K, bar. The constants are LAMMPS's own for `units metal`
(`update.cpp`, `Update::set_units`: force->boltz, mvv2e, ftm2v, nktv2p), so a temperature or
a pressure here equals LAMMPS's thermo output to its printed digits.
"""

from __future__ import annotations

import numpy as np

__all__ = ["BOLTZ_EV_K", "FTM2V", "MVV2E", "NKTV2P", "kinetic"]

BOLTZ_EV_K = 8.617343e-5  # LAMMPS metal units
MVV2E = 1.0364269e-4  # amu A^2 / ps^2 -> eV
FTM2V = 1.0 / 1.0364269e-4  # eV / (A amu) -> A / ps^2
NKTV2P = 1.6021765e6  # eV / A^3 -> bar


def kinetic(masses_amu: np.ndarray, velocities_A_ps: np.ndarray) -> tuple[float, float]:
    """(kinetic energy in eV, temperature in K over 3N - 3 degrees of freedom), in float64
    (LAMMPS' `ke` and `temp` of thermo output)."""
    m = np.asarray(masses_amu, dtype=np.float64)
    v = np.asarray(velocities_A_ps, dtype=np.float64)
    ke = 0.5 * MVV2E * float((m[:, None] * v * v).sum())
    return ke, 2.0 * ke / (max(3 * m.shape[0] - 3, 1) * BOLTZ_EV_K)
