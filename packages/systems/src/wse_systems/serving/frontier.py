"""Operating points and frontiers of a serving system, and the arithmetic both systems share.

Contract. A serving system (`ServingSystem`: the wafers of `wse_systems.serving.wafer`, the
GPUs of `wse_systems.serving.gpus`) answers `point(users)`: with `users` sequences in flight,
an `OperatingPoint` of tokens/s per user, tokens/s in all, time to first token and what bounds
it; `max_users` is the most that fit its memory. A `Frontier` is its points over loads
(aggregate throughput against per-user speed: the chart a buyer compares). The ways to pick
a point, the same on both systems (`at_users`, `meeting`, `knee`), are
`wse_systems.serving.selection`'s.

An `OperatingPoint` counts whole requests: its output tokens/s, and the prompt tokens/s
(`input_tokens_per_s`) that come with them, and the share of the system's time the prompts
take (`input_time_share`: what $/M input tokens is charged). Both systems build it from one
`RequestTimes` (hunt 66: the GPUs left a request's own first token out of its period): a
request's first token, its output from the first token to the last as the user sees it (the
other users' work interleaved with it included), and the period the busiest resource allows;
each user sends its next request when the last completes, so a user's period is
max(first token + output, capacity); when the capacity binds, a new request waits to be
admitted (vLLM's waiting queue), so its first token takes the excess. The first token comes
out of the prompt's pass, so a request of O output tokens has O - 1 decode steps after it
(`decode_steps`: with speculation, ceil((O - 1) / E) whole rounds; hunt 75: both systems
priced O). Tokens/s per user is vLLM's and NVIDIA's
(genai-perf's "output token throughput per user", 1 / TPOT, TPOT = ITL = (e2e - TTFT) /
(O - 1)): the O - 1 tokens after the first over the time from the first token to the last;
at O = 1 there is no such time and no such speed (None: JSON null, printed "n/a"; a speed
limit is then met by any point, `user_speed`), and a request's time is its first token.
Tokens/s in all: users x O per period, every output token, the first included.

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
    "decode_steps",
    "user_speed",
    "speculative_speedup",
    "loads",
    "frontier",
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

    @property
    def prompt_kv_tokens(self) -> int:
        """Cached tokens the prompt's pass is priced at on the wafer: half the prompt (the
        mean a prompt token reads), at least one."""
        return max(1, self.prompt_tokens // 2)

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


def decode_steps(workload: Workload, tokens_per_step: float = 1.0) -> float:
    """Decode steps (or speculative rounds of `tokens_per_step` tokens) a request takes after
    its first token, which the prompt's pass emits: ceil((O - 1) / E) whole rounds, none at
    O = 1 (vLLM's and the speculative engine's `generate`: 31 tokens in the rounds after a
    32-token request's prefill; each request runs whole draft-and-verify rounds, the last
    of which may emit fewer than E tokens). Hunt 75: (O - 1) / E counted a fraction of a
    round, so at O = 2 and E = 5 a speculative decode was a fifth of a round, faster than a
    plain target pass. Plain decoding (E = 1): O - 1 steps, as before."""
    rounds = (workload.output_tokens - 1) / tokens_per_step
    return float(math.ceil(rounds - 1e-9))  # 1e-9: E's rounding must not add a round


def user_speed(point: OperatingPoint) -> float:
    """A point's tokens/s per user for comparisons: inf where it has none (one output token:
    no time between tokens, so any per-user speed is met and none is beaten)."""
    s = point.user_tokens_per_s
    return math.inf if s is None else s


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
    per round, acceptance rate `alpha` in [0, 1] (an input or measured by the engine), the
    draft's weights and KV at `draft_bytes_per_param` bytes a value on the wafer (None: the
    target's, the serving system's `bytes_per_param`; the GPU side prices both models at its
    own precision).

    Why the draft's own bytes (session 85): the speculative engine's report prices each
    model at its own config's dtype (`SpeculativeDecoder.report`: a bfloat16 draft folder of
    a float32 target), and the planner priced the draft at the target's bytes, so a run of
    that pair was priced on another placement search (`plan_speculative`, the shortest
    round) and `wse plan infer --draft` priced a placement the pair does not hold."""

    draft: Any
    gamma: int
    alpha: float
    draft_bytes_per_param: int | None = None

    def __post_init__(self) -> None:
        _whole("gamma", self.gamma)
        if self.draft_bytes_per_param is not None:
            _whole("draft_bytes_per_param", self.draft_bytes_per_param)
        if not 0.0 <= self.alpha <= 1.0:  # also refuses NaN
            raise ServingError(f"alpha must be in [0, 1], got {self.alpha!r}")

    @property
    def tokens_per_round(self) -> float:
        return tokens_per_round(self.alpha, self.gamma)

    def to_dict(self) -> dict[str, Any]:
        name = getattr(self.draft, "name", None) or type(self.draft).__name__
        return {"draft": name, "gamma": self.gamma, "alpha": self.alpha,
                "tokens_per_round": self.tokens_per_round,
                "draft_bytes_per_param": self.draft_bytes_per_param}  # fmt: skip


@dataclasses.dataclass(frozen=True, kw_only=True)
class OperatingPoint:
    """One load: `users` in flight, tokens/s per user (the O - 1 tokens after the first over
    the time from the first to the last; None at one output token) and in all, time to first
    token (s), the bound ("pipeline latency", "region ...", "hbm", "compute", ...) and the
    layout."""

    users: int
    user_tokens_per_s: float | None
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
    O - 1 decode steps and the others' work interleaved with them, at the period; 0 at one
    output token), and the period
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
        speed = (o - 1) / self.decode_s if o > 1 else None  # no tokens after the first: n/a
        return OperatingPoint(
            users=users, user_tokens_per_s=speed, aggregate_tokens_per_s=out,
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
        """The points no other point beats on both per-user speed and aggregate throughput;
        at one output token (no per-user speed) on both the time to first token and the
        aggregate (hunt 75: every point's speed was inf, so one point was kept, whatever
        its first token; `selection.knee` ranks these by output and first token)."""

        def quick(p: OperatingPoint) -> float:  # the larger the better
            return -p.ttft_s if p.user_tokens_per_s is None else user_speed(p)

        fast_first = sorted(self.points, key=lambda p: (-quick(p), -p.aggregate_tokens_per_s))
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
