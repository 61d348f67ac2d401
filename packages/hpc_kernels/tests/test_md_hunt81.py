"""Hunt 81, holes 1 and 2: an MD run's plan, price and trajectory do not depend on how often
it reports.

1. The list cadence was adapted at each thermo row (the shell's chunk), so 256 Cu atoms at
   300 K for 1,000 steps rebuilt 0 times at `thermo_every` 10 (the cadence doubled every 10
   steps, before any rebuild fell due) and 8 times at 100, where the first rebuild overflowed
   the crystal's list capacity and re-planned it from M = 97 to 121: the same trajectory
   priced at 1.338e5 and 1.184e5 timesteps/s. Now the cadence is checked and adapted per
   segment of whole list lifetimes (`segments`). Oracle: LAMMPS's neighbour builds and loop
   do not depend on `thermo N`, so every figure must be equal across thermo intervals; the
   priced N_h (the list capacity, slots walked) is at least the busiest atom's neighbours
   within the cutoff, counted here with SciPy's periodic k-d tree.
2. Langevin noise was drawn per PE, so a trajectory changed when atoms moved between PEs
   (swaps at rebuilds, re-maps), and with them with `thermo_every`. Now each atom's draw is
   keyed by (seed, step, atom id). Oracles: the same fp64 run on another PE placement (another
   tile, another rebuild cadence) is the same trajectory to rounding; and the
   fluctuation-dissipation theorem: the noise holds the temperature at the target, each of
   the 3N velocity components at kB T / m, so the thermo Temp (over 3N - 3 degrees of
   freedom) averages T 3N / (3N - 3), with the canonical spread T sqrt(2 / (3N - 3)).
"""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest
from scipy.spatial import cKDTree
from wse_core import preset
from wse_hpc.md.config import MdConfig
from wse_hpc.md.integrate import Thermostat
from wse_hpc.md.lattice import crystal
from wse_hpc.md.simulate import run_md
from wse_hpc.md.zhou04 import zhou04

pytestmark = pytest.mark.timeout(1200)

POT = zhou04(["Cu"], knots=500)
LANGEVIN = Thermostat("langevin", 300.0, 100.0)


def _cu() -> object:
    return crystal("fcc", "Cu", 3.615, (4, 4, 4))  # 256 atoms


def _most_within_cutoff(structure, cutoff_A: float) -> int:
    """The most atoms within `cutoff_A` of any atom (SciPy's periodic k-d tree)."""
    box = np.asarray(structure.box_A, dtype=np.float64)
    pos = np.mod(np.asarray(structure.positions_A, dtype=np.float64), box)
    pairs = cKDTree(pos, boxsize=box).query_pairs(cutoff_A, output_type="ndarray")
    return int(np.bincount(pairs.ravel(), minlength=len(pos)).max())


@pytest.mark.slow  # three runs of 300 steps, one compile: ~1 min idle
def test_the_plan_and_the_price_do_not_depend_on_thermo_every():
    runners: dict = {}
    runs = {}
    for every in (10, 100, 1000):
        cfg = MdConfig(steps=300, thermo_every=every, temperature_K=300.0, spec=preset("wse3"))
        runs[every] = run_md(_cu(), POT, cfg, runners=runners)
    base = runs[100]
    # before: thermo_every 10 had 0 builds and no re-plan, 100 and 1000 a re-plan to M 121
    assert base.list_builds > 0
    for res in runs.values():
        assert (res.list_builds, res.replans, res.list_reruns) == (
            base.list_builds,
            base.replans,
            base.list_reruns,
        )
        assert res.plan == base.plan
        assert res.report.units_per_s == base.report.units_per_s
        assert res.report.extra["hits"] == base.report.extra["hits"]
        assert res.report.extra["rebuild_every"] == base.report.extra["rebuild_every"]
        rows = {r.step: r for r in res.thermo}
        for r in base.thermo:  # rows at the steps both print: the same trajectory
            if r.step in rows:
                assert rows[r.step] == r
        np.testing.assert_array_equal(res.structure.positions_A, base.structure.positions_A)
    # N_h priced per list slot: the capacity M, said so, at least the neighbours in the cutoff
    m = base.plan.caps[-1]
    assert base.report.extra["hits"] == m
    assert _most_within_cutoff(base.structure, POT.cutoff_A) <= m
    said = base.report.assumptions["md.hits"]
    assert said.startswith(f"priced per list slot: N_h = M = {m},") and "not the neighbours" in said


def _langevin_fp64(**kw) -> MdConfig:
    return MdConfig(steps=60, temperature_K=300.0, seed=3, dtype="float64",
                    thermostat=LANGEVIN, spec=preset("wse3"), **kw)  # fmt: skip


@pytest.mark.slow  # four fp64 runs of 60 steps, three plans compiled: ~2 min idle
def test_langevin_noise_follows_the_atom_not_its_pe():
    with jax.enable_x64(True):
        base = run_md(_cu(), POT, _langevin_fp64(thermo_every=20, tile=(1, 4)))
        others = [
            run_md(_cu(), POT, _langevin_fp64(thermo_every=20, tile=(2, 2))),  # other PEs
            run_md(_cu(), POT, _langevin_fp64(thermo_every=20, tile=(1, 4), rebuild_every=3)),
            run_md(_cu(), POT, _langevin_fp64(thermo_every=10, tile=(1, 4))),
        ]
    assert others[0].tile != base.tile and others[1].list_builds > base.list_builds
    for res in others:  # before: 0.3 to 0.6 eV apart at step 60, positions by ~0.1 A
        np.testing.assert_allclose(
            res.structure.positions_A, base.structure.positions_A, rtol=0, atol=1e-9
        )
        rows = {r.step: r for r in res.thermo}
        for r in base.thermo:
            # fp64 sums of the same pairs in another order: rounding, ~1e-12 eV of 900
            assert rows[r.step].etotal == pytest.approx(r.etotal, rel=0, abs=1e-8)
            assert rows[r.step].temp == pytest.approx(r.temp, rel=1e-10)


@pytest.mark.slow  # 3,000 steps: ~1 min idle
def test_langevin_holds_the_temperature_the_noise_sets():
    """Fluctuation-dissipation: 256 atoms from 300 K (which equipartition halves) held by
    fix langevin at 300 K, damp 100 fs, for 3 ps; the first 1 ps dropped (30 relaxation
    times damp / 2 of the kinetic energy). Tolerances: Temp's canonical spread is
    T sqrt(2 / (3N - 3)) = 15.3 K a sample; the rows 10 fs apart are correlated, at most
    over damp (100 fs, the velocities' memory), so the 2 ps mean holds at least
    2000 / (2 x 100) = 10 independent samples: standard error <= 4.9 K, and 3 of them
    (14.6 K) is the bound. The sample spread, from ~10 independent samples, is within a
    factor 1.5 of the canonical one (its relative error ~ 1 / sqrt(2 x 10) = 0.22)."""
    s = _cu()
    n, t = s.num_atoms, LANGEVIN.temperature_K
    cfg = MdConfig(steps=3000, thermo_every=10, temperature_K=t, seed=1, thermostat=LANGEVIN,
                   spec=preset("wse3"))  # fmt: skip
    temps = np.array([r.temp for r in run_md(s, POT, cfg).thermo if r.step >= 1000])
    expected = t * 3 * n / (3 * n - 3)  # every component at kB T / m, Temp over 3N - 3
    spread = t * math.sqrt(2.0 / (3 * n - 3))
    assert abs(temps.mean() - expected) < 3 * spread / math.sqrt(10)
    assert spread / 1.5 < temps.std() < 1.5 * spread
