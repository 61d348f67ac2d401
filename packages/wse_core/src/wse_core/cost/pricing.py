"""Pricing: mechanisms counted on the busiest PE of each phase -> cycles per mechanism ->
seconds, with the fitted constants of a calibration given to it, and one phase algebra.

It sits below the calibration (`wse_core.cost.calibration` fits its constants by pricing the
calibration cases here) and imports no case: `wse_core.cost.perf.PerfModel` is `Pricing` with
the calibration in force by default, for every shell.

Contract (the mechanism API). A kernel describes one phase of its run as a `Work`
(`wse_core.cost.work`): on the phase's busiest PE, the DSD instructions it issues (`Op`: kind,
dtype, vector length, count, stride, `fabric_in` when an operand streams from the fabric),
SRAM bytes, 32-bit words per link direction (plus "ramp", router <-> own core), router hops
on the longest dependent path (`latency_hops`), dependent relay stages through cores
(`relay_stages`), task activations, and off-wafer bytes and system passes. `Pricing`
prices each mechanism with one constant of the spec (`wse_core.cost.mechanisms` lists them with
units, basis and source; `wse_core.cost.calibration` supplies the fitted ones):

    simd            = sum over ops of count * ceil(length / rate) * per_element, the rate
                      the slowest of each instruction's own bounds (`Op.bounds`: SIMD width,
                      its SRAM read and write ports, its fabric port, one accumulator)
    dsd_issue       = DSD instructions issued * dsd_issue_cycles
    task_activation = task_activations * task_activation_cycles
    scalar          = scalar_instructions * scalar_instruction_cycles
    control         = control_instructions * control_instruction_cycles
    sram            = max(read_bytes / read_bytes_per_cycle, write_bytes / write_bytes_per_cycle)
    link            = max over directions (ramp included) of words * 4 / link_bytes_per_cycle
    hop             = latency_hops * hop_latency_cycles
    relay           = relay_stages * (2 * ramp_latency_cycles + 1)
    router_switch   = router_switches * router_switch_cycles
    fixed           = fixed_cycles (only where no mechanism is known)
    host_io         = host_io_bytes / host_io_bytes_per_s + system_hops * system_latency_s

No efficiency divides any of them. The core's instruction stream (simd + dsd_issue +
task_activation + scalar + control) is `compute`; with the spec's `overlap = 1` the core,
the SRAM ports and the router stream at once, so a phase takes
max(compute, sram, link) + hop + relay + router_switch + fixed + host_io (Luczynski et al.'s
max(C, E/N + L) + (2 T_R + 1) D, with L outside the max); with `overlap = 0` they add up.
`Cost.mechanisms` gives every mechanism's cycles; `Timing.by_mechanism()` sums the cycles
that set the run's time by mechanism (of an overlapped group, only the slowest part's).

Phases combine with one algebra: `serial(a, b, ...)` (one after the other: times add) and
`overlap(a, b, ...)` (on separate resources at once: the slowest sets the time), each with a
`repeat`. `Pricing.evaluate(phases)` returns a `Timing` tree whose leaves carry their
`Cost` and bound. Every shell wraps the tree in a `wse_core.cost.report.RunReport`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Literal

from wse_core.cost.mechanisms import CORE_MECHANISMS, LATENCY_MECHANISMS
from wse_core.cost.reads import note_work, reading
from wse_core.cost.work import LINK_DIRECTIONS, Op, Work, require_count
from wse_core.errors import WseError
from wse_core.hw.frozen_mapping import FrozenMapping
from wse_core.hw.spec import WaferSpec

if TYPE_CHECKING:
    from wse_core.cost.calibration import Calibration

__all__ = [
    "OVERLAP",
    "LINK_DIRECTIONS",
    "Op",
    "Work",
    "Cost",
    "Phase",
    "Phases",
    "Timing",
    "Pricing",
    "serial",
    "overlap",
]

OVERLAP = (
    "phase = max(compute, sram, link) + hop + relay + router switch + host I/O: a PE's "
    "instruction stream, memory ports and router stream at once; hop chains, relay stages, "
    "router switch reconfigurations and off-wafer I/O are serial"
)


@dataclasses.dataclass(frozen=True)
class Cost:
    """Predicted cycles of one phase by mechanism (`wse_core.cost.mechanisms.MECHANISMS`; host I/O
    converted to cycles at the clock), the resources they make up, and the phase's time."""

    mechanisms: Mapping[str, float]
    host_io_s: float
    clock_hz: float
    busiest_link: str = "-"
    overlap: float = 1.0

    def _sum(self, keys) -> float:
        return sum(self.mechanisms.get(k, 0.0) for k in keys)

    @property
    def compute_cycles(self) -> float:
        """The core's instruction stream: elements, issue overhead, task activations."""
        return self._sum(CORE_MECHANISMS)

    @property
    def sram_cycles(self) -> float:
        return self.mechanisms.get("sram", 0.0)

    @property
    def fabric_cycles(self) -> float:
        return self.mechanisms.get("link", 0.0)

    @property
    def latency_cycles(self) -> float:
        return self._sum(LATENCY_MECHANISMS)

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

    def timed_mechanisms(self) -> dict[str, float]:
        """Cycles by mechanism that set this phase's time (they sum to seconds * clock): of
        the overlapped streams only the slowest counts."""
        keep: list[str] = [*LATENCY_MECHANISMS, "host_io"]
        streams = {"compute": CORE_MECHANISMS, "sram": ("sram",), "fabric": ("link",)}
        if self.overlap:
            slow = max(streams, key=lambda r: self._sum(streams[r]))
            keep += streams[slow]
        else:
            keep += [k for ks in streams.values() for k in ks]
        return {k: self.mechanisms[k] for k in keep if self.mechanisms.get(k)}

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
            "mechanism_cycles": dict(self.mechanisms),
        }


@dataclasses.dataclass(frozen=True)
class Phase:
    """A named `Work`, done `repeat` times one after another (`repeat` a finite number >= 0:
    WseError at construction; hunt 65: a repeat of -1 priced negative seconds)."""

    name: str
    work: Work
    repeat: float = 1.0

    def __post_init__(self) -> None:
        require_count(f"Phase {self.name!r}: repeat", self.repeat)


@dataclasses.dataclass(frozen=True)
class Phases:
    """Phases run one after another (`serial`) or at once on separate resources (`overlap`),
    the whole group `repeat` times."""

    mode: Literal["serial", "overlap"]
    parts: tuple[Phase | Phases, ...]
    name: str = ""
    repeat: float = 1.0

    def __post_init__(self) -> None:
        if self.mode not in ("serial", "overlap"):
            raise WseError(f"Phases mode must be 'serial' or 'overlap', got {self.mode!r}")
        require_count(f"Phases {self.name or self.mode!r}: repeat", self.repeat)

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

    @property
    def per_s(self) -> float:
        """Repetitions of the whole tree per second: 1 / seconds, infinite for zero."""
        return 1.0 / self.seconds if self.seconds > 0 else float("inf")

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

    def _sum_tree(self, leaf: Callable[[Timing], dict[str, float]]) -> dict[str, float]:
        """`leaf(node)` of every leaf, times the repeats above it, summed by key; of an
        overlap only the slowest part counts, since it sets the time."""
        if not self.children:
            return leaf(self)
        kids = self.children
        if self.mode == "overlap":
            kids = (max(kids, key=lambda c: c.seconds),)
        out: dict[str, float] = {}
        for kid in kids:
            for key, v in kid._sum_tree(leaf).items():
                out[key] = out.get(key, 0.0) + v * self.repeat
        return out

    def by_bound(self) -> dict[str, float]:
        """Seconds of the run set by each resource: leaf times summed by their bound."""
        return self._sum_tree(lambda t: {t.bound: t.seconds})

    def by_leaf(self, key: Callable[[str], str] = str) -> dict[str, float]:
        """Seconds of the run set by each leaf, summed by `key(leaf name)` (of an overlap
        only the slowest part counts): what sets the time, part by part."""
        return self._sum_tree(lambda t: {key(t.name): t.seconds})

    def by_mechanism(self) -> dict[str, float]:
        """Cycles of the run by mechanism (all repeats; host I/O at the clock): leaves'
        `Cost.timed_mechanisms` summed, of an overlap only the slowest part. They add up to
        the run's seconds times the clock."""

        def leaf(t: Timing) -> dict[str, float]:
            mech = t.cost.timed_mechanisms() if t.cost is not None else {}
            return {k: v * t.repeat for k, v in mech.items()}

        return self._sum_tree(leaf)

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
class Pricing:
    """Prices `Work` and evaluates `Phases` with one spec's constants, the fitted ones taken
    from the calibration given (None: the spec's own values), a fitted constant an `assume`
    block holds at its held value. `wse_core.cost.perf.PerfModel`: the calibration in force."""

    spec: WaferSpec
    calibration: Calibration | None = None

    def calibration_in_force(self) -> Calibration | None:
        """The calibration whose fitted constants `rates` uses (None: the spec's own)."""
        return self.calibration

    @property
    def rates(self) -> WaferSpec:
        """The spec with the calibration's fitted constants in place and those an `assume`
        block holds (`wse_core.cost.assumptions.held`: on every wafer priced, whatever spec was
        given; hunt 70), under the assumptions in force at each call (hunt 74: not the first
        call's): what `cost` uses, built once for each state of the assumptions."""
        from wse_core.cost.assumptions import active, held  # it sits above pricing
        from wse_core.cost.unapplied import warn_unapplied

        state = active()  # what the calibration in force and the held values follow
        memo = self.__dict__.get("_rates_memo")
        if memo is None or memo[0] != state:  # by value: each state builds its rates once
            cal = self.calibration_in_force()
            values = {**(cal.for_spec(self.spec) if cal is not None else {}), **held()}
            memo = (dict(state), self.spec.replace(**values) if values else self.spec)
            object.__setattr__(self, "_rates_memo", memo)  # frozen: a cache, not a field
            warn_unapplied(self.spec)  # hunt 77: a wafer field assumed that the spec lacks
        return memo[1]

    def mechanisms(self, work: Work) -> tuple[dict[str, float], str]:
        """Cycles of `work` by mechanism (host I/O in cycles at the clock) and its busiest
        link direction (the module docstring's table)."""
        s = self.rates
        links = {d: w for d, w in work.links.items() if w > 0}
        link = max(links, key=links.__getitem__) if links else "-"
        host_s = work.host_io_bytes / s.host_io_bytes_per_s + work.system_hops * s.system_latency_s
        cycles = {
            "simd": sum(op.element_cycles(s) for op in work.ops),
            "dsd_issue": work.instructions * s.dsd_issue_cycles,
            "task_activation": work.task_activations * s.task_activation_cycles,
            "scalar": work.scalar_instructions * s.scalar_instruction_cycles,
            "control": work.control_instructions * s.control_instruction_cycles,
            "sram": max(
                work.sram_read_bytes / s.sram_read_bytes_per_cycle,
                work.sram_write_bytes / s.sram_write_bytes_per_cycle,
            ),
            "link": (links[link] * 4.0 / s.link_bytes_per_cycle) if links else 0.0,
            "hop": work.latency_hops * s.hop_latency_cycles,
            "relay": work.relay_stages * (2.0 * s.ramp_latency_cycles + 1.0),
            "router_switch": work.router_switches * s.router_switch_cycles,
            "fixed": work.fixed_cycles,
            "host_io": host_s * s.clock_hz,
        }
        if reading():  # a surface lists what moved its figure (wse_core.cost.reads)
            note_work(work, s, cycles, self.calibration_in_force())
        return cycles, link

    def cost(self, work: Work) -> Cost:
        cycles, link = self.mechanisms(work)
        s = self.spec
        return Cost(
            mechanisms=FrozenMapping(cycles),  # hashed by value: a Timing may be a jit static
            host_io_s=cycles["host_io"] / s.clock_hz,
            clock_hz=s.clock_hz,
            busiest_link=link,
            overlap=s.overlap,
        )

    def evaluate(self, phases: Phases | Phase) -> Timing:
        """Seconds and bound of every node of the phase tree; a `Work` that several leaves
        share (a pipeline's stages, a round's blocks) is priced once."""
        return self._evaluate(phases, {})

    def _evaluate(self, phases: Phases | Phase, costs: dict[int, Cost]) -> Timing:
        if isinstance(phases, Phase):  # by id: the tree, alive for the call, holds each Work
            c = costs.get(id(phases.work))
            if c is None:
                c = costs[id(phases.work)] = self.cost(phases.work)
            return Timing(phases.name, c.seconds * phases.repeat, c.bound, phases.repeat, c)
        kids = tuple(self._evaluate(p, costs) for p in phases.parts)
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
