"""One matrix-vector product on a PE region as the SDK's gemv examples lay it out, counted per
instruction (the "sdk" GEMV program of `wse_systems.pipeline.GEMV_PROGRAMS`).

Contract. `matvec_phases(region, n_in, n_out, ...)` is one matrix-vector product whose
`n_in x n_out` weight is spread over a `rows x cols` PE region as the SDK's gemv examples
lay it out, each step priced by its mechanisms:

- x_in: the input vector sits on the region's top row, split over the columns (n_in / cols
  values per column); each column floods its piece down (`wse_core.cost.collectives`
  broadcast: the piece's words down the ramp, rows - 1 hops, one relay).
- axpy: each PE holds a `ceil(n_out / rows) x ceil(n_in / cols)` block and runs one column
  AXPY (FMAC DSD) per input element it holds (the `single-tile-matvec` kernel).
- reduce: the partial outputs are sum-reduced along each row to its middle PE (both halves
  at once), by the fastest of Luczynski et al.'s line reduces
  (`wse_core.cost.collectives.reduce_to_centre`).
- move: the activation goes from the rows' middle PEs to the next product's input layout
  (the top row, split over the columns) as words over the links the layout has: out along
  each row both ways (half a row's ceil(n_out / rows) values on each of its two links),
  then up the columns (n_out / cols values on a column's northward link), half the row
  plus rows - 1 hops and one relay.

`matvec_work` is the same counts as one `Work` (for counting; `matvec_phases` for timing).
`wse_systems.decoder` builds a decode step's products from it.
"""

from __future__ import annotations

import math

from wse_core.cost.collectives import broadcast_line, reduce_to_centre, wavelets
from wse_core.cost.perf import Op, Phase, Phases, Work, serial
from wse_core.hw.spec import WaferSpec
from wse_core.hw.sram import Region

from wse_systems.attention import value_dtype

__all__ = ["matvec_phases", "matvec_work", "perf_rates"]


def perf_rates(spec: WaferSpec) -> WaferSpec:
    """The constants the collectives choose their algorithm at (fitted ones in place)."""
    from wse_core.cost.perf import PerfModel

    return PerfModel(spec).rates


def _matvec_parts(
    region: Region,
    n_in: int,
    n_out: int,
    bytes_per_value: int,
    input_density: float,
    spec: WaferSpec,
) -> tuple[tuple[str, Work], ...]:
    if not 0.0 <= input_density <= 1.0:
        raise ValueError(f"input_density must be in [0, 1], got {input_density}")
    r, c = region.rows, region.cols
    rows_out, cols_in = math.ceil(n_out / r), math.ceil(n_in / c)
    b = bytes_per_value  # each message whole wavelets (`wavelets`; hunt 82, jobs18 L3)
    fired = cols_in * input_density
    elems = rows_out * fired
    axpy = Work(
        ops=(Op("fmac", value_dtype(bytes_per_value), rows_out, count=fired),),
        # FMAC y += w * x: reads w and y, writes y (x is a scalar in SRAM from x_in).
        sram_read_bytes=2 * elems * bytes_per_value,
        sram_write_bytes=elems * bytes_per_value,
        task_activations=1.0,
    )
    half = wavelets(math.ceil(rows_out / 2), b)
    north = wavelets(math.ceil(n_out / c), b)
    move = Work(
        links={"W": half, "E": half, "N": north, "ramp": wavelets(rows_out, b)},
        latency_hops=float(math.ceil((c - 1) / 2) + (r - 1)),
        relay_stages=1.0,
    )
    return (
        ("x_in", broadcast_line(r, wavelets(cols_in, b))),
        ("axpy", axpy),
        ("reduce", reduce_to_centre(perf_rates(spec), c, wavelets(rows_out, b))),
        ("move", move),
    )


def matvec_phases(
    region: Region,
    n_in: int,
    n_out: int,
    *,
    bytes_per_value: int = 2,
    input_density: float = 1.0,
    spec: WaferSpec,
    name: str = "matvec",
) -> Phases:
    """y (n_out) = W^T x (n_in) on `region`, its busiest PE's steps in order (the module
    contract). `input_density`: the fraction of x that is nonzero; a zero triggers no column
    AXPY (zeros still cross the fabric). `spec`: whose constants choose the reduce."""
    parts = _matvec_parts(region, n_in, n_out, bytes_per_value, input_density, spec)
    return serial(*(Phase(n, w) for n, w in parts), name=name)


def matvec_work(
    region: Region,
    n_in: int,
    n_out: int,
    *,
    bytes_per_value: int = 2,
    input_density: float = 1.0,
    spec: WaferSpec,
) -> Work:
    """`matvec_phases`' counts as one Work (instructions, SRAM, link words, hops, relays)."""
    parts = _matvec_parts(region, n_in, n_out, bytes_per_value, input_density, spec)
    out = Work()
    for _, w in parts:
        out = out + w
    return out
