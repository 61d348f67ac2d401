"""Hunt 81: a `--sweep` row names its case. fabric-collectives' four ops on one grid were
`wafer_cycles grid=8x8`, `... #2`, `#3`, `#4` (`sweeps.CASE_KEYS` lacked `op`), and
wafer-yield's spares and rates, netl-rayleigh-benard's GPU codes likewise.

Oracle: the rows' own params: every label names the op (spares, rate) the row was priced
for, and no label needs a "#n" to tell rows apart.
"""

import pytest
from wse_core.studies import fabric_collectives, wafer_yield
from wse_core.studies.sweeps import sweep


def _no_numbered(result):
    labels = [label for label, _, _ in result.lines]
    assert not [label for label in labels if " #" in label], labels
    return labels


def test_fabric_collectives_rows_name_their_op(monkeypatch):
    monkeypatch.setattr(fabric_collectives, "GRIDS", ((8, 8),))
    monkeypatch.setattr(fabric_collectives, "_measure", lambda *a, **k: {})
    got = sweep(
        lambda seed: fabric_collectives.run(quick=True, seed=seed).predictions,
        "hop_latency_cycles",
        (1.0, 2.0),
    )
    labels = _no_numbered(got)
    for op in fabric_collectives.OPS:
        assert f"wafer_cycles grid=8x8 op={op}" in labels


@pytest.mark.parametrize("key", ["spare_rows", "defect_rate"])
def test_wafer_yield_rows_name_their_spares_and_rate(monkeypatch, key):
    monkeypatch.setattr(wafer_yield, "RATES", (1e-3, 1e-2))
    monkeypatch.setattr(wafer_yield, "SPARES", ((0, 6), (2, 12)))
    monkeypatch.setattr(wafer_yield, "simulate", lambda spec, rate, wafers, rng: (1.0, 1.0))
    got = sweep(
        lambda seed: wafer_yield.run(quick=True, seed=seed).predictions,
        "hop_latency_cycles",
        (1.0,),
    )
    labels = _no_numbered(got)
    assert len(labels) == 4 and all(f"{key}=" in label for label in labels)
