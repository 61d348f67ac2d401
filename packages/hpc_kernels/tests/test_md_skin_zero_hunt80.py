"""Hunt 80 (note): `MdConfig(skin_A=0)` was refused ("must be positive") where LAMMPS runs
`neighbor 0.0 bin`. At skin 0 the lists hold exactly the pairs within the cutoff, right
only when rebuilt at every step: the run starts at that cadence (`initial_every`), and a
longer one asked for is cut down by the shell's drift check (any move reruns the chunk).

Oracle: the full-window kernel (no lists: every step sweeps the whole window, what
`LIST_BUDGET_BYTES` 0 falls back to, as at 800k atoms), the same trajectory rebuilt every
step by construction; fp64, so the two agree to rounding.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from wse_core import preset
from wse_hpc.md.config import MdConfig
from wse_hpc.md.simulate import initial_every, run_md
from wse_hpc.md.testing import perturbed
from wse_hpc.md.zhou04 import zhou04

pytestmark = pytest.mark.timeout(900)

POT = zhou04(["Cu"], knots=500)


def _config(**kw) -> MdConfig:
    base = dict(steps=20, temperature_K=900.0, thermo_every=10, dtype="float64")
    return MdConfig(**base, spec=preset("wse3"), **kw)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def full_window():
    """The oracle run: no lists (monkeypatching the host budget for lists to 0)."""
    import wse_hpc.md.neighbour_plan as neighbour_plan

    s = perturbed("fcc", "Cu", 3.615, (4, 4, 4), 0.05, seed=5)
    with pytest.MonkeyPatch.context() as mp, jax.enable_x64(True):
        mp.setattr(neighbour_plan, "LIST_BUDGET_BYTES", 0)
        res = run_md(s, POT, _config(skin_A=0.0))
    assert not res.plan.caps  # no lists: the full window every step
    return s, res


def test_skin_zero_starts_rebuilding_every_step():
    still = np.zeros((4, 3))
    assert initial_every(still, 0.0, 1.0) == 1  # from rest too (before: the cap, 1024)
    assert initial_every(still, 1.0, 1.0) > 1


@pytest.mark.parametrize("every", [None, 4])
def test_skin_zero_runs_as_the_full_window(full_window, every):
    s, oracle = full_window
    with jax.enable_x64(True):
        # before: WseError "the neighbour-list skin must be positive, got 0.0 A"
        res = run_md(s, POT, _config(skin_A=0.0, rebuild_every=every))
    assert res.plan.caps and res.plan.skin_A == 0.0  # lists, of the pairs within the cutoff
    assert res.list_builds == res.steps  # rebuilt at every step
    if every is not None:  # a longer cadence asked for: its chunks ran again at less
        assert res.list_reruns >= 2
    np.testing.assert_allclose(
        res.structure.positions_A, oracle.structure.positions_A, rtol=0, atol=1e-9
    )
    np.testing.assert_allclose(
        res.structure.forces_eV_A, oracle.structure.forces_eV_A, rtol=0, atol=1e-8
    )
    for a, b in zip(res.thermo, oracle.thermo, strict=True):
        assert a.etotal == pytest.approx(b.etotal, abs=1e-8)
        assert a.press == pytest.approx(b.press, rel=1e-8)


def test_negative_skin_is_still_refused():
    s = perturbed("fcc", "Cu", 3.615, (4, 4, 4), 0.05, seed=5)
    with pytest.raises(Exception, match=r"skin must be a finite number >= 0"):
        run_md(s, POT, _config(skin_A=-0.5))
