"""Hunt 68, the `trtllm-h100` experiment and its kernel-cost sweep. Broken before: the kernel
cost is assumed because the TensorRT-LLM rows do not identify it (`fit_over_floor()`: the
rms falls as it grows), but the experiment never showed that sweep: its measurements held
the fit at 1 us only. Now they hold `fit_over_floor()`'s rows ("fit at kernel_s": kernel_s,
mfu, hbm_fraction, rms_fitted, rms_checks), in the printed table and in results.json, and
the rows and the fit re-run price the kernel cost in force (`--assume gpu.kernel_s`).

Oracles: `fit_over_floor()` itself, and `predict(row, kernel_s=...)` at the value given
explicitly. The fit (about 4 s a value, 16 s a sweep) is replaced by a cheap stand-in in the
default suite, so the experiment's plumbing is checked in a second; the slow test compares
the real fit."""

from __future__ import annotations

import json

import pytest
from wse_core.cost.assumptions import assume
from wse_core.studies.experiment import results_json, table_markdown
from wse_systems import gpu_links
from wse_systems.serving import gpu_step as gs
from wse_systems.serving import trtllm_h100 as tr
from wse_systems.studies import trtllm_h100 as study

FIELDS = ("kernel_s", "mfu", "hbm_fraction", "rms_fitted", "rms_checks")


@pytest.fixture
def cheap_fit(monkeypatch):
    """`tr.fit` as a cheap function of the kernel cost (the fractions it would fit are not
    what these tests check; that the experiment shows `fit_over_floor`'s rows is)."""
    calls = []

    def fit(kernel_s=None):
        calls.append(kernel_s)
        return 0.25 + 1e3 * kernel_s, 0.7 + 1e4 * kernel_s, 0.2 + 1e4 * kernel_s

    monkeypatch.setattr(tr, "fit", fit)
    return calls


def _swept(result) -> list[dict]:
    return [{k: m[k] for k in FIELDS} for m in result.measurements
            if m["what"] == "fit at kernel_s"]  # fmt: skip


def _check_shown(result, oracle: list[dict]) -> None:
    assert _swept(result) == oracle
    data = json.loads(results_json(result))
    assert [{k: m[k] for k in FIELDS} for m in data["measurements"]
            if m["what"] == "fit at kernel_s"] == oracle  # fmt: skip
    text = table_markdown(result)
    keys = next(line for line in text.splitlines() if line.startswith("| what |"))
    columns = [c.strip() for c in keys.strip("|").split("|")]
    shown = [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines()
             if line.startswith("| fit at kernel_s |")]  # fmt: skip
    assert len(shown) == len(oracle) == len(gs.KERNEL.sweep)
    for cells, row in zip(shown, oracle, strict=True):
        for key in FIELDS:
            assert cells[columns.index(key)] == f"{row[key]:.6g}"


def test_the_experiment_shows_fit_over_floor(cheap_fit):
    result = study.run(quick=True)
    # one fit a value, none again for the re-run; then the NVLink latency's sweep at the
    # kernel cost in force (hunt jobs17 B)
    latencies = len(gpu_links.NVLINK_LATENCY.sweep)
    assert cheap_fit == list(gs.KERNEL.sweep) + [gs.KERNEL_S] * latencies
    _check_shown(result, tr.fit_over_floor())
    assert [row["kernel_s"] for row in _swept(result)] == list(gs.KERNEL.sweep)
    refit = result.measurements[0]  # the fit re-run at 1 us: the sweep's row
    assert (refit["mfu"], refit["hbm_fraction"], refit["rms_log_ratio"]) == tr.fit(1e-6)
    assert result.config["kernel_s"] == gs.KERNEL_S


@pytest.mark.parametrize("kernel_s", [2e-6, 3e-6])  # in the sweep, and not in it
def test_the_rows_and_the_refit_take_the_assumed_kernel_cost(cheap_fit, kernel_s):
    with assume(**{"gpu.kernel_s": kernel_s}):
        result = study.run(quick=True)
    for p, row in zip(result.predictions, tr.ROWS, strict=True):
        assert p.value == tr.predict(row, mfu=gs.FITTED_MFU, hbm_fraction=gs.FITTED_HBM_FRACTION,
                                     kernel_s=kernel_s)  # fmt: skip
    refit = result.measurements[0]
    assert (refit["mfu"], refit["hbm_fraction"], refit["rms_log_ratio"]) == tr.fit(kernel_s)
    assert result.config["kernel_s"] == kernel_s
    _check_shown(result, tr.fit_over_floor())  # the sweep is the sweep whatever is assumed


@pytest.mark.slow
def test_the_real_fit_over_floor_is_shown():
    result = study.run(quick=True)
    oracle = tr.fit_over_floor()
    _check_shown(result, oracle)
    # the rows do not identify the kernel cost: the rms on the fitted rows falls as it grows
    rms = [row["rms_fitted"] for row in oracle]
    assert rms == sorted(rms, reverse=True)
