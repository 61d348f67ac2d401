"""What the stencil kernels cost on the wafer, counted per instruction from the plan they run.

Contract. Every function here takes the placed `StencilGrid` (its spec, nz, field dtypes)
and the kernel's own settings (BiCGSTAB precision, the wave's Z block), counts the busiest
PE's DSD instructions (`wse_core.cost.perf.Op`), SRAM bytes and hop chains, takes the fabric
words per link direction from tracing the kernel's own step functions
(`wse_core.fabric.count`), and returns `wse_core.cost.perf.Work` / `Phases`. `PerfModel` prices
each mechanism with its constant (`wse_core.cost.mechanisms`; the fitted ones from
`wse_core.cost.calibration`); nothing here carries a factor of its own.

Counting rules (stated once, used by every kernel):
- One vector instruction per array operation the kernel's jnp code performs, over the
  PE's Z column (length nz, stride 1): what the emulator evaluates is what is priced
  (Jacobi: 6 adds + 4 muls per cell; heat: 7-point difference form 6 sub + 5 add + 3 mul,
  then neg, mul, add). A dot product is one FMAC per pair (mixed `@fmachs` for fp16
  vectors, fp32 FMAC for fp32 ones) into a scalar.
- SRAM: each instruction reads its memory operands and writes its result; operands that
  arrive from the fabric (the ±X / ±Y halos) and scalars are not SRAM reads.
- Sends into the fabric run as asynchronous fabric-output DSDs beside the datapath (not
  issued on it), as in the published 25-point mix; the router replicates them (no ramp
  bound). Hop chains add up in the order they are traced.
- A halo exchange is one relay stage (up the sender's ramp, down the receiver's) over the
  traced hops, and each direction's receive activates a task, as does each step.
- A periodic grid's exchanges are re-counted for the mesh, which has no wrap-around link:
  each axis folded or in place (`wse_hpc.stencil.periodic`).
- Detours around dead PEs (`--defect-seed`) cost their extra hops on the slowest PE's
  path at `hop_latency_cycles` each (`wse_hpc.stencil.detours`): the traced halos hold
  them; the allreduces and the published 25-point step add them.
- A wafer-wide fp32 allreduce (BiCGSTAB's dots) is priced as Luczynski et al. model it
  (`wse_core.cost.collectives.allreduce_2d`: rows to the centre column, the column to the centre,
  a flood back; the fastest of their line algorithms at the spec's hop and ramp latencies),
  on the PE rectangle the grid occupies. Rocki et al.'s "about 10% over the diameter" is a
  check of it in the calibration (`wse_core.cost.calibration.rows`), not a factor here.
- The 25-point step is priced as Jacquelin et al. publish it
  (`wse_core.cost.stencil.wave_step_phases`: per step, per Z block the halo of the 4 R
  nearest PEs then the update, 4 R + 1 FMUL, 4 R + 1 FADD, 2 R FMA, 1 FSUB per cell),
  with the kernel's own radius, nz and Z block; the kernel's traced multicasts must move the
  words the published step counts (R w per link direction and block; a test checks). The
  emulated kernel evaluates the same stencil in another order (pair sums first: 18 mul,
  25 add, 1 sub = 44 flop per cell); the published mix is what the wafer runs.
- SC20's BiCGSTAB is priced two ways (`bicgstab_sc20_iteration`): the kernel Rocki et al.
  describe (fp16 vectors and matrix, a 7-diagonal fp16 SpMV whose four neighbour terms
  stream from the fabric, fp32 accumulation of the dots only, 3 allreduces) and the
  emulator's own mix (`bicgstab_iteration`: x kept in fp32, a difference-form SpMV).

Per PE (`pe_trace`, `wse hpc stencil --trace FILE`): every PE of the X x Y grid runs the same
step on its Z column, so the report spreads evenly over the grid's region
(`wse_core.trace.trace_uniform`); the dead PEs are those of the run's defect seed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
from wse_core import Region, RunReport, WaferSpec, defect_map, fabric
from wse_core.cost.collectives import reduction
from wse_core.cost.perf import Op, PerfModel, Phase, Phases, Work, serial
from wse_core.cost.stencil import block_widths, wave_step_phases
from wse_core.hw.spec import DTYPE_BYTES
from wse_core.hw.traffic import Traffic
from wse_core.trace import PeTrace, trace_uniform

from wse_hpc.stencil import periodic
from wse_hpc.stencil.detours import wave25_detour_hops
from wse_hpc.stencil.placement import StencilGrid

__all__ = [
    "allreduce_work",
    "assumptions",
    "bicgstab_iteration",
    "bicgstab_phases",
    "bicgstab_sc20_iteration",
    "jacobi_phases",
    "heat_phases",
    "pe_trace",
    "restart_work",
    "spmv7_ops",
    "start_work",
    "traced",
    "update_work",
    "wave25_halo_words",
    "wave25_phases",
    "wave25_traffic",
]


def _name(dtype) -> str:
    return "fp16" if jnp.dtype(dtype).itemsize == 2 else "fp32"


def _vec(kind: str, dtype: str, n: float, count: float = 1, reads: float = 2, **kw) -> Work:
    """`count` instructions over n elements: `reads` memory operands each, one result
    written (`write_dtype`, default dtype; `writes=0` for a scalar result: a reduction into
    one accumulator, one element per cycle). The instruction's own ports price the same
    reads and writes (`Op.bounds`)."""
    size = DTYPE_BYTES[dtype]
    writes = kw.get("writes", 1)
    out = DTYPE_BYTES[kw.get("write_dtype", dtype)] * writes
    op = Op(kind, dtype, n, count=count, mem_reads=reads, mem_writes=writes, accumulate=not writes)
    return Work(
        ops=(op,),
        sram_read_bytes=count * reads * n * size,
        sram_write_bytes=count * n * out,
    )


def _sum(works) -> Work:
    out = Work()
    for w in works:
        out = out + w
    return out


def traced(grid: StencilGrid, fn: Callable, *fields) -> Traffic:
    """The traffic `fn(*fields)` records, traced abstractly (fields may be ShapeDtypeStruct);
    on a periodic grid as the mesh moves it (`periodic.traced`; hunt 70: as on a torus)."""
    if grid.boundary == "periodic":
        return periodic.traced(grid, fn, *fields)
    return fabric.count(grid.wafer, fn, *fields)


def field_struct(grid: StencilGrid, dtype, per_pe: tuple[int, ...] | None = None):
    """An abstract placed field of `grid` (for tracing at any size without allocating)."""
    w = grid.wafer
    shape = per_pe if per_pe is not None else (grid.shape[2],)
    return jax.ShapeDtypeStruct(w.padded_shape + shape, dtype, sharding=w.sharding(len(shape)))


def spmv7_ops(dtype: str, n: float) -> Work:
    """The 7-point difference-form SpMV (kernels.laplacian7): 4 subs with a fabric operand,
    2 with a local Z operand, 3 pair adds, 3 scalings, 2 adds."""
    return _sum(
        [
            _vec("sub", dtype, n, 4, reads=1),
            _vec("sub", dtype, n, 2),
            _vec("add", dtype, n, 3),
            _vec("mul", dtype, n, 3, reads=1),
            _vec("add", dtype, n, 2),
        ]
    )


def _fabric(traffic: Traffic) -> Work:
    """A traced halo exchange: its words and hops, one relay stage, a task per direction."""
    return Work.from_traffic(traffic, exchanges=1.0, task_activations=4.0)


def jacobi_phases(grid: StencilGrid, step_fn: Callable, steps: int) -> Phases:
    """`steps` Jacobi sweeps (kernels.jacobi: (f + N u) / D): 2 adds of two fabric halos,
    the Z pair add, 3 scalings, 2 adds, + f, x 1/D; halos traced from `step_fn(u, f)`."""
    dt = grid.dtype("u")
    n, d = grid.shape[2], _name(dt)
    u = field_struct(grid, dt)
    ops = _sum(
        [
            _vec("add", d, n, 2, reads=0),
            _vec("add", d, n, 1),
            _vec("mul", d, n, 3, reads=1),
            _vec("add", d, n, 3),
            _vec("mul", d, n, 1, reads=1),
        ]
    )
    work = ops + _fabric(traced(grid, step_fn, u, u)) + Work(task_activations=1.0)
    return serial(Phase("jacobi_sweep", work), name="jacobi", repeat=steps)


def heat_phases(grid: StencilGrid, step_fn: Callable, steps: int) -> Phases:
    """`steps` explicit heat steps (kernels.heat: u - dt k A u): the 7-point SpMV, then
    neg, scale and add; halos traced from `step_fn(u)`."""
    dt = grid.dtype("u")
    n, d = grid.shape[2], _name(dt)
    update = _sum([_vec("neg", d, n, reads=1), _vec("mul", d, n, reads=1), _vec("add", d, n)])
    halo = _fabric(traced(grid, step_fn, field_struct(grid, dt)))
    work = spmv7_ops(d, n) + update + halo + Work(task_activations=1.0)
    return serial(Phase("heat_step", work), name="heat", repeat=steps)


def allreduce_work(grid: StencilGrid, words: int) -> Work:
    """One fp32 allreduce of `words` values per PE over the grid's PE rectangle, priced as
    every reduction of the stack (`wse_core.cost.collectives.reduction` at the spec's
    constants: `allreduce_2d`, the detours around dead PEs on its slowest path added)."""
    rates = PerfModel(grid.wafer.spec).rates
    return reduction(rates, grid.wafer.remap, grid.shape[0], grid.shape[1], words).work


def _dots(vec: str, n: float, pairs: int) -> Work:
    kind = "fmac_mixed" if vec == "fp16" else "fmac"
    return _vec(kind, vec, n, pairs, writes=0)


def bicgstab_iteration(grid: StencilGrid, precision: str, spmv: Callable) -> Phases:
    """One inner BiCGSTAB iteration (bicgstab.bicgstab): p update (4 ops), 2 SpMVs, s and r
    AXPYs (2 ops each) in the vector dtype (fp16 for mixed); x += alpha p + omega s in fp32
    (mixed: 2 fp16->fp32 converts first); 5 dots as mixed (fp32) FMACs and 3 allreduces of
    1, 2, 2 words; 4 scalar divisions and 2 square roots on every PE."""
    vec = "fp16" if precision == "mixed" else "fp32"
    n = grid.shape[2]
    halo = traced(grid, spmv, field_struct(grid, jnp.float16 if vec == "fp16" else jnp.float32))
    axpy = _sum([_vec("mul", vec, n, 4, reads=1), _vec("sub", vec, n, 3), _vec("add", vec, n)])
    x_update = _sum(
        [_vec("mul", "fp32", n, 2, reads=1), _vec("add", "fp32", n, 2)]
        + ([_vec("convert", "fp16", n, 2, reads=1, write_dtype="fp32")] if vec == "fp16" else [])
    )
    vector = (spmv7_ops(vec, n) + _fabric(halo)).scaled(2) + axpy + x_update + _dots(vec, n, 5)
    scalars = Work(ops=(Op("div", "fp32", 1, count=4), Op("sqrt", "fp32", 1, count=2)))
    return serial(
        Phase("vectors", vector),
        Phase("allreduce_1", allreduce_work(grid, 1)),
        Phase("allreduce_2", allreduce_work(grid, 2), repeat=2),
        Phase("scalars", scalars),
        name="bicgstab_iteration",
    )


def _sc20_spmv(n: float) -> Work:
    """SC20's SpMV y = A x, all fp16, A as 7 diagonals: the centre term one mul (d and x
    read), the Z neighbours two FMACs y += d x over shifted local views (y, d and x read:
    24 B a cycle at 4-wide, so the 16 B read port sets 2.67 a cycle), the four X/Y
    neighbours four FMACs whose x streams from the fabric (y and d read; the link gives
    two fp16 a cycle); the halo: one value per cell each way (two fp16 per wavelet) over
    one hop, one relay stage, a task per direction."""
    ops = (
        Op("mul", "fp16", n),
        Op("fmac", "fp16", n, count=2, mem_reads=3),
        Op("fmac", "fp16", n, count=4, fabric_in=True, mem_reads=2),
    )
    words = n * DTYPE_BYTES["fp16"] / 4
    return Work(
        ops=ops,
        sram_read_bytes=2 * n * (2 + 2 * 3 + 4 * 2),  # diagonal and x (and y for an FMAC)
        sram_write_bytes=2 * n * 7,
        links={"ramp": 4 * words, **{d: words for d in ("N", "S", "E", "W")}},
        latency_hops=1.0,
        relay_stages=1.0,
        task_activations=4.0,
    )


def bicgstab_sc20_iteration(grid: StencilGrid) -> Phases:
    """One BiCGSTAB iteration as Rocki et al. (SC20) describe the kernel: fp16 matrix and
    vectors, two SpMVs (`_sc20_spmv`), six fp16 AXPY-type FMACs (p, s, x twice, r), five
    dots as fp16 products accumulated in fp32 (`@fmachs`), three fp32 allreduces of 1, 2
    and 2 words (`allreduce_work`), three divisions and a square root on every PE."""
    n = grid.shape[2]
    vectors = _vec("fmac", "fp16", n, 6) + _dots("fp16", n, 5) + Work(task_activations=1.0)
    scalars = Work(ops=(Op("div", "fp32", 1, count=3), Op("sqrt", "fp32", 1)))
    return serial(
        Phase("spmv", _sc20_spmv(n), repeat=2),
        Phase("vectors", vectors),
        Phase("allreduce_1", allreduce_work(grid, 1)),
        Phase("allreduce_2", allreduce_work(grid, 2), repeat=2),
        Phase("scalars", scalars),
        name="bicgstab_iteration",
    )


def start_work(grid: StencilGrid, precision: str) -> Work:
    """The solve's start at x = 0 (refine._first), where the true residual is b itself:
    ||b|| (an fp32 FMAC and an allreduce), r = sigma D^-1 b in the vector dtype (an fp32
    mul; mixed: a convert), r^ = r (a move), (r, r) (a dot and an allreduce), sigma from a
    division and ||r|| from square roots."""
    n = grid.shape[2]
    vec = "fp16" if precision == "mixed" else "fp32"
    conv = [_vec("convert", "fp32", n, reads=1, write_dtype="fp16")] if vec == "fp16" else []
    ops = _sum(
        [_dots("fp32", n, 1), _vec("mul", "fp32", n, reads=1), *conv]
        + [_vec("move", vec, n, reads=1), _dots(vec, n, 1)]
    )
    scal = Work(ops=(Op("div", "fp32", 1), Op("sqrt", "fp32", 1, count=2)))
    return ops + allreduce_work(grid, 1).scaled(2) + scal


def update_work(grid: StencilGrid, precision: str, pair: bool, spmv: Callable) -> Work:
    """One reliable update (refine._update), all fp32 but the rescaled vectors: x += d /
    sigma (a mul, then an add, or with a pair a TwoSum: 6 adds/subs and x_lo += err), d = 0
    (a move), r = b - A x_hi (- A x_lo) (SpMVs and subs), ||r|| (an FMAC and an
    allreduce), r = sigma' D^-1 r (a mul; mixed: a convert), p and v times sigma' / sigma
    (2 muls in the vector dtype), (r^, r) and (r, r) (2 dots, an allreduce of 2 words),
    two divisions and two square roots."""
    n = grid.shape[2]
    vec = "fp16" if precision == "mixed" else "fp32"
    halo = traced(grid, spmv, field_struct(grid, jnp.float32))
    spmvs = (spmv7_ops("fp32", n) + _fabric(halo)).scaled(2 if pair else 1)
    conv = [_vec("convert", "fp32", n, reads=1, write_dtype="fp16")] if vec == "fp16" else []
    fold = _vec("add", "fp32", n, 7) if pair else _vec("add", "fp32", n)
    ops = _sum(
        [_vec("mul", "fp32", n, reads=1), fold, _vec("move", "fp32", n, reads=0), spmvs]
        + [_vec("sub", "fp32", n, 2 if pair else 1), _dots("fp32", n, 1)]
        + [_vec("mul", "fp32", n, reads=1), *conv, _vec("mul", vec, n, 2, reads=1)]
        + [_dots(vec, n, 2)]
    )
    scal = Work(ops=(Op("div", "fp32", 1, count=2), Op("sqrt", "fp32", 1, count=2)))
    return ops + allreduce_work(grid, 1) + allreduce_work(grid, 2) + scal


def restart_work(grid: StencilGrid, precision: str, breakdown: bool) -> Work:
    """A Krylov restart: r^ = r (a move in the vector dtype); after a breakdown also p and
    v cleared (2 more moves)."""
    vec = "fp16" if precision == "mixed" else "fp32"
    n = grid.shape[2]
    cleared = _vec("move", vec, n, 2, reads=0) if breakdown else Work()
    return _vec("move", vec, n, reads=1) + cleared


def bicgstab_phases(
    grid: StencilGrid,
    precision: str,
    spmv: Callable,
    *,
    iterations: int,
    updates: int,
    restarts: int = 0,
    breakdowns: int = 0,
    pair: bool,
) -> Phases:
    """A whole solve (refine.refine): the start, `iterations` BiCGSTAB iterations,
    `updates` reliable updates (a true-residual check each) and the Krylov restarts
    (`breakdowns` of the `restarts` after a breakdown)."""
    return serial(
        Phase("start", start_work(grid, precision)),
        Phases(
            "serial",
            bicgstab_iteration(grid, precision, spmv).parts,
            "bicgstab_iteration",
            iterations,
        ),
        Phase("reliable_update", update_work(grid, precision, pair, spmv), repeat=updates),
        Phase("restart", restart_work(grid, precision, False), repeat=restarts - breakdowns),
        Phase("breakdown_restart", restart_work(grid, precision, True), repeat=breakdowns),
        name="bicgstab",
    )


def wave25_traffic(grid: StencilGrid, block_z: int, block_fn: Callable) -> Traffic:
    """What the kernel's traced multicasts record in one step (every Z block of `block_z`,
    the last one shorter)."""
    r, nz = grid.radius, grid.shape[2]
    widths = block_widths(nz, block_z)
    traffic = Traffic()
    for width in sorted(set(widths)):
        t = traced(grid, block_fn, field_struct(grid, jnp.float32, (width + 2 * r,)))
        traffic = traffic + t.scaled(widths.count(width))
    return traffic


def wave25_halo_words(grid: StencilGrid, block_z: int, block_fn: Callable) -> dict[str, float]:
    """Words per link direction the kernel's traced multicasts move in one step: what
    `wave25_phases` must price."""
    return dict(wave25_traffic(grid, block_z, block_fn).links)


def wave25_phases(grid: StencilGrid, block_z: int, block_fn: Callable, steps: int) -> Phases:
    """`steps` 25-point steps on `grid` with Z blocks of `block_z`: the published algorithm
    (`wse_core.cost.stencil`) at the grid's radius and nz (module docstring), and on a grid
    with dead PEs each block's halo detour (`detours.wave25_detour_hops`), in series."""
    del block_fn  # its traced words equal the published step's (wave25_halo_words; tested)
    nz = grid.shape[2]
    step = periodic.on_mesh(grid, wave_step_phases(nz, block_z, radius=grid.radius, steps=steps))
    extra = wave25_detour_hops(grid) * len(block_widths(nz, block_z))
    if not extra:
        return step
    detour = Phase("detours", Work(latency_hops=extra))
    return dataclasses.replace(step, parts=(*step.parts, detour))


def assumptions(kind: str) -> dict[str, str]:
    """The kernel-specific assumptions behind a stencil prediction (for RunReport)."""
    out = {
        "instructions": "one DSD instruction per array operation of the kernel, over the "
        "Z column at stride 1; halos used as fabric operands; sends asynchronous",
    }
    if kind == "wave25":
        out["wave25 mix"] = (
            "priced as published (wse_core.cost.stencil): per Z block the 16 nearest PEs' "
            "values, then 17 FMUL, 17 FADD, 8 FMA, 1 FSUB per cell; the emulated kernel "
            "evaluates the same stencil as 18 mul, 25 add, 1 sub"
        )
    if kind == "bicgstab":
        out["allreduce"] = (
            "fp32 allreduce as Luczynski et al. model it: rows to the centre column, the "
            "column to the centre, a flood back (wse_core.cost.collectives.allreduce_2d)"
        )
        out["x in fp32"] = "the emulator accumulates x in fp32 (converts and fp32 FMAs priced)"
    return out


def pe_trace(
    spec: WaferSpec, report: RunReport, *, grid_xy: tuple[int, int], defect_seed: int | None
) -> PeTrace:
    """The per-PE trace of a stencil run: `report` spread over the `grid_xy` PEs that hold
    the grid, with the dead PEs of `defect_seed` (None: none drawn)."""
    defects = None if defect_seed is None else defect_map(spec, defect_seed)
    region = Region("stencil grid", 0, 0, *grid_xy)
    return trace_uniform(spec, report, region=region, defects=defects)
