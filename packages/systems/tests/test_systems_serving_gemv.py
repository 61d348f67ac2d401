"""`wse plan infer --gemv`: the serving model prices each wafer GEMV as the program its plan
names (`wse_systems.pipeline.GEMV_PROGRAMS`); one user's decode token on the serving system
is the one pricer's (`wse_systems.token.price_token`) on that same plan, for each program."""

from __future__ import annotations

import pytest
from wse_core import preset
from wse_systems import serving as sv
from wse_systems.pipeline import GEMV_PROGRAMS, Regions
from wse_systems.token import price_token
from wse_systems.transformer import LLAMA31_8B

WORK = sv.Workload(prompt_tokens=256, output_tokens=64)


@pytest.mark.parametrize("gemv", GEMV_PROGRAMS)
def test_one_users_token_is_the_pricers_on_the_plan_of_that_program(gemv):
    ws = sv.WaferServing(
        LLAMA31_8B, preset("wse3"), num_wafers=1, workload=WORK,
        regions=Regions(layout="compact", gemv=gemv),
    )  # fmt: skip
    plan, _ = ws.plans(1)
    assert plan.gemv == gemv
    report = price_token(LLAMA31_8B, plan, kv_tokens=WORK.kv_tokens)
    assert ws.round_s(1)[0] == pytest.approx(report.predicted_s, rel=1e-12)


def test_the_programs_price_differently_and_the_plan_says_which():
    from wse_systems.planning.choice import PlanError
    from wse_systems.planning.infer import WaferSetup, plan_infer, wafer_serving

    speeds = {
        g: wafer_serving(LLAMA31_8B, preset("wse3"), num_wafers=1, workload=WORK, gemv=g)
        .point(1)
        .user_tokens_per_s
        for g in GEMV_PROGRAMS
    }
    assert speeds["sdk"] != pytest.approx(speeds["meshgemv"], rel=1e-3)
    with pytest.raises(PlanError, match="known GEMV programs are sdk, meshgemv"):
        plan_infer(None, wafer=WaferSetup(preset("wse3"), gemv="tree"))  # type: ignore[arg-type]
