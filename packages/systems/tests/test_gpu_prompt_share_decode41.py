"""Hunt decode41 (session 82), hole 8: `wse plan infer -m llama3-8b --users 20 --wafers 1
--prompt-tokens 1000 --output-tokens 1000 --context-len 8192 --wafer-dtype bfloat16` refused a
valid load with "input_share must be in [0, 1], got -0.0077" (24 users: -0.0192): the GPUs'
prompt share, 1 - (the request's bare decode rounds) / (its period), went negative, the bare
rounds longer than the rounds that carry the other users' prompt tokens. The cause: a round's
tensor-parallel all-reduce takes the engines' one-shot kernel below 256 KiB at 8 GPUs and
another above it (then the custom two-shot; since review 82 hole 2, vLLM v0.11's torch
symmetric-memory multimem), which the links price lower; 20 decode tokens all-reduce
160 KiB, with 19 prompt tokens more 312 KiB. The share is now none below none
(`gpus.prompt_share`). Oracles: the all-reduce's algorithm by message size, the rounds'
times from `micro_times`, the share by hand, and the plan's $/M input tokens.
"""

from __future__ import annotations

import pytest
from wse_core.cost.assumptions import assumed_spec
from wse_systems import gpu_links
from wse_systems.gpu import gpu_spec
from wse_systems.planning import infer as pi
from wse_systems.planning.choice import ModelChoice
from wse_systems.serving import GpuServing, Workload
from wse_systems.serving.gpus import prompt_share
from wse_systems.transformer import LLAMA31_8B

pytestmark = pytest.mark.timeout(600)

WORK = Workload(prompt_tokens=1000, output_tokens=1000, context_len=8192)  # the hunt's


def test_prompt_share_by_hand():
    assert prompt_share(1.0, 2.0) == 0.5
    assert prompt_share(2.0, 2.0) == 0.0
    assert prompt_share(2.1, 2.0) == 0.0  # before: -0.05, refused by economics.token_costs


@pytest.mark.parametrize("users", [20, 24])
def test_the_gpus_price_a_load_whose_bare_rounds_are_longer(users):
    # the all-reduce's kernel by message size: a bare round of `users` decode tokens below
    # the one-shot limit, one with the others' users - 1 prompt tokens above it
    d, tp = LLAMA31_8B.d_model, 8
    cap = gpu_spec("h100").compute_capability
    assert gpu_links.tp_allreduce_algorithm(users * d * 2, tp, cap) == "one-shot"
    assert gpu_links.tp_allreduce_algorithm((2 * users - 1) * d * 2, tp, cap) == "multimem"
    gpus = GpuServing(LLAMA31_8B, gpu_spec("h100"), num_gpus=8, workload=WORK)
    (one_node,) = [lay for lay in gpus.layouts if (lay.tp, lay.pp) == (tp, 1)]
    times, bare_s, _ = gpus.micro_times(one_node, users)
    assert bare_s > times.period_s  # before: a share of 1 - bare / period < 0, refused
    spec = assumed_spec("wse3")
    plan = pi.plan_infer(ModelChoice("llama3-8b", LLAMA31_8B), wafer=pi.WaferSetup(spec, 1),
                         workload=WORK, target=pi.Target(users=users))  # fmt: skip
    point = plan.gpu_point
    assert point.users == users and point.layout["tp"] == tp and point.layout["pp"] == 1
    share = point.input_time_share
    assert share == 0.0  # the prompts ride in rounds that take no longer than bare ones
    figures = plan.gpu.figures
    assert figures["usd_per_million_input_tokens"] == 0.0
    assert figures["usd_per_million_output_tokens"] > 0.0
