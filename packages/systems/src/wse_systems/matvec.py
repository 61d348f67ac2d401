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
- control: the product's control instructions between its DSDs (`Work.control_instructions`,
  at `control_instruction_cycles`: CS-3's fitted on WaferLLM's MeshGEMV rows, 1 assumed
  elsewhere), counted by hand from the SDK's examples (`SOURCE`) at the granularity of
  `wse_core.cost.meshgemv_rows.KERNEL_CONTROL`: `AXPY_CONTROL` (the task's @activate, the
  kernel's call and return, its 3 DSR loads, the @map's set-up: 8 a product) and the reduce
  task's start, `reduce_control` (its @activate, 3 DSR loads per @faddh, one @faddh per half
  that reaches the row's middle PE: 7 on a row of 3 or more). All are on the axpy's Work:
  the core runs them around its DSDs, before the reduce's first wavelet (on the reduce's
  Work the overlap rule would hide them under the stream they precede). The column AXPYs'
  own loop (the @map's counter, branch and load of x[i]) is `dsd_issue_cycles`' ("the loop
  control around it"; CS-3's fitted on the same @map in WaferLLM's kernel): none per
  column here. The x_in and move phases' programs are not in the examples (the memcpy and
  collectives_2d libraries run them, their source unpublished there): no control on them.

`matvec_work` is the same counts as one `Work` (for counting; `matvec_phases` for timing).
`wse_systems.decoder` builds a decode step's products from it.
"""

from __future__ import annotations

import math

from wse_core.cost.collectives import broadcast_line, reduce_to_centre, wavelets
from wse_core.cost.meshgemv_rows import control_count
from wse_core.cost.perf import Op, Phase, Phases, Work, serial
from wse_core.hw.spec import WaferSpec
from wse_core.hw.sram import Region

from wse_systems.attention import value_dtype

__all__ = [
    "SOURCE",
    "AXPY_CONTROL",
    "REDUCE_TASK_CONTROL",
    "FADD_CONTROL",
    "matvec_phases",
    "matvec_work",
    "perf_rates",
    "reduce_control",
]

# The SDK's examples read for the control counts (module contract; no cycle counts used).
SOURCE = {
    "repository": "Cerebras/csl-examples",
    "commit": "162e0f32b16412ad427e23c3442fc64201525dcd",  # "examples for SDK version 1.4.0"
    "files": (
        "benchmarks/single-tile-matvec/src/pe_matvec.csl",  # the axpy kernel
        "benchmarks/gemv-collectives_2d/pe.csl",  # x down the columns, a compute task, reduce
        "benchmarks/gemv-checkerboard-pattern/pe.csl",  # the reduce task along a row
    ),
}
# Control instructions of one product's axpy (instructions/product), one per call, return,
# @activate, `@load_to_dsr` and @map set-up word, as KERNEL_CONTROL counts WaferLLM's
# mv_compute (the same kernel: three DSRs, then @map over x). Inferred: the compiled code is
# not published. The kernel's local DSD copies (pe_matvec.csl lines 66-67, comptime DSDs)
# fold into the DSR loads: none counted. Its caller's `for (@range(u16, iters))` (line 80) is
# the benchmark's repeat loop, a harness like HARNESS_CONTROL: not a product's.
AXPY_CONTROL = (
    ("@activate of the product's task once x is in (gemv-collectives_2d pe.csl line 105 names "
     "compute_task_id as the broadcast's callback; the @activate as checkerboard pe.csl 102)", 1),
    ("call of the kernel gemv_map (single-tile-matvec pe_matvec.csl line 81)", 1),
    ("3 @load_to_dsr of the FMAC's operands y, y, A (pe_matvec.csl lines 68-70)", 3),
    ("@map set-up: its counter and the input DSD x_dsd (pe_matvec.csl line 71)", 2),
    ("return from gemv_map (pe_matvec.csl line 72)", 1),
)  # fmt: skip
# The reduce along a row (gemv-checkerboard-pattern pe.csl): the task that adds the partial
# sums starts by an @activate once the last AXPY is done (line 102, `@activate(REDUCE)`), and
# each @faddh(fabout, fabin, mem) loads its three operands' DSRs (lines 117-122; inferred as
# above). The middle PE runs one @faddh per half that reaches it (`reduce_control`).
REDUCE_TASK_CONTROL = (("@activate(REDUCE) (checkerboard pe.csl line 102)", 1),)
FADD_CONTROL = (
    ("3 @load_to_dsr of @faddh's operands: fabout, fabin, mem (checkerboard pe.csl 117-122)", 3),
)  # fmt: skip


def perf_rates(spec: WaferSpec) -> WaferSpec:
    """The constants the collectives choose their algorithm at (fitted ones in place)."""
    from wse_core.cost.perf import PerfModel

    return PerfModel(spec).rates


def reduce_control(cols: int) -> int:
    """Control instructions of the reduce along a row of `cols` PEs into its middle PE
    (instructions/product): the reduce task's @activate and one @faddh's DSR loads per half
    that reaches the middle (2; 1 on a row of 2, whose middle is its end); none on one PE."""
    if cols <= 1:
        return 0
    sides = min(cols - 1, 2)  # `reduce_to_centre`'s centre, (cols - 1) // 2, is an end at 2
    return control_count(REDUCE_TASK_CONTROL) + sides * control_count(FADD_CONTROL)


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
        # the product's control and the reduce task's start, on the core between the last
        # AXPY and the reduce's first wavelet (on the reduce's Work its stream would hide it)
        control_instructions=control_count(AXPY_CONTROL) + reduce_control(c),
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
