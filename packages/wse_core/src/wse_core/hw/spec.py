"""Wafer specs: the static hardware description every other part of the stack is built from.

A `WaferSpec` is a frozen, validated dataclass (`wse_core.hw.description`). Presets `wse1`,
`wse2`, `wse3` carry public figures, each source beside its value; where a figure is not
published the value is an assumption and the field's comment says so. Small presets (`tiny`,
`small`, `demo`) exist for tests and demos. Custom specs come from a preset plus overrides
(`spec_from(...)`) or a YAML file (`load_spec(path)`), which may name a `base` preset and
override any field; these live in `wse_core.hw.presets`. This module is the public home of
both. `preset` and `load_spec` are pure: a name or a file gives the same spec in any context.
A caller's `--set` / `--assume` are applied once, at the edge
(`wse_core.cost.assumptions.resolve_spec`); below it code takes `spec: WaferSpec`, never a
preset name.

Units are in the names: bytes, cycles, Hz, bytes per second. Flops per cycle are per PE and
by dtype (`"fp16"`, `"bf16"`, `"fp32"`).

Re-exported here for every caller: the one dtype table of the stack (`DTYPES`,
`DTYPE_BYTES`, `DTYPE_ALIASES`, `dtype_name`, `dtype_bytes`, `to_jnp`) from `wse_core.hw.dtypes`,
and the DSD op kinds and SIMD width tables (`OP_KINDS`, `SIMD_WSE2`, `SIMD_WSE3`) from
`wse_core.hw.simd`.
"""

from wse_core.hw.description import WaferSpec
from wse_core.hw.dtypes import DTYPE_ALIASES, DTYPE_BYTES, DTYPES, dtype_bytes, dtype_name, to_jnp
from wse_core.hw.presets import PRESETS, load_spec, preset, spec_from
from wse_core.hw.simd import OP_KINDS, SIMD_WSE2, SIMD_WSE3

__all__ = [
    "WaferSpec",
    "OP_KINDS",
    "SIMD_WSE2",
    "SIMD_WSE3",
    "PRESETS",
    "preset",
    "spec_from",
    "load_spec",
    "DTYPES",
    "DTYPE_BYTES",
    "DTYPE_ALIASES",
    "dtype_name",
    "dtype_bytes",
    "to_jnp",
]
