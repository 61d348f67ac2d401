"""The performance model: instructions, memory, fabric and hops counted on the busiest PE
of each phase -> cycles per resource -> seconds, with one calibration and one phase algebra.

Contract. A kernel describes one phase of its run as a `Work`: on the phase's busiest PE,
the DSD operations it issues (`Op`: kind, dtype, vector length, count, stride), the SRAM
bytes it reads and writes, the fabric words that leave it per link direction (`links`,
"N" / "S" / "E" / "W", plus "ramp" for words between the router and its own core), the
longest chain of dependent hops, fixed cycles, and the phase's off-wafer bytes. `PerfModel`
prices it with the spec's SIMD table (`WaferSpec.simd_width`) and rates:

    compute = sum over ops of count * (dsd_issue_cycles + ceil(length / width) * per_elem)
    sram    = max(read_bytes / read_bytes_per_cycle, write_bytes / write_bytes_per_cycle)
    fabric  = max over directions of words[d] * 4 / link_bytes_per_cycle   (busiest link)
    latency = latency_hops * hop_latency_cycles + fixed_cycles
    host    = host_io_bytes / host_io_bytes_per_s + system_hops * system_latency_s

then divides compute, SRAM and fabric (streaming and latency) by the calibration's one
efficiency per resource (`wse_core.calibration`), and combines them by the spec's overlap
assumption: with `overlap = 1` the datapath, memory ports and router run at once, so a
phase takes max(compute, sram, fabric) + latency + host; with `overlap = 0` they add up.

Phases combine with one algebra: `serial(a, b, ...)` (one after the other: times add) and
`overlap(a, b, ...)` (on separate resources at once: the slowest sets the time), each with a
`repeat`. `PerfModel.evaluate(phases)` returns a `Timing` tree whose leaves carry their
`Cost` and bound. Every shell wraps the tree in a `wse_core.report.RunReport`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Literal

from wse_core.spec import OP_KINDS, WaferSpec
from wse_core.traffic import Traffic

if TYPE_CHECKING:
    from wse_core.calibration import Calibration

__all__ = [
    "OVERLAP",
    "Op",
    "Work",
    "Cost",
    "Phase",
    "Phases",
    "Timing",
    "PerfModel",
    "serial",
    "overlap",
]

OVERLAP = (
    "phase = max(compute, sram, fabric) + latency + host I/O: a PE's datapath, memory ports "
    "and router stream at once; hop latency chains and off-wafer I/O are serial"
)
LINK_DIRECTIONS = ("N", "S", "E", "W", "ramp")


@dataclasses.dataclass(frozen=True)
class Op:
    """`count` DSD instructions of `kind` on `dtype`, each over `length` elements at `stride`.

    `length` may be fractional when it is an average over PEs or blocks; then the ceil is
    skipped (the average of ceil is not the ceil of the average, so kernels that know their
    exact vector lengths pass integers)."""

    kind: str
    dtype: str
    length: float
    count: float = 1.0
    stride: int = 1

    def __post_init__(self) -> None:
        if self.kind not in OP_KINDS:
            raise ValueError(f"unknown DSD op kind {self.kind!r}; known: {', '.join(OP_KINDS)}")
        if self.length < 0 or self.count < 0:
            raise ValueError(f"Op length and count must be >= 0, got {self.length}, {self.count}")

    def cycles(self, spec: WaferSpec) -> float:
        """Issue cycles of these instructions on one PE (without calibration)."""
        if self.count == 0 or self.length == 0:
            return 0.0
        width = spec.simd_width(self.kind, self.dtype, self.stride)
        per_elem = {"sqrt": spec.sqrt_cycles, "div": spec.div_cycles}.get(self.kind, 1.0)
        n = self.length / width
        steps = math.ceil(n - 1e-9) if float(self.length).is_integer() else n
        return self.count * (spec.dsd_issue_cycles + steps * per_elem)

    def scaled(self, k: float) -> Op:
        return dataclasses.replace(self, count=self.count * k)


def _add_maps(a: Mapping[str, float], b: Mapping[str, float], k: float = 1.0) -> dict:
    out = dict(a)
    for key, v in b.items():
        out[key] = out.get(key, 0.0) + v * k
    return out


@dataclasses.dataclass(frozen=True, kw_only=True)
class Work:
    """One phase's counts on its busiest PE, plus the phase's off-wafer bytes."""

    ops: tuple[Op, ...] = ()
    sram_read_bytes: float = 0.0
    sram_write_bytes: float = 0.0
    links: Mapping[str, float] = dataclasses.field(default_factory=dict)  # words per direction
    latency_hops: float = 0.0
    fixed_cycles: float = 0.0
    host_io_bytes: float = 0.0  # off-wafer, whole system
    system_hops: float = 0.0  # activation passes between systems (system_latency_s each)

    def __post_init__(self) -> None:
        bad = set(self.links) - set(LINK_DIRECTIONS)
        if bad:
            raise ValueError(f"unknown link directions {sorted(bad)}; use {LINK_DIRECTIONS}")

    @classmethod
    def from_traffic(cls, traffic: Traffic, **kwargs: object) -> Work:
        """The fabric work of a traced traffic count (per-direction links and hops)."""
        return cls(links=dict(traffic.links), latency_hops=traffic.latency_hops, **kwargs)  # type: ignore[arg-type]

    def __add__(self, other: Work) -> Work:
        return Work(
            ops=self.ops + other.ops,
            sram_read_bytes=self.sram_read_bytes + other.sram_read_bytes,
            sram_write_bytes=self.sram_write_bytes + other.sram_write_bytes,
            links=_add_maps(self.links, other.links),
            latency_hops=self.latency_hops + other.latency_hops,
            fixed_cycles=self.fixed_cycles + other.fixed_cycles,
            host_io_bytes=self.host_io_bytes + other.host_io_bytes,
            system_hops=self.system_hops + other.system_hops,
        )

    def scaled(self, k: float) -> Work:
        """This work repeated k times."""
        return Work(
            ops=tuple(op.scaled(k) for op in self.ops),
            sram_read_bytes=self.sram_read_bytes * k,
            sram_write_bytes=self.sram_write_bytes * k,
            links={d: v * k for d, v in self.links.items()},
            latency_hops=self.latency_hops * k,
            fixed_cycles=self.fixed_cycles * k,
            host_io_bytes=self.host_io_bytes * k,
            system_hops=self.system_hops * k,
        )

    def flops(self) -> float:
        """Floating-point operations of the ops (FMAC counts 2, moves and converts 0)."""
        per = {"fmac": 2.0, "fmac_mixed": 2.0, "move": 0.0, "convert": 0.0, "shift": 0.0}
        return sum(op.count * op.length * per.get(op.kind, 1.0) for op in self.ops)

    def ops_by_kind(self) -> dict[str, float]:
        """Elements processed per "kind.dtype" (for tables and tests)."""
        out: dict[str, float] = {}
        for op in self.ops:
            key = f"{op.kind}.{op.dtype}"
            out[key] = out.get(key, 0.0) + op.count * op.length
        return out

    def to_dict(self) -> dict[str, object]:
        return {
            "ops": self.ops_by_kind(),
            "instructions": sum(op.count for op in self.ops),
            "sram_read_bytes": self.sram_read_bytes,
            "sram_write_bytes": self.sram_write_bytes,
            "links": dict(self.links),
            "latency_hops": self.latency_hops,
            "fixed_cycles": self.fixed_cycles,
            "host_io_bytes": self.host_io_bytes,
            "system_hops": self.system_hops,
        }


@dataclasses.dataclass(frozen=True)
class Cost:
    """Predicted cycles per resource of one phase (calibrated), and its time."""

    compute_cycles: float
    sram_cycles: float
    fabric_cycles: float
    latency_cycles: float
    host_io_s: float
    clock_hz: float
    busiest_link: str = "-"
    overlap: float = 1.0

    @property
    def streaming_cycles(self) -> float:
        parts = (self.compute_cycles, self.sram_cycles, self.fabric_cycles)
        return max(parts) if self.overlap else sum(parts)

    @property
    def cycles(self) -> float:
        return self.streaming_cycles + self.latency_cycles

    @property
    def seconds(self) -> float:
        return self.cycles / self.clock_hz + self.host_io_s

    @property
    def bound(self) -> str:
        """Which resource sets the time: compute, sram, fabric, latency or host_io."""
        parts = self.parts_s()
        return max(parts, key=parts.__getitem__)

    def parts_s(self) -> dict[str, float]:
        c = self.clock_hz
        return {
            "compute": self.compute_cycles / c,
            "sram": self.sram_cycles / c,
            "fabric": self.fabric_cycles / c,
            "latency": self.latency_cycles / c,
            "host_io": self.host_io_s,
        }

    def to_dict(self) -> dict[str, object]:
        return {
            **{f"{k}_s": v for k, v in self.parts_s().items()},
            "cycles": self.cycles,
            "seconds": self.seconds,
            "bound": self.bound,
            "busiest_link": self.busiest_link,
        }


@dataclasses.dataclass(frozen=True)
class Phase:
    """A named `Work`, done `repeat` times one after another."""

    name: str
    work: Work
    repeat: float = 1.0


@dataclasses.dataclass(frozen=True)
class Phases:
    """Phases run one after another (`serial`) or at once on separate resources (`overlap`),
    the whole group `repeat` times."""

    mode: Literal["serial", "overlap"]
    parts: tuple[Phase | Phases, ...]
    name: str = ""
    repeat: float = 1.0

    def leaves(self) -> Iterator[tuple[Phase, float]]:
        """Every leaf phase with its total repeat count (products down the tree)."""
        for p in self.parts:
            if isinstance(p, Phase):
                yield p, p.repeat * self.repeat
            else:
                for leaf, k in p.leaves():
                    yield leaf, k * self.repeat

    def total_work(self) -> Work:
        """Every leaf's work times its repeats (for counts; overlap does not shrink work)."""
        out = Work()
        for leaf, k in self.leaves():
            out = out + leaf.work.scaled(k)
        return out


def serial(*parts: Phase | Phases, name: str = "", repeat: float = 1.0) -> Phases:
    """Phases that run one after another: their times add."""
    return Phases("serial", tuple(parts), name, repeat)


def overlap(*parts: Phase | Phases, name: str = "", repeat: float = 1.0) -> Phases:
    """Phases that run at once on separate resources: the slowest sets the time."""
    return Phases("overlap", tuple(parts), name, repeat)


@dataclasses.dataclass(frozen=True)
class Timing:
    """The evaluated phase tree: seconds (all repeats included) and the bound of each node."""

    name: str
    seconds: float
    bound: str
    repeat: float = 1.0
    cost: Cost | None = None  # leaves: one repetition's cost
    mode: str = "phase"
    children: tuple[Timing, ...] = ()

    def rows(self, depth: int = 0) -> Iterator[tuple[int, Timing]]:
        """(depth, node) in order, for tables."""
        yield depth, self
        for c in self.children:
            yield from c.rows(depth + 1)

    def leaf(self, name: str) -> Timing:
        """The first node called `name` (KeyError if none)."""
        for _, node in self.rows():
            if node.name == name:
                return node
        raise KeyError(name)

    def by_bound(self) -> dict[str, float]:
        """Seconds of the run set by each resource: leaf times summed by their bound (of an
        overlap, only the slowest part counts, since it sets the time)."""
        if not self.children:
            return {self.bound: self.seconds}
        kids = self.children
        if self.mode == "overlap":
            kids = (max(kids, key=lambda c: c.seconds),)
        out: dict[str, float] = {}
        for kid in kids:
            for bound, sec in kid.by_bound().items():
                out[bound] = out.get(bound, 0.0) + sec * self.repeat
        return out

    def critical(self) -> Timing:
        """The leaf that sets the time: down the largest child of each node."""
        node = self
        while node.children:
            node = max(node.children, key=lambda c: c.seconds)
        return node

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "name": self.name,
            "mode": self.mode,
            "seconds": self.seconds,
            "bound": self.bound,
            "repeat": self.repeat,
        }
        if self.cost is not None:
            out["cost"] = self.cost.to_dict()
        if self.children:
            out["children"] = [c.to_dict() for c in self.children]
        return out


@dataclasses.dataclass(frozen=True)
class PerfModel:
    """Prices `Work` and evaluates `Phases` with one spec's rates and one calibration
    (default: `wse_core.calibration.current()`, fitted lazily on the calibration set)."""

    spec: WaferSpec
    calibration: Calibration | None = None

    def _cal(self) -> Calibration:
        if self.calibration is not None:
            return self.calibration
        from wse_core.calibration import current

        return current()

    def cost(self, work: Work) -> Cost:
        s, cal = self.spec, self._cal()
        compute = sum(op.cycles(s) for op in work.ops)
        sram = max(
            work.sram_read_bytes / s.sram_read_bytes_per_cycle,
            work.sram_write_bytes / s.sram_write_bytes_per_cycle,
        )
        links = {d: w for d, w in work.links.items() if w > 0}
        link = max(links, key=links.__getitem__) if links else "-"
        fabric = (links[link] * 4.0 / s.link_bytes_per_cycle) if links else 0.0
        latency = work.latency_hops * s.hop_latency_cycles
        return Cost(
            compute_cycles=compute / cal.compute,
            sram_cycles=sram / cal.sram,
            fabric_cycles=fabric / cal.fabric,
            latency_cycles=latency / cal.fabric + work.fixed_cycles,
            host_io_s=work.host_io_bytes / s.host_io_bytes_per_s
            + work.system_hops * s.system_latency_s,
            clock_hz=s.clock_hz,
            busiest_link=link,
            overlap=s.overlap,
        )

    def evaluate(self, phases: Phases | Phase) -> Timing:
        """Seconds and bound of every node of the phase tree."""
        if isinstance(phases, Phase):
            c = self.cost(phases.work)
            return Timing(phases.name, c.seconds * phases.repeat, c.bound, phases.repeat, c)
        kids = tuple(self.evaluate(p) for p in phases.parts)
        inner = (
            sum(k.seconds for k in kids)
            if phases.mode == "serial"
            else max((k.seconds for k in kids), default=0.0)
        )
        top = max(kids, key=lambda k: k.seconds).bound if kids else "-"
        name = phases.name or phases.mode
        return Timing(name, inner * phases.repeat, top, phases.repeat, None, phases.mode, kids)

    def seconds(self, phases: Phases | Phase | Work) -> float:
        if isinstance(phases, Work):
            return self.cost(phases).seconds
        return self.evaluate(phases).seconds
