"""Which registered constants a prediction read, and which of them move it over their sweep.

Contract. `with recording() as got: ...` collects, inside the block, every constant of the
registry (`wse_core.cost.mechanisms.CONSTANTS`, the settings, the system constants of
`wse_core.cost.assumptions.register_system_constant`) that the pricing read: `got.values`
maps each key to the values read (several where several wafers were priced), and
`got.moving` names those whose plausible range (`Constant.sweep`) moves what was priced.
Three kinds of reader note them, so that no surface keeps its own list (hunt 69: `wse plan`
listed no wafer constant, the experiment tables only the `assumed` ones of a mechanism's
map, and rows listed `clock_hz` that it did not move):

- `Pricing` (`note_work`, for each `Work` it prices): each constant whose mechanism the
  phase counts, moving where a value at either end of its sweep changes the phase's cycles
  (an instruction's SRAM port that never binds does not; `overlap` where two streams run);
  `clock_hz` for any cycles; and, for a fitted constant taken from a calibration, what
  refits it (`note_calibration`: the settings and fitted constants the fit read);
- `wse_core.cost.assumptions.setting` and `system_constant` (the Table II Z block,
  `gpu.kernel_s`);
- a pricer above wse_core that reads a spec field itself (`read(key, value)`: the MemoryX
  and SwarmX rates of a training step).

A phase is judged alone: a constant that moves a phase off the critical path (the faster
branch of an overlap, a region that is not the pipeline's bottleneck) is listed though the
whole may not move (tiny-llama's SRAM ports in `wse plan infer`): a list errs on the side of
naming. `wse_systems`' tests reprice plans at every sweep end and find them exact.

Recorders nest: a read inside an inner block is the outer block's too; `isolated=True`
starts a fresh stack (the calibration's fit, whose reads are its own: `fit_reads`).
Outside any block `read` costs one context-variable lookup. `wse_core.cost.listing` turns a
`Reads` into the lines and JSON listed beside a prediction.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from wse_core.cost.mechanisms import (
    CALIBRATION_KEYS,
    CONSTANTS,
    CORE_MECHANISMS,
    LATENCY_MECHANISMS,
)

if TYPE_CHECKING:
    from wse_core.cost.work import Op, Work

__all__ = [
    "Reads",
    "merged",
    "recording",
    "reading",
    "read",
    "note_work",
    "note_calibration",
    "recorded_fit",
    "fit_reads",
]

FITTED = tuple(k for k, c in CONSTANTS.items() if c.basis == "fitted")


class Reads:
    """The constants a prediction read: key -> the set of values read (`values`), and the
    keys whose sweep moves it (`moving`; a key read once moving and once not is moving)."""

    def __init__(self) -> None:
        self.values: dict[str, set[float]] = {}
        self.moving: set[str] = set()

    def add(self, key: str, value: float, moves: bool = True) -> None:
        self.values.setdefault(key, set()).add(float(value))
        if moves:
            self.moving.add(key)

    def merge(self, other: Reads) -> None:
        for key, values in other.values.items():
            for v in values:
                self.add(key, v, key in other.moving)

    def __bool__(self) -> bool:
        return bool(self.values)


def merged(*parts: Reads | None) -> Reads:
    """One `Reads` of all of `parts` (a row priced from two systems' figures: a speedup)."""
    out = Reads()
    for part in parts:
        if part:
            out.merge(part)
    return out


_STACK: contextvars.ContextVar[tuple[Reads, ...]] = contextvars.ContextVar("wse_reads", default=())


@contextlib.contextmanager
def recording(*, isolated: bool = False) -> Iterator[Reads]:
    """Collect the constants read inside the block (module contract)."""
    got = Reads()
    token = _STACK.set((*(() if isolated else _STACK.get()), got))
    try:
        yield got
    finally:
        _STACK.reset(token)


def reading() -> bool:
    """Whether some block is recording (a pricer may skip its notes when not)."""
    return bool(_STACK.get())


def read(key: str, value: float, moves: bool = True) -> None:
    """Note that the pricing read `key` at `value` (`moves`: its sweep moves the result)."""
    for got in _STACK.get():
        got.add(key, value, moves)


# What each fit of the calibration read, by the id of its `Calibration` (`recorded_fit`)
_FITS: dict[int, Reads] = {}


def recorded_fit(fit: Callable[[], Any]) -> Any:
    """`fit()`, a fit of the calibration, with what it read kept apart (`fit_reads`), not
    noted for the prediction that asked for it (later ones read the cached fit:
    `wse_core.cost.calibration` keeps each fit for good, so its id is never another's)."""
    with recording(isolated=True) as got:
        calibration = fit()
    _FITS[id(calibration)] = got
    return calibration


def fit_reads(calibration: Any) -> Reads | None:
    """What the fit of `calibration` read: the settings, fitted constants and calibration
    wafers' fields that refit it (None: no fit of `calibration.current()`)."""
    return _FITS.get(id(calibration))


def note_calibration(
    calibration: Any, moves: bool = True, own: Mapping[str, float] | None = None,
    system_only: bool = False,
) -> None:  # fmt: skip
    """A fitted constant was priced from `calibration` (`moves`: it moved the prediction):
    what refits it is read too (the settings and fitted constants its fit read,
    `fit_reads`). `own`: the priced system's own fit (`Calibration.by_system`), listed at
    its values, never at the WSE-2 fit's (issue 41: a CS-3 prediction listed
    dsd_issue_cycles at its own 2.14 and WSE-2's 11.49); `system_only`: the constant priced
    is one of `own`, whose rows (WaferLLM's MeshGEMV on a CS-3) read only `own`'s four, so
    the WSE-2 fit's constants and settings, which no longer move them, are not listed; of
    `own` only those an assumption holds on the rows' wafer too (`FITTED`'s) refit them."""
    fit = fit_reads(calibration)
    if not fit:
        return
    for key, value in (own or {}).items():  # an assumption holds only the WSE-2-fitted
        if key in FITTED:  # constants on every wafer, the rows' too: they refit the others
            read(key, value, moves and key in fit.moving)
    if system_only:
        return
    fitted = calibration.values  # the fit read its iterates too: the values it settled on
    for key, values in fit.values.items():
        if own and key in own:
            continue
        if key in CALIBRATION_KEYS or key in FITTED:
            for v in [fitted[key]] if key in fitted else values:
                read(key, v, moves and key in fit.moving)


# ---- one phase priced: which constants move its cycles (`Pricing.mechanisms`) -------------


def _streams(c: Mapping[str, float]) -> tuple[float, float, float]:
    """The core's instruction stream, the SRAM ports' and the router's, in cycles."""
    return sum(c[k] for k in CORE_MECHANISMS), c["sram"], c["link"]


def _phase(c: Mapping[str, float], overlap: float) -> float:
    """A phase's cycles from its mechanisms (`wse_core.cost.pricing.Cost.cycles`)."""
    parts = _streams(c)
    return (max(parts) if overlap else sum(parts)) + sum(c[k] for k in LATENCY_MECHANISMS)


def _simd_at(ops: tuple[Op, ...], spec: Any, key: str, value: float) -> float:
    """The ops' element cycles with `key` at `value` (an instruction's own bounds rescaled)."""
    bound = {"sram_read_bytes_per_cycle": "sram_read", "sram_write_bytes_per_cycle": "sram_write",
             "fp32_mul_width": "simd"}.get(key)  # fmt: skip
    scale = value / getattr(spec, key) if getattr(spec, key) else 1.0
    total = 0.0
    for op in ops:
        bounds = op.bounds(spec)
        if bound in bounds and (bound != "simd" or _fp32_mul(op)):
            bounds[bound] *= scale
        per = value if key == f"{op.kind}_cycles" else None  # sqrt_cycles, div_cycles
        total += op.element_cycles(spec, bounds=bounds, per_element=per)
    return total


def _fp32_mul(op: Op) -> bool:
    return op.kind in ("mul", "fmac") and op.dtype == "fp32"


# The constants an instruction's elements are priced with beyond its ports: which ops use each
_OP_CONSTANTS: Mapping[str, Callable[[Op], bool]] = {
    "fp32_mul_width": _fp32_mul,
    "sqrt_cycles": lambda op: op.kind == "sqrt",
    "div_cycles": lambda op: op.kind == "div",
}


def _candidates(work: Work, s: Any, c: Mapping[str, float]) -> dict[str, Callable]:
    """Each constant the phase counts -> its mechanisms' cycles at another value of it."""
    out: dict[str, Callable[[float], dict[str, float]]] = {}
    linear = {"dsd_issue_cycles": ("dsd_issue", work.instructions),
              "task_activation_cycles": ("task_activation", work.task_activations),
              "scalar_instruction_cycles": ("scalar", work.scalar_instructions),
              "control_instruction_cycles": ("control", work.control_instructions),
              "router_switch_cycles": ("router_switch", work.router_switches),
              "hop_latency_cycles": ("hop", work.latency_hops)}  # fmt: skip
    for key, (mech, count) in linear.items():
        if count:
            out[key] = _scaled(mech, count)
    if work.relay_stages:
        out["ramp_latency_cycles"] = lambda v: {"relay": work.relay_stages * (2 * v + 1)}
    rb, wb = work.sram_read_bytes, work.sram_write_bytes
    reads = rb or any(op.reads for op in work.ops)
    if reads:
        out["sram_read_bytes_per_cycle"] = lambda v: {
            "sram": max(rb / v, wb / s.sram_write_bytes_per_cycle),
            "simd": _simd_at(work.ops, s, "sram_read_bytes_per_cycle", v)}  # fmt: skip
    if wb or any(op.mem_writes for op in work.ops):
        out["sram_write_bytes_per_cycle"] = lambda v: {
            "sram": max(rb / s.sram_read_bytes_per_cycle, wb / v),
            "simd": _simd_at(work.ops, s, "sram_write_bytes_per_cycle", v)}  # fmt: skip
    for key, uses in _OP_CONSTANTS.items():
        if any(op.elements and uses(op) for op in work.ops):
            out[key] = _simd_of(work.ops, s, key)
    return out


def _scaled(mech: str, count: float) -> Callable[[float], dict[str, float]]:
    """A mechanism's cycles at another value of its cost a count (`_candidates`)."""
    return lambda v: {mech: count * v}


def _simd_of(ops: Any, s: Any, key: str) -> Callable[[float], dict[str, float]]:
    """The SIMD cycles of `ops` at another value of the width or port `key`."""
    return lambda v: {"simd": _simd_at(ops, s, key, v)}


def note_work(work: Work, s: Any, c: Mapping[str, float], calibration: Any) -> None:
    """Note what pricing `work` on `s` (the spec with the fitted constants in place) into the
    mechanism cycles `c` read, and whether each constant's sweep moves the phase."""
    base = _phase(c, s.overlap)
    # a system's own fitted fields (CS-3's hop and ramp latencies, DSD issue and control
    # instruction), where priced from the fit
    own = getattr(calibration, "by_system", {}).get(getattr(s, "system", ""), {})
    own = {k: v for k, v in own.items() if getattr(s, k, None) == v}  # priced, not held
    for key, at in _candidates(work, s, c).items():
        now, sweep = getattr(s, key), CONSTANTS[key].sweep
        moves = any(_phase({**c, **at(v)}, s.overlap) != base
                    for v in (min(sweep), max(sweep)) if v != now) if sweep else False  # fmt: skip
        read(key, now, moves)
        if own.get(key) == now:
            note_calibration(calibration, moves, own, system_only=True)
        elif key in FITTED and key in getattr(calibration, "values", {}):
            note_calibration(calibration, moves, own)
    if any(work.links.values()) or any(op.fabric_in for op in work.ops):
        read("link_bytes_per_cycle", s.link_bytes_per_cycle, False)  # no sweep: published
    if base:
        read("clock_hz", s.clock_hz)
    if sum(1 for x in _streams(c) if x) > 1:  # overlap = 0 adds them
        read("overlap", s.overlap)
    if work.host_io_bytes:
        read("host_io_bytes_per_s", s.host_io_bytes_per_s, False)
    if work.system_hops:
        read("system_latency_s", s.system_latency_s)
