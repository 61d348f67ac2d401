"""The traffic one PE of the MD grid sees, from the traced ledger of a step's fabric calls
(`perf.fabric_counts`): two consecutive entries of one operation in opposite directions run
at once (`chain`), and the fold placement lays each periodic ring out on the physical PEs
(`wse_hpc.md.perf`'s module docstring says why: each ring cut in two and laid interleaved,
one half reversed, so ring neighbours are 1-2 physical hops apart).

`fold_walk` prices one part's ledger entries on the fold: each shift or multicast walked on
its ring where the fold puts it (`wse_core.fabric.ledger.on_mesh`: a chain of k logical
links is the slowest run of links between ring PEs up to k apart, up to 2k links, each at
its own hops, detours included), so a lone detour is paid once (hunt 73: the fold paid
FOLD_HOPS times the recorded chain, every detour on it twice). `fold` is the same placement
on a summed `Traffic` whose entries are gone: its words and word-hops are exact, its
latency FOLD_HOPS per recorded hop, exact only without dead PEs.

Contract: pure functions of `wse_core.hw.traffic.Traffic` (ledger entries in, one
`Traffic` out) and, for `fold_walk`, the wafer's link hops; nothing is traced here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from wse_core.fabric import ledger
from wse_core.fabric.ledger import FOLD_HOPS  # the fabric's fold, which stencils share
from wse_core.hw.traffic import Traffic
from wse_core.hw.wafer import Wafer

__all__ = ["FOLD_HOPS", "FOLDED", "fold", "fold_walk", "chain"]

FOLDED = {0: "fold", 1: "fold"}  # both grid axes are periodic rings, folded (`ledger.on_mesh`)


def _shared(traffic: Traffic) -> dict[str, float]:
    """Link words on the fold: opposite directions share both physical links of an axis, and
    every word the PE receives crosses its ramp."""
    ln = traffic.links
    ew, ns = ln.get("E", 0.0) + ln.get("W", 0.0), ln.get("N", 0.0) + ln.get("S", 0.0)
    links = {d: v for d, v in (("E", ew), ("W", ew), ("N", ns), ("S", ns)) if v}
    if ew + ns:
        links["ramp"] = ew + ns + ln.get("ramp", 0.0)
    return links


def fold(traffic: Traffic) -> Traffic:
    """A summed traffic on the fold placement (see the module docstring): opposite
    directions share both physical links of an axis, word-hops FOLD_HOPS times, and the
    latency FOLD_HOPS per recorded hop (a wafer's detours walked on the ring: `fold_walk`)."""
    return dataclasses.replace(
        traffic,
        word_hops=traffic.word_hops * FOLD_HOPS,
        latency_hops=traffic.latency_hops * FOLD_HOPS,
        links=_shared(traffic),
    )


def fold_walk(wafer: Wafer, entries: Sequence[Traffic]) -> Traffic:
    """One part's ledger entries (recorded on `wafer`) on the fold placement: `fold` of
    their `chain`, its latency each shift or multicast walked on its folded ring
    (`ledger.on_mesh`: a chain of k links the slowest run between ring PEs up to k apart on
    any line, each link at its own hops; reductions and broadcasts as recorded), opposite
    pairs at once. Without dead PEs it is `fold(chain(entries))`."""
    walked = chain([ledger.on_mesh(wafer, e, FOLDED) for e in entries])
    return dataclasses.replace(fold(chain(entries)), latency_hops=walked.latency_hops)


def chain(entries: Sequence[Traffic]) -> Traffic:
    """Sum of ledger entries where two consecutive entries of one op in opposite directions
    (multicast E / W, shift S / N) run at once: their latency is the larger, not the sum."""
    opposite = {"E": "W", "W": "E", "N": "S", "S": "N"}
    total, i = Traffic(), 0
    while i < len(entries):
        e = entries[i]
        nxt = entries[i + 1] if i + 1 < len(entries) else None
        if nxt is not None and nxt.op[:-1] == e.op[:-1] and opposite.get(e.op[-1]) == nxt.op[-1]:
            both = e + nxt
            lat = max(e.latency_hops, nxt.latency_hops)
            total = total + Traffic(both.op, both.words, both.word_hops, both.max_words_per_pe,
                                    lat, both.count, both.links, both.relay_stages)  # fmt: skip
            i += 2
        else:
            total, i = total + e, i + 1
    return total
