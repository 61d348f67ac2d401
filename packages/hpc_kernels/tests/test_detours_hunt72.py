"""Hunt 72: dead PEs' detours on a periodic stencil grid.

A folded periodic axis (`wse_hpc.stencil.periodic`) lays each ring cut in two and
interleaved, one half reversed, so ring neighbours sit 2 links apart on the mesh. The halo
line said "(4 per halo exchange)" where the traced price added 8 (its chains folded,
`ledger.on_mesh`); the 25-point step priced a neighbour R away as R links where the fold
puts it 2 R links away. Oracles: the price's own hop cycles with and without dead PEs
(the line must say what the price adds), and a brute-force walk over the fold's places
built here from its description.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from wse_core import preset
from wse_core.fabric import ledger
from wse_hpc.stencil import detours
from wse_hpc.stencil.placement import grid_wafer, place_grid
from wse_hpc.stencil.runs import StencilConfig, run_stencil


def _hop_cycles(boundary: str, seed: int | None, steps: int):
    cfg = StencilConfig(kind="jacobi", grid=(30, 30, 8), spec=preset("small"), steps=steps,
                        boundary=boundary, defect_seed=seed)  # fmt: skip
    report = run_stencil(cfg).report
    return report.cycles_by_mechanism()["hop"], report.assumptions["detours"]


@pytest.mark.parametrize("boundary", ["periodic", "dirichlet"])
def test_the_halo_line_says_what_the_price_adds_per_exchange(boundary):
    steps = 4
    plain, _ = _hop_cycles(boundary, None, steps)
    detoured, line = _hop_cycles(boundary, 3, steps)
    said = float(re.search(r"\(([0-9.]+) per halo exchange\)", line)[1])
    # one halo exchange a Jacobi step: four one-PE shifts, each chain FOLD_HOPS links folded
    per_shift = ledger.FOLD_HOPS if boundary == "periodic" else 1.0
    assert plain == pytest.approx(steps * 4 * per_shift)
    hop = preset("small").hop_latency_cycles
    assert said > 0 and said * steps * hop == pytest.approx(detoured - plain)


def _fold_places(n: int) -> dict[int, int]:
    """Ring PE -> mesh place: the ring cut in two (the first ceil(n / 2) PEs, the rest),
    the second half reversed, and the two laid alternately."""
    first, second = list(range(-(-n // 2))), list(range(-(-n // 2), n))[::-1]
    order = [p for pair in zip(first, second + [None], strict=False) for p in pair if p is not None]
    return {pe: place for place, pe in enumerate(order)}


def _brute_extra(link_hops: np.ndarray, reach: int, layout: str) -> float:
    """The slowest chain between ring PEs 1 .. reach apart (every column, every PE), each
    link's physical hops summed along the places between them, less the slowest without
    detours; `link_hops` (n - 1, m) along the ring's axis."""
    n = link_hops.shape[0] + 1
    place = _fold_places(n) if layout == "fold" else {i: i for i in range(n)}
    slowest = plain = 0
    for col in range(link_hops.shape[1]):
        for i in range(n):
            for d in range(1, min(reach, n - 1) + 1):
                a, b = sorted((place[i], place[(i + d) % n]))
                slowest = max(slowest, int(link_hops[a:b, col].sum()))
                plain = max(plain, b - a)
    return float(slowest - plain)


def test_the_fold_places_ring_neighbours_one_or_two_links_apart():
    for n in range(3, 12):
        place = _fold_places(n)
        assert sorted(place.values()) == list(range(n))
        gaps = {abs(place[i] - place[(i + 1) % n]) for i in range(n)}
        assert gaps <= {1, 2} and max(gaps) == ledger.FOLD_HOPS


@pytest.mark.parametrize("seed", range(12))
def test_ring_chains_match_a_walk_over_the_places(seed):
    rng = np.random.default_rng(seed)
    n, m, reach = int(rng.integers(3, 25)), int(rng.integers(1, 5)), int(rng.integers(1, 6))
    hops = 1 + (rng.random((n - 1, m)) < 0.2) * rng.integers(1, 4, (n - 1, m))
    layout = ledger.ring_layout(n, reach)[0]
    got = detours._ring_max(hops - 1.0, reach, layout)
    assert got == _brute_extra(hops, reach, layout)
    for other in ("fold", "wrap"):
        assert detours._ring_max(hops - 1.0, reach, other) == _brute_extra(hops, reach, other)


def test_a_periodic_25_point_block_pays_the_folded_chains_detours():
    shape = (30, 30, 16)
    wafer = grid_wafer(preset("small"), shape, mesh_shape=(1, 1), defect_seed=3)
    grid = place_grid(wafer, shape, {"u": "fp32"}, boundary="periodic", radius=4)
    rm = wafer.remap
    axes = (rm.link_hops(0)[:29, :30], rm.link_hops(1)[:30, :29].T)
    want = max(_brute_extra(h, 4, ledger.ring_layout(30, 4)[0]) for h in axes)
    assert want > 0
    assert detours.wave25_detour_hops(grid) == want
