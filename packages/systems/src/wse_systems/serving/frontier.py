"""Operating points and frontiers of a serving system, and the arithmetic both systems share.

Contract. A serving system (`ServingSystem`: the wafers of `wse_systems.serving.wafer`, the
GPUs of `wse_systems.serving.gpus`) answers `point(users)`: with `users` sequences in flight,
an `OperatingPoint` of tokens/s per user, tokens/s in all, time to first token and what bounds
it; `max_users` is the most that fit its memory. A `Frontier` is its points over loads
(aggregate throughput against per-user speed: the chart a buyer compares). Three ways to
pick a point, the same on both systems:

- `at_users(system, n)`: n users in flight (the system refuses more than fit, with numbers);
- `meeting(system, speed, max_ttft_s=)`: the largest load whose per-user speed is at least
  `speed` and whose time to first token is at most `max_ttft_s` (either may be None; None
  when no load meets them);
- `knee(system)`: the load that maximises per-user speed x aggregate throughput (see it).

`meeting` assumes nothing monotone of the curves (they are not where a system changes its
layout, placement or prompt block with the load; hunt 73: a bisection found 52 users of
Llama 3 8B within a first token of 22 ms where 123 met it), but bounds its work
(`meeting_loads`): one user first (none is served faster, so a limit it misses is missed by
every load), then a grid of loads from the most down (every load up to 64, then steps of
3%), the largest grid load that meets, then every load between it and the grid load above
it (which failed). Its resolution: a load that meets the limits with every grid load above
it failing, more than 3% above the answer, is not seen.

An `OperatingPoint` counts whole requests: its output tokens/s, and the prompt tokens/s
(`input_tokens_per_s`) that come with them, and the share of the system's time the prompts
take (`input_time_share`: what $/M input tokens is charged). Both systems build it from one
`RequestTimes` (hunt 66: the GPUs left a request's own first token out of its period): a
request's first token, its output from the first token to the last as the user sees it (the
other users' work interleaved with it included), and the period the busiest resource allows;
each user sends its next request when the last completes, so a user's period is
max(first token + output, capacity); when the capacity binds, a new request waits to be
admitted (vLLM's waiting queue), so its first token takes the excess. Tokens/s per user is
vLLM's and NVIDIA's (genai-perf's "output token throughput per user", 1 / TPOT): output
tokens over the time from the first token to the last; tokens/s in all: users x output
tokens per period.

`Workload` is what each user asks: prompt and output tokens and the context held per user
(default prompt + output); a decode step reads `kv_tokens` = prompt + output // 2 cached
tokens (the mean over the output). `Speculation` is a draft model, gamma drafted tokens per
round and Leviathan's acceptance rate alpha (an input, e.g. the speculative engine's measured
`metrics()["spec_alpha"]`): a round emits (1 - a^(g+1)) / (1 - a) tokens, and
`speculative_speedup` is Leviathan et al.'s (1 - a^(g+1)) / ((1 - a)(g c + v)) with c the
draft step over the target step and v the verification pass over the target step (v = 1 is
the published formula, REFERENCES.md).

"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, Protocol

from wse_core.errors import WseError

__all__ = [
    "ServingError",
    "Workload",
    "check_workload",
    "Speculation",
    "OperatingPoint",
    "RequestTimes",
    "ServingSystem",
    "Frontier",
    "tokens_per_round",
    "speculative_speedup",
    "loads",
    "frontier",
    "at_users",
    "meeting",
    "meeting_loads",
    "knee",
]


class ServingError(WseError):
    """A load, speed or workload that cannot be served as asked (the numbers say why)."""


def _whole(name: str, value: Any, low: int = 1) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ServingError(f"{name} must be an integer >= {low}, got {value!r}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Workload:
    """Each user's request: prompt and output tokens, and the KV context held per user."""

    prompt_tokens: int
    output_tokens: int
    context_len: int | None = None  # KV cache held per user; default prompt + output

    def __post_init__(self) -> None:
        _whole("prompt_tokens", self.prompt_tokens)
        _whole("output_tokens", self.output_tokens)
        if self.context_len is not None:
            _whole("context_len", self.context_len)
            if self.context_len < self.prompt_tokens + self.output_tokens:
                raise ServingError(
                    f"context_len {self.context_len} is shorter than the prompt and output "
                    f"({self.prompt_tokens} + {self.output_tokens} tokens)"
                )

    @property
    def held_tokens(self) -> int:
        """Tokens of KV cache reserved per user."""
        return self.context_len or self.prompt_tokens + self.output_tokens

    @property
    def kv_tokens(self) -> int:
        """Cached tokens a decode step reads: the prompt and half the output (the mean)."""
        return self.prompt_tokens + self.output_tokens // 2

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "held_tokens": self.held_tokens,
                "kv_tokens": self.kv_tokens}  # fmt: skip


def check_workload(model: Any, workload: Workload, whose: str = "the model") -> None:
    """ServingError for a request past `model`'s `max_seq_len` (hunt 67: a 10**6-token prompt
    was priced on a model of 128 positions, 0.65 s to first token), as vLLM refuses a
    max_model_len past max_position_embeddings and `wse plan infer` a request
    (`wse_systems.planning.infer_inputs.check_request`)."""
    limit, held = getattr(model, "max_seq_len", None), workload.held_tokens
    if limit is None or held <= limit:
        return
    asked = (
        f"context_len {workload.context_len:,}" if workload.context_len else
        f"prompt_tokens {workload.prompt_tokens:,} + output_tokens {workload.output_tokens:,}"
    )  # fmt: skip
    raise ServingError(
        f"the workload holds {held:,} tokens per user ({asked}), past {whose}'s "
        f"max_seq_len={limit:,}; use at most {limit:,}"
    )


def tokens_per_round(alpha: float, gamma: int) -> float:
    """(1 - a^(g+1)) / (1 - a): tokens one speculative round emits at acceptance rate a."""
    if alpha >= 1.0:
        return float(gamma + 1)
    return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


def speculative_speedup(
    alpha: float, gamma: int, *, draft_s: float, target_s: float, verify_s: float | None = None
) -> float:
    """Tokens/s with speculation over plain decoding: E / (g c + v), c = draft_s / target_s,
    v = verify_s / target_s (default 1: Leviathan et al.'s formula)."""
    v = 1.0 if verify_s is None else verify_s / target_s
    return tokens_per_round(alpha, gamma) / (gamma * draft_s / target_s + v)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Speculation:
    """Draft-and-verify decoding: `draft` (a model config or shape), `gamma` drafted tokens
    per round, acceptance rate `alpha` in [0, 1] (an input or measured by the engine)."""

    draft: Any
    gamma: int
    alpha: float

    def __post_init__(self) -> None:
        _whole("gamma", self.gamma)
        if not 0.0 <= self.alpha <= 1.0:  # also refuses NaN
            raise ServingError(f"alpha must be in [0, 1], got {self.alpha!r}")

    @property
    def tokens_per_round(self) -> float:
        return tokens_per_round(self.alpha, self.gamma)

    def to_dict(self) -> dict[str, Any]:
        name = getattr(self.draft, "name", None) or type(self.draft).__name__
        return {"draft": name, "gamma": self.gamma, "alpha": self.alpha,
                "tokens_per_round": self.tokens_per_round}  # fmt: skip


@dataclasses.dataclass(frozen=True, kw_only=True)
class OperatingPoint:
    """One load: `users` in flight, tokens/s per user and in all, time to first token (s),
    the bound ("pipeline latency", "stage", "hbm", "compute", ...) and the layout."""

    users: int
    user_tokens_per_s: float
    aggregate_tokens_per_s: float
    ttft_s: float
    bound: str
    layout: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    input_tokens_per_s: float = 0.0  # prompt tokens served per second
    input_time_share: float = 0.0  # the prompts' share of the system's time (for $/M input)

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "layout": dict(self.layout)}


@dataclasses.dataclass(frozen=True, kw_only=True)
class RequestTimes:
    """One request at a load (seconds), the same arithmetic on both systems: its first token
    when admitted at once (`ttft_s`: the prompt's pass and the wait for the item under way),
    its output from the first token to the last as the user sees it (`decode_s`: its own
    decode steps and the others' work interleaved with them, at the period), and the period
    the busiest resource allows (`capacity_s`: every user's whole request through it once)."""

    ttft_s: float
    decode_s: float
    capacity_s: float

    @property
    def period_s(self) -> float:
        """Completions pace the requests: a user's own first token and output, or, when
        full, its share of the busiest resource (whichever is longer)."""
        return max(self.ttft_s + self.decode_s, self.capacity_s)

    @property
    def latency_bound(self) -> bool:
        return self.ttft_s + self.decode_s >= self.capacity_s

    @property
    def first_token_s(self) -> float:
        """The first token as the user sees it: when full, a new request waits to be
        admitted until the busiest resource has room for it (vLLM's and TensorRT-LLM's
        waiting queue: decode steps are not starved by new prompts), so the period's excess
        over the request's own path is a wait before its first token."""
        return max(self.ttft_s, self.capacity_s - self.decode_s)

    def point(
        self, users: int, workload: Workload, *, input_time_share: float, bound: str,
        layout: Mapping[str, Any],
    ) -> OperatingPoint:  # fmt: skip
        """The operating point of `users` sending these requests (module docstring)."""
        period, o = self.period_s, workload.output_tokens
        out = users * o / period
        return OperatingPoint(
            users=users, user_tokens_per_s=o / self.decode_s, aggregate_tokens_per_s=out,
            input_tokens_per_s=out * workload.prompt_tokens / o,
            input_time_share=input_time_share, ttft_s=self.first_token_s, bound=bound,
            layout={**layout, "request_period_s": period, "decode_s": self.decode_s,
                    "admission_wait_s": self.first_token_s - self.ttft_s},
        )  # fmt: skip


class ServingSystem(Protocol):
    """What the selections need of a system: its name, units, capacity and points."""

    name: str
    units: int  # wafers or GPUs of one replica of the system
    max_users: int

    def point(self, users: int) -> OperatingPoint:
        """The point at `users` in flight; a ServingError beyond `max_users`."""
        ...


@dataclasses.dataclass(frozen=True)
class Frontier:
    """A system's points over loads, fewest users first."""

    system: str
    units: int
    max_users: int
    points: tuple[OperatingPoint, ...]

    def best_aggregate(self) -> float:
        return max(p.aggregate_tokens_per_s for p in self.points)

    def pareto(self) -> tuple[OperatingPoint, ...]:
        """The points no other point beats on both per-user speed and aggregate throughput."""
        fast_first = sorted(
            self.points, key=lambda p: (-p.user_tokens_per_s, -p.aggregate_tokens_per_s)
        )
        out, best = [], -math.inf
        for p in fast_first:
            if p.aggregate_tokens_per_s > best:
                out.append(p)
                best = p.aggregate_tokens_per_s
        return tuple(sorted(out, key=lambda p: p.users))

    def _repr_html_(self) -> str:
        from wse_core.notebook import frontier_html

        return frontier_html(self, self.plot())

    def plot(self) -> Any:
        """The frontier chart (`wse_systems.serving.figure`), a matplotlib Figure."""
        import matplotlib.pyplot as plt
        from wse_core.figures import plain  # the system's name as typed (hunt 68)

        from wse_systems.serving.figure import Curve, draw_frontiers

        fig, ax = plt.subplots(figsize=(6.5, 4.5), constrained_layout=True)
        curve = Curve(self, None, "#4c72b0", plain(f"{self.system} ({self.units} units)"))
        draw_frontiers(ax, [curve], title=plain(f"{self.system}: serving frontier"))
        return fig

    def to_dict(self) -> dict[str, Any]:
        return {"system": self.system, "units": self.units, "max_users": self.max_users,
                "points": [p.to_dict() for p in self.points]}  # fmt: skip


def loads(max_users: int, extra: tuple[int, ...] = ()) -> list[int]:
    """1, 2, 4, ... up to `max_users`, the maximum itself, and `extra` (within range)."""
    out = {max_users, *(u for u in extra if 1 <= u <= max_users)}
    u = 1
    while u < max_users:
        out.add(u)
        u *= 2
    return sorted(out)


def frontier(system: ServingSystem, extra: tuple[int, ...] = ()) -> Frontier:
    """The system's points at `loads(system.max_users, extra)`."""
    points = tuple(system.point(u) for u in loads(system.max_users, extra))
    return Frontier(system.name, system.units, system.max_users, points)


def at_users(system: ServingSystem, users: int) -> OperatingPoint:
    """`users` in flight; more than fit is the system's ServingError (with its budget)."""
    _whole("users", users)
    return system.point(users)


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


def meeting(
    system: ServingSystem, speed: float | None = None, *, max_ttft_s: float | None = None
) -> OperatingPoint | None:
    """The largest load whose tokens/s per user is at least `speed` and whose time to first
    token is at most `max_ttft_s` (None when no load meets them), to the grid's resolution:
    one user first (None when it misses), then `meeting_loads` from the most down to the
    largest grid load g that meets, then every load between g and the grid load above it.
    At most 1 + len(meeting_loads(max_users)) + ceil(0.03 g) points are priced (module)."""
    _limits(speed, max_ttft_s)
    if speed is None and max_ttft_s is None:
        raise ServingError("meeting needs a per-user speed, a time to first token, or both")

    def met(users: int) -> OperatingPoint | None:
        p = system.point(users)
        fast = speed is None or p.user_tokens_per_s >= speed
        return p if fast and (max_ttft_s is None or p.ttft_s <= max_ttft_s) else None

    # hunt 73: a bisection took the curves as monotone (8B, a first token in 22 ms: 52 users
    # found, 123 meet it); a scan of every load took up to 138 s (1B on 16 wafers)
    if (one := met(1)) is None:
        return None
    grid = meeting_loads(system.max_users)
    above = system.max_users + 1  # the grid load above the one that meets (failed)
    for g in reversed(grid[1:]):
        if (p := met(g)) is not None:
            return next(filter(None, map(met, range(above - 1, g, -1))), p)
        above = g
    return next(filter(None, map(met, range(above - 1, 1, -1))), one)


def knee(system: ServingSystem, front: Frontier | None = None) -> OperatingPoint:
    """The load that maximises per-user speed x aggregate throughput: past it one user more
    costs a larger fraction of per-user speed than it adds to throughput. On the wafer that
    is where the pipeline fills; on GPUs where compute binds or the KV reads match the
    weights'. Found from the frontier's best sample by a ternary search between its
    neighbours (the product is unimodal in the load for both models, up to the steps of
    ceil(users / replicas); hunt 67: on a flat top, a GPU step's kernel floor amortised over
    the batch, those steps stopped the search below the best sample, which is kept)."""
    front = front or frontier(system)

    def score(users: int) -> float:
        p = system.point(users)
        return p.user_tokens_per_s * p.aggregate_tokens_per_s

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
