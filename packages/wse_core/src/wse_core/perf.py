"""The performance model: counted work on the busiest PE -> cycles and seconds per phase.

PEs run in parallel, so a phase takes as long as its busiest PE. `Work` holds that PE's
counts for one phase (flops by dtype, SRAM bytes read and written, fabric words through its
busiest link, the latency chain in hops) plus the phase's off-wafer I/O bytes. `PerfModel`
turns them into cycles with the spec's rates:

    compute = sum_d flops[d] / flops_per_cycle[d]
    sram    = max(read_bytes / read_bytes_per_cycle, write_bytes / write_bytes_per_cycle)
    fabric  = link_words * 4 / link_bytes_per_cycle
    latency = latency_hops * hop_latency_cycles

Overlap assumption (stated in every prediction): compute, SRAM and fabric streaming overlap
fully (a PE's datapath, memory ports and router run concurrently), so a phase takes their
maximum; the latency chain and off-wafer I/O do not overlap with it and are added. A kernel
that knows better (e.g. weight streaming overlapping host I/O with compute) combines phases
itself with `Prediction.overlapped`.

No constant in this module is fitted to a published result; calibration factors that a
kernel derives from the calibration set in shared/REFERENCES.md live with that kernel and
say so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from wse_core.spec import WaferSpec
from wse_core.traffic import Traffic

__all__ = ["Work", "Prediction", "PerfModel", "OVERLAP"]

OVERLAP = (
    "max(compute, sram, fabric) + latency + host_io: compute, SRAM and fabric streaming "
    "overlap fully; fabric latency chains and off-wafer I/O are serial"
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Work:
    """One phase's work on the busiest PE (and the phase's off-wafer bytes)."""

    flops: Mapping[str, float] = dataclasses.field(default_factory=dict)  # by dtype
    sram_read_bytes: float = 0.0
    sram_write_bytes: float = 0.0
    link_words: float = 0.0  # 32-bit words through the busiest link
    latency_hops: float = 0.0
    host_io_bytes: float = 0.0  # off-wafer, whole wafer

    @classmethod
    def from_traffic(cls, traffic: Traffic, **kwargs: object) -> Work:
        """Fabric work of a traffic count, plus any other fields."""
        return cls(link_words=traffic.max_words_per_pe, latency_hops=traffic.latency_hops, **kwargs)  # type: ignore[arg-type]

    def __add__(self, other: Work) -> Work:
        flops = dict(self.flops)
        for k, v in other.flops.items():
            flops[k] = flops.get(k, 0.0) + v
        return Work(
            flops=flops,
            sram_read_bytes=self.sram_read_bytes + other.sram_read_bytes,
            sram_write_bytes=self.sram_write_bytes + other.sram_write_bytes,
            link_words=self.link_words + other.link_words,
            latency_hops=self.latency_hops + other.latency_hops,
            host_io_bytes=self.host_io_bytes + other.host_io_bytes,
        )

    def scaled(self, k: float) -> Work:
        return Work(
            flops={d: v * k for d, v in self.flops.items()},
            sram_read_bytes=self.sram_read_bytes * k,
            sram_write_bytes=self.sram_write_bytes * k,
            link_words=self.link_words * k,
            latency_hops=self.latency_hops * k,
            host_io_bytes=self.host_io_bytes * k,
        )


@dataclasses.dataclass(frozen=True)
class Prediction:
    """Predicted cycles per part and the total time of one phase on the wafer."""

    compute_cycles: float
    sram_cycles: float
    fabric_cycles: float
    latency_cycles: float
    host_io_s: float
    clock_hz: float
    overlap: str = OVERLAP

    @property
    def cycles(self) -> float:
        streaming = max(self.compute_cycles, self.sram_cycles, self.fabric_cycles)
        return streaming + self.latency_cycles

    @property
    def seconds(self) -> float:
        return self.cycles / self.clock_hz + self.host_io_s

    @property
    def bound(self) -> str:
        """Which part sets the time: compute, sram, fabric, latency or host_io."""
        parts = {
            "compute": self.compute_cycles / self.clock_hz,
            "sram": self.sram_cycles / self.clock_hz,
            "fabric": self.fabric_cycles / self.clock_hz,
            "latency": self.latency_cycles / self.clock_hz,
            "host_io": self.host_io_s,
        }
        return max(parts, key=parts.__getitem__)

    def overlapped(self, other: Prediction) -> Prediction:
        """Two phases on separate resources at once: the slower one's time, per part max."""
        return dataclasses.replace(
            self,
            compute_cycles=max(self.compute_cycles, other.compute_cycles),
            sram_cycles=max(self.sram_cycles, other.sram_cycles),
            fabric_cycles=max(self.fabric_cycles, other.fabric_cycles),
            latency_cycles=max(self.latency_cycles, other.latency_cycles),
            host_io_s=max(self.host_io_s, other.host_io_s),
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "compute_cycles": self.compute_cycles,
            "sram_cycles": self.sram_cycles,
            "fabric_cycles": self.fabric_cycles,
            "latency_cycles": self.latency_cycles,
            "host_io_s": self.host_io_s,
            "cycles": self.cycles,
            "seconds": self.seconds,
            "bound": self.bound,
            "overlap": self.overlap,
        }


@dataclasses.dataclass(frozen=True)
class PerfModel:
    """Turns `Work` into a `Prediction` with one spec's rates."""

    spec: WaferSpec

    def predict(self, work: Work) -> Prediction:
        s = self.spec
        compute = sum(n / s.flops_per_cycle_for(d) for d, n in work.flops.items())
        sram = max(
            work.sram_read_bytes / s.sram_read_bytes_per_cycle,
            work.sram_write_bytes / s.sram_write_bytes_per_cycle,
        )
        return Prediction(
            compute_cycles=float(compute),
            sram_cycles=float(sram),
            fabric_cycles=work.link_words * 4.0 / s.link_bytes_per_cycle,
            latency_cycles=work.latency_hops * s.hop_latency_cycles,
            host_io_s=work.host_io_bytes / s.host_io_bytes_per_s,
            clock_hz=s.clock_hz,
        )

    def seconds(self, work: Work) -> float:
        return self.predict(work).seconds

    def fabric(self, traffic: Traffic) -> Prediction:
        """Predicted time of a fabric traffic count alone."""
        return self.predict(Work.from_traffic(traffic))
