"""`netl-rayleigh-benard` measures its CG iterations in developed convection (session 73):
its 200 steps ended at t 0.53, still conducting (Nu 1.002), where the rolls need ~1.7x the
iterations. Oracle: Globe & Dropkin's (1959) correlation for turbulent-to-laminar
Rayleigh-Benard between rigid plates, Nu = 0.069 Ra^(1/3) Pr^0.074 (3.12 at Ra 1e5, Pr 0.71),
and conduction's Nu = 1."""

import pytest
from wse_hpc.studies import netl_rayleigh_benard as netl


@pytest.mark.slow
@pytest.mark.timeout(1800)  # ~1 min alone, 8 min beside two pytest workers
def test_the_cg_count_is_measured_in_developed_convection():
    cg, measured = netl._measured_cg(quick=True)
    globe_dropkin = 0.069 * 1e5 ** (1 / 3) * 0.71**0.074
    low, high = measured["nusselt_window"]
    assert 0.8 * globe_dropkin < low <= high < 2.0 * globe_dropkin  # convecting, not 1
    assert measured["window_t"][0] >= netl.T_DEVELOPED - 1e-9
    assert measured["unconverged_solves"] == 0
    # the rolls cost more iterations than the conducting start (27.3 there)
    assert cg > measured["cg_iterations_per_step_developing"] * 0.95 and cg > 35
