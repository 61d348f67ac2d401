"""Hunt 74, the first token's bound on the wafer (`RequestWork.first_s`, the point's `ttft_s`)
against a run of the serving policy with short outputs (`_policy_run` of
tests/test_serving_queueing_hunt72.py, event by event, fed only the seconds each item holds
each element).

Reported: after hunt 73's output window (prompts that catch a frozen item) the bound sat
under the run's mean first token (Llama 3 8B on one CS-3, 128 + 1 tokens, 64 users: 36.94
ms priced, 37.69 ms run, ratio 0.980; 1,024 + 1 tokens at 128 users 0.970; Llama 3.2 1B,
128 + 1 at 64 users 0.975-0.988). Not the bound: the run's figure. With short outputs a
convoy releases the users together and they send in one burst a period, each at its place
in the burst every period (8B, 64 users: the k-th sender waits k prompts, every burst
alike). The run's mean is over the requests sent in its last two thirds, and the cut at a
third of its length falls inside a burst and keeps its later senders only, those that wait
longest (27 of the 64 requests of the first burst counted, their mean 56.4 ms; every whole
burst 36.57 ms): the ratio moves with the run's length (1B, 128 + 1, 64 users: 1.016,
0.975, 0.988, 1.011 at 4, 6, 12 and 30 periods) and the window change moved the period,
so the cut. `first_s` does not read the window's freeze count (only the period, its cap).
The oracle here: the same run, each user's mean first token, averaged over the users (every
user's place in the burst once), the same at every length; the bound holds on each of the
142 cases scanned (1B and 8B on one CS-3, 70B on 4 and 8, 128-8,192 + 1-32 tokens, 8-128
users, 8B and 70B with a 1B draft; random, even and in-step phases): 1.0001 of the run at
the least (long prompts, users in step), 1.001-1.03 at 128-1,024 tokens.
"""

from __future__ import annotations

import collections
import importlib.util
import inspect
import random
import textwrap
from pathlib import Path

import pytest
from wse_core import preset
from wse_models import preset_config
from wse_systems.planning.infer import wafer_serving
from wse_systems.serving import Speculation, Workload

_spec = importlib.util.spec_from_file_location(
    "hunt72_oracle", Path(__file__).with_name("test_serving_queueing_hunt72.py")
)
H72 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(H72)

PERIODS = 6  # the run's length, in request periods of the model
PHASES = ("random", "even", "lockstep")

# The run of hunt 72 itself, its one tally of a first token also kept by user: the same
# events (its mean is checked equal to the original's), read per user
_TALLY = 'tally["firsts"].append(clock - s["sent"])'
_SOURCE = textwrap.dedent(inspect.getsource(H72._policy_run))
assert _SOURCE.count(_TALLY) == 1, "hunt 72's run no longer tallies a first token as read"
_BY_USER: dict[int, list[float]] = collections.defaultdict(list)
_SCOPE = {**vars(H72), "BY_USER": _BY_USER}
exec(  # noqa: S102 - hunt 72's own source, one statement added
    compile(
        _SOURCE.replace(_TALLY, _TALLY + '; BY_USER[u].append(clock - s["sent"])'),
        H72.__file__, "exec", flags=annotations.compiler_flag, dont_inherit=True,
    ),
    _SCOPE,
)  # fmt: skip


def _starts(serve, users: int, block: int, phases: str) -> list[float]:
    """The users' first requests: evenly spaced over the priced period, all together, or at
    random over one request alone (seed 1)."""
    if phases == "even":
        period = serve.request(users, block).period_s(users)
        return [u * period / users for u in range(users)]
    if phases == "lockstep":
        return [0.0] * users
    alone, rng = serve.request(1, block).period_s(1), random.Random(1)
    return [rng.uniform(0.0, alone) for _ in range(users)]


def _firsts(serve, users: int, block: int, phases: str, periods: int = PERIODS):
    """(the run's mean first token over its requests, each user's mean averaged over the
    users) in seconds, the run `periods` priced periods long."""
    case, starts = H72._case(serve, users, block), _starts(serve, users, block, phases)
    horizon = periods * serve.request(users, block).period_s(users)
    _BY_USER.clear()
    mean = _SCOPE["_policy_run"](case, starts, horizon)[1]
    assert mean == H72._policy_run(case, starts, horizon)[1]  # the same run
    assert len(_BY_USER) == users
    return mean, sum(sum(w) / len(w) for w in _BY_USER.values()) / users


def _serve(model: str, prompt: int, output: int, wafers: int | None = 1, draft: bool = False):
    spec = Speculation(draft=preset_config("llama3-1b"), gamma=3, alpha=1.0) if draft else None
    work = Workload(prompt_tokens=prompt, output_tokens=output)
    return wafer_serving(preset_config(model), preset("wse3"), num_wafers=wafers, workload=work,
                         speculation=spec)  # fmt: skip


def _check(serve, users: int) -> list[float]:
    """The bound over each phase's per-user mean; each >= 1 (the returned ratios)."""
    p = serve.point(users)
    k = p.layout["prompt_block_tokens"]
    ratios = []
    for phases in PHASES:
        first = _firsts(serve, users, k, phases)[1]
        assert first <= p.ttft_s * (1 + 1e-6), (users, k, phases, p.ttft_s, first)
        ratios.append(p.ttft_s / first)
    return ratios


def test_the_first_token_bounds_every_users_mean_and_the_runs_cut_does_not():
    """Llama 3.2 1B, 128 + 1 tokens, 64 users: the run's mean over its requests moves with
    the run's length (its cut keeps a burst's later senders: above the bound at some
    lengths); each user's mean is under it, the same at every length, and users in step
    come within 2%."""
    serve = _serve("llama3-1b", 128, 2)  # one decode token after the prompt's (hunt 75: + 1)
    p = serve.point(64)
    k = p.layout["prompt_block_tokens"]
    assert p.layout["ttft_bound"].startswith("conservative")
    # the run's at 4, 6 and 12 periods: 0.999, 1.029 and 1.023 of the bound (before session
    # 80's prompt head once, another placement: 0.975 at 6, 0.988 at 12)
    runs = [_firsts(serve, 64, k, "lockstep", periods=n) for n in (4, 6, 12)]
    cuts, fair = [cut for cut, _ in runs], runs[0][1]
    assert max(cuts) - min(cuts) > 0.01 * fair  # the cut's, not the users'
    assert all(same == pytest.approx(fair, rel=1e-9) for _, same in runs)
    assert fair <= p.ttft_s <= fair * 1.02
    _check(serve, 64)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("model", "prompt", "output", "users"),
    [
        ("llama3-8b", 128, 1, 64),  # the run's mean 0.980 of the bound before
        ("llama3-8b", 128, 1, 128),  # 0.982
        ("llama3-8b", 1024, 1, 128),  # 0.970
        ("llama3-8b", 1024, 4, 16),
        ("llama3-8b", 1024, 16, 64),
        ("llama3-1b", 128, 1, 128),  # 0.993
        ("llama3-1b", 1024, 16, 32),
        ("llama3-1b", 8192, 1, 16),
    ],
)
def test_short_outputs_first_token_is_bounded(model, prompt, output, users):
    _check(_serve(model, prompt, output), users)


@pytest.mark.slow
def test_a_drafts_first_token_is_bounded():
    """Llama 3 8B with a 1B draft, 1,024 + 5 tokens at 64 users (the drafts run past the
    prompts: 3% under the bound; hunt 75: 4 decode tokens after the prompt's, one whole
    round of gamma 3 at alpha 1, as + 4 was before O - 1)."""
    _check(_serve("llama3-8b", 1024, 5, draft=True), 64)


@pytest.mark.slow
def test_users_in_step_attain_the_bound():
    """Llama 3 8B, 1,024 + 1 tokens: a prompt behind half the others' prompts on average is
    what users in step wait (within 1%: the bound is tight where it was)."""
    serve = _serve("llama3-8b", 1024, 1)
    for users in (16, 64):
        p = serve.point(users)
        first = _firsts(serve, users, p.layout["prompt_block_tokens"], "lockstep")[1]
        assert first <= p.ttft_s * (1 + 1e-9) and p.ttft_s <= first * 1.01  # rounding
