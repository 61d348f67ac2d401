"""What each fabric op records in the wafer's traffic ledger (no data moves here).

`wse_core.fabric` moves the data and calls these at trace time: `words_per_pe` (the 32-bit
wavelets of one per-PE value, whole: a message of fewer bytes still takes one), `hops`
(mean and max physical hops per logical link along a grid axis, detours around dead PEs
included), `chain_hops` (the physical hops of the slowest chain of
consecutive links along an axis), `flood_hops` (a flood's from a PE of each line out to
both ends), and `record_multicast`, `record_shift`, `record_reduce`,
`record` (one `Traffic` entry: words, word-hops, busiest-link words, latency hops); a
reduction's entry is `wse_core.cost.collectives.reduction`'s price, the one every kernel
and experiment pays for it.

A chain's latency is its slowest line's: the most physical hops, over the rows (or columns)
it runs along, summed over the links of its path there; a detour of e extra hops adds e once
to the chains that cross it (hunt 73: every chain was its length times the wafer's longest
link, so one detour of one extra hop anywhere doubled a whole-row broadcast's latency).

A periodic op is recorded as on a torus (a wrapped value one link away). The wafer is a 2D
mesh with no wrap-around link, so a kernel that prices a periodic exchange lays each
periodic axis out as `ring_layout` chooses and re-counts its entries with `on_mesh`: "fold"
(each ring cut in two and laid interleaved, one half reversed, as `wse_hpc.md` places its
rings: every logical link `FOLD_HOPS` physical hops) or "wrap" (in place: the values that
come round cross the whole axis back, n - 1 links). Either way each physical link carries
the words of both logical directions, and a chain is walked on the ring where the layout
puts it (`ring_hops`: the slowest pair of ring PEs up to its reach apart on any line, each
link between their places at its own hops; hunt 73: it was FOLD_HOPS, or n - 1, times the
axis' longest link, so a fold paid one detour twice).
"""

from __future__ import annotations

import dataclasses
import math
import re
import weakref
from collections.abc import Mapping

import jax
import numpy as np

from wse_core.cost import collectives
from wse_core.hw.traffic import Traffic
from wse_core.hw.wafer import Wafer

try:  # see `_examples`
    from jax._src.interpreters.batching import BatchTracer as _BatchTracer
except ImportError:  # pragma: no cover - a JAX that moved it: vmap counts one example
    _BatchTracer = ()  # type: ignore[misc, assignment]

__all__ = [
    "DIRECTIONS",
    "words_per_pe",
    "hops",
    "chain_hops",
    "flood_hops",
    "record",
    "record_multicast",
    "record_shift",
    "record_reduce",
    "FOLD_HOPS",
    "ring_layout",
    "ring_places",
    "ring_walk",
    "ring_hops",
    "both_ways",
    "on_mesh",
]

# direction -> (grid axis, sign): sign +1 means PE i receives from PE i - distance.
DIRECTIONS = {"N": (0, -1), "S": (0, +1), "E": (1, +1), "W": (1, -1)}


def words_per_pe(x, dtype=None, values: int = 1) -> float:
    """32-bit fabric words (wavelets) per PE of a message of `values` values of x's per-PE
    shape (of `dtype` when given: a result's width), times the examples a `jax.vmap` of the
    op carries (`_examples`, each its own message). A PE's message is whole wavelets: its
    bytes packed, rounded up (hunt 81: one fp16 was half a word, one bool a quarter,
    though the fabric moves nothing smaller than a wavelet)."""
    n = values * int(np.prod(x.shape[2:], dtype=np.int64))
    width = np.dtype(dtype or x.dtype).itemsize
    return float(collectives.wavelets(n, width)) * _examples(x)


def _examples(x) -> int:
    """The batch of a `jax.vmap`ped value (1 outside vmap): the op is traced once on one
    example's shape while every example moves (hunt 74: a vmap over 3 fields recorded
    one). JAX has no public way to ask, so this reads its batching tracer (`val`,
    `batch_dim`), each vmap level in turn, through a JVP's primal (vmap of grad); a JAX
    without them gives 1. JAX traces a cond's branches and a loop's body before it batches
    them, so there x is one example's: `fabric.count` runs them on the batched values
    (`counting`, hunt 75); a trace outside it records one example there."""
    n = 1
    while True:
        if isinstance(x, _BatchTracer):
            dim = getattr(x, "batch_dim", None)
            n *= int(x.val.shape[dim]) if isinstance(dim, int) else 1
            x = x.val
        elif isinstance(x, jax.core.Tracer) and hasattr(x, "primal"):
            x = x.primal
        else:
            return n


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


# Per wafer (every traced op asks; a full wafer's running sums take milliseconds, and one
# MD step traces 552 ops): each axis' running detour sums, and the chains asked of them.
_RUNS: weakref.WeakKeyDictionary[Wafer, dict[tuple[int, int, int], np.ndarray | None]] = (
    weakref.WeakKeyDictionary()
)
_WINDOWS: weakref.WeakKeyDictionary[Wafer, dict[tuple[int, int, int, int], int]] = (
    weakref.WeakKeyDictionary()
)
_RINGS: weakref.WeakKeyDictionary[Wafer, dict[tuple[int, int, int, str, int], float]] = (
    weakref.WeakKeyDictionary()
)


def _detour_runs(wafer: Wafer, axis: int, rect: tuple[int, int] | None = None) -> np.ndarray | None:
    """Running sums of each line's detour hops (physical hops beyond one a logical link)
    along `axis` on this grid (on the rows x cols PEs at (0, 0) `rect`), (lines, links + 1)
    int64, a line a row (axis 1) or column (axis 0), entry j the line's first j links';
    None where no link has a detour."""
    rows, cols = rect or (wafer.rows, wafer.cols)
    kept = _RUNS.setdefault(wafer, {})
    key = (rows, cols, axis)
    if key not in kept:
        links = wafer.remap.link_hops(axis)
        if axis == 1:
            links = links[:rows, : cols - 1]
        else:
            links = links[: rows - 1, :cols].T
        run = None
        if links.size and (any(links.strides) or links.flat[0] != 1):  # identity: no pass
            extra = links.astype(np.int64) - 1
            if extra.any():
                run = np.zeros((extra.shape[0], extra.shape[1] + 1), np.int64)
                np.cumsum(extra, axis=1, out=run[:, 1:])
        kept[key] = run
    return kept[key]


def chain_hops(wafer: Wafer, axis: int, span: int) -> float:
    """Physical hops of the slowest chain of `span` consecutive logical links along `axis`
    (0: down a column, 1: along a row) on this grid: `span` plus the most detour hops on any
    `span` consecutive links of any line (a whole line's when `span` reaches past it);
    `span` without a detour."""
    run = _detour_runs(wafer, axis)
    if run is None or span <= 0:
        return float(span)
    kept = _WINDOWS.setdefault(wafer, {})
    key = (wafer.rows, wafer.cols, axis, span)
    if key not in kept:
        k = min(span, run.shape[1] - 1)
        kept[key] = int((run[:, k:] - run[:, :-k]).max())
    return float(span + kept[key])


def flood_hops(wafer: Wafer, axis: int, source: int) -> float:
    """Physical hops of a flood from PE `source` of every line along `axis` out to both ends
    (the routers forward each wavelet both ways at once): the slowest line's longer side,
    max(source, n - 1 - source) links plus that side's detours (either side may be the
    slower where detours lie on the shorter one)."""
    n = (wafer.rows, wafer.cols)[axis]
    run = _detour_runs(wafer, axis)
    if run is None:
        return float(max(source, n - 1 - source))
    before = source + run[:, source]
    after = (n - 1 - source) + run[:, -1] - run[:, source]
    return float(np.maximum(before, after).max())


def record_multicast(wafer: Wafer, direction: str, w: float, k: int) -> None:
    """Each PE's `w` words to the next `k` PEs toward `direction`; nothing along an axis of
    one PE (no link there: hunt 82)."""
    axis = DIRECTIONS[direction][0]
    if (wafer.rows, wafer.cols)[axis] == 1:
        return
    mean_h = hops(wafer, axis)[0]
    n = wafer.num_pes
    # Each PE forwards k values (its own and k - 1 passing through) on one link; the last
    # arrives k links away.
    links = {direction: k * w}  # data travels toward `direction`
    lat = chain_hops(wafer, axis, k)
    record(wafer, f"multicast{direction}", n * w, n * w * k * mean_h, k * w, lat, links)


def record_shift(wafer: Wafer, direction: str, w: float, distance: int, *, boundary: str) -> None:
    """A shift of `w` words a PE by `distance` toward `direction`. Only PEs that send and
    links that exist carry traffic (hunt 82: a zero-boundary shift across an axis of one PE
    moved nothing and was priced a hop and a link word; the last lines sent nothing and
    were counted): with the zero boundary the `distance` lines nearest the edge it moves
    toward send nothing, so (n_axis - distance) lines send and an axis no longer than
    `distance` records nothing; a periodic shift (a rotation, `distance` < n_axis) sends
    from every PE, as on a torus (`on_mesh` lays it on the mesh)."""
    axis = DIRECTIONS[direction][0]
    size = (wafer.rows, wafer.cols)[axis]
    senders = wafer.num_pes if boundary == "periodic" else (size - distance) * wafer.num_pes // size
    if senders <= 0:
        return  # nothing leaves a PE: no entry, no latency, no link word
    mean_h = hops(wafer, axis)[0]
    links = {direction: w * distance}  # a value relayed over `distance` links
    lat = chain_hops(wafer, axis, distance)
    word_hops = senders * w * distance * mean_h
    record(wafer, f"shift{direction}", senders * w, word_hops, w, lat, links)


def record_reduce(wafer: Wafer, x, axes: tuple[int, ...], op: str, both: bool, dtype) -> None:
    """A reduction of x's per-PE values over the grid `axes` (`both`: and back to every PE),
    carried as `dtype`, the result's (a sum of int8 or bool is int32, as `jnp.sum` gives it:
    the words that result needs; hunt 74 priced the input's width).

    Its price is the one every reduction of the stack pays,
    `wse_core.cost.collectives.reduction` at the constants the model prices with: the chosen
    algorithm's contention on the ramp and the reduced axes' links, its chain with the
    relays, the dead PEs' detours on the slowest path, the word-hops it moves. Hunt 81: the
    entry took the tree's depth but 2 w words a link, a chain's contention (2,274 cycles on
    the full WSE-3 at 16 words where the same op's `fabric-collectives` row priced 2,592),
    and summed each axis' worst detours (194 hops where the slowest path has 192)."""
    from wse_core.cost.perf import PerfModel  # it sits above the fabric

    w = words_per_pe(x, dtype)
    n = wafer.num_pes
    mult = 2 if both else 1  # allreduce = reduce + broadcast back
    rates = PerfModel(wafer.spec).rates
    priced = collectives.reduction(
        rates, wafer.remap, wafer.rows, wafer.cols, w, axes=axes, back=both
    )
    work = priced.work
    entry = Traffic(
        op,
        n * w * mult,
        priced.word_hops,
        2 * w * mult if priced.links else 0.0,  # each PE sends w toward the centre, w back
        work.latency_hops,
        1,
        priced.links,
        work.relay_stages,
    )
    wafer.traffic.record(entry)


# -- periodic axes on the mesh (module docstring) --------------------------------------------
FOLD_HOPS = 2.0  # physical hops per logical link of a folded ring (neighbours 1-2 PEs apart)


def ring_layout(n: int, reach: int) -> tuple[str, float]:
    """(layout, hops of the longest chain) of a periodic axis of `n` PEs whose exchanges
    reach `reach` PEs: "fold", FOLD_HOPS x reach, or "wrap", the value that comes round
    crossing n - 1 links; the shorter (the fold on a tie: no axis-long chain)."""
    fold = FOLD_HOPS * reach
    return ("wrap", float(n - 1)) if n - 1 < fold else ("fold", fold)


def ring_places(n: int, layout: str) -> np.ndarray:
    """Where each PE of a periodic axis' ring of `n` sits along its mesh line: in place
    ("wrap"), or "fold": the ring cut in two and laid interleaved, the second half reversed
    (ring PE i at 2 i in the first half, its ceil(n / 2) PEs, at 2 (n - 1 - i) + 1 after)."""
    i = np.arange(n)
    return i if layout == "wrap" else np.where(i < -(-n // 2), 2 * i, 2 * (n - 1 - i) + 1)


def ring_walk(runs: np.ndarray | None, layout: str, reach: int, n: int) -> float:
    """Physical hops of the slowest chain of a periodic exchange reaching `reach` ring PEs
    (each PE from those 1 .. reach away) on a ring of `n` PEs laid out as `layout`
    (`ring_places`): over every line and pair, the links between the two places, each at its
    own hops. `runs`: each line's running detour sums, (lines, n) (`_detour_runs`); None
    without detours. In place the pair that wraps crosses every link of its line, so it is
    the slowest at any reach."""
    here = ring_places(n, layout)
    best = 0.0
    for d in range(1, min(reach, n - 1, 1 if layout == "wrap" else reach) + 1):
        there = here[(np.arange(n) + d) % n]
        lo, hi = np.minimum(here, there), np.maximum(here, there)
        chain = hi - lo if runs is None else hi - lo + runs[:, hi] - runs[:, lo]
        best = max(best, float(chain.max(initial=0)))
    return best


def ring_hops(
    wafer: Wafer, axis: int, layout: str, reach: int, rect: tuple[int, int] | None = None
) -> float:
    """Physical hops of the slowest chain of a periodic exchange reaching `reach` ring PEs
    along grid `axis` laid out as `layout` (`ring_walk`), on this grid's lines (on the rows x
    cols PEs at (0, 0) `rect`), detours included: folded at a reach of one, the slowest pair
    of ring-neighbour links (2, or 1 at the ring's ends and turn); in place, the slowest
    line's whole length."""
    rows, cols = rect or (wafer.rows, wafer.cols)
    kept = _RINGS.setdefault(wafer, {})
    key = (rows, cols, axis, layout, reach)
    if key not in kept:
        runs = _detour_runs(wafer, axis, (rows, cols))
        kept[key] = ring_walk(runs, layout, reach, (rows, cols)[axis])
    return kept[key]


def _span(wafer: Wafer, axis: int, chain: float) -> int:
    """The links of a chain that `chain_hops` priced at `chain` hops along `axis`: the
    least span reaching it (`chain_hops` grows by at least one hop a link)."""
    lo, hi = 0, max(0, math.ceil(chain))
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if chain_hops(wafer, axis, mid) < chain else (lo, mid)
    return lo


def both_ways(links: Mapping[str, float]) -> dict[str, float]:
    """Link words of a periodic exchange on the mesh: each axis' two physical directions
    carry the words of both logical ones (E = W = E + W; "ramp" as it was)."""
    out = dict(links)
    for a, b in (("E", "W"), ("N", "S")):
        if links.get(a, 0.0) or links.get(b, 0.0):
            out[a] = out[b] = links.get(a, 0.0) + links.get(b, 0.0)
    return out


def on_mesh(wafer: Wafer, entry: Traffic, layouts: Mapping[int, str]) -> Traffic:
    """One ledger entry of a periodic shift or multicast as the mesh moves it, grid axis
    `a` laid out as `layouts[a]` says (`ring_layout`): its words on both physical directions
    (`both_ways`), twice the word-hops (every link carries both directions' words), and the
    chain walked on the ring as laid out, detours included (`ring_hops` at the entry's reach,
    the links its recorded chain spans): folded, ring neighbours 1-2 links apart; in place,
    the slowest line end to end. Other entries (reductions, broadcasts) and axes not in
    `layouts` come back unchanged."""
    op = re.fullmatch(r"(?:shift|multicast)([NSEW])", entry.op)
    axis = DIRECTIONS[op[1]][0] if op else None
    if axis is None or axis not in layouts:
        return entry
    reach = _span(wafer, axis, entry.latency_hops)
    chain = ring_hops(wafer, axis, layouts[axis], reach)
    return dataclasses.replace(
        entry, word_hops=2 * entry.word_hops, latency_hops=chain, links=both_ways(entry.links)
    )
