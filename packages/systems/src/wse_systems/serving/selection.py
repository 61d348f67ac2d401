"""Picking a serving system's operating point, the same on both systems.

Contract. Three ways to pick a point of a `ServingSystem` (`wse_systems.serving.frontier`):

- `at_users(system, n)`: n users in flight (the system refuses more than fit, with numbers);
- `meeting(system, speed, max_ttft_s=)`: of the loads that meet the limits, the knee's rule
  at one output token: the most output tokens/s in all, within 1% a tie
  (`placements.OUTPUT_TIE`), then the soonest first token (then the most output, the fastest
  user, the fewer users: no meeting load `beats` it); None when no load meets them. A load
  meets a per-user speed `speed` when its tokens/s per user is at least `speed` and its
  requests are admitted at once (`queued` is false: a queued point's per-user speed leaves
  out its wait to be admitted, as `gpus_to_match` refuses it), and a first-token limit
  `max_ttft_s` when its time to first token (the wait included) is at most it (either limit
  may be None). At one output token no load has a per-user speed (`frontier.user_speed`): a
  speed has nothing to meet and is dropped, so the pick is `knee`'s, or the first-token
  limit's alone;
- `knee(system)`: the load that maximises per-user speed x aggregate throughput, never a
  queued one (at one output token: the most output within 1%, then the soonest first token).

Why (hunt 75): `meeting` took the largest load meeting a speed, and a queued, saturated load
looks fast (its speed leaves out the wait): Llama 3 8B on a CS-3 at 120 tokens/s a user took
156 users, 18,440 tokens/s in all and a first token in 760 ms, where 128 users served 20,410
tokens/s at 160 tokens/s a user in 588 ms; on 8 x H100 13 tokens/s a user took 3,590 queued
users, a first token in 23 s. Hunt 76: the most output (a 1e-9 tie) then bought 0.2% of output
for 9 times the first token on a plateau (8B on 8 x H100, one output token, any speed: 72
users, 522 ms, where the knee's 8 served 99.8% of it in 58 ms), and at one output token a
speed still refused queued loads: the knee's rule, and no speed to meet there.

`meeting` assumes nothing monotone of the curves (they are not where a system changes its
layout, placement or prompt block with the load; hunt 73), but bounds its work: one user
first (none is served faster nor sooner, so a limit it misses is missed by every load), then
every load of a grid (`meeting_loads`: every load up to 64, then steps of 3%) and the
frontier's loads (`frontier.loads`), then every load between the grid's neighbours of each
peak priced (a load with as much output as both its priced neighbours, within 1% of the most
priced: past a change of layout the output drops, and the most can lie just before a drop,
between two loads priced; session 86), then of the most output found (which sets the 1%
floor), then of the best found (past 64 loads, a finer grid about each, in turn). Its
resolution: a load better than the best grid load, or more output than the grid's most, more
than 3% from both a peak priced and the best, is not seen.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from wse_systems.serving.frontier import (
    Frontier,
    OperatingPoint,
    ServingError,
    ServingSystem,
    _whole,
    frontier,
    loads,
    user_speed,
)
from wse_systems.serving.placements import OUTPUT_TIE

__all__ = ["at_users", "meeting", "meeting_loads", "knee", "queued", "TIE"]

TIE = OUTPUT_TIE  # output tokens/s within this fraction of the most tie (the knee's, hunt 76)


def at_users(system: ServingSystem, users: int) -> OperatingPoint:
    """`users` in flight; more than fit is the system's ServingError (with its budget)."""
    _whole("users", users)
    return system.point(users)


def queued(point: OperatingPoint) -> bool:
    """Whether a new request at `point` waits to be admitted (the busiest resource full):
    its per-user speed leaves that wait out, so it meets no speed (`meeting`)."""
    return point.layout.get("admission_wait_s", 0.0) > 0.0


def _limits(speed: float | None, max_ttft_s: float | None) -> None:
    for name, v in (("per-user speed", speed), ("time to first token", max_ttft_s)):
        if v is not None and not (v > 0 and math.isfinite(v)):
            raise ServingError(f"a {name} limit must be a positive number, got {v!r}")


_DENSE, _STEP = 64, 1.03  # meeting's grid: every load up to _DENSE, then steps of 3%


def meeting_loads(max_users: int) -> list[int]:
    """`meeting`'s grid, fewest first: every load up to 64, then each ceil(1.03 x) the last,
    and `max_users`; about 64 + ln(max_users / 64) / ln(1.03) loads (238 of 13,589)."""
    out = list(range(1, min(max_users, _DENSE) + 1))
    while out[-1] < max_users:
        out.append(min(max_users, math.ceil(out[-1] * _STEP)))
    return out


def beats(a: OperatingPoint, b: OperatingPoint) -> bool:
    """Whether `a` is at least as good as `b` in output tokens/s in all, tokens/s per user
    and time to first token, and better in one."""
    ge = (a.aggregate_tokens_per_s >= b.aggregate_tokens_per_s
          and user_speed(a) >= user_speed(b) and a.ttft_s <= b.ttft_s)  # fmt: skip
    return ge and (a.aggregate_tokens_per_s > b.aggregate_tokens_per_s
                   or user_speed(a) > user_speed(b) or a.ttft_s < b.ttft_s)  # fmt: skip


def _best(points: list[OperatingPoint]) -> OperatingPoint:
    """The most output tokens/s in all (within `TIE`, 1%, a tie); of the tied, the soonest
    first token, then the most output, the fastest user, the fewest users: a point that
    `beats` it would be tied and sooner or, as soon, more (so none does)."""
    most = max(p.aggregate_tokens_per_s for p in points)
    tied = [p for p in points if p.aggregate_tokens_per_s >= (1.0 - TIE) * most]
    return min(tied, key=lambda p: (p.ttft_s, -p.aggregate_tokens_per_s, -user_speed(p), p.users))


def meeting(
    system: ServingSystem,
    speed: float | None = None,
    *,
    max_ttft_s: float | None = None,
    front: Frontier | None = None,
) -> OperatingPoint | None:
    """Of the loads meeting the limits (the module: a speed only unqueued), the most output
    tokens/s within 1%, then the soonest first token (`_best`), None when none meets them: one
    user first (None when it misses), then every load of `meeting_loads` and
    `frontier.loads`, then every load between the grid's neighbours of each peak priced
    within 1% of the most priced (`_peaks`), of the load of the most output, then of the best
    (past 64 of them, 64 evenly spaced, then as many about it, closer in). At most
    len(meeting_loads(max_users)) + log2(max_users) + 1 points are priced, and then about
    ceil(0.07 p) for each peak p (the load of the most output m among them, its neighbours
    priced once) + ceil(0.07 b) for b the load chosen, each up to about 900; past it 64 a
    tenfold finer step. At one output token a speed is dropped (nothing to meet): a speed
    alone is `knee(system, front)`."""
    _limits(speed, max_ttft_s)
    if speed is None and max_ttft_s is None:
        raise ServingError("meeting needs a per-user speed, a time to first token, or both")
    one = system.point(1)
    if one.user_tokens_per_s is None:  # one output token: no per-user speed (hunt 76)
        speed = None
        if max_ttft_s is None:
            return knee(system, front)
    found: dict[int, OperatingPoint | None] = {}

    def met(users: int) -> OperatingPoint | None:
        if users not in found:
            p = one if users == 1 else system.point(users)
            fast = speed is None or (user_speed(p) >= speed and not queued(p))
            found[users] = p if fast and (max_ttft_s is None or p.ttft_s <= max_ttft_s) else None
        return found[users]

    if met(1) is None:
        return None
    grid = meeting_loads(system.max_users)
    for u in sorted({*grid, *loads(system.max_users)}):
        met(u)

    def near(pick: Callable[[list[OperatingPoint]], OperatingPoint], start: int = 0) -> None:
        """Every load between the grid's neighbours of `start` (or `pick`'s load), or 64
        evenly spaced and closer in about `pick`'s load of those priced there."""
        b = start or pick([p for p in found.values() if p is not None]).users
        i = max(j for j, g in enumerate(grid) if g <= b)
        low, high = grid[max(0, i - 1)], grid[min(len(grid) - 1, i + 1)]
        while high - low > 1:
            step = max(1, (high - low) // _DENSE)
            for u in range(low + step, high, step):
                met(u)
            b = pick([p for u, p in found.items() if p is not None and low <= u <= high]).users
            if step == 1 or not low < b < high:
                break
            low, high = max(low, b - step), min(high, b + step)

    def most(points: list[OperatingPoint]) -> OperatingPoint:
        return max(points, key=lambda p: p.aggregate_tokens_per_s)

    # the most output first: it sets the 1% floor (hunt 76: its grid neighbour's floor let in
    # a load 1% below the most, 134 users where 135 is the rule's). Past a change of layout
    # the output drops, so the most can lie between two loads priced, behind the one before
    # the drop: about each load priced with as much output as both its neighbours (a load
    # that misses the limits has none), within 1% of the most priced, most first (session
    # 86: Llama 3 8B on 4 CS-3 at 8,192 + 64 tokens under a 2.76 s first token had 1,388.3
    # tokens/s at 117 users, 1,388.1 at 129 and 883.1 at 133, queued; 132 serve 1,391.4, and
    # the pick about 117, 102 users at 1,376.0, was past the tie)
    for u in _peaks(found):
        near(most, u)
    near(most)
    near(_best)
    return _best([p for p in found.values() if p is not None])


def _peaks(found: dict[int, OperatingPoint | None]) -> list[int]:
    """The loads priced whose output is at least both priced neighbours' (one that misses
    the limits, None, has none), within `TIE` of the most priced, the most output first."""
    us = sorted(found)
    out = {u: p.aggregate_tokens_per_s for u, p in found.items() if p is not None}
    if not out:
        return []
    floor = (1.0 - TIE) * max(out.values())
    near = {u: us[max(0, i - 1) : i + 2] for i, u in enumerate(us)}  # itself, its neighbours
    peaks = [u for u, x in out.items()
             if x >= floor and all(x >= out.get(v, -math.inf) for v in near[u])]  # fmt: skip
    return sorted(peaks, key=lambda u: -out[u])


def knee(system: ServingSystem, front: Frontier | None = None) -> OperatingPoint:
    """The load that maximises per-user speed x aggregate throughput: past it one user more
    costs a larger fraction of per-user speed than it adds to throughput. On the wafer that
    is where the pipeline fills; on GPUs where compute binds or the KV reads match the
    weights'. Found from the frontier's best sample by a ternary search between its
    neighbours (the product is unimodal in the load for both models, up to the steps of
    ceil(users / replicas); hunt 67: on a flat top, a GPU step's kernel floor amortised over
    the batch, those steps stopped the search below the best sample, which is kept). Never
    a queued load (`queued`: its speed leaves out its wait) but for one user. At one output
    token no load has a per-user speed: `_first_token_knee` (hunt 75: the product, the
    output alone, took a plateau load by a float tie, 36 users on a CS-3 with a first token
    in 308 ms where 4 served 99.3% of it in 34 ms)."""
    front = front or frontier(system)
    if all(p.user_tokens_per_s is None for p in front.points):
        return _first_token_knee(system, front)

    def score(users: int) -> float:
        p = system.point(users)
        if users > 1 and queued(p):
            return -math.inf
        return user_speed(p) * p.aggregate_tokens_per_s

    us = [p.users for p in front.points]
    i = max(range(len(us)), key=lambda j: score(us[j]))
    lo, hi = us[max(0, i - 1)], us[min(len(us) - 1, i + 1)]
    while hi - lo > 2:
        m1, m2 = lo + (hi - lo) // 3, hi - (hi - lo) // 3
        if score(m1) < score(m2):
            lo = m1 + 1
        else:
            hi = m2
    return system.point(max([*range(lo, hi + 1), us[i]], key=score))


def _first_token_knee(system: ServingSystem, front: Frontier) -> OperatingPoint:
    """At one output token, the placements' rule (`placements.OUTPUT_TIE`) over every load:
    the most output tokens/s in all, within 1% a tie, then the soonest first token, then the
    fewer users. Queued loads count here: with no output window a request's time is its first
    token, which holds its admission wait. The loads priced: the frontier's, and a bisection
    below its best for the least load within 1% of the most (output rises with the load
    until the busiest resource is full; the first token rises with it)."""
    found = {p.users: p for p in front.points}
    found.setdefault(1, system.point(1))
    most = max(p.aggregate_tokens_per_s for p in found.values())
    floor = (1.0 - OUTPUT_TIE) * most
    hi = min(u for u, p in found.items() if p.aggregate_tokens_per_s >= floor)
    lo = max((u for u, p in found.items() if u < hi), default=hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        found[mid] = system.point(mid)
        lo, hi = (lo, mid) if found[mid].aggregate_tokens_per_s >= floor else (mid, hi)
    tied = [p for p in found.values() if p.aggregate_tokens_per_s >= floor]
    return min(tied, key=lambda p: (p.ttft_s, p.users))
