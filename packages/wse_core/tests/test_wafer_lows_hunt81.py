"""Hunt 81's low items on the wafer core:

- L1: `presets.py` said the small presets carry WSE-3 per-PE figures; they carry WSE-2's
  (850 MHz, its SIMD widths and fp16 flops a cycle), which the comment now says;
- L3: a seed of 2**64 - 1 was refused as "got 1.845e+19", an integer in float notation;
- L4: a shift past a one-column grid read "it has 1 columns";
- L5: `--assume hop_latency_cycles=0` was taken: a zero-cycle hop is no router.

Oracles: the WSE-2 and WSE-3 presets' own fields, Python's digits of 2**64 - 1, English.
"""

import jax
import jax.numpy as jnp
import pytest
from wse_core import fabric, preset
from wse_core.cost.assumptions import assume, assumed_spec
from wse_core.errors import DefectError, PlacementError, SpecError
from wse_core.hw.defects import defect_map
from wse_core.hw.wafer import build_wafer

PER_PE = ("clock_hz", "simd_widths", "flops_per_cycle", "sram_bytes_per_pe")


@pytest.mark.parametrize("name", ["tiny", "small", "demo"])
def test_the_small_presets_carry_wse2_per_pe_figures(name):
    small, wse2, wse3 = preset(name), preset("wse2"), preset("wse3")
    assert all(getattr(small, k) == getattr(wse2, k) for k in PER_PE)
    assert small.clock_hz != wse3.clock_hz and small.simd_widths != wse3.simd_widths


def test_a_seed_past_int64_is_shown_in_its_digits():
    with pytest.raises(DefectError) as e:
        defect_map(preset("tiny"), 2**64 - 1)
    assert str(e.value).endswith("got 18446744073709551615")


def test_one_column_is_singular():
    w = build_wafer(preset("tiny"), grid=(4, 1))
    x = jax.ShapeDtypeStruct(w.padded_shape, jnp.float32, sharding=w.sharding())
    with pytest.raises(PlacementError, match="it has 1 column, so at most 1 "):
        jax.eval_shape(lambda a: fabric.shift(w, a, "E", distance=2), x)


def test_a_zero_cycle_hop_is_refused():
    with pytest.raises(SpecError, match=r"hop_latency_cycles must be in \[1, 1000\]"):
        with assume(hop_latency_cycles=0):
            assumed_spec("wse3")
    with pytest.raises(SpecError, match="hop_latency_cycles"):
        preset("wse3").replace(hop_latency_cycles=0.0)
