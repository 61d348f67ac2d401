"""Experiment `trtllm-h100`: the GPU serving model against NVIDIA's TensorRT-LLM H100 FP8 rows.

Every row of `wse_systems.serving.trtllm_h100.ROWS` (v0.19.0 performance overview: Llama 3.1
8B, 70B and 405B on 1 to 8 H100, input/output lengths 128/128 to 20000/2000) predicted by
`wse_systems.serving.gpus` in fp8 at the row's tp x pp layout and the most users it holds,
with the fractions `FITTED_MFU` and `FITTED_HBM_FRACTION`, which `trtllm_h100.fit()` finds
on the rows whose input length is at most their output length: their role is `FITS`,
"fits FITTED_MFU, FITTED_HBM_FRACTION" (`wse_core.studies.experiment.row_role`'s "fits K";
hunt 73: it was "fitted", outside that vocabulary). The other rows (long prompts, short
outputs) are checks ("check"): their ratios show whether whole requests, prompts included,
are priced right. The figure: model against published, both logarithmic, fitted and check
rows marked apart. `--quick` changes nothing (the model is arithmetic). Measurements: the
fit re-run here and its rms log ratio per role, then the fit at each value of the kernel
cost's sweep (`trtllm_h100.fit_over_floor()`: the kernel cost, the fitted MFU and HBM share,
the rms on the fitted rows and on the checks; hunt 68: the sweep that shows the rows do not
identify the kernel cost, which is why it is assumed, was never printed), and over the NVLink
latency's (`trtllm_h100.fit_over_latency()`, `gpu.nvlink_latency_s`; hunt jobs17 B). The rows
and the fit re-run price the kernel cost and the latencies in force (`--assume gpu.kernel_s=S`,
`gpu.nvlink_latency_s=S`; `--sweep KEY` reruns the rows only, `run_predictions`).
"""

from __future__ import annotations

import math

from wse_core import ExperimentResult, PredictionRow
from wse_core.cost.reads import recording
from wse_core.studies.experiment import read_by, row_role

from wse_systems.serving import trtllm_h100 as tr
from wse_systems.serving.gpu_step import FITTED_HBM_FRACTION, FITTED_MFU, kernel_s_in_force

__all__ = ["FITS", "run", "run_predictions"]

NAME = "trtllm-h100"
# The role of a row the fractions are fitted on ("fits K": the constants it sets)
FITS = "fits FITTED_MFU, FITTED_HBM_FRACTION"
# Each role with its name in the figure and the measurements
ROLES = ((FITS, "fitted"), ("check", "check"))


def _row(r: tr.TrtllmRow) -> PredictionRow:
    """The row at the fitted fractions, with what its pricing read (a tp 1 row reads no
    NVLink latency: hunt jobs17 B)."""
    with recording() as got:
        value = tr.predict(r, mfu=FITTED_MFU, hbm_fraction=FITTED_HBM_FRACTION)
    params = {"model": r.model, "gpus": r.gpus, "tp": r.tp, "pp": r.pp,
              "input_tokens": r.input_tokens, "output_tokens": r.output_tokens,
              "precision": "fp8", "role": FITS if tr.fitted(r) else "check"}  # fmt: skip
    row = PredictionRow("output_tokens_per_s", value, "tokens/s", params,
                        r.output_tokens_per_s, tr.SOURCE)  # fmt: skip
    return read_by(got, row)[0]


def _rms(rows: list[PredictionRow], role: str) -> float:
    logs = [math.log(p.value / p.published) for p in rows if row_role(p) == role]
    return math.sqrt(sum(v * v for v in logs) / len(logs))


def _figure(rows: list[PredictionRow]):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 5))
    for (role, label), mark in zip(ROLES, ("o", "^"), strict=True):
        pts = [(p.published, p.value) for p in rows if row_role(p) == role]
        ax.scatter(*zip(*pts, strict=True), marker=mark, label=f"{label} ({len(pts)} rows)")
    lo = min(min(p.value, p.published) for p in rows) / 1.5
    hi = max(max(p.value, p.published) for p in rows) * 1.5
    ax.plot([lo, hi], [lo, hi], "k--", lw=0.8, label="model = published")
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="TensorRT-LLM v0.19.0, output tokens/s",
        ylabel="model, output tokens/s",
        title="H100 FP8 serving: model against published",
    )
    ax.legend()
    fig.tight_layout()
    return fig


def run_predictions(*, seed: int = 0) -> list[PredictionRow]:
    """Every row predicted at the fitted fractions (what `--sweep` reruns: no fit)."""
    del seed  # arithmetic only
    return [_row(r) for r in tr.ROWS]


def _fit(over_floor: list[dict[str, float]], kernel_s: float) -> tuple[float, float, float]:
    """The fit at `kernel_s`: the sweep's row where it holds that value (the same fit, about
    4 s saved), else `tr.fit`."""
    at = [f for f in over_floor if f["kernel_s"] == kernel_s]
    return (at[0]["mfu"], at[0]["hbm_fraction"], at[0]["rms_fitted"]) if at else tr.fit(kernel_s)


def run(*, quick: bool = False, seed: int = 0) -> ExperimentResult:
    del quick  # arithmetic only: the same rows either way
    rows = run_predictions(seed=seed)
    over_floor = tr.fit_over_floor()
    kernel_s = kernel_s_in_force()
    mfu, hbm, rms = _fit(over_floor, kernel_s)
    measurements = [
        {"what": "fit re-run", "kernel_s": kernel_s, "mfu": mfu, "hbm_fraction": hbm,
         "rms_log_ratio": rms},
        *({"what": f"rms log ratio, {label} rows", "role": role, "rows": sum(row_role(p) == role
           for p in rows), "rms_log_ratio": _rms(rows, role)} for role, label in ROLES),
        *({"what": "fit at kernel_s", **f} for f in over_floor),
        *({"what": "fit at nvlink_latency_s", **f} for f in tr.fit_over_latency()),
    ]  # fmt: skip
    config = {"source": tr.SOURCE, "mfu": FITTED_MFU, "hbm_fraction": FITTED_HBM_FRACTION,
              "kernel_s": kernel_s, "precision": "fp8", "gpu": "H100-SXM5-80GB"}  # fmt: skip
    return ExperimentResult(NAME, seed, config, measurements, rows, _figure(rows))
