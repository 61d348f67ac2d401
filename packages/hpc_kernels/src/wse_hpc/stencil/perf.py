"""What the stencil kernels cost on the wafer, counted per instruction from the plan they run.

Contract. Every function here takes the placed `StencilGrid` (its spec, nz, field dtypes)
and the kernel's own settings (BiCGSTAB precision, the wave's Z block), counts the busiest
PE's DSD instructions (`wse_core.perf.Op`), SRAM bytes and hop chains, takes the fabric
words per link direction from tracing the kernel's own step functions
(`wse_core.fabric.count`), and returns `wse_core.perf.Work` / `Phases`. `PerfModel` prices
them with the spec's SIMD table and the one calibration (`wse_core.calibration`); nothing
here carries a factor of its own.

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
- A wafer-wide fp32 allreduce (BiCGSTAB's dots) is traced as `fabric.allreduce`: reduce to
  the centre and back, the grid's diameter in hops; Rocki et al. measured one in about
  1.1x the diameter in cycles, so 0.1 x the traced hops are added as fixed cycles (the adds
  along the chain).
- The 25-point step is priced as published (Jacquelin et al.): per cell 4 R FMUL with a
  fabric operand + 1, 4 R + 1 FADD, 2 R FMA, 1 FSUB (R = 4: 17, 17, 8, 1); SRAM 2R+1 Z
  reads, u_prev and (v dt)^2, 4 R buffered halos read, 1 + 4 R written. The emulated kernel
  evaluates the same stencil in another order (pair sums first: 18 mul, 25 add, 1 sub =
  44 flop per cell); the published mix is what the wafer runs and what the calibration
  fitted, so the step is priced by it (`wave25_work` equals
  `wse_core.calibration.wave25_work`; a test checks).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
from wse_core import fabric
from wse_core.perf import Op, Phase, Phases, Work, serial
from wse_core.spec import DTYPE_BYTES
from wse_core.traffic import Traffic

from wse_hpc.stencil.placement import StencilGrid

__all__ = [
    "ALLREDUCE_OVER_DIAMETER",
    "allreduce_work",
    "assumptions",
    "bicgstab_iteration",
    "bicgstab_phases",
    "jacobi_phases",
    "heat_phases",
    "refinement_work",
    "spmv7_ops",
    "traced",
    "wave25_phases",
    "wave25_work",
]

ALLREDUCE_OVER_DIAMETER = 1.1  # Rocki et al. (SC20): allreduce cycles / diameter hops


def _name(dtype) -> str:
    return "fp16" if jnp.dtype(dtype).itemsize == 2 else "fp32"


def _vec(kind: str, dtype: str, n: float, count: float = 1, reads: float = 2, **kw) -> Work:
    """`count` instructions over n elements: `reads` memory operands each, one result
    written (`write_dtype`, default dtype; `writes=0` for a scalar result)."""
    size = DTYPE_BYTES[dtype]
    out = DTYPE_BYTES[kw.get("write_dtype", dtype)] * kw.get("writes", 1)
    return Work(
        ops=(Op(kind, dtype, n, count=count),),
        sram_read_bytes=count * reads * n * size,
        sram_write_bytes=count * n * out,
    )


def _sum(works) -> Work:
    out = Work()
    for w in works:
        out = out + w
    return out


def traced(grid: StencilGrid, fn: Callable, *fields) -> Traffic:
    """The traffic `fn(*fields)` records, traced abstractly (fields may be ShapeDtypeStruct)."""
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
    return Work.from_traffic(traffic)


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
    work = ops + _fabric(traced(grid, step_fn, u, u))
    return serial(Phase("jacobi_sweep", work), name="jacobi", repeat=steps)


def heat_phases(grid: StencilGrid, step_fn: Callable, steps: int) -> Phases:
    """`steps` explicit heat steps (kernels.heat: u - dt k A u): the 7-point SpMV, then
    neg, scale and add; halos traced from `step_fn(u)`."""
    dt = grid.dtype("u")
    n, d = grid.shape[2], _name(dt)
    update = _sum([_vec("neg", d, n, reads=1), _vec("mul", d, n, reads=1), _vec("add", d, n)])
    work = spmv7_ops(d, n) + update + _fabric(traced(grid, step_fn, field_struct(grid, dt)))
    return serial(Phase("heat_step", work), name="heat", repeat=steps)


def allreduce_work(grid: StencilGrid, words: int, spec_hop_cycles: float) -> Work:
    """One wafer-wide fp32 allreduce of `words` values per PE (traced), with Rocki et al.'s
    ~10% over the diameter as fixed cycles."""
    t = traced(
        grid, lambda a: fabric.allreduce(grid.wafer, a), field_struct(grid, jnp.float32, (words,))
    )
    extra = (ALLREDUCE_OVER_DIAMETER - 1) * t.latency_hops * spec_hop_cycles
    return Work(links=dict(t.links), latency_hops=t.latency_hops, fixed_cycles=extra)


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
    hop = grid.wafer.spec.hop_latency_cycles
    return serial(
        Phase("vectors", vector),
        Phase("allreduce_1", allreduce_work(grid, 1, hop)),
        Phase("allreduce_2", allreduce_work(grid, 2, hop), repeat=2),
        Phase("scalars", scalars),
        name="bicgstab_iteration",
    )


def _replacement(grid: StencilGrid, precision: str, spmv: Callable) -> Work:
    """Residual replacement r = lo(b - A x) from the fp32 x: an fp32 SpMV and a sub (mixed:
    and two converts)."""
    n = grid.shape[2]
    conv = [_vec("convert", "fp16", n, 2, reads=1)] if precision == "mixed" else []
    halo = traced(grid, spmv, field_struct(grid, jnp.float32))
    return spmv7_ops("fp32", n) + _vec("sub", "fp32", n) + _sum(conv) + _fabric(halo)


def refinement_work(grid: StencilGrid, precision: str, pair: bool, spmv: Callable) -> Work:
    """One outer refinement step on the wafer, all fp32: r = b - A x_hi (- A x_lo when x is a
    pair), ||r|| (an FMAC and an allreduce), the scaled inner right-hand side (mul; mixed:
    convert), and x += d / sigma (pair: a TwoSum, 6 adds/subs, and x_lo += err)."""
    n = grid.shape[2]
    halo = traced(grid, spmv, field_struct(grid, jnp.float32))
    spmvs = (spmv7_ops("fp32", n) + _fabric(halo)).scaled(2 if pair else 1)
    conv = [_vec("convert", "fp32", n, reads=1, write_dtype="fp16")] if precision == "mixed" else []
    update = _vec("add", "fp32", n, 7) if pair else _vec("add", "fp32", n)
    ops = _sum(
        [
            spmvs,
            _vec("sub", "fp32", n, 2 if pair else 1),
            _dots("fp32", n, 1),
            _vec("mul", "fp32", n, 2, reads=1),
            update,
            *conv,
        ]
    )
    hop = grid.wafer.spec.hop_latency_cycles
    scal = Work(ops=(Op("div", "fp32", 1), Op("sqrt", "fp32", 1)))
    return ops + allreduce_work(grid, 1, hop) + scal


def bicgstab_phases(
    grid: StencilGrid,
    precision: str,
    spmv: Callable,
    *,
    iterations: int,
    outer_steps: int,
    replacements: int,
    pair: bool,
) -> Phases:
    """A whole refined solve: `outer_steps` true-residual checks / corrections (the first
    included), `iterations` inner iterations and `replacements` residual replacements."""
    return serial(
        Phase("true_residual", refinement_work(grid, precision, pair, spmv), repeat=outer_steps),
        Phases(
            "serial",
            bicgstab_iteration(grid, precision, spmv).parts,
            "bicgstab_iteration",
            iterations,
        ),
        Phase("residual_replacement", _replacement(grid, precision, spmv), repeat=replacements),
        name="bicgstab",
    )


def wave25_work(grid: StencilGrid, block_z: int, block_fn: Callable) -> Work:
    """One 25-point step on `grid` with Z blocks of `block_z` (the last may be shorter):
    the published per-cell mix for radius R = grid.radius (module docstring) as vector
    instructions over each block (the mean block length when blocks differ, as the
    calibration's count), and the halo traffic traced from `block_fn(block_field)` for
    every block."""
    r, nz = grid.radius, grid.shape[2]
    blocks = math.ceil(nz / block_z)
    widths = [block_z] * (nz // block_z) + ([nz % block_z] if nz % block_z else [])
    traffic = Traffic()
    for width in sorted(set(widths)):
        t = traced(grid, block_fn, field_struct(grid, jnp.float32, (width + 2 * r,)))
        traffic = traffic + t.scaled(widths.count(width))
    per_cell = (("mul", 4 * r + 1), ("add", 4 * r + 1), ("fmac", 2 * r), ("sub", 1))
    length = nz / blocks
    ops = tuple(Op(kind, "fp32", length, count=k * blocks) for kind, k in per_cell)
    reads = (2 * r + 1) + 2 + 4 * r  # Z reads, u_prev and (v dt)^2, buffered halos
    return Work(
        ops=ops,
        sram_read_bytes=reads * 4 * nz,
        sram_write_bytes=(1 + 4 * r) * 4 * nz,
        links=dict(traffic.links),
        latency_hops=traffic.latency_hops,
    )


def wave25_phases(grid: StencilGrid, block_z: int, block_fn: Callable, steps: int) -> Phases:
    return serial(
        Phase("wave25_step", wave25_work(grid, block_z, block_fn)), name="wave25", repeat=steps
    )


def assumptions(kind: str) -> dict[str, str]:
    """The kernel-specific assumptions behind a stencil prediction (for RunReport)."""
    out = {
        "instructions": "one DSD instruction per array operation of the kernel, over the "
        "Z column at stride 1; halos used as fabric operands; sends asynchronous",
    }
    if kind == "wave25":
        out["wave25 mix"] = (
            "priced by the published per-cell mix (17 FMUL, 17 FADD, 8 FMA, 1 FSUB); the "
            "emulated kernel evaluates the same stencil as 18 mul, 25 add, 1 sub"
        )
    if kind == "bicgstab":
        out["allreduce"] = (
            f"fp32 allreduce = traced diameter hops x {ALLREDUCE_OVER_DIAMETER} (Rocki et al.)"
        )
        out["x in fp32"] = "the emulator accumulates x in fp32 (converts and fp32 FMAs priced)"
    return out
