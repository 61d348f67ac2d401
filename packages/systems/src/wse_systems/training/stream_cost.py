"""The off-wafer side of a training step: weights in, gradients out, MemoryX's update.

Contract. `stream_work(pl, n_params)` is n_params in the compute dtype through MemoryX and
SwarmX to (or from) every wafer: bytes at min(memoryx_bytes_per_s, swarmx_bytes_per_s), plus
one `system_latency_s` per level of the SwarmX tree (`tree_levels(num_csx,
spec.swarmx_fanout)`) on every streamed item. `Streams(pl, on)` names the phases a placement
streams (all empty when `on` is False: the compute-only step, or a resident placement's
weights). With `accumulate` (a micro-batch before the step's last) MemoryX adds the
reduced gradient to the step's sum instead of updating (phase `memoryx_accumulate`, at the
update's pace). `PARTS` maps each stream phase to the part of the step it belongs to.
`wafer_update` is fp32 Adam on the wafer (resident placement).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from wse_core import Op, Phase, WaferSpec, Work
from wse_core.cost.mechanisms import CONSTANTS
from wse_core.cost.reads import read, reading

from wse_systems.training.placement import StepPlacement

__all__ = ["ADAM_FP32_OPS", "PARTS", "tree_levels", "stream_work", "wafer_update", "Streams",
           "stream_bytes"]  # fmt: skip

# stream phase name -> the part of a step it is (every other leaf is the wafer's compute)
PARTS = {
    "weights_in": "weights_in",
    "gradients_out": "gradients_out",
    "gradients_in": "gradients_out",  # resident: the reduced gradient coming back
    "memoryx_update": "memoryx_update",
    "memoryx_accumulate": "memoryx_update",
}

ADAM_FP32_OPS = (("fmac", 4), ("mul", 1), ("sqrt", 1), ("div", 1))  # per parameter, on a PE


def tree_levels(num_csx: int, fanout: float = 2.0) -> int:
    """Levels of a SwarmX tree of `fanout` that reaches `num_csx` systems (0 for one)."""
    levels, reach = 0, 1.0
    while reach < num_csx:
        reach, levels = reach * fanout, levels + 1
    return levels


def stream_work(pl: StepPlacement, n_params: int) -> Work:
    """n_params in the compute dtype through MemoryX / SwarmX to (or from) every wafer.

    Work prices host I/O at the spec's host rate; the bytes are scaled so that the time is
    bytes / min(memoryx, swarmx) (equal on every preset: the scale is then 1)."""
    s = pl.spec
    rate = min(s.memoryx_bytes_per_s, s.swarmx_bytes_per_s)
    nbytes = n_params * pl.num.operand_bytes
    if reading():  # Work prices what follows from them, not these constants themselves
        _note_stream_constants(s, pl.num_csx)
    return Work(
        host_io_bytes=nbytes * s.host_io_bytes_per_s / rate,
        system_hops=tree_levels(pl.num_csx, s.swarmx_fanout),
    )


def _note_stream_constants(s, num_csx: int) -> None:
    """The MemoryX and SwarmX constants a stream read (`wse_core.cost.reads`), each moving it
    where an end of its sweep changes the slower rate or the tree's levels."""
    rates = {k: getattr(s, k) for k in ("memoryx_bytes_per_s", "swarmx_bytes_per_s")}
    for key, value in rates.items():
        other = min(v for k, v in rates.items() if k != key)
        ends = (min(CONSTANTS[key].sweep), max(CONSTANTS[key].sweep))
        read(key, value, any(min(e, other) != min(value, other) for e in ends))
    fan = CONSTANTS["swarmx_fanout"]
    if len({tree_levels(num_csx, e) for e in fan.limits}) == 1:
        return  # hunt 77: no fanout moves this tree (one system: none), so none is read
    levels = tree_levels(num_csx, s.swarmx_fanout)
    moves = any(tree_levels(num_csx, e) != levels for e in (min(fan.sweep), max(fan.sweep)))
    read("swarmx_fanout", s.swarmx_fanout, moves)


def wafer_update(pl: StepPlacement, n_params: int) -> Work:
    """fp32 Adam on the wafer (resident placement): each PE updates its share."""
    n = n_params / pl.spec.num_pes
    return Work(ops=tuple(Op(k, "fp32", n, count=c) for k, c in ADAM_FP32_OPS))


@dataclasses.dataclass(frozen=True)
class Streams:
    """The off-wafer phases of a placement (all empty: the compute-only step)."""

    pl: StepPlacement
    on: bool = True
    accumulate: bool = False  # a micro-batch before the step's last: MemoryX only sums

    def weights_in(self, n: int) -> Phase:
        live = self.on and not self.pl.resident
        return Phase("weights_in", stream_work(self.pl, n) if live else Work())

    def gradients_out(self, n: int) -> Phase:
        live = self.on and (not self.pl.resident or self.pl.num_csx > 1)
        return Phase("gradients_out", stream_work(self.pl, n) if live else Work())

    def returned(self, n: int) -> Phase:
        """Streamed: the next layer's weights; resident: the reduced gradient coming back."""
        if self.pl.resident:
            live = self.on and self.pl.num_csx > 1
            return Phase("gradients_in", stream_work(self.pl, n) if live else Work())
        return self.weights_in(n)

    def update(self, n: int) -> Phase:
        live = self.on and not self.pl.resident
        name = "memoryx_accumulate" if self.accumulate else "memoryx_update"
        return Phase(name, stream_work(self.pl, n) if live else Work())


def stream_bytes(report: Any, spec: WaferSpec) -> dict[str, float]:
    """Bytes each stream phase of a predicted step (`report`, a RunReport) moves per replica:
    each `PARTS` leaf's host I/O bytes times its repeat, at the stream's rate (min(memoryx,
    swarmx)) over the host I/O rate the leaf was priced at (what a run's metrics count)."""
    rate = min(spec.memoryx_bytes_per_s, spec.swarmx_bytes_per_s)
    out: dict[str, float] = {}
    for leaf, k in report.phases.leaves():
        if leaf.name in PARTS:
            got = k * leaf.work.host_io_bytes * rate / spec.host_io_bytes_per_s
            out[leaf.name] = out.get(leaf.name, 0.0) + got
    return out
