"""The traffic ledger: what the fabric moved, recorded at trace time so counting is free.

Every fabric op appends one `Traffic` entry when it is traced (not when it runs): a jitted
step that is traced once records its traffic once, which is exactly "per step". Use
`ledger.scope()` to collect what one function records (what its trace ran: a loop's body
once, a cached jit's nothing), or `fabric.count(...)` to trace a function abstractly and get
its total (every trip of a static loop, every vmapped example, jit's cache bypassed: the
rules are `wse_core.fabric.counting`'s).

Counts are for the logical grid: `words` (32-bit words injected into the fabric),
`word_hops` (words times the physical hops they travel, detours around dead PEs included),
`max_words_per_pe` (the busiest PE's injected words, all directions together),
`links` (the busiest PE's words per outgoing link direction, "N", "S", "E", "W", and for a
reduction "ramp", the words its busiest core takes off the router, Luczynski et al.'s
contention C: links of different directions run at once, so the busiest single link bounds
bandwidth time; the performance model takes the maximum over directions), `latency_hops`
(the longest chain of dependent hops, which bounds latency time) and `relay_stages`
(dependent relays through a core on that chain: a reduction's combining steps, 2 T_R + 1
cycles each).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Mapping

from wse_core.hw.frozen_mapping import FrozenMapping

__all__ = ["Traffic", "TrafficLedger"]


@dataclasses.dataclass(frozen=True)
class Traffic:
    """One fabric op's counts, or a sum of them (the module docstring's fields); frozen and
    hashed by value (`links` kept as a `FrozenMapping`: hunt 75, a `RunReport` holding one
    could not be a `jax.jit` static argument)."""

    op: str = "total"
    words: float = 0.0
    word_hops: float = 0.0
    max_words_per_pe: float = 0.0
    latency_hops: float = 0.0
    count: int = 0  # number of fabric ops
    links: Mapping[str, float] = dataclasses.field(default_factory=FrozenMapping)  # per direction
    relay_stages: float = 0.0  # dependent relays through a core (wse_core.cost.perf: 2 T_R + 1)

    def __post_init__(self) -> None:
        if type(self.links) is not FrozenMapping:
            object.__setattr__(self, "links", FrozenMapping(self.links))

    def __add__(self, other: Traffic) -> Traffic:
        links = dict(self.links)
        for d, v in other.links.items():
            links[d] = links.get(d, 0.0) + v
        return Traffic(
            op=self.op if self.op == other.op else "total",
            words=self.words + other.words,
            word_hops=self.word_hops + other.word_hops,
            max_words_per_pe=self.max_words_per_pe + other.max_words_per_pe,
            latency_hops=self.latency_hops + other.latency_hops,
            count=self.count + other.count,
            links=links,
            relay_stages=self.relay_stages + other.relay_stages,
        )

    def scaled(self, k: float) -> Traffic:
        """This traffic repeated k times (e.g. per step times steps)."""
        return Traffic(
            self.op,
            self.words * k,
            self.word_hops * k,
            self.max_words_per_pe * k,
            self.latency_hops * k,
            int(self.count * k),
            {d: v * k for d, v in self.links.items()},
            self.relay_stages * k,
        )

    @property
    def busiest_link(self) -> tuple[str, float]:
        """(direction, words) of the busiest outgoing link of the busiest PE."""
        if not self.links:
            return ("-", 0.0)
        d = max(self.links, key=self.links.__getitem__)
        return d, float(self.links[d])

    def to_dict(self) -> dict[str, object]:
        out = dataclasses.asdict(self)
        out["links"] = dict(self.links)
        return out


class TrafficLedger:
    """An append-only list of `Traffic` entries with nested scopes: each scope collects what
    is recorded while it is open, and so do the scopes around it, up to the nearest one
    opened `own` (`fabric.count`: what a count inside a counted function traces is the
    inner count's alone; hunt 76: the outer count added it, 256 words for a function that
    moved none)."""

    def __init__(self) -> None:
        self._entries: list[Traffic] = []
        self._open: list[tuple[list[Traffic], bool]] = []  # (collected, own), innermost last

    def record(self, entry: Traffic) -> None:
        self._entries.append(entry)
        for collected, own in reversed(self._open):
            collected.append(entry)
            if own:
                break

    @property
    def entries(self) -> tuple[Traffic, ...]:
        return tuple(self._entries)

    def total(self, since: int = 0) -> Traffic:
        out = Traffic()
        for e in self._entries[since:]:
            out = out + e
        return dataclasses.replace(out, op="total")

    def by_op(self, since: int = 0) -> dict[str, Traffic]:
        out: dict[str, Traffic] = {}
        for e in self._entries[since:]:
            out[e.op] = out[e.op] + e if e.op in out else e
        return out

    @contextlib.contextmanager
    def scope(self, *, own: bool = False) -> Iterator[list[Traffic]]:
        """Collect the entries recorded inside the block into the yielded list; `own`: and
        keep them from the scopes around it (the class docstring). The ledger keeps every
        entry either way."""
        collected: list[Traffic] = []
        here = (collected, own)
        self._open.append(here)
        try:
            yield collected
        finally:
            # by identity: another thread's scope on this ledger may close out of order
            del self._open[next(i for i, s in enumerate(self._open) if s is here)]

    def clear(self) -> None:
        self._entries.clear()
