"""2D Rayleigh-Benard Nusselt numbers of `run_cfd` against Dedalus on the same case.

The oracle is Dedalus 3's own Rayleigh-Benard example (`wse_hpc.fields.dedalus_peer`: same
free-fall units, aspect 2, no-slip plates at T = 1 and 0, periodic sides, the same
deterministic perturbation), a Chebyshev-Fourier spectral code: at 32 x 16 modes its Nu
differs from 64 x 32 modes by 2e-5 (Ra 1e4, Pr 1) and 1.4e-4 (Ra 1e5), so it stands for the
exact Nu of the case. Both runs reach a steady single roll pair (Nu's peak-to-peak over the
last 20 free-fall times under 0.5%), Nu averaged over that window.

Ours on 64 x 32 cells, measured (2026-11-28) against Dedalus 64 x 32: Ra 1e4 +0.51% (Pr 1),
+0.53% (Pr 0.71); Ra 1e5 +1.3% (both Pr). The second-order MAC scheme converges at h^2 to
it: Ra 1e5 Pr 0.71 is +5.6% / +1.3% / +0.33% on 32 x 16 / 64 x 32 / 128 x 64 (ratios 4.3,
3.9), Ra 1e4 Pr 1 +2.0% / +0.51%; 64 x 32 is the smallest grid inside the issue's 2% at
both Ra. Ra 1e5 needs t = 150 on it: the rolls' oscillation decays slowly (±1% at t = 90).
Skipped where Dedalus is absent (Debian's MPI and FFTW dev packages, the `peers` extra).
"""

import numpy as np
import pytest
from wse_core import PRESETS
from wse_hpc.fields.runs import CfdConfig, run_cfd

pytest.importorskip("dedalus")

from wse_hpc.fields.dedalus_peer import DedalusConfig, dedalus_nusselt  # noqa: E402

T_AVG = 20.0
# (statistically) steady: Nu's peak-to-peak over the averaging window under 0.5%, so the
# average is within 0.25% of the steady value, well inside the 2% compared
STEADY = 5e-3


def _ours(ra: float, pr: float, grid: tuple[int, int], t_end: float) -> float:
    from wse_hpc.fields.convection import stable_dt

    dt = stable_dt((*grid, 1), 2.0, ra, pr)
    steps, chunk = int(round(t_end / dt)), 20
    run = run_cfd(CfdConfig(case="rayleigh-benard", grid=(*grid, 1), spec=PRESETS["wse3"],
                            steps=steps, ra=ra, pr=pr, output_every=chunk))  # fmt: skip
    t, nu = np.array([h[1] for h in run.history]), np.array([h[2] for h in run.history])
    last = t > t_end - T_AVG
    assert np.ptp(nu[last]) < STEADY * nu[last].mean()
    return float(nu[last].mean())


@pytest.mark.slow
# each case took 750-2,180 s beside other work on the 2 cores (2026-12-02, all four passed):
# past the suite's 600 s pytest-timeout, which cut Ra 1e4 Pr 0.71 on 2026-12-01
@pytest.mark.timeout(3600)
@pytest.mark.parametrize(
    ("ra", "pr", "grid", "t_end"),
    [
        (1e4, 1.0, (64, 32), 80.0),
        (1e4, 0.71, (64, 32), 80.0),
        (1e5, 1.0, (64, 32), 150.0),
        (1e5, 0.71, (64, 32), 150.0),
    ],
)
def test_nusselt_within_two_percent_of_dedalus(ra, pr, grid, t_end):
    peer = dedalus_nusselt(DedalusConfig(ra=ra, pr=pr, nx=32, nz=16, t_end=t_end, t_avg=T_AVG))
    inst = np.array([h[1] for h in peer.history if h[0] > t_end - T_AVG])
    assert np.ptp(inst) < STEADY * peer.nusselt  # Dedalus steady too
    ours = _ours(ra, pr, grid, t_end)
    assert abs(ours / peer.nusselt - 1) < 0.02, (ours, peer.nusselt)
