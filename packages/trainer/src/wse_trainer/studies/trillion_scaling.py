"""Experiment `trillion-scaling`: a 1-trillion-parameter model trained by weight streaming on
1, 2, 4, 8, 16 and 2,048 CS-3 systems — predicted step time, tokens/s and scaling efficiency.

The case is the shipped `llama_1t` config (1.198T parameters: d_model 25,600, 128 layers,
d_ff 102,400, 160 heads, 16 KV heads; the shape is an assumption, stated in the config):
3 sequences of 8,192 tokens per system, so N systems train 3N sequences a step (weak
scaling: the wafer keeps its activations in SRAM, which caps the per-system batch). Every
prediction is `wse_systems.training.performance.predict_step` on the plan `wse train
--validate-only` prints: a layer does not fit beside its activations, so its matrices stream in
column chunks sized by the SRAM ledger; the speedup is tokens/s(N) / tokens/s(1), the efficiency
that over N (`performance.scaling`, which also names what the added systems cost).

Nothing is fitted here and nothing is compared: Cerebras's published 1T figures are not in
shared/REFERENCES.md's calibration set, so `published` stays empty. Every assumption behind
the numbers (the wafer spec's assumed fields with their values, MemoryX and SwarmX included,
and the trainer's pricing rules) is a row of the table (under "Measurements": this
experiment measures nothing, so `--quick` changes nothing). The figure is the speedup
against systems, with the ideal line.
"""

from __future__ import annotations

from typing import Any

from wse_core import ExperimentResult, PredictionRow

__all__ = ["run", "SYSTEMS", "CONFIG"]

NAME = "trillion-scaling"
CONFIG = "llama_1t"
SYSTEMS = (1, 2, 4, 8, 16, 2048)


def _case() -> tuple[Any, Any, int, int]:
    """(model, spec, batch per system, sequence) of the shipped 1T config."""
    from wse_core.cost.assumptions import assumed_spec

    from wse_trainer.config import load_config
    from wse_trainer.session import model_config

    cfg = load_config(CONFIG)
    batch = cfg.train_input.batch_size // cfg.runconfig.num_csx
    return (
        model_config(cfg),
        assumed_spec(cfg.runconfig.wafer),
        batch,
        cfg.train_input.max_sequence_length,
    )


def _predictions() -> tuple[list[PredictionRow], list[Any], dict[str, str]]:
    """The rows, the reports (one per system count) and the assumptions they rest on."""
    from wse_systems.training.performance import predict_step, scaling

    model, spec, batch, seq = _case()
    reports = [
        predict_step(model, spec, num_csx=n, micro_batch=batch, seq_len=seq) for n in SYSTEMS
    ]
    one, rows = reports[0], []
    for r in reports:
        s = scaling(one, r)
        p = {"model": f"{CONFIG} ({model.num_params() / 1e12:.4g}T)", "wafer": spec.name,
             "systems": r.systems, "batch_per_system": batch, "seq_len": seq,
             "global_batch": batch * r.systems, "precision": r.extra["precision"],
             "weight_chunks": r.extra["weight_chunks"], "stride": r.extra["stride"],
             "step_bound": s["step_bound"], "scaling_bound": s["scaling_bound"],
             "swarmx_levels": s["swarmx_levels"]}  # fmt: skip
        rows += [
            PredictionRow("step_s", r.predicted_s, "s", p),
            PredictionRow("tokens_per_s", r.extra["tokens_per_s"], "tokens/s", p),
            PredictionRow("speedup", r.extra["tokens_per_s"] / one.extra["tokens_per_s"], "x", p),
            PredictionRow("scaling_efficiency", s["scaling_efficiency"], "", p),
            PredictionRow("stall_fraction", r.extra["stall_fraction"], "", p),
            PredictionRow("added_s_vs_one_system", s["added_s"], "s", p),
        ]
    return rows, reports, reports[-1].assumptions


def _figure(rows: list[PredictionRow]):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    speed = {r.params["systems"]: r.value for r in rows if r.name == "speedup"}
    eff = {r.params["systems"]: r.value for r in rows if r.name == "scaling_efficiency"}
    n = sorted(speed)
    fig, ax = plt.subplots(figsize=(6, 4.2))
    ax.loglog(n, n, "k--", lw=1, label="ideal (N x one system)")
    ax.loglog(n, [speed[k] for k in n], "o-", color="tab:orange", label="predicted, CS-3")
    for k in n:
        ax.annotate(f"{100 * eff[k]:.2f}%", (k, speed[k]), textcoords="offset points",
                    xytext=(4, -12), fontsize=7)  # fmt: skip
    ax.set(xlabel="CS-3 systems", ylabel="speedup (tokens/s over one system)",
           title="1T-parameter Llama by weight streaming (3 x 8192 tokens per system)")  # fmt: skip
    ax.title.set_fontsize(9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def run(*, quick: bool, seed: int) -> ExperimentResult:
    del quick  # nothing is measured: the predictions are the whole experiment
    rows, reports, assumptions = _predictions()
    model, spec, batch, seq = _case()
    config = {
        "config": CONFIG, "n_params": int(model.num_params()), "systems": list(SYSTEMS),
        "batch_per_system": batch, "seq_len": seq, "wafer": spec.name,
        "scaling": "weak: the same batch per system on every system count",
        "weight_chunks": reports[0].extra["weight_chunks"],
        "priced by": "wse_systems.training.performance.predict_step (the plan wse train "
        "--validate-only prints), performance.scaling against one system",
    }  # fmt: skip
    table = [{"assumption": k, "value": v} for k, v in assumptions.items()]
    return ExperimentResult(NAME, seed, config, table, rows, _figure(rows))
