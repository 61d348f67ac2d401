"""Review 82, hole 7: `wse plan infer -m gpt2-124m --users 1` served GPT-2 (12 attention
heads) on an 8-GPU replica as tp 6, as vLLM runs it (tp must divide the heads: 6 GPUs of the
8), and printed "8 x H100-SXM5-80GB (tp 6, pp 1)": the 2 idle GPUs were unsaid in the layout,
and the replica's energy counted all 8 at the busy power.

Oracles: the idle count by hand (8 - 1 x 6 x 1); the energy from the side's own figures
(replicas, busy fraction, days) with 6 GPUs at the node's busy power per GPU and 2 at its idle
power while the replica serves, all 8 at idle power the rest of the day (DGX H100: 10.2 kW
max, 25% idle, over 8 GPUs); the GPU-hours of all 8 (rented with the replica).
"""

from __future__ import annotations

import pytest
import wse_models
from wse_core.hw.spec import preset
from wse_systems.gpu import H100
from wse_systems.planning import infer as pi
from wse_systems.planning.choice import ModelChoice

DAY_S = 86400.0


def _plan(model: str) -> pi.ServingPlan:
    choice = ModelChoice(model, wse_models.preset_config(model, dtype="bfloat16"))
    return pi.plan_infer(choice, wafer=pi.WaferSetup(preset("wse3"), None),
                         gpu=pi.GpuSetup(gpus=8), target=pi.Target(users=1))  # fmt: skip


def _energy_by_hand(side, used: int, idle: int) -> float:
    f = side.figures
    peak_w, idle_w = 10200.0 / 8, 0.25 * 10200.0 / 8  # DGX H100 max and 25% idle, a GPU
    assert H100.power_w_per_gpu() == pytest.approx((peak_w, idle_w), rel=1e-12)
    busy_s = f["busy_fraction"] * f["replicas"] * DAY_S
    days = 365.0  # the plan's default (`Costing.days`)
    busy = busy_s * (used * peak_w + idle * idle_w)
    rest = (f["replicas"] * DAY_S - busy_s) * 8 * idle_w
    return days * (busy + rest)


def test_gpt2_on_8_gpus_runs_tp_6_with_2_idle_at_idle_power():
    plan = _plan("gpt2-124m")
    g = plan.gpu
    lay = g.figures["point"]["layout"]
    assert (lay["replicas"], lay["tp"], lay["pp"]) == (1, 6, 1)  # 12 heads: no tp 8
    assert g.figures["idle_gpus"] == 8 - 1 * 6 * 1 == 2
    assert g.energy_j == pytest.approx(_energy_by_hand(g, used=6, idle=2), rel=1e-12)
    # before: all 8 at the busy power, 1.2x the energy of this load
    assert _energy_by_hand(g, used=8, idle=0) > 1.15 * g.energy_j
    # the replica's GPU-hours count all 8: they are rented with it
    assert g.figures["system_hours"] == pytest.approx(g.figures["replicas"] * 8 * 24 * 365)
    assert any("2 of each replica's 8 GPUs sit idle" in n for n in plan.assumptions)


def test_a_layout_that_uses_every_gpu_has_none_idle():
    plan = _plan("llama3-8b")  # 32 heads, 8 KV heads: tp 8 runs
    g = plan.gpu
    lay = g.figures["point"]["layout"]
    assert g.figures["idle_gpus"] == 0 == 8 - lay["replicas"] * lay["tp"] * lay["pp"]
    assert g.energy_j == pytest.approx(_energy_by_hand(g, used=8, idle=0), rel=1e-12)
    assert not any("sit idle" in n for n in plan.assumptions)
