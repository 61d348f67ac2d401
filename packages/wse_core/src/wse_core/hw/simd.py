"""The PE's DSD instructions as the cost model prices them: op kinds and SIMD widths.

`OP_KINDS` are the DSD operation kinds `wse_core.cost.perf.Op` may name; `SIMD_WSE2` and
`SIMD_WSE3` map "kind.dtype" (dtypes from `wse_core.hw.dtypes.DTYPES`) to elements per cycle,
the `simd_widths` of a `WaferSpec` (`WaferSpec.simd_width` applies the stride rules).
Re-exported by `wse_core.hw.spec`.
"""

from __future__ import annotations

from types import MappingProxyType

from wse_core.hw.dtypes import DTYPES

__all__ = ["OP_KINDS", "SIMD_WSE2", "SIMD_WSE3"]

# DSD operation kinds the cost model prices (wse_core.cost.perf.Op). "fmac_mixed" and "add_mixed"
# are fp16 operands accumulated in fp32 (@fmachs, @faddhs); "convert" is fp16 <-> fp32.
OP_KINDS = (
    "add", "sub", "mul", "fmac", "fmac_mixed", "add_mixed", "move", "neg", "abs", "scale",
    "max", "convert", "shift", "sqrt", "div",
)  # fmt: skip

# SIMD width (elements per cycle) by "kind.dtype", from the SDK language appendix
# (Cerebras SDK documentation, "Computing with Cerebras"). bf16 is priced as fp16. Not in the SDK
# table: fp32 mul and FMAC (@fmuls, @fmacs) on either generation, priced by the spec's
# `fp32_mul_width` (an ASSUMED constant, `wse_core.cost.mechanisms`: 1 on both, the WSE-2
# simulator's figure, swept 1..4; the entries below only mirror it); sqrt has no SIMD form
# (width 1, `sqrt_cycles` per element); division is about 50 cycles per element
# (`div_cycles`).
_FP16_OPS = ("add", "sub", "mul", "fmac", "move", "neg", "abs", "scale")
_FP32_OPS = ("add", "sub", "move", "neg", "abs", "scale")


def _simd(w16: float, w32: float, wmix: float, wmax16: float, wnarrow: float) -> dict:
    table = {f"{k}.{d}": w16 for k in _FP16_OPS for d in ("fp16", "bf16")}
    table |= {f"{k}.fp32": w32 for k in _FP32_OPS}
    table |= {"fmac_mixed.fp16": wmix, "add_mixed.fp16": wmix, "move.fp32": w32}
    table |= {"fmac_mixed.bf16": wmix, "add_mixed.bf16": wmix}
    table |= {"max.fp16": wmax16, "max.bf16": wmax16, "max.fp32": wnarrow}
    table |= {f"{k}.{d}": wnarrow for k in ("convert", "shift") for d in DTYPES}
    table |= {"mul.fp32": 1.0, "fmac.fp32": 1.0}  # not in the table: spec.fp32_mul_width
    table |= {f"{k}.{d}": 1.0 for k in ("sqrt", "div") for d in DTYPES}
    return table


SIMD_WSE2 = MappingProxyType(_simd(4.0, 2.0, 2.0, 1.0, 1.0))
SIMD_WSE3 = MappingProxyType(_simd(8.0, 4.0, 4.0, 8.0, 4.0))
