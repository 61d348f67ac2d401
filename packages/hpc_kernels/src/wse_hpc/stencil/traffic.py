"""The fabric traffic of a stencil run, as the ledger counts it: the report's `traffic`.

Contract. `run_traffic(grid, fn, fields, exchanges)` and `bicgstab_traffic(...)` trace the
same step functions `wse_hpc.stencil.perf` prices (`perf.traced`: `wse_core.fabric.count`)
and return the run's `Traffic`: words injected, word-hops (detours included), the busiest
PE's words, link words per direction, hop chains (`wse_core.hw.traffic`), times the
exchanges the run made (the 25-point step's: `perf.wave25_traffic`). Hunt 67: the report
rebuilt it from the priced links alone and said 0 words and 0 word-hops beside 80 words a
link.
"""

from __future__ import annotations

from collections.abc import Callable

import jax.numpy as jnp
from wse_core import fabric
from wse_core.hw.traffic import Traffic

from wse_hpc.stencil.perf import field_struct, traced
from wse_hpc.stencil.placement import StencilGrid

__all__ = ["bicgstab_traffic", "run_traffic"]


def run_traffic(grid: StencilGrid, fn: Callable, fields: tuple, exchanges: float) -> Traffic:
    """The ledger's count of `fn(*fields)` (one step's exchanges), `exchanges` times."""
    return traced(grid, fn, *fields).scaled(exchanges)


def _reduction(grid: StencilGrid, words: int) -> Traffic:
    """One fp32 wafer-wide reduction of `words` per PE, as the kernel's `fabric.reduce`."""
    x = field_struct(grid, jnp.float32, (words,))
    return traced(grid, lambda v: fabric.reduce(grid.wafer, v), x)


def bicgstab_traffic(
    grid: StencilGrid, precision: str, spmv: Callable, *, iterations: int, updates: int, pair: bool
) -> Traffic:
    """A solve's traffic (`perf.bicgstab_phases`' exchanges): per iteration two SpMV halos in
    the vector dtype and reductions of 1, 2, 2 words; per reliable update an fp32 SpMV halo
    (two with a pair) and reductions of 1 and 2 words; the start's two of 1 word."""
    vec = jnp.float16 if precision == "mixed" else jnp.float32
    halo = traced(grid, spmv, field_struct(grid, vec)).scaled(2 * iterations)
    halo32 = traced(grid, spmv, field_struct(grid, jnp.float32))
    one, two = _reduction(grid, 1), _reduction(grid, 2)
    return (
        halo
        + halo32.scaled(updates * (2 if pair else 1))
        + one.scaled(iterations + updates + 2)
        + two.scaled(2 * iterations + updates)
    )
