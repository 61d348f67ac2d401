"""Session 80: users in step are released one after another, and the first token's bound
(`RequestWork.first_s`) counts it (`RequestWork.release_s`).

A request ends with its last item leaving the path's last element that holds one, which
serves one item at a time: two users' requests end, and their next are sent, that item's
hold there apart at least, g. A prompt then waits behind each earlier sender's prompt B (its
hold at the element it holds longest) less the g it was sent sooner. Reported: with the
prompt's head once (the engine's prompt pass runs it on the last position alone), Llama 3.2
1B's 64 users of 128 + 2 tokens on one CS-3 take a 10-row head that holds each decode token
29 us, and the bound, (U - 1) B / 2 behind the others, sat 6% above the run's users' mean
(hunt 74's test holds 2%); the run's users in step are sent 29 us apart.

The oracle: hunt 74's run of the policy, event by event (tests/test_serving_ttft_hunt74.py,
itself hunt 72's), each user's mean first token: users in step, the k-th sender waits
k (B - g) more than the first; g read by hand from the decode token's holds in path order."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from wse_systems.decoder import PER_TOKEN

_spec = importlib.util.spec_from_file_location(
    "hunt74_oracle", Path(__file__).with_name("test_serving_ttft_hunt74.py")
)
H74 = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(H74)


def test_users_in_step_are_sent_a_decode_tokens_last_hold_apart():
    serve = H74._serve("llama3-1b", 128, 2)  # one decode token after the prompt's
    p = serve.point(64)
    k = p.layout["prompt_block_tokens"]
    r = serve.request(64, k)
    held = serve.pipelines(64)[0].occupancy_s(1)  # a decode token's holds, in path order
    last = [name for name, s in held.items() if s > 0][-1]
    assert last == PER_TOKEN  # the head region ends the path (a pass that holds none after)
    assert r.release_s == held[last] > 0
    fair = H74._firsts(serve, 64, k, "lockstep")[1]
    means = sorted(sum(w) / len(w) for w in H74._BY_USER.values())
    steps = [b - a for a, b in zip(means, means[1:], strict=False)]
    big = max(r.prompt_held_s.values())  # B
    # each sender waits B - g more (0.1% until session 84; at CS-3's fitted hop and relay
    # latencies the run's users are 542.49 us apart, every one, against B - g = 546.74: the
    # bound is 0.8% above the run's spacing, not yet explained, and still a bound; session
    # 86, with the decode's norms, final norm and argmax priced: every step is B - g, 472.73
    # us, to the last digit but rounding)
    assert max(steps) <= (big - r.release_s) * (1 + 1e-12)
    assert sum(steps) / len(steps) == pytest.approx(big - r.release_s, rel=1e-2)
    # the bound: (U - 1) (B - g) / 2 behind the others (6% above the run without g)
    assert fair <= p.ttft_s <= fair * 1.02
    # without g the bound leaves the 2% (5% until session 84: CS-3's fitted hop and relay
    # latencies lengthen the prompt's hold B, and g = 11.2 us is 2% of it)
    assert p.ttft_s + 0.5 * 63 * r.release_s > fair * 1.02
