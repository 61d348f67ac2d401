"""The `leviathan23-speculative` experiment (--quick): output shape, the published formula
recomputed independently from each row's measured alpha and c, predictions on the fixed grid."""

import json

import pytest


def _formula(a: float, g: int, c: float) -> float:  # Leviathan et al. 2023, eq. in Sec. 3.4
    return (1 - a ** (g + 1)) / ((1 - a) * (g * c + 1))


@pytest.mark.slow
def test_quick_run_rows_and_predictions(tmp_path):
    from wse_core import write_experiment
    from wse_inference.studies import leviathan23_speculative as exp

    res = exp.run(quick=True, seed=0)
    folder = write_experiment(res, tmp_path)
    d = json.loads((folder / "results.json").read_text())
    assert (folder / "figure.png").stat().st_size > 1000
    assert d["config"]["target_weight_mb"] > 4 * 32  # weights streamed from DRAM, not L3
    assert d["config"]["prompt_tokens"] + d["config"]["new_tokens"] == exp.CONTEXT
    rows = d["measurements"]
    assert rows and {r["draft_layers"] for r in rows} == {1}
    for r in rows:
        assert 0 < r["alpha"] < 1 and r["draft_alone_c"] > 0 and r["verify_cost_ratio"] > 0
        assert r["verify_forward_ratio"] > 0
        assert r["plain_step_in_run_ms"] > 0 and r["round_in_run_ms"] > 0
        assert r["draft_weight_mb"] < r["target_weight_mb"] / 4
        f = _formula(r["alpha"], r["gamma"], r["cost_ratio_c"])
        assert r["formula_speedup"] == pytest.approx(f, rel=1e-12)
        assert r["ratio"] == pytest.approx(r["measured_speedup"] / f, rel=1e-12)
        assert r["within_10pct"] == (abs(r["ratio"] - 1) <= 0.10)
        assert 1 <= r["tokens_per_pass"] <= r["gamma"] + 1
    # predictions: the published formula on the fixed grid, the same quick or not
    assert len(d["predictions"]) == len(exp.GRID)
    for p, (a, g, c) in zip(d["predictions"], exp.GRID, strict=True):
        assert p["value"] == pytest.approx(_formula(a, g, c), rel=1e-12)
