"""Specs, presets, the SRAM ledger, defect maps and remap, and the performance model."""

import numpy as np
import pytest
from wse_core import (
    PRESETS,
    DefectError,
    PlacementError,
    SpecError,
    SramBudgetError,
    SramLedger,
    defect_map,
    load_spec,
    preset,
    remap,
    spec_from,
)


def test_presets_carry_the_public_figures():
    wse2, wse3 = preset("wse2"), preset("wse3")
    assert (wse2.pe_rows, wse2.pe_cols) == (757, 996)  # SDK full fabric
    assert (wse3.pe_rows, wse3.pe_cols) == (762, 1176)
    assert wse3.sram_bytes_per_pe == 48 * 1024
    # 44 GB of SRAM on WSE-3 (vendor), within the rounding of 48 kB per PE.
    assert 43e9 < wse3.sram_total_bytes < 45e9
    assert wse2.host_io_bytes_per_s == pytest.approx(1.2e12 / 8)
    assert preset("wse1").num_pes == pytest.approx(400_000, rel=0.01)
    for spec in PRESETS.values():
        assert spec.peak_flops("fp16") >= spec.peak_flops("fp32")


def test_unknown_preset_suggests_the_closest():
    with pytest.raises(SpecError, match="did you mean 'wse3'"):
        preset("wse33")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("pe_rows", 0),
        ("pe_cols", -3),
        ("clock_hz", 0.0),
        ("defect_rate", 1.0),
        ("defect_rate", -0.1),
        ("spare_cols", -1),
        ("link_bytes_per_cycle", float("nan")),
    ],
)
def test_bad_spec_values_are_refused(field, value):
    with pytest.raises(SpecError, match=field):
        spec_from(preset("tiny"), **{field: value})


def test_yaml_spec_round_trip(tmp_path):
    f = tmp_path / "my.yaml"
    f.write_text("base: wse2\npe_rows: 100\npe_cols: 50\nclock_hz: 1.0e9\n")
    spec = load_spec(f)
    assert (spec.pe_rows, spec.pe_cols, spec.clock_hz) == (100, 50, 1e9)
    assert spec.sram_bytes_per_pe == preset("wse2").sram_bytes_per_pe
    full = tmp_path / "full.yaml"
    import yaml

    full.write_text(yaml.safe_dump(spec.to_dict()))
    assert load_spec(full) == spec
    (tmp_path / "bad.yaml").write_text("base: wse2\nclock_ghz: 1\n")
    with pytest.raises(SpecError, match="clock_ghz.*did you mean 'clock_hz'"):
        load_spec(tmp_path / "bad.yaml")
    with pytest.raises(SpecError, match="cannot read"):
        load_spec(tmp_path / "missing.yaml")


def test_preset_and_load_spec_are_pure_under_any_assumptions(tmp_path):
    import yaml
    from wse_core.cost.assumptions import assume

    full = tmp_path / "full.yaml"
    full.write_text(yaml.safe_dump(preset("wse2").to_dict()))
    based = tmp_path / "based.yaml"
    based.write_text("base: wse3\npe_rows: 100\n")
    outside = [preset(n) for n in PRESETS] + [load_spec(full), load_spec(based)]
    with assume(hop_latency_cycles=7, clock_hz=1e9, table_ii_block_z=100):
        with assume(sqrt_cycles=3):
            inside = [preset(n) for n in PRESETS] + [load_spec(full), load_spec(based)]
    assert inside == outside
    assert [s.key() for s in inside] == [s.key() for s in outside]


def test_resolve_spec_applies_sets_then_assumptions_to_a_preset_or_a_file(tmp_path):
    import yaml
    from wse_core.cost.assumptions import applied, assume, assumed_spec, resolve_spec

    wse2 = preset("wse2")
    full = tmp_path / "full.yaml"  # every field, no base: --assume applies as to a preset
    full.write_text(yaml.safe_dump(wse2.to_dict()))
    assert resolve_spec(path=full) == wse2 == resolve_spec(name="wse2")
    assert resolve_spec() == preset("wse3")
    sets, assumed = {"pe_rows": "100", "clock_hz": "1e9"}, {"clock_hz": 2e9, "sqrt_cycles": 4}
    for got in (
        resolve_spec(name="wse2", sets=sets, assumptions=assumed),
        resolve_spec(path=full, sets=sets, assumptions=assumed),
    ):
        assert (got.pe_rows, got.clock_hz, got.sqrt_cycles) == (100, 2e9, 4.0)  # --assume last
        assert got == wse2.replace(pe_rows=100, clock_hz=2e9, sqrt_cycles=4.0)
    # A calibration setting is not a spec field: it leaves the spec as it is.
    assert applied(wse2, {"table_ii_block_z": 100}) == wse2
    with pytest.raises(SpecError, match="not both"):
        resolve_spec(name="wse2", path=full)
    with pytest.raises(SpecError, match="unknown assumption"):
        resolve_spec(name="wse2", assumptions={"hop": 1})
    with assume(hop_latency_cycles=3):  # the experiment runners' edge reads the block
        assert assumed_spec("wse2") == wse2.replace(hop_latency_cycles=3.0)
    assert assumed_spec("wse2") == wse2


def test_sram_ledger_budget_and_planning():
    ledger = SramLedger(4, 6, 1000)
    ledger.allocate("field", 400)
    left = ledger.region("left", 0, 0, 4, 3)
    ledger.allocate("weights", 500, left)
    assert ledger.free_bytes(left) == 100
    assert ledger.free_bytes(ledger.region("right", 0, 3, 4, 3)) == 600
    with pytest.raises(SramBudgetError) as e:
        ledger.allocate("cache", 200, left)
    msg = str(e.value)
    assert "'cache'" in msg and "200 B" in msg and "100 B free" in msg and "left" in msg
    # Largest column length n with 4 bytes * 3 fields * n on the right half.
    right = ledger.region("right", 0, 3, 4, 3)
    assert ledger.largest(lambda n: 12 * n, region=right) == 600 // 12
    assert ledger.largest(lambda n: 10_000 * n) == 0  # nothing fits
    ledger.free("weights")
    assert ledger.free_bytes() == 600
    with pytest.raises(PlacementError):
        ledger.region("off", 3, 3, 2, 2)


def test_sram_ledger_overlapping_regions_use_the_worst_pe():
    ledger = SramLedger(10, 10, 100)
    ledger.allocate("a", 40, ledger.region("a", 0, 0, 5, 10))
    ledger.allocate("b", 40, ledger.region("b", 3, 6, 7, 4))
    # Only PEs in rows 3-4, cols 6-9 carry both.
    assert ledger.used_bytes() == 80
    assert ledger.used_bytes(ledger.region("q", 0, 0, 3, 10)) == 40


def test_defect_rate_and_remap_invariants():
    spec = preset("wse2")
    dm = defect_map(spec, seed=1, rate=1e-3)
    expected = spec.physical_rows * spec.physical_cols * 1e-3
    assert abs(dm.num_dead - expected) < 5 * np.sqrt(expected)
    rm = remap(spec, dm)
    phys_dead = dm.dead[rm.phys_row[:, None], rm.phys_col]
    assert not phys_dead.any()  # no logical PE on a dead PE
    assert (np.diff(rm.phys_col, axis=1) >= 1).all()  # order kept along rows
    assert len(np.unique(rm.phys_col[0])) == spec.pe_cols
    assert rm.extra_hops["ew_total"] == int((np.diff(rm.phys_col, axis=1) - 1).sum())
    # Same seed, same map.
    assert (defect_map(spec, seed=1, rate=1e-3).dead == dm.dead).all()


def test_link_hops_kept_per_axis_equal_a_fresh_count():
    spec = preset("wse2")
    rm = remap(spec, defect_map(spec, seed=3, rate=1e-3))
    ew, ns = rm.link_hops(1), rm.link_hops(0)
    assert (ew == np.diff(rm.phys_col, axis=1)).all()
    drow = np.diff(rm.phys_row)[:, None]
    assert (ns == drow + np.abs(np.diff(rm.phys_col, axis=0))).all()
    assert rm.link_hops(1) is ew and rm.link_hops(0) is ns  # computed once
    with pytest.raises(ValueError):
        ew[0, 0] = 7  # kept read-only: no caller can change another's counts


def test_unrepairable_wafer_names_the_row():
    spec = preset("tiny")  # 1 spare row, 1 spare column
    dead = np.zeros((spec.physical_rows, spec.physical_cols), bool)
    dead[2, :3] = True  # row 2 needs 3 spare columns: retired with the spare row
    rm = remap(spec, type(defect_map(spec, 0))(dead=dead.copy(), seed=None, rate=0.0))
    assert rm.retired_rows == (2,) and 2 not in rm.phys_row
    dead[5, :2] = True  # a second such row: no spare row left
    with pytest.raises(DefectError, match="physical row 5"):
        remap(spec, type(defect_map(spec, 0))(dead=dead, seed=None, rate=0.0))
