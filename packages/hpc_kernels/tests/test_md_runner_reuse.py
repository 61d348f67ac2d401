"""A repeat of an MD run given the caller's `runners` cache reuses the first run's compiled
runner and gives the same result bit for bit (the same program on the same input); a
changed setting builds a new runner."""

import dataclasses

import numpy as np
import pytest
from wse_core import preset
from wse_hpc.md.config import MdConfig
from wse_hpc.md.integrate import maxwell_boltzmann
from wse_hpc.md.lattice import crystal
from wse_hpc.md.simulate import run_md
from wse_hpc.md.zhou04 import zhou04

POT = zhou04(["Cu"], knots=500)


@pytest.mark.slow  # three short runs, two compiles: ~1 min idle, 3 under load
def test_repeat_reuses_the_runner_and_matches_bit_for_bit():
    s = crystal("fcc", "Cu", 3.615, (4, 4, 4))
    s.velocities_A_ps = maxwell_boltzmann([POT.masses_amu[0]] * s.num_atoms, 900.0, seed=3)
    cfg = MdConfig(steps=12, thermo_every=6, spec=preset("wse3"))
    cache: dict = {}
    first = run_md(s, POT, cfg, runners=cache)
    runners = list(cache.values())
    again = run_md(s, POT, cfg, runners=cache)
    assert list(cache.values()) == runners and len(runners) == 1  # nothing new was built
    np.testing.assert_array_equal(again.structure.positions_A, first.structure.positions_A)
    np.testing.assert_array_equal(again.structure.velocities_A_ps, first.structure.velocities_A_ps)
    assert [r.etotal for r in again.thermo] == [r.etotal for r in first.thermo]
    other = run_md(s, POT, dataclasses.replace(cfg, dt_fs=0.5 * cfg.dt_fs), runners=cache)
    assert len(cache) == 2  # a new runner for the new timestep
    assert not np.array_equal(other.structure.positions_A, first.structure.positions_A)
