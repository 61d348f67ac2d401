"""Experiment `tco-training`: a 12B model trained to a fixed token budget on CS-3 systems
against an H100 cluster — time, energy and cost, with every assumption in the config.

The model is Llama-3 shaped at 12.3B parameters (d_model 5120, 40 layers, 40 heads, 8 KV
heads, d_ff 13824, Llama-3 vocabulary); the budget is Chinchilla's 20 tokens per parameter
(Hoffmann et al. 2022), rounded to 2.4e11 tokens; sequences of 8192 tokens. For 1, 4, 16
and 64 CS-3 systems (the per-system batch `wse plan` picks: the smallest with no weight
stall) against 8 H100s per system on the same global batch, and the number of H100s that
would match the wafers' time. It lives beside `wse plan` because it needs the trainer's
wafer predictor and the GPU model at once (`wse_systems.planning.train`). No published figure is in
references/calibration-rows.md, so `published` stays empty; `--quick` changes nothing (nothing is
measured).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from wse_core import ExperimentResult, PredictionRow
from wse_core.cost.assumptions import assumed_spec
from wse_core.cost.reads import merged
from wse_core.studies.experiment import read_by
from wse_systems import economics as eco
from wse_systems import gpu as gpum

__all__ = ["run", "SYSTEMS", "TOKENS"]

NAME = "tco-training"
SYSTEMS = (1, 4, 16, 64)
TOKENS = 2.4e11
SEQ_LEN = 8192
GPUS_PER_SYSTEM = 8


def model_12b():
    import wse_models

    return wse_models.preset_config(
        "llama3-8b", name="llama-12b", d_model=5120, n_layers=40, n_heads=40, d_ff=13824,
        dtype="bfloat16",
    )  # fmt: skip


def _rows(plan, n: int) -> list[PredictionRow]:
    """Each side's rows, listing what its own pricing read (`SideResult.reads`; hunt 71: the
    GPU rows listed the wafer's constants and not `gpu.train_mfu`, which sets them)."""
    rows = []
    for side, count, key in ((plan.wafer, n, "num_csx"), (plan.gpu, plan.gpu.units, "num_gpus")):
        params = {"system": side.system, key: count, "tokens": TOKENS, "seq_len": SEQ_LEN,
                  "global_batch": plan.inputs["global_batch"]}  # fmt: skip
        rows += read_by(
            side.reads,
            PredictionRow("time_to_train_days", side.time_s / 86400, "days", params),
            PredictionRow("energy_mwh", side.energy_j / 3.6e9, "MWh", params),
            PredictionRow("energy_per_token_j", side.figures["energy_j_per_token"], "J", params),
            PredictionRow("cost_usd", side.bill.total_usd, "USD", params),
        )
    match = plan.gpus_to_match
    return rows + read_by(
        merged(plan.wafer.reads, plan.gpu.reads),  # the GPUs matching the wafers' time
        PredictionRow(
            "gpus_to_match_time",
            float("nan") if match is None else match,
            "H100",
            {"num_csx": n, "matched": match is not None},
        ),
    )  # fmt: skip


def _figure(plans: list[tuple[int, Any]]):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(12, 3.8))
    n = [k for k, _ in plans]
    panels = (
        ("time to train (days)", lambda s: s.time_s / 86400),
        ("energy (MWh)", lambda s: s.energy_j / 3.6e9),
        ("cost (M$)", lambda s: s.bill.total_usd / 1e6),
    )
    x = range(len(n))
    for ax, (title, f) in zip(axes, panels, strict=True):
        ax.bar([i - 0.2 for i in x], [f(p.wafer) for _, p in plans], 0.4, label="CS-3")
        ax.bar([i + 0.2 for i in x], [f(p.gpu) for _, p in plans], 0.4, label="8 H100 / system")
        ax.set_xticks(list(x), [str(k) for k in n])
        ax.set(xlabel="CS-3 systems", title=title, yscale="log")
        ax.legend(fontsize=7)
    fig.suptitle(f"12B model, {TOKENS:.2g} tokens: CS-3 against H100 (predicted)", fontsize=10)
    fig.tight_layout()
    return fig


def run(*, quick: bool, seed: int) -> ExperimentResult:
    from wse_systems.planning.choice import ModelChoice
    from wse_systems.planning.train import TrainGpus, plan_train

    del quick  # nothing measured: the predictions are the whole experiment
    choice, spec = ModelChoice("llama-12b", model_12b(), seq_len=SEQ_LEN), assumed_spec("wse3")
    plans = [
        (
            n,
            plan_train(
                choice,
                tokens=TOKENS,
                spec=spec,
                systems=n,
                gpus=TrainGpus(gpus=GPUS_PER_SYSTEM * n),
            ),
        )  # fmt: skip
        for n in SYSTEMS
    ]
    rows = [r for n, p in plans for r in _rows(p, n)]
    first = plans[0][1]
    config = {
        "model": {"name": "llama-12b", "n_params": first.n_params, "d_model": 5120,
                  "n_layers": 40, "n_heads": 40, "n_kv_heads": 8, "d_ff": 13824},
        "tokens": TOKENS,
        "seq_len": SEQ_LEN,
        "systems": list(SYSTEMS),
        "gpus_per_system": GPUS_PER_SYSTEM,
        "gpu": gpum.H100.to_dict(),
        "wafer_system": dataclasses.asdict(eco.system_of(spec)),
        "rates": {"wafer": first.inputs["wafer_rates"], "gpu": first.inputs["gpu_rates"]},
        "mfu": first.inputs["mfu"],
        "assumptions": first.assumptions,
    }  # fmt: skip
    return ExperimentResult(NAME, seed, config, [], rows, _figure(plans))
