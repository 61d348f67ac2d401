"""Hunt 81: Cerebras's published totals were looked up by a spec's free-text name, so `tiny`
renamed wse3 (`wse wafer info -p tiny --set name=wse3`) read "Cerebras 44 GB: ours is
0.00x", and a WSE-2 spec file named wse3 was compared with WSE-3's figures. Now a spec is
compared only where it is that preset's wafer (its grid, SRAM and ports; a clock assumed
otherwise is ours to show).

Oracle: the presets themselves, and REFERENCES.md's 44 GB for WSE-3 (762 x 1,176 PEs x
49,152 B = 44.05 GB: ratio 1.00).
"""

from wse_core import preset
from wse_core.hw.presets import spec_from
from wse_core.hw.published import published_totals


def test_the_preset_is_compared():
    got = published_totals(preset("wse3"))["sram_bytes"]
    assert got["published"] == 44e9
    assert abs(got["ratio"] - 762 * 1176 * 49152 / 44e9) < 1e-12


def test_another_wafer_under_the_name_is_not():
    for spec in (
        preset("tiny").replace(name="wse3"),
        spec_from(preset("wse2"), name="wse3"),  # a WSE-2 file named wse3
        preset("wse3").replace(sram_bytes_per_pe=24 * 1024),
    ):
        totals = published_totals(spec)
        assert not any("published" in t for t in totals.values()), spec
        assert "are not its" in totals["sram_bytes"]["published_note"]


def test_a_clock_assumed_is_still_the_wafer():
    totals = published_totals(preset("wse3").replace(clock_hz=1.0e9))
    assert totals["sram_bytes_per_s"]["published"] == 21e15
    assert "1 GHz" in totals["sram_bytes_per_s"]["gap"]  # shown as ours
