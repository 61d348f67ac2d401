"""A periodic stencil grid on the wafer's 2D mesh, which has no wrap-around link.

Contract. The fabric records a periodic exchange as on a torus (the wrapped value one link
away). Here each PE axis of a periodic grid is laid out as `wse_core.fabric.ledger.ring_layout`
chooses at the stencil's reach R (`layouts`): folded ("fold": each ring cut in two and laid
interleaved, one half reversed, as `wse_hpc.md` places its rings; a neighbour R away is
2 R physical hops) or in place ("wrap": the values that come round cross the axis back,
n - 1 hops) where that is shorter (an axis of fewer than 2 R + 1 PEs). Either way each
physical link carries the words of both logical directions. `traced(grid, fn, *fields)` is
the ledger's count of `fn` with every entry re-counted so (`ledger.on_mesh`), `on_mesh(grid,
step)` the published 25-point step's halo, and `periodic_assumption(grid)` the report's
line. A Dirichlet grid is left exactly as it was.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import jax
from wse_core.cost.perf import Phase, Phases
from wse_core.fabric import ledger
from wse_core.hw.traffic import Traffic

from wse_hpc.stencil.placement import StencilGrid

__all__ = ["layouts", "on_mesh", "periodic_assumption", "traced"]


def layouts(grid: StencilGrid) -> dict[int, str]:
    """How each PE axis of a periodic grid is laid on the mesh ("fold" or "wrap"); none for a
    Dirichlet grid."""
    if grid.boundary != "periodic":
        return {}
    return {a: ledger.ring_layout(grid.shape[a], grid.radius)[0] for a in (0, 1)}


def traced(grid: StencilGrid, fn: Callable, *fields) -> Traffic:
    """The traffic `fn(*fields)` records, each entry as the mesh moves it (hunt 70: a
    periodic exchange was priced as on a torus, the wrapped word one hop away)."""
    lay = layouts(grid)
    with grid.wafer.traffic.scope() as entries:
        # a fresh function: eval_shape caches traces by function, a cached one records nothing
        jax.eval_shape(lambda *a: fn(*a), *fields)
    moved = (ledger.on_mesh(grid.wafer, e, lay) for e in entries)
    return functools.reduce(lambda a, e: a + e, moved, Traffic())


def on_mesh(grid: StencilGrid, step: Phases) -> Phases:
    """The published 25-point step on a periodic grid: each block's halo words on both
    physical directions of an axis (`ledger.both_ways`), its chain the longer of the two
    axes' (2 R folded, n - 1 in place); a Dirichlet step as given."""
    if not layouts(grid):
        return step
    chain = max(ledger.ring_layout(grid.shape[a], grid.radius)[1] for a in (0, 1))

    def halo(p: Phase | Phases) -> Phase | Phases:
        if isinstance(p, Phases):
            return dataclasses.replace(p, parts=tuple(halo(q) for q in p.parts))
        if p.name != "halo_in":
            return p
        w = dataclasses.replace(p.work, links=ledger.both_ways(p.work.links), latency_hops=chain)
        return dataclasses.replace(p, work=w)

    return halo(step)  # type: ignore[return-value]


def periodic_assumption(grid: StencilGrid) -> dict[str, str]:
    """The report's line on how a periodic grid's axes sit on the mesh (none for Dirichlet)."""
    lay, r = layouts(grid), grid.radius
    if not lay:
        return {}
    fold = ledger.FOLD_HOPS * r

    def axis(a: int) -> str:
        n = grid.shape[a]
        if lay[a] == "fold":
            return (f"{'XY'[a]} ({n} PEs) folded, each ring cut in two and interleaved, one "
                    f"half reversed (md.fold's placement): a neighbour {r} away is {fold:g} "
                    "physical hops")  # fmt: skip
        return (f"{'XY'[a]} ({n} PEs) in place: the values that come round cross the axis "
                f"back, {n - 1} hops (shorter than a fold's {fold:g})")  # fmt: skip

    return {
        "periodic on the mesh": "the wafer's 2D mesh has no wrap-around link: "
        f"{axis(0)}; {axis(1)}; each link carries both directions' halo words (twice a "
        "Dirichlet grid's) and the word-hops double; the emulator computes the same values "
        "on the logical grid (wse_core.fabric.ledger.on_mesh)"
    }
