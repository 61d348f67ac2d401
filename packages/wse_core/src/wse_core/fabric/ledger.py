"""What each fabric op records in the wafer's traffic ledger (no data moves here).

`wse_core.fabric` moves the data and calls these at trace time: `words_per_pe` (32-bit words
of one per-PE value), `hops` (mean and max physical hops per logical link along a grid axis,
detours around dead PEs included), and `record_multicast`, `record_shift`, `record_reduce`,
`record` (one `Traffic` entry: words, word-hops, busiest-link words, latency hops).
"""

from __future__ import annotations

import numpy as np

from wse_core.hw.traffic import Traffic
from wse_core.hw.wafer import Wafer

__all__ = [
    "DIRECTIONS",
    "words_per_pe",
    "hops",
    "record",
    "record_multicast",
    "record_shift",
    "record_reduce",
]

# direction -> (grid axis, sign): sign +1 means PE i receives from PE i - distance.
DIRECTIONS = {"N": (0, -1), "S": (0, +1), "E": (1, +1), "W": (1, -1)}


def words_per_pe(x) -> float:
    """32-bit fabric words per PE for one value of x's per-PE shape."""
    return float(np.prod(x.shape[2:], dtype=np.int64)) * x.dtype.itemsize / 4


def hops(wafer: Wafer, axis: int) -> tuple[float, float]:
    """Mean and max physical hops per logical link along `axis` on this grid."""
    links = wafer.remap.link_hops(axis)[: wafer.rows, : wafer.cols]
    if axis == 0:
        links = links[: wafer.rows - 1]
    else:
        links = links[:, : wafer.cols - 1]
    if links.size == 0:
        return 1.0, 1.0
    return float(links.mean()), float(links.max())


def record(
    wafer: Wafer,
    op: str,
    words: float,
    word_hops: float,
    busiest: float,
    lat: float,
    links: dict[str, float] | None = None,
) -> None:
    """One entry; `links` are the busiest PE's words per outgoing direction (their sum is
    `busiest`)."""
    wafer.traffic.record(Traffic(op, words, word_hops, busiest, lat, 1, links or {}))


def record_multicast(wafer: Wafer, direction: str, w: float, k: int) -> None:
    mean_h, max_h = hops(wafer, DIRECTIONS[direction][0])
    n = wafer.num_pes
    # Each PE forwards k values (its own and k - 1 passing through) on one link.
    links = {direction: k * w}  # data travels toward `direction`
    record(wafer, f"multicast{direction}", n * w, n * w * k * mean_h, k * w, k * max_h, links)


def record_shift(wafer: Wafer, direction: str, w: float, distance: int) -> None:
    mean_h, max_h = hops(wafer, DIRECTIONS[direction][0])
    n = wafer.num_pes
    links = {direction: w * distance}  # a value relayed over `distance` links
    record(wafer, f"shift{direction}", n * w, n * w * distance * mean_h, w, distance * max_h, links)


def record_reduce(wafer: Wafer, x, axes: tuple[int, ...], op: str, both: bool) -> None:
    """A reduction of x's per-PE values over the grid `axes` (`both`: and back to every PE)."""
    w = words_per_pe(x)
    n = wafer.num_pes
    sizes = {0: wafer.rows, 1: wafer.cols}
    # A chain reduction toward the centre of each reduced axis: half the axis in latency.
    lat = sum((sizes[a] - 1) / 2 * hops(wafer, a)[1] for a in axes)
    mult = 2 if both else 1  # allreduce = reduce + broadcast back
    # Toward the centre of each axis from both ends, and back out: w per link each way.
    links: dict[str, float] = {}
    for a in axes:
        for d in ("N", "S") if a == 0 else ("E", "W"):
            links[d] = links.get(d, 0.0) + w * mult
    record(wafer, op, n * w * mult, n * w * mult, 2 * w * mult, lat * mult, links)
