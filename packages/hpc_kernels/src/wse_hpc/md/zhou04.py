# ruff: noqa: E501  (the parameter table keeps one element per line)
"""EAM potentials generated from the published parameter table of Zhou, Johnson & Wadley,
Phys. Rev. B 69, 144113 (2004) — with the NIST Interatomic Potentials Repository's corrected
Al and Pt entries and Lin, Johnson & Zhigilei, PRB 77, 214108 (2008) for Cr — written as
setfl files that LAMMPS reads (`pair_style eam/alloy`).

Functional forms (r_e, f_e, rho_e, rho_s, alpha, beta, A, B, kappa, lambda, F_ni, F_i, eta,
F_e from the table):
    phi(r) = A e^{-alpha (r/r_e - 1)} / (1 + (r/r_e - kappa)^20)
             - B e^{-beta (r/r_e - 1)} / (1 + (r/r_e - lambda)^20)
    f(r)   = f_e e^{-beta (r/r_e - 1)} / (1 + (r/r_e - lambda)^20)
    F(rho) = sum_i F_ni (rho/rho_n - 1)^i,   rho < rho_n = rho_l rho_e
           = sum_i F_i (rho/rho_e - 1)^i,    rho_n <= rho < rho_0 = rho_h rho_e
           = F_e (1 - eta ln(rho/rho_s)) (rho/rho_s)^eta,   rho >= rho_0
and, between elements a and b, phi_ab = (f_b/f_a phi_aa + f_a/f_b phi_bb) / 2. The grid
follows the paper's tool: cutoff sqrt(10)/2 times the largest fcc lattice constant
(sqrt(2) r_e), r from 0 (values below 0.5 A taken at 0.5 A), rho up to
max(2 rho_e, max f(0.5), 100).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from wse_hpc.md.potentials import EamPotential, PotentialError

__all__ = ["ZHOU04", "ELEMENTS", "zhou04"]

_FIELDS = (
    "re fe rhoe rhos alpha beta A B kappa lam Fn0 Fn1 Fn2 Fn3 F0 F1 F2 F3 eta Fe "
    "Z mass F3hi rhol rhoh"
).split()
# One row per element: the table's columns in the order of _FIELDS (F3hi: the cubic term
# above rho_e, equal to F3 in every published entry; rhol, rhoh: the embedding breakpoints).
_TABLE = """
Cu 2.556162 1.554485 21.175871 21.175395 8.127620 4.334731 0.396620 0.548085 0.308782 0.756515 -2.170269 -0.263788 1.088878 -0.817603 -2.19 0.0 0.561830 -2.100595 0.310490 -2.186568 29 63.546 -2.100595 0.85 1.15
Ag 2.891814 1.106232 14.604100 14.604144 9.132010 4.870405 0.277758 0.419611 0.339710 0.750758 -1.729364 -0.255882 0.912050 -0.561432 -1.75 0.0 0.744561 -1.150650 0.783924 -1.748423 47 107.8682 -1.150650 0.85 1.15
Au 2.885034 1.529021 19.991632 19.991509 9.516052 5.075228 0.229762 0.356666 0.356570 0.748798 -2.937772 -0.500288 1.601954 -0.835530 -2.98 0.0 1.706587 -1.134778 1.021095 -2.978815 79 196.96654 -1.134778 0.85 1.15
Ni 2.488746 2.007018 27.562015 27.562031 8.383453 4.471175 0.429046 0.633531 0.443599 0.820658 -2.693513 -0.076445 0.241442 -2.375626 -2.70 0.0 0.265390 -0.152856 0.445470 -2.7 28 58.6934 -0.152856 0.85 1.15
Pd 2.750897 1.595417 21.335246 21.940073 8.697397 4.638612 0.406763 0.598880 0.397263 0.754799 -2.321006 -0.473983 1.615343 -0.231681 -2.36 0.0 1.481742 -1.675615 1.130000 -2.352753 46 106.42 -1.675615 0.85 1.15
Pt 2.771916 2.336509 33.367564 35.205357 7.105782 3.789750 0.556398 0.696037 0.385255 0.770510 -1.455568 -2.149952 0.528491 1.222875 -4.17 0.0 3.010561 -2.420128 1.450000 -4.145597 78 195.08 -2.420128 0.25 1.15
Al 2.863924 1.403115 20.418205 23.195740 6.613165 3.527021 0.314873 0.365551 0.379846 0.759692 -2.807602 -0.301435 1.258562 -1.247604 -2.83 0.0 0.622245 -2.488244 0.785902 -2.824528 13 26.981539 -2.488244 0.85 1.15
Pb 3.499723 0.647872 8.450154 8.450063 9.121799 5.212457 0.161219 0.236884 0.250805 0.764955 -1.422370 -0.210107 0.682886 -0.529378 -1.44 0.0 0.702726 -0.538766 0.935380 -1.439436 82 207.2 -0.538766 0.85 1.15
Fe 2.481987 1.885957 20.041463 20.041463 9.818270 5.236411 0.392811 0.646243 0.170306 0.340613 -2.534992 -0.059605 0.193065 -2.282322 -2.54 0.0 0.200269 -0.148770 0.391750 -2.539945 26 55.847 -0.148770 0.85 1.15
Mo 2.728100 2.723710 29.354065 29.354065 8.393531 4.476550 0.708787 1.120373 0.137640 0.275280 -3.692913 -0.178812 0.380450 -3.133650 -3.71 0.0 0.875874 0.776222 0.790879 -3.712093 42 95.94 0.776222 0.85 1.15
Ta 2.860082 3.086341 33.787168 33.787168 8.489528 4.527748 0.611679 1.032101 0.176977 0.353954 -5.103845 -0.405524 1.112997 -3.585325 -5.14 0.0 1.640098 0.221375 0.848843 -5.141526 73 180.9479 0.221375 0.85 1.15
W 2.740840 3.487340 37.234847 37.234847 8.900114 4.746728 0.882435 1.394592 0.139209 0.278417 -4.946281 -0.148818 0.365057 -4.432406 -4.96 0.0 0.661935 0.348147 0.582714 -4.961306 74 183.84 0.348147 0.85 1.15
Mg 3.196291 0.544323 7.132600 7.132600 10.228708 5.455311 0.137518 0.225930 0.5 1.0 -0.896473 -0.044291 0.162232 -0.689950 -0.90 0.0 0.122838 -0.226010 0.431425 -0.899702 12 24.305 -0.226010 0.85 1.15
Co 2.505979 1.975299 27.206789 27.206789 8.679625 4.629134 0.421378 0.640107 0.5 1.0 -2.541799 -0.219415 0.733381 -1.589003 -2.56 0.0 0.705845 -0.687140 0.694608 -2.559307 27 58.9332 -0.687140 0.85 1.15
Ti 2.933872 1.863200 25.565138 25.565138 8.775431 4.680230 0.373601 0.570968 0.5 1.0 -3.203773 -0.198262 0.683779 -2.321732 -3.22 0.0 0.608587 -0.750710 0.558572 -3.219176 22 47.88 -0.750710 0.85 1.15
Zr 3.199978 2.230909 30.879991 30.879991 8.559190 4.564902 0.424667 0.640054 0.5 1.0 -4.485793 -0.293129 0.990148 -3.202516 -4.51 0.0 0.928602 -0.981870 0.597133 -4.509025 40 91.224 -0.981870 0.85 1.15
Cr 2.493879 1.793835 17.641302 19.60545 8.604593 7.170494 1.551848 1.827556 0.18533 0.277995 -2.022754 0.039608 -0.183611 -2.245972 -2.02 0.0 -0.056517 0.439144 0.456 -2.020038 24 51.9961 0.439144 0.85 1.15
"""

ZHOU04: dict[str, dict[str, float]] = {
    row.split()[0]: dict(zip(_FIELDS, map(float, row.split()[1:]), strict=True))
    for row in _TABLE.strip().splitlines()
}
ELEMENTS = tuple(ZHOU04)
_R_MIN_A = 0.5


def _cut(x: np.ndarray, shift: float) -> np.ndarray:
    return 1.0 + (x - shift) ** 20


def _density(p: dict[str, float], r: np.ndarray) -> np.ndarray:
    x = r / p["re"]
    return p["fe"] * np.exp(-p["beta"] * (x - 1.0)) / _cut(x, p["lam"])


def _pair(p: dict[str, float], r: np.ndarray) -> np.ndarray:
    x = r / p["re"]
    rep = p["A"] * np.exp(-p["alpha"] * (x - 1.0)) / _cut(x, p["kappa"])
    att = p["B"] * np.exp(-p["beta"] * (x - 1.0)) / _cut(x, p["lam"])
    return rep - att


def _embedding(p: dict[str, float], rho: np.ndarray) -> np.ndarray:
    rho_n, rho_0 = p["rhol"] * p["rhoe"], p["rhoh"] * p["rhoe"]
    low = rho / rho_n - 1.0
    mid = rho / p["rhoe"] - 1.0
    s = np.maximum(rho, 1e-300) / p["rhos"]
    f_low = p["Fn0"] + low * (p["Fn1"] + low * (p["Fn2"] + low * p["Fn3"]))
    cubic = np.where(rho < p["rhoe"], p["F3"], p["F3hi"])
    f_mid = p["F0"] + mid * (p["F1"] + mid * (p["F2"] + mid * cubic))
    f_high = p["Fe"] * (1.0 - p["eta"] * np.log(s)) * s ** p["eta"]
    out = np.where(rho < rho_n, f_low, np.where(rho < rho_0, f_mid, f_high))
    return np.where(rho == 0.0, 0.0, out)


def zhou04(elements: Sequence[str], *, knots: int = 2000) -> EamPotential:
    """A setfl potential for `elements` (e.g. ["Cu"] or ["Cu", "Ni"]) on `knots` points."""
    unknown = [e for e in elements if e not in ZHOU04]
    if unknown or not elements:
        raise PotentialError(
            f"zhou04 has no parameters for {', '.join(unknown) or '(no elements)'}; "
            f"it covers {', '.join(ELEMENTS)}"
        )
    if len(set(elements)) != len(elements):
        raise PotentialError(f"elements repeat: {' '.join(elements)}")
    if knots < 100:
        raise PotentialError(f"knots must be at least 100, got {knots}")
    ps = [ZHOU04[e] for e in elements]
    lattice = [math.sqrt(2.0) * p["re"] for p in ps]
    cutoff = math.sqrt(10.0) / 2.0 * max(lattice)
    r = np.linspace(0.0, cutoff, knots)
    dr = r[1] - r[0]
    r = np.maximum(r, _R_MIN_A)
    dens = np.stack([_density(p, r) for p in ps])
    pair = np.stack([_pair(p, r) for p in ps])
    ne = len(ps)
    z2r = np.empty((ne, ne, knots))
    for a in range(ne):
        for b in range(ne):
            if a == b:
                z2r[a, b] = r * pair[a]
            else:
                mixed = 0.5 * (dens[b] / dens[a] * pair[a] + dens[a] / dens[b] * pair[b])
                z2r[a, b] = r * mixed
    rho_max = max(float(dens.max()), 2.0 * max(p["rhoe"] for p in ps), 100.0)
    rho = np.linspace(0.0, rho_max, knots)
    return EamPotential(
        kind="setfl",
        elements=tuple(elements),
        masses_amu=tuple(p["mass"] for p in ps),
        numbers=tuple(int(p["Z"]) for p in ps),
        lattice_A=tuple(lattice),
        structures=tuple("fcc" for _ in ps),
        nrho=knots,
        drho=float(rho[1] - rho[0]),
        nr=knots,
        dr=float(dr),
        cutoff_A=cutoff,
        frho=np.stack([_embedding(p, rho) for p in ps]),
        rhor=np.repeat(dens[:, None, :], ne, axis=1),
        z2r=z2r,
    )
