"""The `WaferSpec` class: the static hardware description every other part of the stack is
built from, a frozen dataclass validated when built (`wse_core.hw.spec` is its public home,
with the presets and spec files of `wse_core.hw.presets`).

Units are in the names: bytes, cycles, Hz, bytes per second. Flops per cycle are per PE and
by dtype (`"fp16"`, `"bf16"`, `"fp32"`). `_coerce` turns a spec file's text into a field's
type (finite numbers only). A spec is a value: equal and hashed by its fields, pickled and
deep-copied whole (its mappings are `FrozenMapping`s: hunt 74), so it may be a jit static argument.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from wse_core.errors import SpecError, ascii_only, shown_int, suggest
from wse_core.hw.dtypes import DTYPES
from wse_core.hw.frozen_mapping import FrozenMapping
from wse_core.hw.simd import OP_KINDS, SIMD_WSE2

__all__ = [
    "WaferSpec",
    "CODE_STACK_BYTES_PER_PE",
    "MAX_PE_SIDE",
    "MAX_SRAM_BYTES_PER_PE",
    "MAX_NAME_CHARS",
    "unseen_character",
    "expected_value",
]

# Bounds of the integer fields (hunt 55): past them no model of a wafer means anything, and
# a grid of 2**63 rows overflows every product the cost model forms from it.
MAX_PE_SIDE = 100_000  # PE rows / columns (spares, program rectangle): ~100x WSE-3's 762 x 1,176
MAX_SRAM_BYTES_PER_PE = 1 << 30  # 1 GiB: ~20,000x WSE-3's 48 KiB
MAX_NAME_CHARS = 1_000  # name, system, system_source
_TEXT_FIELDS = ("name", "system", "system_source")
# ASSUMED: bytes of each PE's SRAM its program holds, not data: the code, its stack and the
# runtime's (memcpy) buffers. The SDK ("A Conceptual View"): each PE "has its own executable
# code in its memory"; no size is published. 2 KiB, swept 0 .. 4 KiB (the sweep's source:
# `wse_core.cost.mechanisms`, code_stack_bytes_per_pe).
CODE_STACK_BYTES_PER_PE = 2048
# The integer fields' ranges, [low, high]: what __post_init__ holds them to and every
# refusal of one names (hunt 69: `--set pe_rows=1.5` said "must be a number").
_INT_RANGES = {
    "pe_rows": (1, MAX_PE_SIDE),
    "pe_cols": (1, MAX_PE_SIDE),
    "sram_bytes_per_pe": (1, MAX_SRAM_BYTES_PER_PE),
    "spare_rows": (0, MAX_PE_SIDE),
    "spare_cols": (0, MAX_PE_SIDE),
    "program_rows": (0, MAX_PE_SIDE),
    "program_cols": (0, MAX_PE_SIDE),
    "code_stack_bytes_per_pe": (0, MAX_SRAM_BYTES_PER_PE),
}
# Bounds past which a figure describes no machine (hunt 57): checked after the overflow
# check, so 1e308 Hz still says the totals overflow.
# (clock_hz, a cost constant, is held to its `limits` in `_check_constant_limits`)
_PLAUSIBLE = (
    ("system_peak_w", 0.0, 1e9, "W"),  # CS-3: ~2.3e4; a gigawatt is a power station
    ("system_usd_per_hour", 0.0, 1e6, "USD/h"),  # wse plan's --usd-per-system-hour bound
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class WaferSpec:
    """One wafer's hardware constants. All per-PE unless the name says otherwise."""

    name: str
    pe_rows: int  # logical PE grid rows (what software sees after repair)
    pe_cols: int  # logical PE grid columns
    sram_bytes_per_pe: int
    clock_hz: float
    sram_read_bytes_per_cycle: float  # per PE
    sram_write_bytes_per_cycle: float  # per PE
    link_bytes_per_cycle: float  # per fabric link, per direction
    flops_per_cycle: Mapping[str, float]  # per PE, by dtype
    host_io_bytes_per_s: float  # off-wafer I/O of one system
    spare_rows: int = 0  # physical rows beyond pe_rows used to repair defects
    spare_cols: int = 0  # physical columns beyond pe_cols used to repair defects
    defect_rate: float = 0.0  # expected fraction of dead physical PEs
    hop_latency_cycles: float = 1.0  # cycles per link traversal (Luczynski et al.; SDK scripts)
    ramp_latency_cycles: float = 2.0  # T_R, core <-> router one way (Luczynski et al.: ~2)
    memoryx_bytes_per_s: float = 150e9  # weight store -> wafer (assumption: the host I/O rate)
    swarmx_bytes_per_s: float = 150e9  # per-system broadcast / reduce link (same assumption)
    swarmx_fanout: float = 2.0  # assumption: a binary broadcast / reduce tree
    memoryx_capacity_bytes: float = 2.4e15  # MemoryX's largest CS-2 configuration (glossary)
    # The instruction-level cost model (wse_core.cost.perf): SIMD width by "kind.dtype" (see
    # SIMD_WSE2 / SIMD_WSE3) and the mechanism constants of wse_core.cost.mechanisms.
    simd_widths: Mapping[str, float] = dataclasses.field(default_factory=lambda: SIMD_WSE2)
    fp32_mul_width: float = 1.0  # ASSUMED: fp32 mul / FMAC are not in the SDK's table (swept)
    dsd_issue_cycles: float = 3.0  # FITTED (wse_core.cost.calibration); 3 is the prior
    task_activation_cycles: float = 10.0  # FITTED (wse_core.cost.calibration); 10 is the prior
    scalar_instruction_cycles: float = 1.0  # assumption: one scalar instruction per cycle
    control_instruction_cycles: float = 1.0  # assumed (CS-3: fitted); one a cycle is the prior
    router_switch_cycles: float = 0.0  # FITTED (wse_core.cost.calibration); 0 is the prior
    sqrt_cycles: float = 10.0  # assumption: not published (no SIMD form)
    div_cycles: float = 50.0  # SDK example comments ("about 50 cycles")
    system_latency_s: float = 2e-6  # assumption: one system-to-system activation pass
    overlap: float = 1.0  # assumption: 1 = streaming parts overlap fully, 0 = they add up
    # The system built around the wafer (what `RunReport.energy_j` and wse_systems.economics
    # read; nothing looks a system up by the wafer's name): its name, peak power in W (0:
    # none published, so no energy is predicted), default hourly rate in USD (an assumption,
    # an input wherever it is used) and the power figure's source.
    system: str = ""
    system_peak_w: float = 0.0
    system_usd_per_hour: float = 0.0
    system_source: str = ""
    # The largest rectangle a user program gets on the system (PE rows, cols; 0: the whole
    # logical grid): what a kernel that fills the system with copies of its grid may use.
    program_rows: int = 0
    program_cols: int = 0
    # ASSUMED: SRAM a PE's program holds (code, stack, the runtime's buffers), off the data
    # budget every ledger and planner sizes against (`data_bytes_per_pe`)
    code_stack_bytes_per_pe: int = CODE_STACK_BYTES_PER_PE

    def __post_init__(self) -> None:
        for field in _TEXT_FIELDS:  # a spec file's `name: 5` is a number, not a name
            value = getattr(self, field)
            if not isinstance(value, str):
                raise SpecError(f"{field} must be text, got {value!r:.60} ({type(value).__name__})")
            if len(value) > MAX_NAME_CHARS or (field == "name" and not value):
                raise SpecError(
                    f"{field} must be text of 1 to {MAX_NAME_CHARS:,} characters, "
                    f"got {len(value):,} characters"
                )
            if why := unseen_character(value):  # hunt 64: a traceback, or a name on two lines
                raise SpecError(f"{field} holds {why}; a {field} is one line of printable text")
        for declared in dataclasses.fields(self):  # YAML's yes / true is no number
            value = getattr(self, declared.name)
            # hunt 62: a list or mapping (`defect_rate: [0.1]`) was a TypeError traceback
            if declared.type in ("int", "float") and isinstance(value, bool):
                raise SpecError(f"{declared.name} must be a number, got {_typed(value)}")
            if declared.type in ("int", "float") and not isinstance(value, int | float):
                kind = "an integer" if declared.type == "int" else "a number (int or float)"
                raise SpecError(f"{declared.name} must be {kind}, got {_typed(value)}")
            if declared.type == "float" and isinstance(value, int) and abs(value) >= 10**308:
                # hunt 63: math.isfinite of a 401-digit integer was an OverflowError traceback
                raise SpecError(f"{declared.name} must be a finite number, got {_typed(value)}")
            if declared.type == "float" and value == 0 and math.copysign(1.0, value) < 0:
                # hunt 68: `defect_rate: -0.0` (a file, --set) passed [0, 1) and printed as
                # "rate -0"; zero has one sign in a spec, so every printer shows 0
                object.__setattr__(self, declared.name, 0.0)
        for field in _INT_RANGES:
            value = getattr(self, field)
            if not isinstance(value, int) or not _in_range(field, value):
                raise SpecError(f"{field} must be {expected_value(field)}, got {_typed(value)}")
        if self.code_stack_bytes_per_pe >= self.sram_bytes_per_pe:
            # hunt 82 L3: the line named only the reserve, to a user who had set the SRAM
            raise SpecError(
                f"sram_bytes_per_pe = {self.sram_bytes_per_pe:,} B leaves no byte for data beside "
                f"the program's code_stack_bytes_per_pe = {self.code_stack_bytes_per_pe:,} B "
                "(code and stack, assumed), which every PE holds first; give sram_bytes_per_pe "
                f"above {self.code_stack_bytes_per_pe:,} B, or set code_stack_bytes_per_pe below "
                f"{self.sram_bytes_per_pe:,} B too"
            )
        for field in (
            "clock_hz",
            "sram_read_bytes_per_cycle",
            "sram_write_bytes_per_cycle",
            "link_bytes_per_cycle",
            "host_io_bytes_per_s",
            "memoryx_bytes_per_s",
            "swarmx_bytes_per_s",
            "memoryx_capacity_bytes",
        ):
            value = getattr(self, field)
            if not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
                raise SpecError(f"{field} must be a positive number, got {value!r}")
        for field in ("system_peak_w", "system_usd_per_hour"):
            value = getattr(self, field)
            if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
                raise SpecError(f"{field} must be a number >= 0, got {value!r}")
        if not 0.0 <= float(self.defect_rate) < 1.0:
            raise SpecError(f"defect_rate must be in [0, 1), got {self.defect_rate!r}")
        for field in (
            "dsd_issue_cycles",
            "task_activation_cycles",
            "scalar_instruction_cycles",
            "control_instruction_cycles",
            "router_switch_cycles",
            "ramp_latency_cycles",
            "sqrt_cycles",
            "div_cycles",
            "system_latency_s",
        ):
            if not 0 <= getattr(self, field) < math.inf:
                raise SpecError(
                    f"{field} must be a finite number >= 0, got {getattr(self, field)!r}"
                )
        if not 2 <= self.swarmx_fanout < math.inf:
            raise SpecError(f"swarmx_fanout must be >= 2, got {self.swarmx_fanout!r}")
        if not 0 < self.fp32_mul_width < math.inf:
            raise SpecError(f"fp32_mul_width must be > 0, got {self.fp32_mul_width!r}")
        if self.overlap not in (0, 1, 0.0, 1.0):
            raise SpecError(f"overlap must be 0 (serial) or 1 (full overlap), got {self.overlap!r}")
        for field in ("simd_widths", "flops_per_cycle"):  # a number or a list in a spec file
            if not isinstance(getattr(self, field), Mapping):
                raise SpecError(
                    f"{field} must be a mapping of key: number, got {getattr(self, field)!r:.80}"
                )
        widths = dict(self.simd_widths)
        for key, width in widths.items():
            kind, _, dtype = str(key).partition(".")
            if kind not in OP_KINDS or dtype not in DTYPES:
                raise SpecError(
                    f"simd_widths key {key!r} must be 'kind.dtype' with kind in "
                    f"{', '.join(OP_KINDS)} and dtype in {', '.join(DTYPES)}"
                )
            number = isinstance(width, int | float) and not isinstance(width, bool)
            if not number or not 0 < width < math.inf:  # hunt 64: `yes` was width 1
                raise SpecError(f"simd_widths[{key!r}] must be a positive number, got {width!r}")
        object.__setattr__(self, "simd_widths", FrozenMapping(widths))
        if not 0 <= self.hop_latency_cycles < math.inf:
            raise SpecError(f"hop_latency_cycles must be >= 0, got {self.hop_latency_cycles!r}")
        flops = dict(self.flops_per_cycle)
        unknown = set(flops) - set(DTYPES)
        if unknown:
            bad = sorted(unknown)[0]
            raise SpecError(
                f"flops_per_cycle has unknown dtype {bad!r}{suggest(bad, DTYPES)}; "
                f"known: {', '.join(DTYPES)}"
            )
        values = flops.values()
        numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
        if not numbers or not all(0 < v < math.inf for v in values) or "fp32" not in flops:
            raise SpecError(
                "flops_per_cycle needs positive finite values and at least an 'fp32' entry, "
                f"got {flops!r}"
            )
        object.__setattr__(self, "flops_per_cycle", FrozenMapping(flops))
        per_cycle = max(*flops.values(), self.sram_read_bytes_per_cycle,
                        self.sram_write_bytes_per_cycle, self.link_bytes_per_cycle)  # fmt: skip
        if not math.isfinite(float(self.num_pes) * self.clock_hz * per_cycle * 4):
            raise SpecError(
                f"clock_hz {self.clock_hz!r} x {self.num_pes:,} PEs x {per_cycle!r} per cycle "
                "overflows a float: the wafer's totals would be infinite; give smaller values"
            )
        for name, least, most, unit in _PLAUSIBLE:  # hunt 57: 1e-300 Hz printed 1e-293 FLOP/s
            figure = getattr(self, name)
            if not least <= figure <= most:
                raise SpecError(f"{name} must be in [{least:g}, {most:g}] {unit}, got {figure!r}")
        self._check_constant_limits()

    def _check_constant_limits(self) -> None:
        """The cost model's constants within the `limits` `--assume` takes (hunt 57: `--set
        fp32_mul_width=1e30` or a spec file's was priced); the SIMD table's widths within
        fp32_mul_width's, the same unit."""
        from wse_core.cost.mechanisms import CONSTANTS

        for key, c in CONSTANTS.items():
            value = getattr(self, key, None)
            why = None if value is None else c.outside(value)
            if why:
                raise SpecError(f"{key} {why}, got {value!r}")
        for key, width in self.simd_widths.items():
            why = CONSTANTS["fp32_mul_width"].outside(width)
            if why:
                raise SpecError(f"simd_widths[{key!r}] {why}, got {width!r}")

    # Derived figures -------------------------------------------------------------------
    @property
    def num_pes(self) -> int:
        return self.pe_rows * self.pe_cols

    @property
    def physical_rows(self) -> int:
        return self.pe_rows + self.spare_rows

    @property
    def physical_cols(self) -> int:
        return self.pe_cols + self.spare_cols

    @property
    def sram_total_bytes(self) -> int:
        return self.num_pes * self.sram_bytes_per_pe

    @property
    def data_total_bytes(self) -> int:
        """The wafer's SRAM left for data (`data_bytes_per_pe` on every PE)."""
        return self.num_pes * self.data_bytes_per_pe

    @property
    def data_bytes_per_pe(self) -> int:
        """The bytes of a PE's SRAM left for data: `sram_bytes_per_pe` less the program's
        code and stack (`code_stack_bytes_per_pe`, assumed), what ledgers and planners size
        against; noted as read (`wse_core.cost.reads`), so that a prediction sized by it
        lists the assumption."""
        from wse_core.cost.reads import read  # the cost model sits above the spec

        read("code_stack_bytes_per_pe", float(self.code_stack_bytes_per_pe))
        return self.sram_bytes_per_pe - self.code_stack_bytes_per_pe

    def flops_per_cycle_for(self, dtype: str) -> float:
        """Flops per cycle per PE for `dtype`; bf16 falls back to fp16, then to fp32."""
        for key in (dtype, "fp16" if dtype == "bf16" else dtype, "fp32"):
            if key in self.flops_per_cycle:
                return float(self.flops_per_cycle[key])
        raise SpecError(f"no flops_per_cycle for {dtype!r}")  # unreachable: fp32 is required

    def simd_width(self, kind: str, dtype: str, stride: int = 1) -> float:
        """Elements per cycle of one DSD operation `kind` on `dtype` at memory `stride`.

        Full width needs stride 0 or 1 or stride % 8 in {2, 3, 5, 6}; stride % 8 in {1, 7}
        gives at most 2 and stride % 8 == 0 gives 1 (SDK bank rules, REFERENCES.md)."""
        if kind not in OP_KINDS:
            raise SpecError(f"unknown DSD op kind {kind!r}{suggest(kind, OP_KINDS)}")
        if dtype not in DTYPES:
            raise SpecError(f"unknown dtype {dtype!r}{suggest(dtype, DTYPES)}")
        if kind in ("mul", "fmac") and dtype == "fp32":
            width = float(self.fp32_mul_width)
        else:
            width = float(self.simd_widths.get(f"{kind}.{dtype}", 1.0))
        s = abs(int(stride))
        if s in (0, 1) or s % 8 in (2, 3, 5, 6):
            return width
        return min(width, 2.0) if s % 8 in (1, 7) else 1.0

    def peak_flops(self, dtype: str = "fp16") -> float:
        """Whole-wafer peak flop/s for `dtype`."""
        return self.num_pes * self.flops_per_cycle_for(dtype) * self.clock_hz

    @property
    def sram_bytes_per_s(self) -> float:
        """Whole-wafer SRAM bandwidth, B/s: PEs x (read + write bytes a cycle) x clock."""
        per_cycle = self.sram_read_bytes_per_cycle + self.sram_write_bytes_per_cycle
        return self.num_pes * per_cycle * self.clock_hz

    @property
    def fabric_bytes_per_s(self) -> float:
        """Whole-wafer fabric bandwidth, B/s: PEs x 4 links x link bytes a cycle x clock, each
        PE's words out on its N, S, E, W links (every link between neighbours once a
        direction; not the core's own link). Not Cerebras's accounting: `hw.published`."""
        return self.num_pes * 4 * self.link_bytes_per_cycle * self.clock_hz

    def replace(self, **changes: Any) -> WaferSpec:
        """A copy with `changes` applied (validated); unknown fields are a SpecError.

        Strings are converted to the field's type, so values may come from a command line
        or from YAML that spells floats as `1.0e9`."""
        types = {f.name: f.type for f in dataclasses.fields(self)}
        for key in changes:
            if key not in types:
                raise SpecError(f"unknown spec field {key!r}{suggest(key.lower(), types)}")
        return dataclasses.replace(self, **{k: _coerce(k, types[k], v) for k, v in changes.items()})

    def to_dict(self) -> dict[str, Any]:
        # the mappings as dicts (JSON, YAML), so build the dict by hand
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["flops_per_cycle"] = dict(self.flops_per_cycle)
        out["simd_widths"] = dict(self.simd_widths)
        return out

    def key(self) -> str:
        """A stable text key of every field (for caches keyed by spec)."""
        import json

        return json.dumps(self.to_dict(), sort_keys=True)


# Characters a name cannot show: controls (a newline, ESC), format characters (U+202E turns
# the text around), line and paragraph separators, and lone surrogates (no encoding writes
# them: `print` raised UnicodeEncodeError). The CLI's error lines escape the same set.
_UNSEEN = {"Cc", "Cf", "Zl", "Zp", "Cs"}


def unseen_character(text: str) -> str | None:
    """None when every character of `text` can be shown, else the first one that cannot, as
    a reader can find it ("'\\n' (U+000A), a control character, at character 4")."""
    import unicodedata

    for i, c in enumerate(text):
        kind = unicodedata.category(c)
        if kind not in _UNSEEN:
            continue
        if kind == "Cs" and 0xDC80 <= ord(c) <= 0xDCFF:  # a byte argv held that is not UTF-8
            return f"byte 0x{ord(c) - 0xDC00:02x}, which is not UTF-8, at character {i + 1:,}"
        what = {"Cs": "a lone surrogate, not text", "Cf": "a format character"}.get(
            kind, "a control character"
        )
        return f"{ascii(c)} (U+{ord(c):04X}), {what}, at character {i + 1:,}"
    return None


def _typed(value: Any) -> str:
    """`value` for an error line: short, with its type when that is the problem."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**15:
        return shown_int(value)
    text = f"{value!r:.60}"
    return (
        text
        if isinstance(value, int | float) and not isinstance(value, bool)
        else (f"{text} ({type(value).__name__})")
    )


def _in_range(field: str, value: int) -> bool:
    low, high = _INT_RANGES[field]
    return low <= value <= high


def expected_value(field: str) -> str:
    """What a value of `field` must be, as a refusal says it: "an integer in [1, 100,000]",
    "a number", "text", "a mapping of key: number"."""
    if field in _INT_RANGES:
        low, high = _INT_RANGES[field]
        return f"an integer in [{low}, {high:,}]"
    if field in _TEXT_FIELDS:
        return "text"
    kind = {f.name: f.type for f in dataclasses.fields(WaferSpec)}.get(field, "")
    return "a mapping of key: number" if str(kind).startswith("Mapping") else "a number"


def _coerce(name: str, annotation: object, value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):  # YAML's .nan / .inf
        raise SpecError(f"{name} must be a finite number, got {value!r}")
    if annotation == "int" and isinstance(value, float) and value.is_integer():
        return int(value)  # a whole float, as "1e2" is: an assumption's or a sweep's bytes
    if not isinstance(value, str) or annotation == "str":
        return value
    try:
        number = float(ascii_only(value))  # hunt 61: --set pe_rows=١٠ was read as 10
    except ValueError:
        raise SpecError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(number):
        raise SpecError(f"{name} must be a finite number, got {value!r}")
    if annotation != "int":
        return float(value)
    if not number.is_integer():  # hunt 69: int('1.5') was "must be a number"
        raise SpecError(f"{name} must be {expected_value(name)}, got {value!r}")
    return int(number)
