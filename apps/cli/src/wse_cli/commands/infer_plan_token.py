"""`wse infer generate`'s token beside `wse plan infer`'s for the same request.

Contract. `plan_token(config, wafer, prompt_tokens=P, output_tokens=O, stages=S)` is None
where `wse plan infer --users 1 --prompt-tokens P --output-tokens O` on `wafer` (its
default wafer count, the model's own dtype, its stage count searched) places the model in
S layer stages, as the engine emulated; else a dict: that plan's stage count, regions,
layout, wafers and predicted token (`wafer_s_per_token`, a user's token alone:
`layout["token_s"]` of its point), or `why`, one line, where the planner refuses the request.
`plan_line(figure)` is the report's line for it.

`request_figure(config, plan, prompt_tokens=P, output_tokens=n, chunk=c)`: the request the
engine ran, priced on the engine's own `plan` by the serving model's request pricer
(`wse_systems.serving.request.request_work`, on `wse_systems.serving.blocks` pipelines: the
prompt at a KV read of P / 2 tokens, the token at the request's mean read, as `wse plan
infer` prices them): its first token (`ttft_s`: the prompt's pass in ceil(P / c) blocks of
min(c, P) tokens, the engine's chunks, its last one padded to the chunk as the engine runs
it), the token, and the request (`request_s`: TTFT + (n - 1) tokens). `ttft_line(...)` is
the report's line for it beside the measured first token.

Why (hunt 75): generate predicted 2 regions (banded, 39.37 us a token) for a 4-layer
folder's request that `wse plan infer` placed on 5 regions (compact, 36.04 us), neither
saying so: generate emulates `--stages` (default 1), the plan searches the count. Session
80 (hunt jobs16 H3): generate printed a measured first token beside a prediction of the
decode token alone; the plan it ran prices the prompt too.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["plan_line", "plan_token", "request_figure", "stages_of", "ttft_line"]


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


def request_figure(
    config: Any, plan: Any, *, prompt_tokens: int, output_tokens: int, chunk: int
) -> dict:
    """The engine's request priced on its `plan` (module contract)."""
    from wse_systems.serving import Workload
    from wse_systems.serving.blocks import price_pipeline
    from wse_systems.serving.request import Pipes, request_work

    work = Workload(prompt_tokens=prompt_tokens, output_tokens=output_tokens)
    token = price_pipeline(config, plan, kv_tokens=work.kv_tokens)
    prompt = price_pipeline(config, plan, kv_tokens=work.prompt_kv_tokens)  # the wafer's read
    pipes = Pipes(token, None, prompt, None, token.token_s, token.occupancy_s(1))
    req = request_work(work, chunk, pipes)
    full, last = divmod(prompt_tokens, req.block)
    return {"ttft_s": req.prompt_s, "token_s": token.token_s,
            "request_s": req.prompt_s + req.decode_s, "output_tokens": output_tokens,
            "prompt_tokens": prompt_tokens, "block_tokens": req.block,
            "blocks": math.ceil(prompt_tokens / req.block),
            "chunks": [req.block] * full + ([last] if last else []),
            "max_block_tokens": prompt.max_block_tokens}  # fmt: skip


def ttft_line(figure: dict, measured_s: float) -> str:
    """The report's line for `request_figure`'s dict beside the measured first token."""
    us = lambda s: f"{s * 1e6:,.1f} us"  # noqa: E731
    chunks = " + ".join(map(str, figure["chunks"]))
    mixed = len(set(figure["chunks"])) > 1
    padded = ", the last padded to it as the engine runs it" if mixed else ""
    beyond = ""
    if figure["block_tokens"] > figure["max_block_tokens"]:
        beyond = (f"; the plan's free SRAM holds {figure['max_block_tokens']}-token blocks at "
                  "most: the engine's chunk is priced past it")  # fmt: skip
    n = figure["output_tokens"]
    return (
        f"predicted first token {us(figure['ttft_s'])} (its {figure['prompt_tokens']}-token "
        f"prompt in {figure['blocks']} block(s) of {figure['block_tokens']} tokens, the "
        f"engine's chunks {chunks}{padded}{beyond}), measured on this emulator "
        f"{measured_s * 1e3:.1f} ms; the request {us(figure['ttft_s'])} + {n - 1} x "
        f"{us(figure['token_s'])} = {us(figure['request_s'])}"
    )
