"""Predicted wafer time per step / iteration of the stencil kernels.

Work on the busiest PE (its Z column of nz cells) for one step, turned into cycles by
`wse_core.perf.PerfModel`:

- flops per cell by kernel (below, counted from the update formulas; 51 for the 25-point
  stencil as published), in the kernel's dtype;
- SRAM words per cell read and written (at the spec's 16 B read + 8 B write per cycle per
  PE, the stencil paper's figure — see wse_core.spec): local Z reads, the fields; halos
  received through the fabric are used as operands straight from the router (7-point) or
  written to a block buffer and read back (25-point, as in Jacquelin et al.'s Z blocks);
- fabric: traced with `wse_core.fabric` on the real step function. The four directions use
  separate links and run at once, so the busiest link carries the largest one-direction
  total (not the sum over directions);
- latency: the traced latency chains; each wafer-wide reduction is also broadcast back to
  every PE (an allreduce), so a reduction's latency counts twice.

Calibration (the only fitted constant): `EFFICIENCY`, the fraction of the model's
streaming rate that the 25-point kernel reaches, from Jacquelin et al. Table II (the
calibration set of shared/REFERENCES.md). It multiplies the streaming cycles of every kernel
here, so the BiCGSTAB prediction (SC20 size) is a true prediction. Per Z block the kernel
pays a fixed set-up (an assumption, `BLOCK_SETUP_CYCLES`) plus its multicast latency.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
from wse_core import PerfModel, Prediction, Traffic, WaferSpec, Work
from wse_core.wafer import Wafer

__all__ = [
    "BLOCK_SETUP_CYCLES",
    "CALIBRATION",
    "EFFICIENCY",
    "FLOPS_PER_CELL",
    "KernelCost",
    "calibrated_efficiency",
    "predict",
    "traced_traffic",
    "wave25_cost",
    "wave25_traffic",
]

# Flops per cell. jacobi: 3 pair sums + 3 scalings + 2 + 1 adds + 1 scaling = 10.
# spmv7: 6 adds for pairs/sums + 4 multiplies + 3 adds (diag u - off) = 13.
# bicgstab: 2 SpMVs (26, fp16), AXPYs p (4), s (2), x (4), r (2) in fp16; 4 fp32 dots (8).
# heat: spmv7 + source add + scale + add = 16.  wave25: 51 (Jacquelin et al.).
FLOPS_PER_CELL = {
    "jacobi": 10.0,
    "heat": 16.0,
    "spmv7": 13.0,
    "bicgstab": 38.0,
    "bicgstab_dots": 8.0,
    "wave25": 51.0,
}

# Jacquelin et al., Table II (shared/REFERENCES.md, calibration set): WSE-2, nz = 1000,
# 1000 steps: (nx, ny, seconds).
CALIBRATION = ((200, 200, 0.0750), (400, 400, 0.0763), (600, 600, 0.0761), (755, 994, 0.0761))
CALIBRATION_NZ = 1000
CALIBRATION_STEPS = 1000
CALIBRATION_BLOCK_Z = 100  # Z block assumed for the calibration runs (not published)
BLOCK_SETUP_CYCLES = 20.0  # assumption: starting one Z block's vector operations


@dataclasses.dataclass(frozen=True, kw_only=True)
class KernelCost:
    """Per-cell counts of one step plus its traced traffic."""

    flops: dict[str, float]  # per cell, by dtype
    sram_read_words: float  # per cell
    sram_write_words: float  # per cell
    word_bytes: int  # bytes per SRAM word of this kernel's fields
    traffic: Traffic  # whole step, busiest link already per-direction
    reductions: int = 0  # wafer-wide reductions per step (broadcast back too)
    blocks: int = 1  # Z blocks per step


def traced_traffic(wafer: Wafer, fn: Callable[..., Any], *args: Any) -> tuple[Traffic, Traffic]:
    """(traffic for the model, plain total): trace `fn(*args)` abstractly and group by op.

    Busiest link: the largest per-direction total (shift/multicast N, S, E, W use separate
    links). Words, word-hops and latency are summed.
    """
    with wafer.traffic.scope() as entries:
        jax.eval_shape(fn, *args)
    total = sum(entries, Traffic())
    by_dir: dict[str, float] = {}
    for e in entries:
        key = e.op[-1] if e.op.startswith(("shift", "multicast")) else e.op
        by_dir[key] = by_dir.get(key, 0.0) + e.max_words_per_pe
    busiest = max(by_dir.values(), default=0.0)
    return dataclasses.replace(total, op="step", max_words_per_pe=busiest), total


def _streaming_work(cost: KernelCost, nz: int) -> Work:
    return Work(
        flops={d: v * nz for d, v in cost.flops.items()},
        sram_read_bytes=cost.sram_read_words * cost.word_bytes * nz,
        sram_write_bytes=cost.sram_write_words * cost.word_bytes * nz,
        link_words=cost.traffic.max_words_per_pe,
    )


def _latency_cycles(spec: WaferSpec, cost: KernelCost) -> float:
    # Traced latency counts a reduction once; its broadcast back doubles it.
    lat = cost.traffic.latency_hops * spec.hop_latency_cycles
    return lat + cost.blocks * BLOCK_SETUP_CYCLES


def predict(
    spec: WaferSpec,
    cost: KernelCost,
    nz: int,
    *,
    efficiency: float | None = None,
    reduction_hops: float = 0.0,
) -> Prediction:
    """Wafer time of one step: streaming cycles / efficiency + latency chains.

    `reduction_hops` is the one-way latency of one wafer-wide reduction (added once more per
    reduction for the broadcast back).
    """
    eff = EFFICIENCY if efficiency is None else efficiency  # noqa: F821 (set at import)
    p = PerfModel(spec).predict(_streaming_work(cost, nz))
    latency = _latency_cycles(spec, cost) + cost.reductions * reduction_hops
    return dataclasses.replace(
        p,
        compute_cycles=p.compute_cycles / eff,
        sram_cycles=p.sram_cycles / eff,
        fabric_cycles=p.fabric_cycles / eff,
        latency_cycles=latency,
        overlap=p.overlap + f"; streaming at {eff:.3f} of the model rate (calibrated)",
    )


def wave25_cost(traffic: Traffic, blocks: int) -> KernelCost:
    """25-point step: 9 Z reads + u_prev + (v dt)^2 + 16 buffered halos read; 1 + 16 written."""
    return KernelCost(
        flops={"fp32": FLOPS_PER_CELL["wave25"]},
        sram_read_words=27,
        sram_write_words=17,
        word_bytes=4,
        traffic=traffic,
        blocks=blocks,
    )


def wave25_traffic(nz: int, block_z: int) -> Traffic:
    """The 25-point step's traffic on a defect-free grid, per PE (what tracing records:
    4 multicasts of k = 4 per block; busiest link 4 words per cell; 4 hops each)."""
    blocks = nz // block_z
    return Traffic(
        "step",
        words=4 * nz,
        word_hops=16 * nz,
        max_words_per_pe=4 * nz,
        latency_hops=16 * blocks,
        count=4 * blocks,
    )


def calibrated_efficiency(spec: WaferSpec, block_z: int = CALIBRATION_BLOCK_Z) -> float:
    """Model streaming cycles / published cycles, averaged over the Table II grids."""
    ratios = []
    nz = CALIBRATION_NZ
    cost = wave25_cost(wave25_traffic(nz, block_z), nz // block_z)
    for _, _, seconds in CALIBRATION:
        model = predict(spec, cost, nz, efficiency=1.0)
        streaming = max(model.compute_cycles, model.sram_cycles, model.fabric_cycles)
        measured = seconds / CALIBRATION_STEPS * spec.clock_hz
        ratios.append(streaming / (measured - model.latency_cycles))
    return sum(ratios) / len(ratios)


def _wse2() -> WaferSpec:
    from wse_core import preset

    return preset("wse2")


# The calibrated factor (see the module docstring): fitted on Table II only.
EFFICIENCY = calibrated_efficiency(_wse2())
