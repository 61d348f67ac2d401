"""Predicted wafer figures of a placed TLR-MVM: time per MVM and sustained bases bandwidth.

Contract: `predict(wafer, plan, op)` counts the busiest PE's work per phase (flops, SRAM
bytes) from the plan, the fabric traffic of each phase with `wse_core.fabric.count` (the
x broadcast, the ring allgather, the band, column or row sum), and turns each phase into time with
`wse_core.perf.PerfModel`. The phases depend on each other, so their times add; off-wafer
I/O (x in, y out) is a separate phase, reported apart because a stream of MVMs overlaps it
with the previous product. Complex arithmetic costs 8 real flops per multiply-add, counted
as fp32. `sustained_bytes_per_s` is the bytes of compressed bases (no padding) over the
on-wafer time — the paper's metric. `cluster` scales to `systems` CS-2s, each filled with
as many copies of the operator (frequency slices of a multi-dimensional convolution) as its
PE grid holds, all running at once. No constant here is fitted to a published result.
"""

from __future__ import annotations

import dataclasses

import jax
from wse_core import fabric
from wse_core.perf import PerfModel, Prediction, Work
from wse_core.spec import WaferSpec
from wse_core.wafer import Wafer

from wse_hpc.tlrmvm.compress import TlrOperator
from wse_hpc.tlrmvm.grouped import GroupedPlan
from wse_hpc.tlrmvm.packed import PackedPlan
from wse_hpc.tlrmvm.wafer import TlrPlan

__all__ = ["TlrPrediction", "predict", "cluster"]


@dataclasses.dataclass(frozen=True)
class TlrPrediction:
    phases: dict[str, Prediction]
    bases_bytes: int  # compressed bases read per MVM
    batch: int

    @property
    def wafer_s(self) -> float:
        """On-wafer time of one product (phases 0-3, no host I/O)."""
        return sum(p.seconds for k, p in self.phases.items() if k != "host_io")

    @property
    def with_io_s(self) -> float:
        return self.wafer_s + self.phases["host_io"].seconds

    @property
    def sustained_bytes_per_s(self) -> float:
        return self.bases_bytes / self.wafer_s

    def to_dict(self) -> dict[str, object]:
        return {
            "wafer_s": self.wafer_s,
            "with_io_s": self.with_io_s,
            "sustained_bytes_per_s": self.sustained_bytes_per_s,
            "bound": {k: p.bound for k, p in self.phases.items()},
            "phases_s": {k: p.seconds for k, p in self.phases.items()},
        }


def _traffic(wafer: Wafer, fn, per_pe: tuple[int, ...], dtype) -> Work:
    pr, pc = wafer.padded_shape
    x = jax.ShapeDtypeStruct((pr, pc, *per_pe), dtype, sharding=wafer.sharding(len(per_pe)))
    return Work.from_traffic(fabric.count(wafer, fn, x))


def _final_sum(wafer: Wafer, plan: TlrPlan | PackedPlan, dt) -> dict[str, Work]:
    """The last phase: the band sum (banded) or the column sum of the tile-row buffers."""
    ch, b = plan.chunk, plan.batch
    if isinstance(plan, PackedPlan):
        mt = plan.tiles[0]
        add = Work(flops={"fp32": 2.0 * (plan.tiles[1] + mt) * ch * b})
        return {
            "column_sum": add
            + _traffic(
                wafer, lambda x: fabric.allreduce(wafer, x, "sum", axis="col"), (mt, ch, b), dt
            )
        }
    if plan.max_band == 1:
        return {"band_sum": Work()}
    add = Work(flops={"fp32": 2.0 * (plan.max_band - 1) * ch * b})
    return {
        "band_sum": add
        + _traffic(wafer, lambda x: fabric.multicast(wafer, x, "N", plan.max_band - 1), (ch, b), dt)
    }


def _vhx_work(fma: float, w: int, nb: int, b: int, isz: int) -> Work:
    """Phase 1 on one PE: a (w x nb) V^H slice times b vectors of nb."""
    return Work(
        flops={"fp32": fma * w * nb * b},
        sram_read_bytes=(w * nb + nb * b) * isz,
        sram_write_bytes=w * b * isz,
    )


def _ring_work(wafer: Wafer, direction: str, ring: int, per_pe: tuple[int, int], dt) -> Work:
    """Phase 2: the reshuffle as a periodic ring allgather of `ring` PEs along `direction`."""
    if ring <= 1:
        return Work()
    hops = ring - 1
    return _traffic(
        wafer,
        lambda x: fabric.multicast(wafer, x, direction, hops, boundary="periodic"),
        per_pe,
        dt,
    )


def _grouped_phases(wafer: Wafer, plan: GroupedPlan, fma: float, dt) -> dict[str, Work]:
    """Every PE: w V rows (w x nb) in phase 1, each against the x piece of its tile column;
    w U rows in phase 3 into s partial y pieces; the s x pieces along PE rows, the ring
    allgather down PE columns, the s partial pieces summed along PE rows."""
    nb, w, b, ring, isz = plan.nb, plan.rank_chunk, plan.batch, plan.ring, plan.itemsize
    s = plan.windows
    return {
        "x_broadcast": _traffic(
            wafer, lambda x: fabric.broadcast(wafer, x, "row", 0), (s * nb, b), dt
        ),
        "phase1_vhx": _vhx_work(fma, w, nb, b, isz),
        "phase2_reshuffle": _ring_work(wafer, "S", ring, (w, b), dt),
        "phase3_uy": Work(
            flops={"fp32": fma * nb * w * b},
            sram_read_bytes=(nb * w + w * b) * isz,
            sram_write_bytes=s * nb * b * isz,
        ),
        "row_sum": Work(flops={"fp32": 2.0 * s * nb * b})
        + _traffic(wafer, lambda x: fabric.allreduce(wafer, x, "sum", axis="row"), (s * nb, b), dt),
    }


def predict(
    wafer: Wafer, plan: TlrPlan | PackedPlan | GroupedPlan, op: TlrOperator
) -> TlrPrediction:
    """Per-phase predictions for one product of `plan.batch` vectors on `wafer.spec`."""
    (m, n), nb, (_, nt), w, b = plan.shape, plan.nb, plan.tiles, plan.rank_chunk, plan.batch
    isz, cplx = plan.itemsize, plan.dtype.startswith("complex")
    fma = 8.0 if cplx else 2.0  # real flops per multiply-add
    dt = op.dtype
    model = PerfModel(wafer.spec)
    io = {"host_io": Work(host_io_bytes=(m + n) * b * isz)}
    if isinstance(plan, GroupedPlan):
        phases = {**_grouped_phases(wafer, plan, fma, dt), **io}
        return TlrPrediction({k: model.predict(v) for k, v in phases.items()}, op.bases_bytes, b)
    ch = plan.chunk
    phases = {
        "x_broadcast": _traffic(wafer, lambda x: fabric.broadcast(wafer, x, "col", 0), (nb, b), dt),
        "phase1_vhx": _vhx_work(fma, w, nb, b, isz),
        "phase2_reshuffle": _ring_work(wafer, "E", nt, (w, b), dt),
        "phase3_uy": Work(
            flops={"fp32": fma * nt * ch * w * b},
            sram_read_bytes=(nt * ch * w + nt * w * b) * isz,
            sram_write_bytes=ch * b * isz,
        ),
        **_final_sum(wafer, plan, dt),
        **io,
    }
    return TlrPrediction({k: model.predict(v) for k, v in phases.items()}, op.bases_bytes, b)


def cluster(
    pred: TlrPrediction, plan: TlrPlan | PackedPlan | GroupedPlan, spec: WaferSpec, *, systems: int
) -> dict:
    """Figures for `systems` wafers of `spec`, each filled with copies of the operator."""
    rows, cols = plan.grid
    copies = (spec.pe_rows // rows) * (spec.pe_cols // cols)
    io_s = pred.phases["host_io"].seconds * copies  # one system's I/O link is shared
    per_system = copies * pred.bases_bytes / pred.wafer_s
    return {
        "systems": systems,
        "copies_per_system": copies,
        "pes_used_per_system": copies * rows * cols,
        "time_per_mvm_s": pred.wafer_s,
        "bytes_per_s": systems * per_system,
        "io_serial_bytes_per_s": systems * copies * pred.bases_bytes / (pred.wafer_s + io_s),
    }
