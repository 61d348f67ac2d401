"""Hunt 73: MD's fold placement walks each chain on its folded ring, a detour paid once.

Broken before: `fold_traffic.fold` priced every recorded chain at FOLD_HOPS times its
ledger latency, a chain of k logical links twice the slowest run of k links, so a lone
detour on it was paid twice; on the fold the chain is the slowest run between ring PEs up to
k apart, up to 2k links, each at its own hops (`fold_walk`, through `ledger.on_mesh`).

Oracle: a brute-force walk built here from the fold's description (each ring cut in two, the
second half reversed, the two laid alternately): every line, every ring PE, every reach up
to the plan's, the link hops between the two places summed in Python (`Remap.link_hops`);
opposite directions of one op run at once. Without dead PEs nothing moves: the old rule's
figure exactly.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from wse_core import DefectError, preset
from wse_core.hw.wafer import build_wafer
from wse_hpc.md.eam import EamPlan, eam, geometry
from wse_hpc.md.fold_traffic import chain, fold, fold_walk
from wse_hpc.md.mapping import NFIELDS
from wse_hpc.md.neighbours import neighbour_fns
from wse_hpc.md.perf import step_phases
from wse_hpc.md.state import Atoms
from wse_hpc.md.zhou04 import zhou04

POT = zhou04(["Cu"], knots=100)
# a +-2 x +-2 window, one candidate per row offset: multicasts E / W over 2 PEs, two marches
PLAN = EamPlan(2, 2, (12.0, 12.0, 12.0), "float32", 1.0, (1, 1, 1, 1, 1, 8), 0)
SMALL = preset("small")


def _wafer(seed: int | None):
    kw = {} if seed is None else {"defect_seed": seed, "defect_rate": 0.02}
    try:
        return build_wafer(SMALL, grid=(9, 13), mesh_shape=(1, 1), devices=jax.devices()[:1],
                           **kw)  # fmt: skip
    except DefectError:
        return None


def _parts(w) -> dict[str, list]:
    """The ledger entries of a step's parts, traced abstractly as `perf.fabric_counts` does."""
    pr, pc = w.padded_shape
    state = jax.eval_shape(Atoms.of, jax.ShapeDtypeStruct((pr, pc, NFIELDS), jnp.float32))
    geo = jax.eval_shape(lambda: geometry(w))
    lists = neighbour_fns(w, POT, PLAN)
    nbrs = jax.eval_shape(lists.build_fn, state, geo)[0]

    def traced(fn, *args):
        with w.traffic.scope() as entries:
            jax.eval_shape(fn, *args)
        return list(entries)

    forces = traced(lists.forces_fn, state, geo, nbrs)
    half = len(forces) // 2
    sort = traced(eam(w, POT, PLAN).sort_fn, state, geo)
    return {"density": forces[:half], "force": forces[half:], "swaps": sort}


def _places(n: int) -> dict[int, int]:
    """Ring PE -> place on its line: the first ceil(n / 2) PEs, then the rest reversed, laid
    alternately."""
    first, second = list(range(-(-n // 2))), list(range(-(-n // 2), n))[::-1]
    order = [p for pair in zip(first, second + [None], strict=False) for p in pair if p is not None]
    return {pe: place for place, pe in enumerate(order)}


def _lines(w, axis: int) -> list[list[int]]:
    """Each row's (axis 1) or column's (axis 0) physical hops per logical link."""
    h = w.remap.link_hops(axis)
    if axis == 1:
        return [[int(h[r, c]) for c in range(w.cols - 1)] for r in range(w.rows)]
    return [[int(h[r, c]) for r in range(w.rows - 1)] for c in range(w.cols)]


def _walk(lines: list[list[int]], reach: int) -> int:
    """The most physical hops between two ring PEs 1 .. reach apart on any folded line."""
    n = len(lines[0]) + 1
    place, best = _places(n), 0
    for line in lines:
        for i in range(n):
            for d in range(1, reach + 1):
                a, b = sorted((place[i], place[(i + d) % n]))
                best = max(best, sum(line[a:b]))
    return best


def _oracle(w, entries) -> float:
    """A part's latency on the fold: each op's chain walked at its reach (a multicast E / W
    the plan's k_cols, every shift one PE), a pair of opposite directions at the larger."""
    axis_of = {"E": 1, "W": 1, "N": 0, "S": 0}
    total, i = 0, 0
    while i < len(entries):
        op = entries[i].op
        reach = PLAN.k_cols if op.startswith("multicast") else 1
        hops = _walk(_lines(w, axis_of[op[-1]]), reach)
        nxt = entries[i + 1].op if i + 1 < len(entries) else ""
        paired = nxt[:-1] == op[:-1] and {nxt[-1], op[-1]} in ({"E", "W"}, {"N", "S"})
        total, i = total + hops, i + (2 if paired else 1)  # both directions' lines alike
    return float(total)


def test_the_fold_walks_each_chain_a_loop_finds():
    wafers = [w for w in map(_wafer, range(8)) if w is not None]
    assert len(wafers) >= 5
    paid_once = 0
    for w in wafers:
        for name, entries in _parts(w).items():
            ops = {e.op for e in entries}
            assert ops <= {"multicastE", "multicastW", "shiftN", "shiftS", "shiftE", "shiftW"}
            old, new = fold(chain(entries)), fold_walk(w, entries)
            assert new.latency_hops == _oracle(w, entries), name
            # words and word-hops as before: only the chain moves
            assert (new.links, new.word_hops, new.words) == (old.links, old.word_hops, old.words)
            assert new.latency_hops <= old.latency_hops
            paid_once += new.latency_hops < old.latency_hops
    assert paid_once  # some draw has a lone detour, paid twice by the old rule


def _slowest_run(lines: list[list[int]], k: int) -> int:
    """The most physical hops on k consecutive links of any line (the recorded chain)."""
    return max(sum(line[i : i + k]) for line in lines for i in range(len(line) - k + 1))


def test_seed_0_pays_each_detour_once():
    """The old rule, by loop: twice the slowest run of k links, per pair of directions."""
    w = _wafer(0)
    for entries in _parts(w).values():
        old = 0
        for e in entries[::2]:  # each part's entries come in opposite pairs
            k = PLAN.k_cols if e.op.startswith("multicast") else 1
            old += 2 * _slowest_run(_lines(w, 1 if e.op[-1] in "EW" else 0), k)
        assert fold(chain(entries)).latency_hops == old  # the rule this hunt replaces
        assert fold_walk(w, entries).latency_hops == _oracle(w, entries) < old


def test_without_dead_pes_nothing_moves():
    w = _wafer(None)
    for entries in _parts(w).values():
        assert fold_walk(w, entries) == fold(chain(entries))
        assert fold_walk(w, entries).latency_hops == _oracle(w, entries)


def test_the_step_pays_the_walked_chains():
    """`step_phases` prices each part's latency as the walk (seed 0 and no dead PEs)."""
    for w in (_wafer(0), _wafer(None)):
        phases = step_phases(w, POT, PLAN, rebuild_every=10, hits=4)
        got = {p.name: p.work.latency_hops for p, _ in phases.leaves()}
        for name, entries in _parts(w).items():
            assert got[name] == _oracle(w, entries), name
