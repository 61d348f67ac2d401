"""The layer-stage counts a `wse_systems.serving.wafer.WaferServing` weighs, for
`wse_systems.serving.placements.search`.

Contract. `stage_counts(ws)` is the tuple of `Regions.stages` values the placement search
weighs at each load, the asked count first: `(ws.stages,)` where the count is asked (or the
system serves with speculation, whose placement search keeps the asked regions); else one
region per layer (None, `wse_systems.pipeline`'s default) then each of `STAGE_COUNTS` from
the wafer count up to below the layer count that splits the layers evenly. The search keeps
its policy (`placements.served`: the most output, within 1% a tie, then the soonest first
token).

Why (hunt 75): `wse plan infer` always planned one stage per layer, where llama3-8b's
1,024 + 256 token at one user is 325 us on 32 stages and 287 us on 8, and `wse infer
generate` emulated its own count (default 1). Two counts only: each is a ladder of head
sizes priced at one user, and weighing 1, 2, 4, 8, 16 and 32 took `wse plan infer --model
llama3-8b` 2.3 times the CPU of one a layer; 1, 2 and 4 served the least of every count at 1
and 8 users for llama3 1B, 3B, 8B and 70B (4 wafers), and 32 of 70B's 80 layers (unequal
stages, no scaled bound: planned at every load) served less than 16 or one a layer. Only
counts that split the layers evenly: they keep the scaled bounds (`placements.scaled`), where
8 of a 12-layer model's stages, planned at every load, took its plan 5.7 times the CPU.
"""

from __future__ import annotations

from typing import Any

__all__ = ["STAGE_COUNTS", "stage_counts"]

STAGE_COUNTS = (8, 16)  # weighed beside one region per layer (module contract: why these)


def stage_counts(ws: Any) -> tuple[int | None, ...]:
    """The stage counts the search weighs on `ws` (module contract)."""
    if not ws.search_stages or ws.speculation is not None:
        return (ws.stages,)
    layers = ws.config.n_layers
    return (None, *(s for s in STAGE_COUNTS if ws.units <= s < layers and layers % s == 0))
