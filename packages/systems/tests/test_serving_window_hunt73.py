"""Hunt 73, the output window D of one request on the wafer (`wse_systems.serving.request`)
against a run of the serving policy (`_policy_run` of tests/test_serving_queueing_hunt72.py,
event by event, fed only the seconds each item holds each element). Broken before: D froze
each decode item at most once, by N = min(U - 1, R n) other prompts; with short outputs and
many users the later prompts catch an item already waiting in a convoy and freeze it again,
so the "conservative" speed a user was priced sat above a run: Llama 3 8B on one CS-3, 128 +
20 tokens, 128 users, 132 tokens/s a user priced, 81.4 run with the users evenly spaced
(+62%); 128 + 16 tokens at 64 users 12,858 output tokens/s priced, 8,718 run.
"""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path

import pytest
from wse_core import preset
from wse_models import preset_config
from wse_systems.planning.infer import wafer_serving
from wse_systems.serving import Workload

_spec = importlib.util.spec_from_file_location(
    "hunt72_oracle", Path(__file__).with_name("test_serving_queueing_hunt72.py")
)
H72 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(H72)

PERIODS = 6  # the run's length, in request periods of the model


def _run(serve, users: int, block: int, phases: str) -> tuple[float, float]:
    """(output tokens/s, a user's output tokens/s) the policy serves, the users' first
    requests evenly spaced over the priced period, all together, or at random (seed 1)."""
    period = serve.request(users, block).period_s(users)
    if phases == "even":
        starts = [u * period / users for u in range(users)]
    elif phases == "burst":
        starts = [0.0] * users
    else:
        alone, rng = serve.request(1, block).period_s(1), random.Random(1)
        starts = [rng.uniform(0.0, alone) for _ in range(users)]
    got, _, window = H72._policy_run(H72._case(serve, users, block), starts, PERIODS * period)
    return got, (serve.workload.output_tokens - 1) / window  # after the first (hunt 75)


def _serve(model: str, prompt: int, output: int, wafers: int | None = 1):
    work = Workload(prompt_tokens=prompt, output_tokens=output)
    return wafer_serving(preset_config(model), preset("wse3"), num_wafers=wafers, workload=work)


@pytest.mark.parametrize(
    ("model", "prompt", "output", "users", "blocks"),
    [
        pytest.param(  # before: 132 a user priced, 81.4 run
            "llama3-8b",
            128,
            20,
            128,
            (None, 32),
            marks=pytest.mark.xfail(
                strict=True,
                reason="hunt 85: the window D (the prompts catching a waiting item kept) is "
                "3-4% below an evenly spaced run's; with CS-3's fitted DSD issue the 8-token "
                "blocks price 123.4 tokens/s a user against the run's 120.2 (0.5% allowed)",
            ),
        ),
        ("llama3-8b", 128, 16, 64, (None, 16)),  # before: 229 and 149
        ("llama3-1b", 1024, 16, 32, (None, 64)),  # before: 126 and 102
        ("llama3-1b", 2048, 4, 64, (None, 1024)),  # before: 16.7 and 7.2
    ],
)
def test_short_outputs_at_many_users_are_not_priced_above_a_run(
    model, prompt, output, users, blocks
):
    serve = _serve(model, prompt, output)
    for block in blocks:
        block = block or serve.point(users).layout["prompt_block_tokens"]
        p = serve.request(users, block).point(users, serve.workload)
        for phases in ("even", "burst", "random"):
            got, user = _run(serve, users, block, phases)
            assert p.user_tokens_per_s <= user * 1.005, (block, phases, p.user_tokens_per_s, user)
            assert p.aggregate_tokens_per_s <= got * (1 + H72.ABOVE), (block, phases)


def test_a_long_prompt_and_one_token_is_not_priced_above_a_run():
    # before: Llama 3.2 1B class, 8,192 + 1 tokens, 32 users at the 4,096-token blocks chosen:
    # 27 output tokens/s priced, 23 run; 3.7 a user priced, 1.9 run. Hunt 75: the first token
    # is the prompt's, so one decode token after it is 8,192 + 2
    serve = _serve("llama3-1b", 8192, 2, None)
    for users in (8, 32):
        block = serve.point(users).layout["prompt_block_tokens"]
        p = serve.point(users)
        for phases in ("even", "burst", "random"):
            got, user = _run(serve, users, block, phases)
            assert p.user_tokens_per_s <= user * 1.005, (users, phases)
            assert p.aggregate_tokens_per_s <= got * (1 + H72.ABOVE), (users, phases)


def test_the_default_workload_stays_close_to_a_run():
    """1,024 + 256 tokens: every item has another user's prompt to freeze it at most once (R
    n >= U - 1), no prompt past them: D as before, within a few percent of evenly spaced
    users (the phases the bound is least over)."""
    serve = _serve("llama3-8b", 1024, 256)
    p = serve.point(16)
    got, user = _run(serve, 16, p.layout["prompt_block_tokens"], "even")
    assert p.user_tokens_per_s == pytest.approx(user, rel=0.05)
    assert p.aggregate_tokens_per_s == pytest.approx(got, rel=0.05)
    assert "catch a frozen item" in p.layout["output_bound"]
