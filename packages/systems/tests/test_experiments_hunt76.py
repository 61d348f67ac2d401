"""Hunt 76 on `cost-model-calibration`. Broken before:

- `--sweep attention.exp_fmacs` (4, 6, 12) printed the 8B check at 3041.5 tokens/s at every
  value (2928.1 at every value given 12,6,4), where `--assume attention.exp_fmacs=4|6|12` gave
  3041.5 / 3012.3 / 2928.1: `token._DECODE_CASES` (now `published._CASES`) kept the phases
  by the spec and the calibration alone, and the exponential's cost is baked into them.
- each row listed the whole run's reads: Table II's grids at 850 MHz listed clock_hz
  "8.5e+08, 1.1e+09" (the WSE-3's too), every leave-one-out refit's fitted values, and
  system_latency_s and attention.exp_fmacs, which cannot move them.

Oracles: each value priced in a fresh process state (an empty cache) under `assume`, as
separate `--assume` runs price it; the calibration in force and the calibration's WSE-2 clock.
"""

from __future__ import annotations

import pytest
from wse_core.cost.assumptions import assume, assumed_spec, calibration_spec
from wse_core.cost.calibration import current
from wse_core.cost.listing import listed
from wse_core.cost.reads import recording
from wse_core.studies.sweeps import sweep
from wse_systems import published
from wse_systems.studies import calibration_check as cc

KEY = "attention.exp_fmacs"


def _fresh_tokens_per_s(monkeypatch, value: float) -> float:
    """The 8B check's tokens/s under `--assume attention.exp_fmacs=value`, nothing cached."""
    monkeypatch.setattr(published, "_CASES", {})
    with assume(**{KEY: value}):
        return 1.0 / float(published.decode_check_row()["model"])


def _check_row(rows):
    return next(r for r in rows if r.name == "tokens_per_s")


@pytest.mark.parametrize("values", [(4.0, 6.0, 12.0), (12.0, 6.0, 4.0)])
def test_a_sweep_of_the_exponential_moves_the_8b_check_as_separate_runs(monkeypatch, values):
    alone = [_fresh_tokens_per_s(monkeypatch, v) for v in values]
    assert len(set(alone)) == 3  # the constant moves the check (3041.5 / 3012.3 / 2928.1)
    monkeypatch.setattr(published, "_CASES", {})
    swept = sweep(cc.run_predictions, KEY, values)
    line = next(vals for label, _, vals in swept.lines if label.startswith("tokens_per_s"))
    assert list(line) == pytest.approx(alone, rel=1e-12)


def test_a_cached_decode_case_lists_what_a_fresh_one_reads(monkeypatch):
    monkeypatch.setattr(published, "_CASES", {})
    with recording() as cold:
        published.decode_case()
    with recording() as warm:  # a hit: what the build read is read again
        published.decode_case()
    assert cold.values == warm.values and cold.moving == warm.moving
    assert KEY in warm.values


def _listing(row) -> dict[str, tuple[float, ...]]:
    return {e.key: e.values for e in listed(row.assumed, {})}


def test_each_calibration_row_lists_what_its_own_pricing_read():
    rows = cc.run_predictions()
    cal, wse2 = current(), calibration_spec("wse2")
    for row in rows:
        assert row.assumed is not None, row.name
        got = _listing(row)
        # a row on a CS-3 (wse3) prices CS-3's own fit where it has one (issue 41: its DSD
        # issue too, not the WSE-2 fit's), every other row the calibration's values
        own = cal.by_system["CS-3"] if row.params.get("wafer") == "wse3" else {}
        for key, values in got.items():  # one value each: no leave-one-out refit's
            assert len(values) == 1, (row.params["case"], key, values)
            if key in own:
                assert values[0] == own[key]
            elif key in cal.values:
                assert values[0] == cal.values[key]
        if row.params.get("wafer") == "wse2":
            assert got.get("clock_hz", (wse2.clock_hz,)) == (wse2.clock_hz,)
            assert not {"system_latency_s", KEY} & set(got), (row.params["case"], got)
    grid = next(r for r in rows if r.params.get("grid") == "200x200")
    assert "router_switch_cycles" in _listing(grid)  # the constant this row fits
    check = _listing(_check_row(rows))
    assert KEY in check and check["clock_hz"] == (assumed_spec("wse3").clock_hz,)
