"""One request on a wafer pipeline: what it holds each element for, and its times.

Contract. `RequestWork` is one request of `wse_systems.serving.wafer.WaferServing` (built by
its `request(users, block)`; the policy and the arithmetic are that module's docstring):
the seconds it holds each pipeline element for (prompt and output, and the prompt's part),
its prompt's pass, its decode alone and its wait at the bottleneck. `times(users)` is its
first token, output window and period at `users` in flight (`wse_systems.serving.frontier.
RequestTimes`, the GPUs' arithmetic too) and `point(users, workload, **layout)` the
operating point they give.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from wse_systems.serving.frontier import OperatingPoint, RequestTimes, Workload

__all__ = ["RequestWork"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class RequestWork:
    """One request on the pipeline (seconds): what it holds each element for, prompt and
    output together (`held_s`) and its prompt's part, its prompt pass and its decode alone,
    and the wait for the item under way at the bottleneck (none at one user)."""

    block: int
    held_s: Mapping[str, float]
    prompt_held_s: Mapping[str, float]
    prompt_s: float
    decode_s: float
    wait_s: float

    @property
    def ttft_s(self) -> float:
        return self.wait_s + self.prompt_s

    def bottleneck(self) -> tuple[str, float]:
        name = max(self.held_s, key=self.held_s.__getitem__)
        return name, self.held_s[name]

    def stall_s(self, users: int) -> float:
        """a: the other users' prompts' longest hold of one element, per period (the
        module `wse_systems.serving.wafer`)."""
        return (users - 1) * max(self.prompt_held_s.values(), default=0.0)

    def times(self, users: int) -> RequestTimes:
        """First token admitted at once, the output window with the others' prompt stalls
        at the period, and the capacity (`wse_systems.serving.wafer`'s docstring)."""
        a, first, capacity = self.stall_s(users), self.ttft_s, users * self.bottleneck()[1]
        s = first + self.decode_s + a  # the own path: T^2 - s T + first a = 0, larger root
        period = max(0.5 * (s + math.sqrt(s * s - 4.0 * first * a)), capacity)
        stalls = self.decode_s * a / (period - a)  # = D - O T1: never below 0, 0 alone
        return RequestTimes(ttft_s=first, decode_s=self.decode_s + stalls, capacity_s=capacity)

    def period_s(self, users: int) -> float:
        """A user's request period (`RequestTimes.period_s`)."""
        return self.times(users).period_s

    def output_per_s(self, users: int, output_tokens: int) -> float:
        return users * output_tokens / self.period_s(users)

    def point(self, users: int, workload: Workload, **layout: Any) -> OperatingPoint:
        name, work = self.bottleneck()
        times = self.times(users)
        return times.point(
            users, workload, input_time_share=self.prompt_held_s.get(name, 0.0) / work,
            bound="pipeline latency" if times.latency_bound else f"region {name}",
            layout={**layout, "bottleneck_s_per_request": work, "prompt_block_tokens": self.block,
                    "decode_alone_s": self.decode_s,
                    "decode_stalls_s": times.decode_s - self.decode_s},
        )  # fmt: skip
