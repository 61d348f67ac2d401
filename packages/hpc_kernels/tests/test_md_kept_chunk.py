"""Chunks in which no neighbour-list rebuild is due run as a program without the rebuild
(`runners.Runner.kept_fits`): the run gives the same thermo rows and final state bit for
bit as the run that steps every chunk with the rebuild's program (the oracle), and both
programs are used (kept chunks first, the full chunk once a rebuild falls due)."""

import numpy as np
import pytest
from wse_core import preset
from wse_hpc.md import exec_cache, runners
from wse_hpc.md.config import MdConfig
from wse_hpc.md.integrate import maxwell_boltzmann
from wse_hpc.md.lattice import crystal
from wse_hpc.md.simulate import run_md
from wse_hpc.md.zhou04 import zhou04

POT = zhou04(["Cu"], knots=500)


@pytest.mark.slow  # two runs, three chunk programs compiled: ~1 min idle
def test_kept_chunks_match_the_rebuilding_chunks_bit_for_bit(monkeypatch):
    monkeypatch.setattr(exec_cache, "_root", lambda: None)  # every program compiled here
    s = crystal("fcc", "Cu", 3.615, (4, 4, 4))
    s.velocities_A_ps = maxwell_boltzmann([POT.masses_amu[0]] * s.num_atoms, 900.0, seed=3)
    # a skin of 0.1 A: the atoms cross a quarter of it in a few steps, so the shell stops
    # doubling the cadence and halves it (reruns) until a rebuild falls due: both kinds
    cfg = MdConfig(steps=10, thermo_every=1, rebuild_every=3, skin_A=0.1, spec=preset("wse3"))
    used = []
    real_chunk = runners.Runner.chunk

    def chunk(self, n, *args, kept=False):
        used.append(kept)
        return real_chunk(self, n, *args, kept=kept)

    monkeypatch.setattr(runners.Runner, "chunk", chunk)
    mixed = run_md(s, POT, cfg)
    assert True in used and False in used and mixed.list_builds > 0
    monkeypatch.setattr(runners.Runner, "kept_fits", lambda self, n, state: False)
    used.clear()
    full = run_md(s, POT, cfg)
    assert True not in used
    for a, b in (
        (mixed.structure.positions_A, full.structure.positions_A),
        (mixed.structure.velocities_A_ps, full.structure.velocities_A_ps),
        (mixed.structure.forces_eV_A, full.structure.forces_eV_A),
    ):
        np.testing.assert_array_equal(a, b)
    assert mixed.thermo == full.thermo  # every row, every field
    assert mixed.list_builds == full.list_builds
