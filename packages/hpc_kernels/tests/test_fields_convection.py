"""Rayleigh-Benard on the field layer: the rigid-rigid onset Ra_c = 1707.76 (Chandrasekhar
1961) found within 1% from growth rates in a periodic box one critical wavelength wide, and
a perturbation that decays below onset."""

import numpy as np
import pytest
from wse_core import PRESETS
from wse_hpc.fields.convection import (
    CRITICAL_ASPECT,
    RA_CRITICAL,
    RbCase,
    growth_rate,
    onset,
    rayleigh_benard,
)

SPEC = PRESETS["small"]


@pytest.mark.slow
def test_onset_within_one_percent():
    """24 x 24 cells: the second-order scheme's onset is 0.9% low here (16 x 16: 2.0%, the
    h^2 ratio 2.2 between them), inside the issue's 1%."""
    case = RbCase(ra=RA_CRITICAL, pr=1.0, aspect=CRITICAL_ASPECT, mesh_shape=(1, 1))
    rc = onset(SPEC, (24, 24, 1), case, ra_lo=1650.0, ra_hi=1770.0, t_skip=6.0, t_fit=6.0)
    assert abs(rc / RA_CRITICAL - 1) < 0.01


@pytest.mark.cpu_devices  # a 2 x 4 mesh of CPU devices
def test_subcritical_perturbation_decays_at_the_diffusive_rate():
    """Ra 200, far below onset: the perturbation decays; buoyancy only slows it, so the rate
    lies between conduction's slowest mode alone (kappa (pi^2 + k^2)) and zero."""
    ra, pr = 200.0, 1.0
    case = RbCase(ra=ra, pr=pr, aspect=CRITICAL_ASPECT, mesh_shape=(2, 4))
    sigma = growth_rate(SPEC, (12, 12, 1), case, t_skip=2.0, t_fit=2.0)
    kappa = (ra * pr) ** -0.5
    k = 2 * np.pi / (2 * np.pi / 3.117)
    assert -kappa * (np.pi**2 + k**2) < sigma < 0


def test_bad_rayleigh_is_refused():
    from wse_hpc.fields import FieldError

    with pytest.raises(FieldError, match="Rayleigh number must be positive"):
        rayleigh_benard(SPEC, (8, 8, 1), RbCase(ra=0.0, pr=1.0))
