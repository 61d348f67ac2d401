"""Experiment `trillion-scaling`: a 1-trillion-parameter model trained by weight streaming on
1 to 64 CS-3 systems, strong scaling (a fixed global batch) and weak scaling (a fixed batch
per system), each system count with its step's parts.

The case is the shipped `llama_1t` config, issue 40's params.yaml (1.198T parameters:
d_model 25,600, 128 layers, d_ff 102,400, 160 heads, 16 KV heads; batch_size 64 sequences of
4,096 tokens, `micro_batch_size: auto`). Strong scaling splits the global 64 sequences over
N systems (64 / N each); weak scaling gives every system 64. Every prediction is
`wse_systems.training.scaling` (`plan_step`: the micro-batch each system count runs,
explored for the fastest; `predict_step` on its plan, streamed below the layer). Per system
count the rows show compute, weights in, gradients out (SwarmX's reduce into MemoryX's one
ingress), MemoryX's update (overlapped with the backward except the last group's, which is
on the critical path; `scaling`'s docstring says why) and what the streams add.

Nothing is fitted here and nothing is compared: Cerebras's published 1T figures are not in
the calibration set (references/calibration-rows.md), so `published` stays empty. The
assumptions behind the numbers are rows of the table (this experiment measures nothing, so
`--quick` changes nothing). The figure: speedup against systems for both curves, with the ideal
line, and the strong-scaling step's parts.
"""

from __future__ import annotations

from typing import Any

from wse_core import ExperimentResult, PredictionRow

__all__ = ["run", "SYSTEMS", "CONFIG"]

NAME = "trillion-scaling"
CONFIG = "llama_1t"
SYSTEMS = (1, 2, 4, 8, 16, 32, 64)
PARTS = ("compute_s", "weights_in_s", "gradients_out_s", "memoryx_update_s", "exposed_s")


def _case() -> tuple[Any, Any, int, int]:
    """(model, spec, global batch, sequence) of the shipped 1T config."""
    from wse_core.cost.assumptions import assumed_spec

    from wse_trainer.config import load_config
    from wse_trainer.session import model_config

    cfg = load_config(CONFIG)
    return (
        model_config(cfg),
        assumed_spec(cfg.runconfig.wafer),
        cfg.train_input.batch_size,
        cfg.train_input.max_sequence_length,
    )


def curves() -> dict[str, list[Any]]:
    """{"strong": [ScalePoint per N], "weak": [...]}."""
    from wse_systems.training.scaling import strong_scaling, weak_scaling

    model, spec, batch, seq = _case()
    return {
        "strong": strong_scaling(model, spec, global_batch=batch, seq_len=seq, systems=SYSTEMS),
        "weak": weak_scaling(model, spec, batch_per_system=batch, seq_len=seq, systems=SYSTEMS),
    }


def _rows(by: dict[str, list[Any]]) -> list[PredictionRow]:
    model, spec, _, seq = _case()
    rows = []
    for curve, points in by.items():
        for p in points:
            params = {"model": f"{CONFIG} ({model.num_params() / 1e12:.4g}T)",
                      "wafer": spec.name, "scaling": curve, "systems": p.systems,
                      "batch_per_system": p.batch_per_system, "micro_batch": p.micro_batch,
                      "global_batch": p.global_batch, "seq_len": seq, "step_bound": p.bound,
                      "swarmx_levels": p.swarmx_levels}  # fmt: skip
            rows += [
                PredictionRow("step_s", p.step_s, "s", params),
                PredictionRow("tokens_per_s", p.tokens_per_s, "tokens/s", params),
                PredictionRow("speedup", p.speedup, "x", params),
                PredictionRow("scaling_efficiency", p.efficiency, "", params),
                *(PredictionRow(k, getattr(p, k), "s", params) for k in PARTS),
            ]
    return rows


def _figure(by: dict[str, list[Any]]):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 4.2))
    n = list(SYSTEMS)
    ax.loglog(n, n, "k--", lw=1, label="ideal (N x one system)")
    for curve, color in (("weak", "tab:blue"), ("strong", "tab:orange")):
        ax.loglog([p.systems for p in by[curve]], [p.speedup for p in by[curve]], "o-",
                  color=color, label=f"{curve} scaling")  # fmt: skip
    ax.set(xlabel="CS-3 systems", ylabel="speedup (tokens/s over one system)",
           title="1T Llama, weak (64 seq./system) and strong (64 seq. in all)")  # fmt: skip
    ax.title.set_fontsize(9)
    ax.legend(fontsize=8)
    strong = by["strong"]
    for k in PARTS:
        bx.loglog([p.systems for p in strong], [getattr(p, k) for p in strong], "o-", label=k)
    bx.loglog([p.systems for p in strong], [p.step_s for p in strong], "k-", lw=2, label="step")
    bx.set(xlabel="CS-3 systems", ylabel="seconds per step (busy, hidden or not)",
           title="strong scaling: what shrinks and what does not")  # fmt: skip
    bx.title.set_fontsize(9)
    bx.legend(fontsize=7)
    fig.tight_layout()
    return fig


def run(*, quick: bool, seed: int) -> ExperimentResult:
    del quick  # nothing is measured: the predictions are the whole experiment
    from wse_systems.training.micro_batch import plan_step
    from wse_systems.training.scaling import ASSUMPTIONS

    by = curves()
    model, spec, batch, seq = _case()
    one = plan_step(model, spec, num_csx=1, batch_per_system=batch, seq_len=seq)
    config = {
        "config": CONFIG, "n_params": int(model.num_params()), "systems": list(SYSTEMS),
        "global_batch (strong)": batch, "batch_per_system (weak)": batch, "seq_len": seq,
        "wafer": spec.name, "micro_batch": "explored per system count (plan_step)",
        "priced by": "wse_systems.training.scaling (plan_step, predict_step)",
    }  # fmt: skip
    rules = {**one.assumptions, **ASSUMPTIONS}
    table = [{"assumption": k, "value": v} for k, v in rules.items()]
    return ExperimentResult(NAME, seed, config, table, _rows(by), _figure(by))
