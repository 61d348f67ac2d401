"""Reduce, broadcast and allreduce on the wafer, priced as Luczynski et al. model them.

Contract. Each function returns the `wse_core.cost.perf.Work` of one collective over `p` PEs in a
line (or an `rows x cols` rectangle) of `words` 32-bit words per PE, counted in the three
quantities of Luczynski et al., "Near-Optimal Wafer-Scale Reduce" (HPDC 2024,
arXiv:2404.15888), whose model T = max(C, E/N + L) + (2 T_R + 1) D they validated on a CS-2
within 4%:

- C, contention: the most wavelets one PE's core takes off its ramp -> `links["ramp"]`;
- L, distance: router hops of the longest path -> `latency_hops`;
- D, depth: dependent relay stages through cores -> `relay_stages` (2 T_R + 1 cycles each).

`PerfModel` prices them as max(C, ...) + L * hop_latency_cycles + D * (2 T_R + 1): L is
added outside the max (the E/N term, the mean link load, is left out: on a line the busiest
link carries C words at most). Why not their max(C, E/N + L): a collective is a `Work`
priced by the one algebra every phase is priced by, streaming bounds in a max and the
latency after them (`wse_core.cost.pricing`), with no overlap of a stream with its own
pipeline fill; against their form this adds at most min(C, L), an upper bound: C = 352
cycles of a 16-word allreduce on the full WSE-3 (about 14% of it), 22 of a scalar's (about
1%). No row of the calibration set tells the two apart (REFERENCES.md gives the form and
its constants only), so the one algebra is kept (hunt 82 L4). The combining adds stream as
the wavelets arrive (the C term) and their issue overlaps the wait for data, so a
collective counts no `Op`s.

Algorithms (their Sec. 4-5, closed forms per the paper; p PEs, B words):
    star       C = B (p - 1)          L = p - 1   D = 1
    chain      C = B                  L = p - 1   D = p - 1
    tree       C = B ceil(log2 p)     L = p - 1   D = ceil(log2 p)
    two_phase  C = 2 B                L = p - 1   D = 2 ceil(sqrt p) - 2
    broadcast  C = B                  L = p - 1   D = 1   (flooding: multicast is free)
`reduce_line(..., algorithm="best")` takes the fastest of the four at this spec's constants
(`best_algorithm`; their Auto-Gen trees do at least as well: an upper bound on a tuned
library). What each moves, words x links (`line_word_hops`): star B p (p - 1) / 2, chain
B (p - 1), tree B (p / 2) log2 p (each level's senders over 2^(k-1) links), two_phase
B (p - g) + B s (g - 1) (s = ceil(sqrt p) PEs a group, g = ceil(p / s) groups). The 2D
allreduce reduces along rows to the centre column, then along it to the centre PE (each
half-line toward the centre at once, and one relay to join the halves), then floods the
result back from the centre: for a scalar this is about the wafer's diameter plus the
relays, the shape of Rocki et al.'s "about 10% greater than the diameter".

The centre of a line of p PEs is PE (p - 1) // 2, and the longest chain into it, or out of
it, is p // 2 links (`centre_hops`, from the far end): 1 for 2 PEs, 2 for 4 (PE 3 -> 2 -> 1),
2 for 5. Reduce and flood both walk it. Hunt 76: the join of an even line's halves was priced at 0
hops, one short.

One pricer (hunt 81): `reduction` is every grid reduction's price, the traced
`fabric.reduce` / `fabric.allreduce` (`wse_core.fabric.ledger.record_reduce` records its
work) and every kernel's and experiment's allreduce alike: C on "ramp" and on the reduced
axes' links, L with the dead PEs' detours on the slowest path (`allreduce_detour_hops`),
D, and the word-hops the chosen algorithm moves. Hunt 81: the traced allreduce paid the
tree's depth with a chain's contention (2 B words a link, not B ceil(log2 p)), 2,274 cycles
on the full WSE-3 at 16 words where the `fabric-collectives` row priced 2,592.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from wse_core.cost.work import Op, Work
from wse_core.hw.defects import Remap
from wse_core.hw.spec import WaferSpec

__all__ = [
    "ALGORITHMS",
    "Reduction",
    "line_work",
    "line_word_hops",
    "best_algorithm",
    "reduce_line",
    "broadcast_line",
    "allreduce_2d",
    "reduce_2d",
    "flood_2d",
    "centre_hops",
    "reduce_to_centre",
    "allreduce_detour_hops",
    "extra_link_hops",
    "reduction",
    "WAVELET_BYTES",
    "wavelets",
    "two_tree_allreduce",
]

# bytes of one wavelet, the fabric's unit: "32-bit messages, called wavelets" (Cerebras SDK
# documentation); REFERENCES.md: one 32-bit wavelet per link per direction per cycle
WAVELET_BYTES = 4


def wavelets(values: float, bytes_per_value: float) -> int:
    """Whole wavelets of one message of `values` values of `bytes_per_value` bytes each: its
    bytes packed, rounded up, as the fabric carries it (the ledger's `words_per_pe` counts
    a traced message so since hunt 81; hunt 82, jobs18 L3: the systems pricers counted 25
    fp16 values as 12.5 words)."""
    return math.ceil(values * bytes_per_value / WAVELET_BYTES)


def _chain(p: int) -> tuple[int, int]:
    """(root index, the longer side's length) of a line of p PEs reduced to its middle."""
    root = p // 2
    return root, max(root, p - 1 - root)


def _sides(p: int) -> int:
    """The root's receives: one per side that has PEs."""
    root = p // 2
    return int(root > 0) + int(root < p - 1)


def two_tree_allreduce(
    a: int, groups: int, nt: int, bytes_per_value: int, dtype: str
) -> tuple[tuple[str, Work], ...]:
    """WaferLLM's `two_tree_allreduce` of `nt` values of `dtype` over a line of `a` PEs in
    `groups` groups, on its root (`wse_systems.meshgemv` states it; the calibration prices
    its measured MeshGEMV rows with it, `wse_core.cost.calibration`): the chain to each
    group's root (reduce_group), the chain over the group roots (reduce_groups) and the
    root's multicast both ways (broadcast), each as its ops, ramp wavelets, hops and relay
    stages. Each chain starts with its far end's send, on the critical path: the group's end
    PE's `@fmovh(mv_*_send, own)` (comm_pe.csl `two_tree_allreduce_y`, phase 1) and the far
    group root's `@fmovh(*_reduce_send, own)` (phase 2), one move DSD of `nt` to the fabric
    each (no SRAM write) beside the root's adds (issue 41: they were not counted)."""
    words = wavelets(nt, bytes_per_value)  # whole ones
    m = a // groups
    r1, h1 = _chain(m)
    r2, h2 = _chain(groups)
    root = r2 * m + r1
    add = lambda k: (Op("add", dtype, nt, count=k, fabric_in=True),) if k and nt else ()  # noqa: E731
    send = lambda k: (Op("move", dtype, nt, mem_writes=0.0),) if k and nt else ()  # noqa: E731
    first = Work(
        ops=send(h1) + add(_sides(m)),
        links={"ramp": _sides(m) * words},
        latency_hops=h1,
        relay_stages=h1,
    )
    second = Work(
        ops=send(h2) + add(_sides(groups)),
        links={"ramp": _sides(groups) * words},
        latency_hops=h2 * m,
        relay_stages=h2,
    )
    bcast = Work(
        ops=(Op("move", dtype, nt, mem_writes=0.0),) if a > 1 and nt else (),
        links={"ramp": words} if a > 1 else {},
        latency_hops=float(max(root, a - 1 - root)),
        relay_stages=1.0 if a > 1 else 0.0,
    )
    return (("reduce_group", first), ("reduce_groups", second), ("broadcast", bcast))


ALGORITHMS = ("star", "chain", "tree", "two_phase")


def _log2(p: int) -> int:
    return max(0, math.ceil(math.log2(p))) if p > 1 else 0


def line_work(algorithm: str, p: int, words: float) -> Work:
    """One reduce of `words` per PE over `p` PEs in a line to its end, by `algorithm`."""
    if p <= 1 or words <= 0:
        return Work()
    b, hops = float(words), float(p - 1)
    if algorithm == "star":
        c, d = b * (p - 1), 1.0
    elif algorithm == "chain":
        c, d = b, float(p - 1)
    elif algorithm == "tree":
        c, d = b * _log2(p), float(_log2(p))
    elif algorithm == "two_phase":
        c, d = 2.0 * b, float(2 * math.ceil(math.sqrt(p)) - 2)
    else:
        raise ValueError(f"unknown reduce algorithm {algorithm!r}; known: {ALGORITHMS}")
    return Work(links={"ramp": c}, latency_hops=hops, relay_stages=d)


def _cycles(spec: WaferSpec, work: Work) -> float:
    # Luczynski et al.'s terms at the spec's constants (no calibration needed: a collective
    # counts no DSD instructions).
    ramp = work.links.get("ramp", 0.0) * 4.0 / spec.link_bytes_per_cycle
    relay = 2.0 * spec.ramp_latency_cycles + 1.0
    return ramp + work.latency_hops * spec.hop_latency_cycles + work.relay_stages * relay


def best_algorithm(spec: WaferSpec, p: int, words: float) -> str:
    """The fastest of `ALGORITHMS` for a line reduce of `p` PEs at `spec`'s constants (the
    first listed on a tie)."""
    return min(ALGORITHMS, key=lambda a: _cycles(spec, line_work(a, p, words)))


def reduce_line(spec: WaferSpec, p: int, words: float, algorithm: str = "best") -> Work:
    """A reduce over `p` PEs in a line; "best": the fastest algorithm at `spec`'s constants."""
    if algorithm == "best":
        algorithm = best_algorithm(spec, p, words)
    return line_work(algorithm, p, words)


def line_word_hops(algorithm: str, p: int, words: float) -> float:
    """Words x links one reduce of `words` per PE over `p` PEs in a line to its end (PE 0)
    moves, by `algorithm` (the module docstring's table): star, every PE straight to PE 0;
    chain, one link each; tree, at level k (1 .. ceil(log2 p)) each PE i = 2^(k-1) mod 2^k
    over 2^(k-1) links; two_phase, a chain in each group of ceil(sqrt p) PEs to its first,
    then the groups' firsts along the line."""
    if p <= 1 or words <= 0:
        return 0.0
    if algorithm == "star":
        links = p * (p - 1) // 2
    elif algorithm == "chain":
        links = p - 1
    elif algorithm == "tree":
        links = 0
        for k in range(1, _log2(p) + 1):
            step = 2 ** (k - 1)
            senders = (p - 1 - step) // (2 * step) + 1  # i = step, 3 step, 5 step, ... < p
            links += step * senders
    elif algorithm == "two_phase":
        s = math.ceil(math.sqrt(p))
        g = math.ceil(p / s)
        links = (p - g) + s * (g - 1)
    else:
        raise ValueError(f"unknown reduce algorithm {algorithm!r}; known: {ALGORITHMS}")
    return float(words) * links


def broadcast_line(p: int, words: float) -> Work:
    """Flooding broadcast from one end of a line of `p` PEs (the router multicasts)."""
    if p <= 1 or words <= 0:
        return Work()
    return Work(links={"ramp": float(words)}, latency_hops=float(p - 1), relay_stages=1.0)


def centre_hops(p: int) -> int:
    """Links of the longest chain between a line of `p` PEs and its centre PE, (p - 1) // 2:
    from the far end, p // 2 (0 for one PE)."""
    return max(0, p // 2)


def reduce_to_centre(spec: WaferSpec, p: int, words: float, algorithm: str = "best") -> Work:
    """A reduce over a line of `p` PEs into its centre PE, (p - 1) // 2: both halves of
    ceil(p / 2) PEs at once, each to its end next to the centre, then one relay to join
    them. With p odd the halves share the centre PE; with p even the far half ends one link
    past it, so the join adds that hop: `centre_hops(p)` in all."""
    if p <= 1 or words <= 0:
        return Work()
    half_pes = math.ceil(p / 2)
    half = reduce_line(spec, half_pes, words, algorithm)
    join = float(centre_hops(p) - (half_pes - 1))  # 1 for p even, 0 for p odd
    return half + Work(links={"ramp": float(words)}, latency_hops=join, relay_stages=1.0)


def reduce_2d(spec: WaferSpec, rows: int, cols: int, words: float, algorithm: str = "best") -> Work:
    """A reduce of `words` per PE over a `rows x cols` rectangle into its centre PE: every
    row to the centre column, then that column to the centre."""
    along_rows = reduce_to_centre(spec, cols, words, algorithm)
    return along_rows + reduce_to_centre(spec, rows, words, algorithm)


def flood_2d(rows: int, cols: int, words: float) -> Work:
    """The centre PE's value flooded to every PE of a `rows x cols` rectangle (down the
    centre column, then along each row: the routers multicast, one relay; none on one PE)."""
    return Work(
        links={"ramp": float(words)},
        latency_hops=float(centre_hops(rows) + centre_hops(cols)),
        relay_stages=1.0 if rows * cols > 1 else 0.0,
    )


def allreduce_2d(
    spec: WaferSpec, rows: int, cols: int, words: float, algorithm: str = "best"
) -> Work:
    """Allreduce of `words` per PE over a `rows x cols` rectangle: rows to the centre column,
    the centre column to the centre PE (`reduce_2d`), then a flood back to every PE from the
    centre (`flood_2d`)."""
    return reduce_2d(spec, rows, cols, words, algorithm) + flood_2d(rows, cols, words)


def _halves(line: np.ndarray, centre: int) -> tuple[np.ndarray, np.ndarray]:
    """Extra hops from each end of lines of links (last axis) to PE `centre`."""
    return line[..., :centre].sum(axis=-1), line[..., centre:].sum(axis=-1)


def extra_link_hops(remap: Remap, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
    """Extra physical hops of each logical link of the rows x cols PEs at (0, 0): N-S
    (rows - 1, cols) and E-W (rows, cols - 1); 0 without detour."""
    ns = remap.link_hops(0)[: rows - 1, :cols] - 1
    ew = remap.link_hops(1)[:rows, : cols - 1] - 1
    return ns, ew


def allreduce_detour_hops(
    remap: Remap, rows: int, cols: int, axes: tuple[int, ...] = (0, 1), back: bool = True
) -> float:
    """Extra hops that dead PEs' detours (`remap.link_hops`) add to the slowest path of a
    reduction over the rows x cols PEs at (0, 0) along grid `axes` (`back`: and flooded
    back, an allreduce). Over both axes (`allreduce_2d`): rows to the centre column (the
    slowest row half), the column to the centre (its slower half), the flood back (the
    centre column to a row, then that row's farther half). Along one axis every line at
    once: the slowest line's slower half, again on the way back. 0 without detours."""
    mr, mc = math.ceil(rows / 2) - 1, math.ceil(cols / 2) - 1
    ns, ew = extra_link_hops(remap, rows, cols)
    row_half = np.maximum(*_halves(ew, mc)) if cols > 1 else np.zeros(rows)
    if tuple(sorted(axes)) == (1,):
        return (2.0 if back else 1.0) * float(row_half.max(initial=0))
    if tuple(sorted(axes)) == (0,):
        col_half = np.maximum(*_halves(ns.T, mr)) if rows > 1 else np.zeros(cols)
        return (2.0 if back else 1.0) * float(col_half.max(initial=0))
    col = ns[:, mc] if rows > 1 else np.zeros(0)
    reduce = float(row_half.max()) + float(max(_halves(col, mr)))
    if not back:
        return reduce
    up = np.concatenate([np.cumsum(col[:mr][::-1])[::-1], [0.0], np.cumsum(col[mr:])])
    return reduce + float((up + row_half).max())


class Reduction(NamedTuple):
    """One grid reduction's price (`reduction`): its `work` (C on "ramp", L with the
    detours, D), the busiest PE's words per direction it moves (`links`: "ramp" and the
    reduced axes' links, none above C, so pricing them with `work` changes nothing) and
    the `word_hops` it moves (words x physical hops, detours included at each axis' mean
    link)."""

    work: Work
    links: dict[str, float]
    word_hops: float


def _centre_word_hops(spec: WaferSpec, p: int, words: float) -> float:
    """Words x links of `reduce_to_centre` over `p` PEs: both halves by the best algorithm,
    then the join (one link for p even, none for p odd)."""
    if p <= 1 or words <= 0:
        return 0.0
    half = math.ceil(p / 2)
    join = centre_hops(p) - (half - 1)
    return 2.0 * line_word_hops(best_algorithm(spec, half, words), half, words) + words * join


def reduction(
    spec: WaferSpec,
    remap: Remap | None,
    rows: int,
    cols: int,
    words: float,
    *,
    axes: tuple[int, ...] = (0, 1),
    back: bool = True,
) -> Reduction:
    """The one price of a reduction of `words` per PE over the rows x cols PEs at (0, 0)
    along grid `axes` (0: down the columns, 1: along the rows; both: to the centre PE) and,
    `back`, flooded back to every PE (an allreduce), at `spec`'s constants (pass
    `PerfModel.rates`): `reduce_2d` (+ `flood_2d`) over the reduced axes, the detours of
    `remap` on the slowest path added (`allreduce_detour_hops`; None: no dead PEs). Its
    `links`: each reduced axis' two directions carry a half-line's contention and the join
    (the busiest link of a line reduce carries what its end core takes off the ramp,
    B ceil(log2 p) for a tree), plus the flood's B."""
    r = rows if 0 in axes else 1
    c = cols if 1 in axes else 1
    work = reduce_2d(spec, r, c, words)
    if back:
        work = work + flood_2d(r, c, words)
    if words <= 0 or r * c <= 1:
        return Reduction(Work(), {}, 0.0)
    mean_ns = mean_ew = 1.0
    detour = 0.0
    if remap is not None:
        ns, ew = extra_link_hops(remap, rows, cols)
        mean_ns += float(ns.mean()) if ns.size else 0.0
        mean_ew += float(ew.mean()) if ew.size else 0.0
        detour = allreduce_detour_hops(remap, rows, cols, axes, back)
    links = {"ramp": work.links.get("ramp", 0.0)}  # first: a tie names the ramp
    flood = float(words) if back else 0.0
    for n, pair in ((c, ("E", "W")), (r, ("N", "S"))):
        if n > 1:
            along = reduce_to_centre(spec, n, words).links.get("ramp", 0.0) + flood
            links.update(dict.fromkeys(pair, along))
    # word-hops: every row (or every column, one axis alone) to its centre; the centre
    # column (with both axes) to the centre; the flood over every link of the rectangle once
    lines = rows if 1 in axes else 0
    hops_ew = lines * _centre_word_hops(spec, c, words)
    hops_ns = (1 if 1 in axes else cols) * _centre_word_hops(spec, r, words) if 0 in axes else 0.0
    if back:
        hops_ew += float(words) * (rows if 1 in axes else 0) * (c - 1)
        hops_ns += float(words) * ((1 if 1 in axes else cols) if 0 in axes else 0) * (r - 1)
    work = Work(
        links={"ramp": links["ramp"]},
        latency_hops=work.latency_hops + detour,
        relay_stages=work.relay_stages,
    )
    return Reduction(work, links, hops_ew * mean_ew + hops_ns * mean_ns)
