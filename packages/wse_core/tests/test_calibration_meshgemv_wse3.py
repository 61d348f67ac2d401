"""WaferLLM's MeshGEMV measured on a CS-3 (FxPiGaAo/WaferLLM wse_result.json @5c67053): the
rows fit CS-3's hop and ramp latencies only, the WSE-2 calibration is untouched, the fit is a
least squares an independent solve reproduces, and its leave-one-out can fail."""

import math

import numpy as np
import pytest
from wse_core import PerfModel, preset
from wse_core.cost.assumptions import assume, resolve_spec
from wse_core.cost.calibration import (
    MESHGEMV_FITTED,
    MESHGEMV_WSE3,
    Calibration,
    current,
    leave_one_out,
    meshgemv_row_phases,
    rows,
)

GEMV = "meshgemv wse3"
CS3 = ("hop_latency_cycles", "ramp_latency_cycles")


def _case(r):
    return f"{GEMV} P{r[0]} M{r[1]} N{r[2]} g{r[3]}"


def test_the_rows_are_the_published_file_s():
    # 16 Mt = Nt = 1 runs (P = 16 .. 720, group_num 2, 4, 8 at P = 16 and 80) and 12 with
    # Mt = Nt = 8; a few figures as wse_result.json gives them.
    assert len(MESHGEMV_WSE3) == 28
    got = {r[:4]: r[4] for r in MESHGEMV_WSE3}
    assert got[(144, 144, 144, 8)] == 601.95 and got[(720, 5760, 5760, 8)] == 2358.033565432099
    assert got[(80, 80, 80, 2)] == 596.96 and got[(80, 80, 80, 4)] == 468.95
    assert all(r[5] == f"output_P{r[0]}_M{r[1]}_N{r[2]}_G{r[3]}.txt" for r in MESHGEMV_WSE3)


def test_wse2_calibration_is_the_same_with_or_without_the_cs3_rows():
    # Every WSE-2 constant and row to the last digit: the fit without any MeshGEMV row.
    cal = current()
    without = current(frozenset(_case(r) for r in MESHGEMV_WSE3))
    assert dict(cal.values) == dict(without.values) and not without.by_system
    old = [r for r in rows(without) if not str(r["case"]).startswith(GEMV)]
    new = [r for r in rows(cal) if not str(r["case"]).startswith(GEMV)]
    assert old == new
    # The WSE-2 and WSE-1 presets price the sourced fabric constants; WSE-3 the fitted ones.
    for name in ("wse2", "wse1", "small"):
        rates = PerfModel(preset(name)).rates
        assert (rates.hop_latency_cycles, rates.ramp_latency_cycles) == (1.0, 2.0)
    rates = PerfModel(preset("wse3")).rates
    fit = cal.by_system["CS-3"]
    assert (rates.hop_latency_cycles, rates.ramp_latency_cycles) == (fit[CS3[0]], fit[CS3[1]])
    assert rates.dsd_issue_cycles == cal.values["dsd_issue_cycles"]  # the WSE-2 fit's


def test_an_assumed_or_given_fabric_constant_is_priced_not_the_fit():
    with assume(hop_latency_cycles=1.5):
        rates = PerfModel(resolve_spec(name="wse3", assumptions={"hop_latency_cycles": 1.5})).rates
        assert rates.hop_latency_cycles == 1.5
        assert rates.ramp_latency_cycles == current().by_system["CS-3"][CS3[1]]
    given = preset("wse3").replace(ramp_latency_cycles=3.0)  # a spec file's own value
    assert PerfModel(given).rates.ramp_latency_cycles == 3.0


def _geometry(p, groups):
    """Hops and relay stages of the two-tree allreduce by hand: chain to the middle of each
    group of m, chain over the group roots (m PEs apart), multicast from the global root."""
    m = p // groups
    h1 = max(m // 2, m - 1 - m // 2)
    h2 = max(groups // 2, groups - 1 - groups // 2)
    root = (groups // 2) * m + m // 2
    return h1 + h2 * m + max(root, p - 1 - root), h1 + h2 + 1


def test_the_fit_is_the_least_squares_an_independent_solve_gives():
    cal = current()
    fit = [r for r in MESHGEMV_WSE3 if r[1] == r[0] and (r[0], r[3]) in MESHGEMV_FITTED]
    assert len(fit) == 10
    spec = preset("wse3").replace(ramp_latency_cycles=0.0)  # hops 1 cycle, relays 1 cycle
    model = PerfModel(spec, Calibration(values=cal.values))  # the WSE-2 fit's, no CS-3 fit
    rows_x, y = [], []
    for p, m, n, g, cycles, _ in fit:
        hops, relays = _geometry(p, g)
        t = model.evaluate(meshgemv_row_phases(p, m, n, g)).seconds * spec.clock_hz
        base = t - hops - relays  # the cycles no hop or relay prices
        # cycles = base + c + hop H + (2 T_R + 1) R, least squares on relative residuals
        rows_x.append(np.array([1.0, hops, 2.0 * relays]) / cycles)
        y.append(1.0 - (base + relays) / cycles)
    c, hop, ramp = np.linalg.lstsq(np.array(rows_x), np.array(y), rcond=None)[0]
    fitted = cal.by_system["CS-3"]
    assert fitted["hop_latency_cycles"] == pytest.approx(hop, rel=1e-6)
    assert fitted["ramp_latency_cycles"] == pytest.approx(ramp, rel=1e-6)
    assert cal.intercepts[GEMV] == pytest.approx(c, rel=1e-6)
    # about 2 cycles a hop and 9.6 a relay stage: twice the WSE-2 sources' 1 and 5
    assert 1.8 < hop < 2.3 and 8.0 < 2 * ramp + 1 < 11.0


def test_fitted_rows_within_five_percent_and_the_checks_reported():
    table = {str(r["case"]): r for r in rows() if str(r["case"]).startswith(GEMV)}
    fitted = [r for r in table.values() if str(r["role"]).startswith("fits")]
    assert len(fitted) == 10 and all(abs(r["ratio"] - 1) < 0.05 for r in fitted)
    checks = [r for r in MESHGEMV_WSE3 if table[_case(r)]["role"] == "check"]
    assert len(checks) == 18
    for r in checks:
        miss = table[_case(r)]["ratio"] - 1
        if r[1] == r[0]:  # the other P of the same kernel shape: within 5%
            assert abs(miss) < 0.05, r
        else:  # Mt = Nt = 8: seven more FMAC DSDs, each priced at the WSE-2 fit's issue
            # (11.5 cycles; the rows' own M series says about 3): always slow, by the
            # over-charge over the GEMV's cycles, so within 10% from P = 272 on
            assert miss > 0, r
            assert miss < (0.10 if r[0] >= 272 else 0.30), r


def test_meshgemv_leave_one_out_fails_when_a_row_is_perturbed():
    loo = {r["case"]: r for r in leave_one_out() if str(r["case"]).startswith(GEMV)}
    assert len(loo) == 10
    assert all(abs(r["error_without_row"]) < 0.06 for r in loo.values())
    # The g = 2 run at P = 80 measured 30% slower: the other nine rows do not predict it.
    case = f"{GEMV} P80 M80 N80 g2"
    bad = {case: 596.96 * 1.3}
    moved = {r["case"]: r for r in leave_one_out(bad)}
    assert moved[case]["error_without_row"] < -0.20
    assert math.isclose(moved[case]["published"], 596.96 * 1.3)
