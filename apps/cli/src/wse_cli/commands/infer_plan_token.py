"""`wse infer generate`'s token beside `wse plan infer`'s for the same request.

Contract. `plan_token(config, wafer, prompt_tokens=P, output_tokens=O, stages=S)` is None
where `wse plan infer --users 1 --prompt-tokens P --output-tokens O` on `wafer` (its
default wafer count, the model's own dtype, its stage count searched) places the model in
S layer stages, as the engine emulated; else a dict: that plan's stage count, regions,
layout, wafers and predicted token (`wafer_s_per_token`, a user's token alone:
`layout["token_s"]` of its point), or `why`, one line, where the planner refuses the request.
`plan_line(figure)` is the report's line for it.

Why (hunt 75): generate predicted 2 regions (banded, 39.37 us a token) for a 4-layer
folder's request that `wse plan infer` placed on 5 regions (compact, 36.04 us), neither
saying so: generate emulates `--stages` (default 1), the plan searches the count.
"""

from __future__ import annotations

from typing import Any

__all__ = ["plan_line", "plan_token", "stages_of"]


def plan_token(
    config: Any, wafer: Any, *, prompt_tokens: int, output_tokens: int, stages: int
) -> dict | None:
    """`wse plan infer`'s placement and token for one user's request (module contract)."""
    from wse_core.errors import WseError
    from wse_core.hw.dtypes import dtype_bytes
    from wse_systems.planning.infer import wafer_serving
    from wse_systems.serving import Workload

    work = Workload(prompt_tokens=prompt_tokens, output_tokens=output_tokens)
    try:
        ws = wafer_serving(config, wafer, num_wafers=None, workload=work,
                           bytes_per_param=dtype_bytes(config.param_dtype))  # fmt: skip
        lay = ws.point(1).layout
    except WseError as e:
        return {"why": f"wse plan infer places no such request: {e}"}
    if lay["stages"] == stages:
        return None
    return {"stages": lay["stages"], "regions": lay["regions"], "layout": lay["layout"],
            "wafers": lay["wafers"], "wafer_s_per_token": lay["token_s"],
            "tokens_per_s": 1.0 / lay["token_s"]}  # fmt: skip


def plan_line(figure: dict, stages: int) -> str:
    """The report's line for `plan_token`'s dict beside the engine's `stages`-stage token."""
    if "why" in figure:
        return f"not compared with wse plan infer: {figure['why']}"
    n = figure["stages"]
    return (
        f"wse plan infer --users 1 places this request on {n} stage(s) ({figure['regions']} "
        f"{figure['layout']} regions, {figure['wafers']} wafer(s)): "
        f"{figure['wafer_s_per_token'] * 1e6:.1f} us/token, where this run emulated {stages} "
        f"stage(s); --stages {n} emulates the plan's"
    )


def stages_of(predicted: dict) -> str:
    """'S stage(s), ' for a report's figure labelled with its stage count, else ''."""
    return f"{predicted['stages']} stage(s), " if "stages" in predicted else ""
