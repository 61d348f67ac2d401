"""`meeting`'s bounded search against a brute force over every load (hunt 73).

A scan of every load took 12-138 s in `wse plan infer --max-ttft-s` (1B on 16 wafers: 13,589
loads); `meeting` now prices one user, then a grid (every load to 64, then steps of 3%) and
the frontier's loads, then the loads between the grid's neighbours of the best found (hunt
75: the most output of the loads that meet the limits, a queued load meeting no speed; it
was the largest load that meets). The oracle: every load priced and the loads that meet
taken by hand, on real curves that are not monotone (wafers: placement and block change with
the load; GPUs): the one chosen serves their most output (within `TIE`, 1% since hunt 76:
then the soonest first token) and none of them beats it; the
number of points priced against the stated bound.
"""

from __future__ import annotations

import math

import pytest
import wse_models
from wse_core import preset
from wse_systems.gpu import H100
from wse_systems.pipeline import Regions
from wse_systems.serving import OperatingPoint, Workload, meeting
from wse_systems.serving.frontier import loads
from wse_systems.serving.gpus import GpuServing
from wse_systems.serving.selection import TIE, beats, meeting_loads, queued
from wse_systems.serving.wafer import WaferServing

LONG = Workload(prompt_tokens=8192, output_tokens=64)


class _Counted:
    """A system whose point() calls are counted (the work of a search)."""

    def __init__(self, system) -> None:
        self.system, self.calls = system, 0
        self.name, self.units, self.max_users = system.name, system.units, system.max_users

    def point(self, users: int) -> OperatingPoint:
        self.calls += 1
        return self.system.point(users)


def _wafers(name: str, wafers: int, work: Workload) -> WaferServing:
    config = wse_models.preset_config(name)
    return WaferServing(config, preset("wse3"), num_wafers=wafers, workload=work,
                        regions=Regions())  # fmt: skip


CASES = {
    "8b-4-wafers": lambda: _wafers("llama3-8b", 4, LONG),  # 140 users
    "1b-1-wafer": lambda: _wafers("llama3-1b", 1, Workload(prompt_tokens=8192, output_tokens=256)),
    "8b-2-gpus": lambda: GpuServing(
        wse_models.preset_config("llama3-8b"), H100, num_gpus=2, workload=LONG
    ),  # fmt: skip
}


def _bound(max_users: int, found: OperatingPoint | None, most: int = 0) -> int:
    g = found.users if found else 0  # hunt 75: every grid load, the frontier's, b's neighbours
    # hunt 76: and the neighbours of `most`, the (largest) load of the most output, the floor
    return (
        len({*meeting_loads(max_users), *loads(max_users)})
        + math.ceil(0.07 * g)
        + (math.ceil(0.07 * most))
    )


def _most(meets: list[OperatingPoint]) -> int:
    """The largest load serving the most output of `meets` (within rounding)."""
    top = max((p.aggregate_tokens_per_s for p in meets), default=0.0)
    return max((p.users for p in meets if p.aggregate_tokens_per_s >= (1 - 1e-9) * top), default=0)


# session 85: 8b-4-wafers under a 2.76 s first token picked 102 users, 1,376.0 tokens/s, where
# 132 serve 1,391.4 (1.1%, the tie is 1%): the most lay behind a drop past the grid's most
# (a change of block), unseen; session 86: the search looks about each such peak, 104 users
@pytest.mark.parametrize("case", sorted(CASES))
def test_meeting_is_the_brute_force_over_every_load(case):
    s = CASES[case]()
    assert s.max_users > 64  # the grid's steps of 3% are searched
    points = {u: s.point(u) for u in range(1, s.max_users + 1)}
    ttfts = sorted({p.ttft_s for p in points.values()})
    speeds = sorted({p.user_tokens_per_s for p in points.values()})
    limits = [(None, ttfts[i]) for i in (0, 2, len(ttfts) // 3, len(ttfts) // 2, -3, -1)]
    limits += [(speeds[i], None) for i in (0, 3, len(speeds) // 2, -2, -1)]
    limits += [(speeds[len(speeds) // 4], ttfts[len(ttfts) // 2]), (None, ttfts[0] / 2)]
    for speed, ttft in limits:
        meets = [p for p in points.values()
                 if (speed is None or (p.user_tokens_per_s >= speed and not queued(p)))
                 and (ttft is None or p.ttft_s <= ttft)]  # fmt: skip
        counted = _Counted(s)
        got = meeting(counted, speed, max_ttft_s=ttft)
        # hunt 75: the largest load meeting them was the rule (a queued load looked fast);
        # now the most output of the loads that meet them, none of which beats it
        assert (got is None) == (not meets), (speed, ttft)
        if got is not None:
            assert any(got.users == p.users for p in meets)
            assert not any(beats(p, got) for p in meets), (speed, ttft)
            most = max(p.aggregate_tokens_per_s for p in meets)
            assert got.aggregate_tokens_per_s >= (1 - TIE) * most, (speed, ttft)
        assert counted.calls <= _bound(s.max_users, got, _most(meets))


def test_the_grid_is_every_load_to_64_then_steps_of_3_percent():
    for most in (1, 2, 63, 64, 65, 140, 13_589):
        grid = meeting_loads(most)
        assert grid[0] == 1 and grid[-1] == most and grid == sorted(set(grid))
        assert grid[: min(most, 64)] == list(range(1, min(most, 64) + 1))
        pairs = list(zip(grid[63:], grid[64:], strict=False))
        for a, b in pairs[:-1]:
            assert b == math.ceil(1.03 * a)
        for a, b in pairs[-1:]:
            assert a < b <= math.ceil(1.03 * a)
        # each step multiplies by at least 1.03: at most log(most / 64) / log(1.03) of them
        assert len(grid) <= min(most, 64) + math.ceil(math.log(max(most, 64) / 64) / math.log(1.03))


class _Line:
    """A first token growing with the load: 1 ms a user."""

    name, units, max_users = "line", 1, 13_589

    def point(self, users: int) -> OperatingPoint:
        return OperatingPoint(users=users, user_tokens_per_s=1.0, aggregate_tokens_per_s=users,
                              ttft_s=users * 1e-3, bound="hand")  # fmt: skip


def test_a_search_of_13589_loads_is_bounded():
    # hunt 76: the least load within 1% of the most output (the soonest first token), where it
    # was the most: ceil(0.99 x the largest load that meets)
    for limit, most, want in ((5e-3, 5, 5), (1.0, 1000, 990), (7.777, 7777, 7700),
                              (20.0, 13_589, 13_454), (5e-4, None, None)):  # fmt: skip
        counted = _Counted(_Line())
        got = meeting(counted, max_ttft_s=limit * (1 + 1e-9))
        assert (got and got.users) == want
        assert want is None or want == math.ceil(0.99 * most - 1e-9)
        assert counted.calls <= _bound(13_589, got, most or 0)
    counted = _Counted(_Line())
    assert meeting(counted, max_ttft_s=1e-4) is None and counted.calls == 1  # one user misses
