"""What a phase does on its busiest PE, counted by mechanism: `Op` (DSD instructions) and `Work`.

Contract. A kernel never states a time. It counts, on the phase's busiest PE, each mechanism
the machine runs (`wse_core.cost.mechanisms` lists them with their constants):

- `Op`: `count` DSD instructions of one `kind` on one `dtype`, each over `length` elements at
  `stride`. Each instruction runs at the slowest of its own bounds (`Op.bounds`): the SIMD
  width of the spec's table (stride rules applied); its SRAM read port (`mem_reads` vector
  operands read per element, by default 1 for a unary kind, 2 for a binary kind or an FMAC
  whose multiplier is a scalar register; an SpMV's `y += d * x` reads 3) and write port
  (`mem_writes`, default 1); its fabric port (`fabric_in=True`: one operand streams from an
  input queue, one 32-bit wavelet per cycle, and replaces one memory read); `same_bank=True`
  when its two memory operands sit in banks with bank1 % 4 == bank2 % 4 (the SDK's bank
  rule: one element per cycle); `accumulate=True` when it reduces into one scalar
  accumulator (a dot product: each element depends on the last, one element per cycle).
  Each instruction pays `dsd_issue_cycles` once.
- `Work.scalar_instructions`: scalar (non-DSD) instructions of the kernel's own work, priced
  one instruction each at `scalar_instruction_cycles`, never as a length-1 DSD.
- `Work.control_instructions`: control flow between DSDs (a call, return, branch, compare of
  a role, DSR load or DSD base-address set), priced at `control_instruction_cycles`.
- `Work`: the ops, SRAM bytes read and written, 32-bit words per link direction (`links`:
  "N" / "S" / "E" / "W", and "ramp" for words between the router and its own core: the
  contention C of Luczynski et al.), the longest chain of router hops (`latency_hops`, L),
  dependent relay stages (`relay_stages`, D: a value that goes up a ramp, through a core and
  down again, 2 T_R + 1 cycles each), task activations, off-wafer bytes and passes between
  systems. `fixed_cycles` is only for a cost whose mechanism is not known; every use names
  why.

`wse_core.cost.perf.PerfModel` prices a `Work`; this module only counts. Re-exported by
`wse_core.cost.perf`.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Mapping
from numbers import Integral
from typing import TYPE_CHECKING

from wse_core.errors import WseError, shown, shown_int
from wse_core.hw.dtypes import DTYPE_BYTES, DTYPES, dtype_name
from wse_core.hw.frozen_mapping import FrozenMapping
from wse_core.hw.simd import OP_KINDS

if TYPE_CHECKING:
    from wse_core.hw.spec import WaferSpec
    from wse_core.hw.traffic import Traffic

__all__ = ["LINK_DIRECTIONS", "UNARY_KINDS", "Op", "Work", "require_count"]

LINK_DIRECTIONS = ("N", "S", "E", "W", "ramp")
# Kinds that read one vector operand (a scalar multiplier or none): 1 SRAM read per element.
UNARY_KINDS = ("move", "neg", "abs", "scale", "convert", "shift", "sqrt")
_LARGEST = sys.float_info.max  # a count past it prices as inf or overflows a float


def _number_shown(value: object) -> str:
    return shown_int(value) if isinstance(value, int) else shown(value, quote=False)


def require_count(what: str, value: object) -> None:
    """Refuse a count or repeat that is not a finite number >= 0 (WseError naming `what`).

    Hunt 65: a repeat of -1 or -100 hops priced negative seconds, a NaN length a NaN time,
    NaN link words 0 s (`max` skips NaN). One comparison: cheap enough for the many small
    `Work`s a pricing builds."""
    try:
        if 0 <= value <= _LARGEST:  # type: ignore[operator]
            return
    except (TypeError, ValueError):  # a str, a list, an array of many values
        got = f"{shown(repr(value), quote=False)} ({type(value).__name__})"
        raise WseError(f"{what} must be a finite number >= 0, got {got}") from None
    raise WseError(f"{what} must be a finite number >= 0, got {_number_shown(value)}")


@dataclasses.dataclass(frozen=True)
class Op:
    """`count` DSD instructions of `kind` on `dtype`, each over `length` elements at `stride`
    (`fabric_in`: one operand comes from a fabric input queue; `same_bank`: its two memory
    operands share a bank class).

    `length` may be fractional when it is an average over PEs or blocks; then the ceil is
    skipped (the average of ceil is not the ceil of the average, so kernels that know their
    exact vector lengths pass integers). `dtype` is one the SIMD table prices (`DTYPES`);
    `length`, `count`, `mem_reads` and `mem_writes` are finite numbers >= 0 and `stride` a
    signed integer (WseError, naming the field, at construction)."""

    kind: str
    dtype: str
    length: float
    count: float = 1.0
    stride: int = 1
    fabric_in: bool = False
    same_bank: bool = False
    accumulate: bool = False  # reduces into one scalar accumulator: 1 element per cycle
    mem_reads: float | None = None  # vector operands read from SRAM per element (None: kind's)
    mem_writes: float = 1.0  # vector results written to SRAM per element

    def __post_init__(self) -> None:
        if self.kind not in OP_KINDS:
            raise WseError(f"unknown DSD op kind {self.kind!r}; known: {', '.join(OP_KINDS)}")
        # hunt 65: "fp64" was accepted here and a KeyError at pricing
        if self.dtype not in DTYPES:
            alias = dtype_name(self.dtype)
            hint = f" (did you mean {alias!r}?)" if alias in DTYPES else ""
            raise WseError(f"unknown Op dtype {self.dtype!r}{hint}; use one of {', '.join(DTYPES)}")
        require_count("Op length", self.length)
        require_count("Op count", self.count)
        require_count("Op mem_writes", self.mem_writes)
        if self.mem_reads is not None:
            require_count("Op mem_reads", self.mem_reads)
        # a DSD stride is a signed whole number of elements (0 repeats one element)
        if type(self.stride) is not int and not isinstance(self.stride, Integral):
            raise WseError(f"Op stride must be an integer, got {_number_shown(self.stride)}")

    @property
    def issued(self) -> float:
        """DSD instructions issued (none for an empty op)."""
        return self.count if self.length > 0 else 0.0

    @property
    def elements(self) -> float:
        return self.count * self.length

    @property
    def reads(self) -> float:
        """Vector operands this instruction reads from SRAM per element."""
        if self.mem_reads is not None:
            return float(self.mem_reads)
        base = 1.0 if self.kind in UNARY_KINDS else 2.0
        return max(base - (1.0 if self.fabric_in else 0.0), 0.0)

    def bounds(self, spec: WaferSpec) -> dict[str, float]:
        """Elements per cycle each of this instruction's resources allows: `simd` (the
        table's width at its stride), `sram_read` / `sram_write` (its own ports), `fabric`
        (one wavelet per cycle from an input queue), `bank` (same bank class: 1) and
        `accumulator` (one scalar accumulator: 1). The slowest sets its rate."""
        size = DTYPE_BYTES[self.dtype]
        out = {"simd": spec.simd_width(self.kind, self.dtype, self.stride)}
        if self.reads > 0:
            out["sram_read"] = spec.sram_read_bytes_per_cycle / (self.reads * size)
        if self.mem_writes > 0:
            out["sram_write"] = spec.sram_write_bytes_per_cycle / (self.mem_writes * size)
        if self.fabric_in:
            out["fabric"] = spec.link_bytes_per_cycle / size
        if self.same_bank:
            out["bank"] = 1.0
        if self.accumulate:
            out["accumulator"] = 1.0
        return out

    def width(self, spec: WaferSpec) -> float:
        """Elements per cycle: the slowest of `bounds`."""
        return min(self.bounds(spec).values())

    def element_cycles(
        self, spec: WaferSpec, *, bounds: Mapping[str, float] | None = None,
        per_element: float | None = None,
    ) -> float:  # fmt: skip
        """Cycles of the elements at the rate of the slowest bound (`bounds`; given: those,
        and `per_element` cycles of a sqrt or div, as `wse_core.cost.reads` weighs a
        constant's sweep)."""
        if self.count == 0 or self.length == 0:
            return 0.0
        width = min((bounds or self.bounds(spec)).values())
        per_elem = {"sqrt": spec.sqrt_cycles, "div": spec.div_cycles}.get(self.kind, 1.0)
        per_elem = per_elem if per_element is None else per_element
        n = self.length / width
        steps = math.ceil(n - 1e-9) if float(self.length).is_integer() else n
        return self.count * steps * per_elem

    def cycles(self, spec: WaferSpec) -> float:
        """Core cycles of these instructions: their elements and their issue overhead."""
        return self.element_cycles(spec) + self.issued * spec.dsd_issue_cycles

    def scaled(self, k: float) -> Op:
        return dataclasses.replace(self, count=self.count * k)


def _add_maps(a: Mapping[str, float], b: Mapping[str, float], k: float = 1.0) -> dict:
    out = dict(a)
    for key, v in b.items():
        out[key] = out.get(key, 0.0) + v * k
    return out


_COUNTS = (
    "sram_read_bytes",
    "sram_write_bytes",
    "latency_hops",
    "relay_stages",
    "task_activations",
    "scalar_instructions",
    "control_instructions",
    "router_switches",
    "fixed_cycles",
    "host_io_bytes",
    "system_hops",
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Work:
    """One phase's counts on its busiest PE, plus the phase's off-wafer bytes. Every count
    and link word count is a finite number >= 0 (WseError, naming the field, at
    construction)."""

    ops: tuple[Op, ...] = ()
    sram_read_bytes: float = 0.0
    sram_write_bytes: float = 0.0
    links: Mapping[str, float] = dataclasses.field(default_factory=dict)  # words per direction
    latency_hops: float = 0.0  # L: router hops on the longest dependent path
    relay_stages: float = 0.0  # D: dependent core relays (2 T_R + 1 cycles each)
    task_activations: float = 0.0  # tasks started on the busiest PE
    scalar_instructions: float = 0.0  # scalar (non-DSD) instructions on the busiest PE
    control_instructions: float = 0.0  # control flow between DSDs (calls, branches, DSR loads)
    router_switches: float = 0.0  # dependent router switch reconfigurations (control wavelets)
    fixed_cycles: float = 0.0  # only where no mechanism is known (name it where used)
    host_io_bytes: float = 0.0  # off-wafer, whole system
    system_hops: float = 0.0  # activation passes between systems (system_latency_s each)

    def __post_init__(self) -> None:
        bad = set(self.links) - set(LINK_DIRECTIONS)
        if bad:
            raise WseError(f"unknown link directions {sorted(bad)}; use {LINK_DIRECTIONS}")
        for f in _COUNTS:
            require_count(f"Work {f}", getattr(self, f))
        for d, words in self.links.items():
            require_count(f"Work links[{d!r}]", words)
        # hunt 75: a frozen Work (and the Phases and RunReport holding it) hashes by value
        object.__setattr__(self, "links", FrozenMapping(self.links))

    @classmethod
    def from_traffic(cls, traffic: Traffic, exchanges: float = 0.0, **kwargs: object) -> Work:
        """The fabric work of a traced traffic count (per-direction links, hops and relays),
        plus one relay stage for each of its `exchanges`.

        A reduction's entry carries its own relays (`collectives.reduction`). A shift,
        multicast or broadcast entry carries none: the sending core's ramp up and the
        receiving core's ramp down (one relay stage, 2 T_R + 1 cycles: Luczynski et al.'s
        D = 1 of a flood, as `collectives.broadcast_line`) are paid once by each exchange
        of point-to-point ops that run together, which only the caller knows: a lone shift
        is `exchanges=1`, a halo's four shifts at once too. Hunt 81: `fabric-collectives`
        added the relay to its shift row and the tour's shift had none, 22 cycles and 17
        for the same 16-word shift."""
        return cls(
            links=dict(traffic.links),
            latency_hops=traffic.latency_hops,
            relay_stages=traffic.relay_stages + exchanges,
            **kwargs,  # type: ignore[arg-type]
        )

    def __add__(self, other: Work) -> Work:
        return Work(
            ops=self.ops + other.ops,
            links=_add_maps(self.links, other.links),
            **{f: getattr(self, f) + getattr(other, f) for f in _COUNTS},
        )

    def scaled(self, k: float) -> Work:
        """This work repeated k times."""
        return Work(
            ops=tuple(op.scaled(k) for op in self.ops),
            links={d: v * k for d, v in self.links.items()},
            **{f: getattr(self, f) * k for f in _COUNTS},
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

    @property
    def instructions(self) -> float:
        """DSD instructions issued."""
        return sum(op.issued for op in self.ops)

    @property
    def fabric_in_elements(self) -> float:
        """Elements taken from fabric input queues by the ops."""
        return sum(op.elements for op in self.ops if op.fabric_in)

    def to_dict(self) -> dict[str, object]:
        return {
            "ops": self.ops_by_kind(),
            "instructions": self.instructions,
            "fabric_in_elements": self.fabric_in_elements,
            "links": dict(self.links),
            **{f: getattr(self, f) for f in _COUNTS},
        }
