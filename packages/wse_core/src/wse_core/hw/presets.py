"""Where specs come from: the named presets (`PRESETS`, `preset`), a preset plus overrides
(`spec_from`) and YAML spec files (`load_spec`).

`wse1`, `wse2`, `wse3` carry public figures, each source beside its value; where a figure is not
published the value is an assumption and its comment says so. Small presets (`tiny`,
`small`, `demo`) exist for tests and demos. `preset` and `load_spec` are pure: a name or a
file gives the same spec in any context. `wse_core.hw.spec` re-exports every name here
with the `WaferSpec` class (`wse_core.hw.description`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from wse_core.errors import SpecError, quoted_number, shown, suggest, yaml_problem
from wse_core.hw.description import WaferSpec, _coerce, expected_value, unseen_character
from wse_core.hw.simd import SIMD_WSE3

__all__ = ["PRESETS", "preset", "spec_from", "load_spec", "refuse_past_the_grid"]


# Presets -------------------------------------------------------------------------------
# WSE-2: full fabric 757 x 996 (SDK), 48 kB per PE, 850 MHz as in the SDK's benchmark
# scripts; 16 B read + 8 B write per cycle as in Jacquelin et al. (the per-port figure is
# two 32-bit reads and one write, 8 B + 4 B; we use the stencil paper's, which the
# calibration was fitted with). It does not give the 20 PB/s marketing total at this grid
# and clock: 753,972 PEs x 24 B x 850 MHz = 15.4 PB/s, 0.77x; 20 PB/s is 850,000 cores x
# 24 B at 0.98 GHz (hunt 76: this said it matched; `published_totals` and `wse wafer info`
# show each total beside Cerebras's,
# `wse_core.hw.published`). One 32-bit word per link per direction per cycle; fp16:
# 4-wide FMAC = 8 flop/cycle; fp32: one FMAC = 2 flop/cycle (assumption). Spares: about 1% of
# columns (assumption; Cerebras says ~1% of cores are spare). Host I/O 1.2 Tb/s = 150 GB/s.
def _system(name: str, peak_w: float, usd_per_hour: float, source: str) -> dict[str, Any]:
    """A system's fields of a preset: name, peak power (W), default hourly rate (USD: an
    assumption, no list price is published) and the power figure's source."""
    return dict(
        system=name, system_peak_w=peak_w, system_usd_per_hour=usd_per_hour, system_source=source
    )


_WSE2 = WaferSpec(
    name="wse2",
    pe_rows=757,
    pe_cols=996,
    sram_bytes_per_pe=48 * 1024,
    clock_hz=850e6,
    sram_read_bytes_per_cycle=16.0,
    sram_write_bytes_per_cycle=8.0,
    link_bytes_per_cycle=4.0,
    flops_per_cycle={"fp16": 8.0, "bf16": 8.0, "fp32": 2.0},
    host_io_bytes_per_s=150e9,
    spare_rows=0,
    spare_cols=10,
    defect_rate=2e-4,
    **_system("CS-2", 23e3, 90.0, "Cerebras CS-2 datasheet"),
)
# The small test wafers are parts of no system: no power, no energy predicted.
_NO_SYSTEM = _system("", 0.0, 0.0, "")

PRESETS: Mapping[str, WaferSpec] = MappingProxyType(
    {
        # WSE-1: 400,000 cores and 18 GB; no public fabric size, so a 633 x 633 square
        # (400,689 PEs) is assumed; clock and SIMD widths assumed equal to WSE-2's (the SDK
        # documents WSE-2 and WSE-3 only): SRAM 400,689 x 24 B x 850 MHz = 8.17 PB/s, 0.91x
        # the 9 PB/s marketing total (400,000 cores x 24 B at 0.94 GHz).
        "wse1": _WSE2.replace(
            name="wse1",
            pe_rows=633,
            pe_cols=633,
            sram_bytes_per_pe=45 * 1000,  # 18 GB / 400,000 cores
            flops_per_cycle={"fp16": 8.0, "bf16": 8.0, "fp32": 2.0},
            host_io_bytes_per_s=150e9,
            spare_cols=6,
            **_system("CS-1", 20e3, 60.0, "Cerebras CS-1 product overview (SC19)"),
        ),
        # a CS-2 program gets 750 x 994 of the 757 x 996 PEs (SDK examples)
        "wse2": _WSE2.replace(program_rows=750, program_cols=994),
        # WSE-3: full fabric 762 x 1176 (SDK); 8-wide fp16 FMAC = 16 flop/cycle; the clock
        # is not published: 1.1 GHz, the top of the 1.0-1.1 GHz REFERENCES.md reads in the
        # marketing totals (the 21 PB/s SRAM total alone is 900,000 cores x 24 B at 0.97
        # GHz: our 896,112 PEs x 24 B x 1.1 GHz = 23.7 PB/s is 1.13x it). MemoryX up
        # to 1.2 PB (CS-3 launch, March 2024: 1.5 TB, 12 TB or 1.2 PB external memory).
        "wse3": _WSE2.replace(
            name="wse3",
            pe_rows=762,
            pe_cols=1176,
            clock_hz=1.1e9,
            flops_per_cycle={"fp16": 16.0, "bf16": 16.0, "fp32": 2.0},
            simd_widths=SIMD_WSE3,
            spare_cols=12,
            memoryx_capacity_bytes=1.2e15,
            # the same power as CS-2
            **_system("CS-3", 23e3, 100.0, "Cerebras CS-3 announcement (2024)"),
        ),
        # Small wafers with WSE-2 per-PE figures (its 850 MHz clock, SIMD widths and fp16
        # flops a cycle; hunt 81: this said WSE-3's), for tests and demos.
        "tiny": _WSE2.replace(
            name="tiny",
            pe_rows=8,
            pe_cols=8,
            spare_rows=1,
            spare_cols=1,
            defect_rate=0.01,
            **_NO_SYSTEM,
        ),
        "small": _WSE2.replace(
            name="small",
            pe_rows=32,
            pe_cols=32,
            spare_rows=1,
            spare_cols=2,
            defect_rate=0.005,
            **_NO_SYSTEM,
        ),
        "demo": _WSE2.replace(
            name="demo",
            pe_rows=64,
            pe_cols=96,
            spare_rows=2,
            spare_cols=3,
            defect_rate=0.002,
            **_NO_SYSTEM,
        ),
    }
)


def preset(name: str) -> WaferSpec:
    """The preset called `name`; an unknown name is a SpecError with the closest match.

    Pure: the same name gives the same spec in any context (an `assume(...)` block included;
    `wse_core.cost.assumptions.resolve_spec` is where a caller's `--assume` changes a spec)."""
    try:
        return PRESETS[name]
    except KeyError:
        # the names are lower case: 'WSE3' is suggested 'wse3' (hunt 69), as ' wse3' was
        close = suggest(name.lower(), PRESETS) if isinstance(name, str) else ""
        raise SpecError(
            f"unknown wafer preset {shown(name)}{close}; choose one of: {', '.join(PRESETS)}"
        ) from None


def spec_from(base: WaferSpec, **overrides: Any) -> WaferSpec:
    """`base` with field overrides; None values are ignored."""
    changes = {k: v for k, v in overrides.items() if v is not None}
    return base.replace(**changes) if changes else base


def refuse_past_the_grid(spec: WaferSpec, given: Iterable[str]) -> WaferSpec:
    """`spec`, unless a field the user changed (`given`: a `base:` spec file's keys, --set's)
    puts more spare rows or columns than the logical grid has (hunt 57: 100,000 spare rows on
    762 drew a 119M-PE defect map), or a program rectangle (program_rows, program_cols) larger
    than it (hunt 62). Only changed fields: a grid shrunk under a preset keeps its spares and
    its program rectangle (`copies_per_system` clips that to the grid), and a spec written out
    whole (`to_dict`) reads back as it was; its spares are checked (hunt 69: a file of every
    field with 100,000 spare rows drew a 119.7M-PE map), which a preset's dump passes."""
    for field, side in (
        ("spare_rows", "pe_rows"),
        ("spare_cols", "pe_cols"),
        ("program_rows", "pe_rows"),  # hunt 62: a 100,000-row program rectangle was priced
        ("program_cols", "pe_cols"),
    ):
        if field in given and getattr(spec, field) > getattr(spec, side):
            raise SpecError(
                f"{field} must be at most {side} ({getattr(spec, side):,}), "
                f"got {getattr(spec, field):,}"
            )
    return spec


def _from_fields(data: dict[str, Any]) -> WaferSpec:
    """A spec from every field (no base preset), strings converted to the field types."""
    types = {f.name: f.type for f in dataclasses.fields(WaferSpec)}
    return WaferSpec(**{k: _coerce(k, types[k], v) for k, v in data.items()})


def _refuse_unknown_or_empty(data: dict[str, Any], path: Path) -> None:
    """A spec file's keys are `base` and WaferSpec fields, each with a value. Checked first
    (hunt 69): `Base: tiny` was "lacks the fields name, pe_rows, ..." without a word of the
    key typed, and `pe_rows:` left empty kept the base preset's value without a word."""
    keys = ["base", *(f.name for f in dataclasses.fields(WaferSpec))]
    for key, value in data.items():
        if key not in keys:
            raise SpecError(f"unknown spec field {shown(key)}{suggest(str(key).lower(), keys)}")
        if value is None:
            want = f"a preset ({', '.join(PRESETS)})" if key == "base" else expected_value(key)
            # without `base:` a field without a default cannot be left out
            must = data.get("base") is None and key in _required()
            raise SpecError(f"{key} in spec file {str(path)!r} has no value; give {want}"
                            + ("" if must else " or remove the line"))  # fmt: skip


def _required() -> list[str]:
    """The fields a spec file without `base:` must give (those without a default)."""
    missing = dataclasses.MISSING
    return [
        f.name
        for f in dataclasses.fields(WaferSpec)
        if f.default is missing and f.default_factory is missing
    ]


# Numbers as YAML 1.2's core schema reads them (PyYAML reads YAML 1.1): decimal integers,
# leading zeros included (hunt 64: `spare_rows: 010` was octal 8, where --set reads 10), 0o17
# and 0x1f; floats with or without a dot (1e9 was text). No base 60 (`pe_rows: 7:30` was
# 450) and no 0b: they are text, and a number field refuses text. `_` groups digits, as
# PyYAML and Python allow. With these, any text a number field holds was quoted or is no
# number, and is refused rather than read as one.
_INT = re.compile(r"^(?:[-+]?[0-9][0-9_]*|0o[0-7][0-7_]*|0x[0-9a-fA-F][0-9a-fA-F_]*)$")
_FLOAT = re.compile(
    r"^(?:[-+]?(?:\.[0-9][0-9_]*|[0-9][0-9_]*(?:\.[0-9_]*)?)(?:[eE][-+]?[0-9]+)?"
    r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
)
_YAML11_ONLY = re.compile(r"[-+]?(?:0b[01_]+|[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?)")
_NUMBER_TAGS = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")
_SPEC_LOADER: list[Any] = []


def _yaml12_int(loader: Any, node: Any) -> int:
    """An int node the YAML 1.2 way: 010 is 10, 0o10 is 8, 0x10 is 16 (an explicit `!!int`
    in another spelling, or one past int()'s 4,300 digits, is a YAML error at its line)."""
    import yaml

    text = loader.construct_scalar(node).replace("_", "")
    digits = text.lstrip("+-")
    base = {"0o": 8, "0x": 16}.get(digits[:2].lower(), 10)
    try:
        value = int(digits[2:] if base != 10 else digits, base)
    except ValueError:
        why = (
            f"an integer of {len(digits):,} digits is past any field's range"
            if len(digits) > 40
            else f"{text!r} is no integer YAML 1.2 reads (10, 0o17, 0x1f)"
        )
        raise yaml.constructor.ConstructorError(None, None, why, node.start_mark) from None
    return -value if text.startswith("-") else value


def spec_loader() -> Any:
    """`names_loader()` reading numbers as YAML 1.2 does (`_INT`, `_FLOAT`)."""
    if not _SPEC_LOADER:
        from wse_core.host.readers import names_loader

        class SpecLoader(names_loader()):  # type: ignore[misc]
            yaml_implicit_resolvers = {
                first: [(tag, rx) for tag, rx in pairs if tag not in _NUMBER_TAGS]
                for first, pairs in names_loader().yaml_implicit_resolvers.items()
            }

        SpecLoader.add_implicit_resolver(_NUMBER_TAGS[0], _INT, list("-+0123456789"))
        SpecLoader.add_implicit_resolver(_NUMBER_TAGS[1], _FLOAT, list("-+.0123456789"))
        SpecLoader.add_constructor(_NUMBER_TAGS[0], _yaml12_int)
        _SPEC_LOADER.append(SpecLoader)
    return _SPEC_LOADER[0]


def _refuse_text_numbers(data: dict[str, Any], path: Path) -> None:
    """A spec file's number fields hold YAML numbers: text there (`pe_rows: '100'`) is refused
    naming the field and the type (the command line's `--set` text is converted instead); an
    integer field takes a whole float (`pe_rows: 1e3`)."""
    types = {f.name: f.type for f in dataclasses.fields(WaferSpec)}
    for key, value in data.items():
        kind = types.get(key)
        if kind in ("int", "float") and isinstance(value, str):
            where = f"{key} in spec file {str(path)!r}"
            if _YAML11_ONLY.fullmatch(value):  # YAML 1.1 read it as a number: say how 1.2 does
                raise SpecError(
                    f"{where} must be a number, got the text {shown(value, head=40)}: spec "
                    "files read numbers as YAML 1.2 does (10, 010 = 10, 0o17, 0x1f, 1.5e9); "
                    "base 60 (7:30) and 0b101 are text"
                )
            raise SpecError(quoted_number(where, key, value))
        if kind == "int" and isinstance(value, float) and value.is_integer():
            data[key] = int(value)


def load_spec(path: str | Path) -> WaferSpec:
    """Read a spec from YAML: `base: wse2` (optional) plus any WaferSpec fields. Pure, as
    `preset` is: with or without `base:`, the file's spec is what it says (a caller's
    `--assume` is applied by `wse_core.cost.assumptions.resolve_spec`, to either alike)."""
    import yaml

    from wse_core.host.readers import load_yaml, read_text

    path = Path(path)
    try:
        data = load_yaml(
            read_text(path, "spec file"), f"spec file {str(path)!r}", loader=spec_loader()
        )
    except OSError as e:
        raise SpecError(f"cannot read spec file {shown(path)}: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise SpecError(f"spec file {str(path)!r} is not UTF-8 text: {e.reason}") from None
    except yaml.YAMLError as e:
        raise SpecError(f"spec file {str(path)!r} is not valid YAML: {yaml_problem(e)}") from None
    if not isinstance(data, dict):
        raise SpecError(f"spec file {str(path)!r} must hold a mapping of spec fields")
    _refuse_unknown_or_empty(data, path)
    base = data.pop("base", None)
    _refuse_text_numbers(data, path)
    if base is None:
        # hunt 62: the missing fields are named when some are missing, not guessed from any
        # TypeError (`defect_rate: [0.1]` was reported as "lacks the fields :")
        missing = [name for name in _required() if name not in data]
        if missing:
            raise SpecError(
                f"spec file {str(path)!r} lacks the fields {', '.join(missing)}: give every "
                f"field, or name a preset to start from (base: {', '.join(PRESETS)})"
            )
        # the spares drew the map (hunt 69): a program rectangle is clipped to the grid
        return refuse_past_the_grid(_from_fields(data), {"spare_rows", "spare_cols"})
    # a file name's newline or ESC escaped: the name it gives must be one printable line
    stem = "".join(c if unseen_character(c) is None else ascii(c)[1:-1] for c in path.stem)
    data.setdefault("name", f"{base}+{stem}")
    return refuse_past_the_grid(spec_from(preset(str(base)), **data), data)
