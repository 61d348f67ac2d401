"""The swept constants a prediction read, listed beside it: one line and one JSON entry each.

Contract. A prediction is honest only if every constant behind it is named, sourced or
fitted, and every assumption that moves it is listed beside it with its plausible range.
`listed(reads)` turns what the pricing read (`wse_core.cost.reads.Reads`, recorded while it
priced) into `Listed` entries, in the registry's order (`wse_core.cost.mechanisms.CONSTANTS`,
then the system constants): every constant with a sweep that moves what was priced,
whatever its basis (hunt 69: `hop_latency_cycles`, "sourced", moved a BiCGSTAB row 15% and
was never listed), and every one changed by `--assume` that it read. Every surface prints
them the same way: `assumed_lines` ("clock_hz = 1.1e+09 Hz (swept 8.5e+08..1.1e+09;
assumed)"; a constant read and changed by `--assume` that moves no figure says so, "read,
moves nothing here", and its JSON entry has "moves": false: hunt 82, jobs18 L1, `--assume
gpu.ib_latency_s` on a plan of one node was listed among the constants moving it),
`assumed_list` (the same as JSON), `assumed_compact` (one line for a summary, the ranges
left to `wse experiments assumptions`). A surface that knows the keys it prices
without recording them gives them with `reads_of(spec, keys)`.

`unread(changes, reads, calibration)` names the `--assume` keys a prediction never read
(hunt 69: `--assume memoryx_bytes_per_s=7.5e10` was listed beside a serving plan it did not
touch); `calibration.FIELD` counts as read where the prediction priced a fitted constant and
the calibration's fit read FIELD on its wafers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from wse_core.cost.assumptions import (
    CALIBRATION_PREFIX,
    active,
    constant_of,
    system_constant,
    system_keys,
    value_of,
)
from wse_core.cost.mechanisms import CALIBRATION_KEYS, CONSTANTS, SYSTEM_FITTED
from wse_core.cost.reads import FITTED, Reads, fit_reads
from wse_core.errors import SpecError

__all__ = [
    "Listed",
    "listed",
    "assumed_lines",
    "assumed_list",
    "assumed_compact",
    "compact",
    "reads_of",
    "read_keys",
    "unread",
    "refuse_unread",
    "COMPACT_HINT",
]

COMPACT_HINT = "ranges: wse experiments assumptions"


@dataclasses.dataclass(frozen=True)
class Listed:
    """One constant listed beside a prediction: the values it priced (several where several
    wafers were priced), its units, plausible range and basis, and whether `--assume`
    changed it (one of those values is the assumed one)."""

    key: str
    values: tuple[float, ...]
    units: str
    sweep: tuple[float, float]
    basis: str
    assumed: bool = False
    moves: bool = True  # False: read, changed by --assume, and no figure priced moves with it

    def _values(self) -> str:
        return ", ".join(f"{v:.4g}" for v in self.values)

    def line(self) -> str:
        """ "NAME = value unit (swept lo..hi; basis)", "; --assume" when changed, "; read,
        moves nothing here" when it moves no figure."""
        lo, hi = self.sweep
        unit = f"[{self.units}]" if self.units[:1].isdigit() else self.units  # "0 or 1"
        how = f"{self.basis}; --assume" if self.assumed else self.basis
        still = "" if self.moves else "; read, moves nothing here"
        return f"{self.key} = {self._values()} {unit} (swept {lo:g}..{hi:g}; {how}{still})"

    def to_dict(self) -> dict[str, Any]:
        one = len(self.values) == 1
        return {"name": self.key, "value": self.values[0] if one else list(self.values),
                "units": self.units, "sweep": list(self.sweep), "basis": self.basis,
                "assumed": self.assumed, "moves": self.moves}  # fmt: skip

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Listed:
        """The entry `to_dict` gave (a JSON's "assumed" printed again: `compact`)."""
        value = d["value"]
        values = tuple(value) if isinstance(value, list | tuple) else (float(value),)
        return cls(d["name"], values, d["units"], tuple(d["sweep"]), d["basis"], d["assumed"],
                   bool(d.get("moves", True)))  # fmt: skip


def _order() -> list[str]:
    return [*CONSTANTS, *system_keys()]


def listed(reads: Reads | None, changed: Mapping[str, float] | None = None) -> tuple[Listed, ...]:
    """The entries of `reads` (module contract); `changed`: the `--assume` changes (default:
    the active ones)."""
    if not reads:
        return ()
    changed = active() if changed is None else changed
    out = []
    for key in _order():
        c = constant_of(key)
        moves = key in reads.moving and bool(c.sweep)
        if key not in reads.values or not (moves or key in changed):
            continue
        sweep = (min(c.sweep), max(c.sweep)) if c.sweep else (min(c.limits), max(c.limits))
        values = tuple(sorted(reads.values[key]))
        # assumed where a value priced is the one assumed (hunt 70: a wafer built outside
        # the `assume` block was marked --assume beside the preset's value)
        assumed = key in changed and float(changed[key]) in values
        basis, sweep = _system_fit(key, values, c.basis, sweep)
        out.append(Listed(key, values, c.units, sweep, basis, assumed, key in reads.moving))
    return tuple(out)


def _system_fit(
    key: str, values: tuple[float, ...], basis: str, sweep: tuple[float, float]
) -> tuple[str, tuple[float, float]]:
    """The basis and range of a constant one system's wafer fits (`SYSTEM_FITTED`), where a
    value priced is that fit: "sourced; fitted on CS-3", the range widened to hold the fit
    (session 84: CS-3's hop at 2.04 was listed "swept 1..2; sourced")."""
    if not any(key in keys for keys in SYSTEM_FITTED.values()):
        return basis, sweep
    from wse_core.cost.calibration import current  # it sits above this module

    fits = {s: f[key] for s, f in current().by_system.items() if key in f}
    on = [s for s, v in fits.items() if any(abs(v - x) <= 1e-12 * abs(v) for x in values)]
    if not on:
        return basis, sweep
    held = [fits[s] for s in on]
    return f"{basis}; fitted on {', '.join(on)}", (min(sweep[0], *held), max(sweep[1], *held))


def assumed_lines(reads: Reads | None, changed: Mapping[str, float] | None = None) -> list[str]:
    """One line per listed constant (`Listed.line`)."""
    return [e.line() for e in listed(reads, changed)]


def assumed_list(
    reads: Reads | None, changed: Mapping[str, float] | None = None
) -> list[dict[str, Any]]:
    """The listed constants as JSON (`Listed.to_dict`)."""
    return [e.to_dict() for e in listed(reads, changed)]


def assumed_compact(reads: Reads | None, changed: Mapping[str, float] | None = None) -> str:
    """The listed constants on one line (`compact`)."""
    return compact(listed(reads, changed))


def compact(entries: Iterable[Listed]) -> str:
    """ "assumed: clock_hz 1.1e+09, hop_latency_cycles 1, ... (ranges: wse experiments
    assumptions)": listed constants on one line for a summary ("" when none)."""
    entries = tuple(entries)
    if not entries:
        return ""
    parts = [f"{e.key}{'*' if e.assumed else ''} {e._values()}" for e in entries]
    star = "; * changed by --assume" if any(e.assumed for e in entries) else ""
    return f"assumed: {', '.join(parts)} ({COMPACT_HINT}{star})"


def reads_of(spec: Any, keys: Iterable[str]) -> Reads:
    """`keys` as a surface that prices them without recording declares them: each at its
    value on `spec` (a system constant: the value in force), each moving."""
    out, system = Reads(), set(system_keys())
    for key in keys:
        constant_of(key)  # an unknown key is refused here, as `--assume` refuses it
        out.add(key, system_constant(key) if key in system else value_of(spec, key))
    return out


def read_keys(reads: Reads | None, calibration: Any = None) -> list[str]:
    """Every key a prediction read, in the registry's order, then `calibration.FIELD` for
    each field its calibration's fit read where it priced a fitted constant."""
    if not reads:
        return []
    keys = [k for k in _order() if k in reads.values]
    return keys + [CALIBRATION_PREFIX + k for k in _refitting(reads, calibration)]


def _refitting(reads: Reads, calibration: Any) -> list[str]:
    """The calibration wafers' fields that refit what `reads` priced (none when it priced no
    fitted constant)."""
    fit = fit_reads(calibration)
    if not fit or not any(k in reads.values for k in FITTED):
        return []
    return [k for k in CONSTANTS if k in fit.values and k not in FITTED + CALIBRATION_KEYS]


def unread(changes: Mapping[str, float], reads: Reads | None, calibration: Any = None) -> list[str]:
    """The keys of `changes` (`--assume`) that the prediction of `reads` never read."""
    known = set(read_keys(reads, calibration))
    return [k for k in changes if k not in known]


def refuse_unread(
    changes: Mapping[str, float], reads: Reads | None, calibration: Any, what: str
) -> None:
    """A SpecError naming the `--assume` keys `what` (a command, an experiment) never read
    (`unread`) and the keys it does read; nothing when it read them all."""
    names = unread(changes, reads, calibration)
    if not names:
        return
    keys = read_keys(reads, calibration)
    own = [k for k in keys if not k.startswith(CALIBRATION_PREFIX)]
    fields = [k.removeprefix(CALIBRATION_PREFIX) for k in keys if k not in own]
    also = f", and {CALIBRATION_PREFIX}FIELD for {', '.join(fields)}" if fields else ""
    them, they = ("it", "it") if len(names) == 1 else ("them", "they")
    raise SpecError(
        f"--assume {', '.join(names)}: {what} does not read {them}, so {they} would move "
        f"nothing it prices; it reads {', '.join(own) or 'no assumption'}{also}"
    )
