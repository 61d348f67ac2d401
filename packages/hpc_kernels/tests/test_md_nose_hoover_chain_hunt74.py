"""Hunt 74 hole 1: `wse hpc md --thermostat nose-hoover` held one thermostat (LAMMPS's
`fix nvt ... tchain 1`) while LAMMPS's `fix nvt temp 300 300 0.1` chains 3 ("tchain value =
N = length of thermostat chain (1 = single thermostat)", default 3). Now `Thermostat.chain`
(`--tchain`) defaults to 3 and tchain 1 is the run it was, to the bit.

Oracles: the equations of motion of the Nosé–Hoover chain (Martyna, Klein & Tuckerman, J.
Chem. Phys. 97, 2635 (1992), eqs. 2.9), integrated by SciPy's DOP853 on a few harmonic
oscillators, with their conserved energy written out here; the chain with its later masses
infinite is the single thermostat; and LAMMPS 29 Sep 2021's thermo output for plain
`fix 1 all nvt temp 600 600 0.1` and for `... tchain 1` (recorded in the CLI's
test_cli_md_hunt71, the same structure and potential file, step 50).
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import subprocess
import sys

import jax
import numpy as np
import pytest
from scipy.integrate import solve_ivp
from wse_core import preset
from wse_core.errors import WseError
from wse_hpc.md import crystal, maxwell_boltzmann, read_potential, write_setfl, zhou04
from wse_hpc.md.config import MdConfig
from wse_hpc.md.integrate import Thermostat
from wse_hpc.md.nose_hoover import ChainMasses, chain_energy, chain_half
from wse_hpc.md.pe_program import NOSE_HOOVER_LINK, scalar_count
from wse_hpc.md.simulate import run_md
from wse_hpc.md.testing import perturbed
from wse_hpc.md.thermostat_perf import NOSE_HOOVER_SUMS, half_instructions
from wse_hpc.md.xyz import XyzError, read_xyz, write_xyz

# test_cli_md_hunt71: step 50 (PotEng eV, Temp K, Ecouple eV) of LAMMPS's runs
LAMMPS_TCHAIN_1 = (-897.62122129, 92.39626202, -0.62038725)
LAMMPS_TCHAIN_3 = (-897.63449752, 90.14234986, -0.53253659)  # plain `fix nvt`


# -- the default ------------------------------------------------------------------------------
def test_the_default_chain_is_lammps_three():
    assert Thermostat("nose-hoover", 300.0).chain == 3
    assert inspect.signature(Thermostat).parameters["chain"].default == 3
    with pytest.raises(WseError, match=r"chain length \(--tchain, LAMMPS's tchain\) must be an "):
        Thermostat("nose-hoover", 300.0, 100.0, 0)


# -- the chain's half step against the MTK equations -------------------------------------------
# unit-free: m = 1, kB T = 1, 2 KE = sum v^2; independent 3-d oscillators F = -k x
K_SPRING, N_OSC, NF = 4.0, 4, 12


def _masses(chain: int, tau: float = 0.5) -> ChainMasses:
    return ChainMasses(NF * 1.0, 1.0, (NF * tau**2,) + (tau**2,) * (chain - 1))


def _mtk(t, y, q):
    """Martyna-Klein-Tuckerman's chain: dx = v, dv = F - xi_0 v, d eta_k = xi_k,
    dxi_0 = (sum v^2 - Nf kT) / Q_0 - xi_0 xi_1, dxi_k = (Q_{k-1} xi_{k-1}^2 - kT) / Q_k -
    xi_k xi_{k+1} (no xi_{M})."""
    m = len(q)
    x, v = y[:NF], y[NF : 2 * NF]
    xi, _ = y[2 * NF : 2 * NF + m], y[2 * NF + m :]
    g = np.empty(m)
    g[0] = (v @ v - NF) / q[0]
    g[1:] = (q[:-1] * xi[:-1] ** 2 - 1.0) / q[1:]
    dxi = g - xi * np.append(xi[1:], 0.0)
    return np.concatenate([v, -K_SPRING * x - xi[0] * v, dxi, xi])


def _extended_energy(y, q):
    """Hamiltonian of the extended system, conserved by `_mtk`: written here, not ours."""
    m = len(q)
    x, v = y[:NF], y[NF : 2 * NF]
    xi, eta = y[2 * NF : 2 * NF + m], y[2 * NF + m :]
    bath = NF * eta[0] + np.sum(eta[1:]) + 0.5 * np.sum(np.asarray(q) * xi**2)
    return 0.5 * v @ v + 0.5 * K_SPRING * x @ x + bath


def _start(chain: int):
    rng = np.random.default_rng(74)
    xi0 = np.array([0.3, -0.7, 1.1][:chain])
    return rng.normal(size=NF), 1.6 * rng.normal(size=NF), xi0, np.zeros(chain)


def _trotter(chain: int, dt: float, t_end: float):
    """Velocity Verlet inside `chain_half`, as `integrate._verlet` runs it."""
    x, v, xi, eta = _start(chain)
    masses = _masses(chain)
    for _ in range(round(t_end / dt)):
        xi, eta, s = chain_half(xi, eta, v @ v, masses, dt)
        v = v * float(s)
        v = v - 0.5 * dt * K_SPRING * x
        x = x + dt * v
        v = v - 0.5 * dt * K_SPRING * x
        xi, eta, s = chain_half(xi, eta, v @ v, masses, dt)
        v = v * float(s)
    return np.concatenate([x, v, np.asarray(xi), np.asarray(eta)])


@pytest.mark.parametrize("chain", [1, 3])
def test_chain_half_integrates_the_mtk_equations_to_second_order(chain):
    q = np.array(_masses(chain).q)
    x, v, xi, eta = _start(chain)
    y0 = np.concatenate([x, v, xi, eta])
    t_end = 2.0
    exact = solve_ivp(_mtk, (0, t_end), y0, args=(q,), method="DOP853", rtol=1e-12, atol=1e-12)
    y_end = exact.y[:, -1]
    # the oracle conserves its own extended energy (the equations and H' agree)
    assert _extended_energy(y_end, q) == pytest.approx(_extended_energy(y0, q), abs=1e-9)
    with jax.enable_x64(True):
        errors = [np.abs(_trotter(chain, dt, t_end) - y_end).max() for dt in (0.01, 0.005)]
        ours = _trotter(chain, 0.005, t_end)
    # a symmetric Trotter split is second order: halving dt quarters the error (3.6..4.4)
    assert 3.6 < errors[0] / errors[1] < 4.4, errors
    assert errors[1] < 2e-3
    m = len(q)
    got = chain_energy(ours[2 * NF : 2 * NF + m], ours[2 * NF + m :], _masses(chain))
    want = _extended_energy(ours, q) - 0.5 * ours[NF : 2 * NF] @ ours[NF : 2 * NF]
    want -= 0.5 * K_SPRING * ours[:NF] @ ours[:NF]
    assert got == pytest.approx(want, rel=1e-12)  # `chain_energy` is the oracle's bath term


def test_a_chain_with_infinite_later_masses_is_one_thermostat():
    with jax.enable_x64(True):
        one, three = _masses(1), _masses(3)
        heavy = three._replace(q=(three.q[0], 1e300, 1e300))
        xi1, eta1, s1 = chain_half(np.array([0.4]), np.array([0.2]), 17.0, one, 0.01)
        xi3, eta3, s3 = chain_half(np.array([0.4, 0, 0]), np.array([0.2, 0, 0]), 17.0, heavy, 0.01)
    assert float(s3) == float(s1) and float(xi3[0]) == float(xi1[0])
    # the later elements move by dt/4 G_k with G_k ~ 1/1e300: nothing element 0 feels
    assert float(eta3[0]) == float(eta1[0]) and np.abs(np.asarray(xi3[1:])).max() < 1e-290


# -- the wafer's run against LAMMPS --------------------------------------------------------------
@pytest.fixture(scope="module")
def lammps_case(tmp_path_factory):
    """test_cli_md_hunt71's case: 256 fcc Cu atoms at 334.9 K (seed 3) through an extended
    XYZ file, `wse hpc md potential --elements Cu`'s file (zhou04, 1000 knots)."""
    tmp = tmp_path_factory.mktemp("md74")
    s = crystal("fcc", "Cu", 3.615, (4, 4, 4))
    s.velocities_A_ps = maxwell_boltzmann(np.full(s.num_atoms, 63.546), 334.9, seed=3)
    s = read_xyz(write_xyz(tmp / "eq.xyz", [s]))[-1]
    path = tmp / "Cu.eam.alloy"
    write_setfl(zhou04(["Cu"], knots=1000), path, ["hunt 74", "zhou04 Cu", "1000 knots"])
    return s, read_potential(path, species=["Cu"])


def _step50(case, thermostat: Thermostat) -> tuple[float, float, float]:
    s, pot = case
    cfg = MdConfig(steps=50, thermo_every=25, thermostat=thermostat, dtype="float64",
                   spec=preset("small"))  # fmt: skip
    with jax.enable_x64(True):
        row = run_md(s, pot, cfg).thermo[-1]
    assert row.step == 50
    return row.pe, row.temp, row.ecouple


def test_the_default_run_is_lammps_plain_fix_nvt(lammps_case):
    got = _step50(lammps_case, Thermostat("nose-hoover", 600.0, 100.0))
    # LAMMPS prints 8 decimals: a last-digit rounding (before: Temp 92.396, tchain 1's)
    assert got == pytest.approx(LAMMPS_TCHAIN_3, abs=1e-5)


def test_tchain_1_is_still_lammps_tchain_1(lammps_case):
    got = _step50(lammps_case, Thermostat("nose-hoover", 600.0, 100.0, chain=1))
    assert got == pytest.approx(LAMMPS_TCHAIN_1, abs=1e-5)


# -- a chain continued from its frame ----------------------------------------------------------
def test_a_continued_chain_equals_an_uninterrupted_run_and_another_length_is_refused(tmp_path):
    s = perturbed("fcc", "Cu", 3.615, (4, 4, 4), 0.05, seed=1)
    s.velocities_A_ps = maxwell_boltzmann(np.full(s.num_atoms, 63.546), 300.0, seed=2)
    pot, runners = zhou04(["Cu"], knots=500), {}
    cfg = MdConfig(steps=20, thermo_every=10, dtype="float64", spec=preset("small"),
                   thermostat=Thermostat("nose-hoover", 600.0, 20.0))  # fmt: skip
    full = run_md(s, pot, cfg, runners=runners)
    half, frames = dataclasses.replace(cfg, steps=10), []
    run_md(s, pot, half, on_frame=lambda step, f: frames.append(f), runners=runners)
    path = write_xyz(tmp_path / "half.xyz", [frames[-1]])
    assert 'nose_hoover_xi="' in path.read_text().splitlines()[1]  # three values, quoted
    cont = read_xyz(path)[-1]
    assert len(cont.info["nose_hoover_xi"]) == len(cont.info["nose_hoover_eta"]) == 3
    rest = run_md(cont, pot, half, runners=runners)
    a, b = full.thermo[-1], rest.thermo[-1]
    for k in ("pe", "ke", "temp", "press", "ecouple"):
        assert getattr(b, k) == pytest.approx(getattr(a, k), rel=1e-8, abs=1e-8), k
    np.testing.assert_allclose(rest.structure.info["nose_hoover_xi"],
                               full.structure.info["nose_hoover_xi"], rtol=1e-8)  # fmt: skip
    one = dataclasses.replace(half, thermostat=Thermostat("nose-hoover", 600.0, 20.0, chain=1))
    with pytest.raises(WseError) as e:
        run_md(cont, pot, one)
    assert str(e.value) == (
        "the structure carries a Nose-Hoover chain of 3 (its run's --tchain) and this run's is "
        "1: give --tchain 3 to continue that run, or --create-velocities to start a new one"
    )


def test_a_frame_whose_xi_and_eta_differ_in_length_is_refused(tmp_path):
    s = crystal("fcc", "Cu", 3.615, (4, 4, 4))
    s.info = {"nose_hoover_xi": (1.5, -2.0, 0.25), "nose_hoover_eta": (0.5, 0.125)}
    path = write_xyz(tmp_path / "t.xyz", [s])
    with pytest.raises(XyzError, match="nose_hoover_xi has 3 values and nose_hoover_eta 2"):
        read_xyz(path)
    s.info["nose_hoover_eta"] = (0.5, 0.125, math.pi)
    assert read_xyz(write_xyz(tmp_path / "u.xyz", [s]))[-1].info == s.info  # to the bit


# -- the price -----------------------------------------------------------------------------------
def test_each_further_element_adds_its_scalar_work_and_no_sum():
    # by hand from nose_hoover.chain_half, per element k >= 1 per half step: exp(-dt/8 xi_k)
    # (mul + the 12-instruction exp), its 2 multiplies into each of element k-1's 2 kicks (4
    # mul), element k's 2 kicks (Q xi^2 - kT: 2 mul, sub; * dt/4/Q: mul; + xi: fmac) and
    # eta_k (fmac): 1 + 4 + 2 x 3 = 11 mul, 2 sub, 3 fmac, the exp's 12: 28
    assert scalar_count(NOSE_HOOVER_LINK) == 28
    one, three = (half_instructions(Thermostat("nose-hoover", 300.0, chain=m)) for m in (1, 3))
    assert (one, three) == (28, 28 + 2 * 28)
    assert NOSE_HOOVER_SUMS == 2  # the chain is scalars on every PE: no more allreduces


# -- the CLI's --tchain (LAMMPS's keyword) -------------------------------------------------------
@pytest.mark.parametrize(
    ("extra", "line"),
    [(["--thermostat", "nose-hoover", "--temperature-K", "300", "--tchain", "0"],
      "Error: --tchain must be an integer in [1, 100], got 0"),
     (["--thermostat", "langevin", "--temperature-K", "300", "--tchain", "3"],
      "Error: --tchain applies to --thermostat nose-hoover (LAMMPS fix nvt), not langevin")],
    ids=["zero", "langevin"],
)  # fmt: skip
def test_the_cli_refuses_a_tchain_it_cannot_use_in_one_line(tmp_path, extra, line):
    args = ["hpc", "md", "--lattice", "fcc", "--element", "Cu", "--a", "3.615", "--cells",
            "4", "4", "4", "--potential", str(tmp_path / "none.eam.alloy"), *extra]  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "wse_cli", *args], capture_output=True,
                          text=True, timeout=120, check=False)  # fmt: skip
    assert (done.returncode, done.stderr.strip().splitlines()) == (2, [line]), done.stderr
