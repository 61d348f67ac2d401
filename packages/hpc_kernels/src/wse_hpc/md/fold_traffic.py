"""The traffic one PE of the MD grid sees, from the traced ledger of a step's fabric calls
(`perf.fabric_counts`): two consecutive entries of one operation in opposite directions run
at once (`chain`), and the fold placement lays each periodic ring out on the physical PEs
(`fold`; `wse_hpc.md.perf`'s module docstring says why: each ring cut in two and laid
interleaved, one half reversed, so ring neighbours are 1-2 physical hops apart).

Contract: pure functions of `wse_core.hw.traffic.Traffic` (ledger entries in, one
`Traffic` out); nothing is traced here.
"""

from __future__ import annotations

from collections.abc import Sequence

from wse_core.fabric.ledger import FOLD_HOPS  # the fabric's fold, which stencils share
from wse_core.hw.traffic import Traffic

__all__ = ["FOLD_HOPS", "fold", "chain"]


def fold(traffic: Traffic) -> Traffic:
    """The fold placement's traffic (see the module docstring): opposite directions share
    both physical links of an axis, and every hop is FOLD_HOPS physical hops."""
    ln = traffic.links
    ew, ns = ln.get("E", 0.0) + ln.get("W", 0.0), ln.get("N", 0.0) + ln.get("S", 0.0)
    links = {d: v for d, v in (("E", ew), ("W", ew), ("N", ns), ("S", ns)) if v}
    if ew + ns:  # every word the PE receives crosses its ramp
        links["ramp"] = ew + ns + ln.get("ramp", 0.0)
    return Traffic(
        traffic.op,
        traffic.words,
        traffic.word_hops * FOLD_HOPS,
        traffic.max_words_per_pe,
        traffic.latency_hops * FOLD_HOPS,
        traffic.count,
        links,
        traffic.relay_stages,
    )


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
