"""Experiment `weight-streaming`: predicted step time, stall and tokens/s of weight-streaming
training on WSE-3 for GPT-2 124M, Llama-3 8B and 70B at 1..64 systems, next to a
data-parallel GPU cluster (8 GPUs per CS-3, ring allreduce), and the stall fraction measured
in the emulator on a tiny model beside its predicted step on the `small` wafer.

Every wafer row comes from one `wse_systems.training.performance.predict_step` RunReport of the
trainer's own memory plan, with the stable params `model`, `wafer`, `systems`, `precision`
(plus `batch_per_system`, `seq_len`). The models run as the shipped configs do (bf16
compute, fp32 masters: "mixed"); the per-system batches are the configs' (`gpt2_124m`,
`llama3_8b`, `llama3_70b`: 112 x 1024, 64 / 4 x 8192, 64 / 16 x 8192 tokens), so the global
batch grows with the systems (weak scaling). No published training figure is in
references/calibration-rows.md, so `published` stays empty. Predictions are the same with `--quick`;
only the measured part shrinks. Each row lists the constants its own pricing read (`read_by`;
hunt 70: every row listed the whole run's, the GPU rows wafer constants that do not move
them and not the MFU that does, `gpu.train_mfu`, and the wse3 rows the measured part's
850 MHz clock beside their own).
"""

from __future__ import annotations

from typing import Any

from wse_core import ExperimentResult, PredictionRow, RunReport
from wse_core.cost.assumptions import assumed_spec
from wse_core.cost.reads import recording
from wse_core.studies.experiment import read_by
from wse_systems import gpu as gpum
from wse_systems.training.performance import StepLayout, no_stall_batch, predict_step

__all__ = ["run", "CASES", "NUM_CSX"]

NAME = "weight-streaming"
NUM_CSX = (1, 2, 4, 8, 16, 32, 64)
CASES = (("gpt2-124m", 112, 1024), ("llama3-8b", 16, 8192), ("llama3-70b", 4, 8192))
GPUS_PER_SYSTEM = 8
WAFER = "wse3"


def _wafer_rows(name: str, r: RunReport, got: Any) -> list[PredictionRow]:
    """The step, tokens/s and stall rows of `r`, each listing what pricing it read (`got`)."""
    x = r.extra
    params = {
        "model": name,
        "wafer": r.wafer,
        "systems": r.systems,
        "precision": x["precision"],
        "batch_per_system": x["micro_batch"],
        "seq_len": x["seq_len"],
    }
    return read_by(
        got,
        PredictionRow("step_s", r.predicted_s, "s", params),
        PredictionRow("tokens_per_s", x["tokens_per_s"], "tokens/s", params),
        PredictionRow("stall_fraction", x["stall_fraction"], "", params),
    )


def _gpu_rows(name: str, model: Any, n: int, batch: int, seq: int) -> list[PredictionRow]:
    """The same global batch on GPUS_PER_SYSTEM H100s per system, by wse_systems' GPU model
    (the fastest data/tensor/pipeline layout that fits, ring all-reduce, at the assumed MFU
    `gpu.train_mfu`, which the rows list: `read_by`)."""
    gpus, h100 = GPUS_PER_SYSTEM * n, gpum.H100
    params = {"model": name, "gpus": gpus, "gpu": h100.name}
    try:
        with recording() as got:
            g = gpum.train_step(gpum.ModelShape.of(model), h100, num_gpus=gpus,
                                batch=n * batch, seq_len=seq)  # fmt: skip
    except gpum.GpuMemoryError:  # the row says how many GPUs would hold it instead
        params["fits_memory"] = False
        with recording() as got:  # memory alone: it reads no assumption, and lists none
            need = gpum.min_train_gpus(gpum.ModelShape.of(model), h100, seq_len=seq,
                                       batch=n * batch)  # fmt: skip
        return read_by(got, PredictionRow("gpu_min_gpus_to_fit", float(need), "GPUs", params))
    params |= {"fits_memory": True, "layout": g.layout.to_dict()}
    return read_by(
        got,
        PredictionRow("gpu_tokens_per_s", n * batch * seq / g.step_s, "tokens/s", params),
        PredictionRow("gpu_scaling_efficiency", g.compute_s / g.step_s, "", params),
    )


def _predictions() -> tuple[list[PredictionRow], dict[str, Any]]:
    import wse_models

    spec, rows, curves = assumed_spec(WAFER), [], {}
    for name, batch, seq in CASES:
        model = wse_models.preset_config(name, dtype="bfloat16")
        for n in NUM_CSX:
            with recording() as got:
                r = predict_step(model, spec, num_csx=n, batch_per_system=batch, seq_len=seq)
            g = _gpu_rows(name, model, n, batch, seq)
            rows += _wafer_rows(name, r, got) + g
            gpu = (g[0].value, g[1].value) if len(g) == 2 else (float("nan"), float("nan"))
            curves.setdefault(name, []).append((n, r.extra["tokens_per_s"], *gpu))
        with recording() as got:
            fewest = no_stall_batch(model, spec, num_csx=1, seq_len=seq)
        rows += read_by(
            got,
            PredictionRow(
                "no_stall_batch",
                fewest,
                "sequences per system",
                {
                    "model": name,
                    "wafer": WAFER,
                    "systems": 1,
                    "precision": r.extra["precision"],
                    "seq_len": seq,
                },
            ),
        )  # fmt: skip
    return rows, curves


def _tiny_model() -> Any:
    """The model `_measure` streams in the emulator (tiny-gpt2, d=128, 4 layers)."""
    import wse_models

    return wse_models.preset_config(
        "tiny-gpt2",
        vocab_size=512,
        d_model=128,
        n_layers=4,
        n_heads=4,
        n_kv_heads=4,
        d_ff=512,
        max_seq_len=128,
    )


def _measure(quick: bool, seed: int) -> list[dict[str, Any]]:
    """Stall fraction and throughput of the tiny model streamed in the emulator."""
    import jax
    import numpy as np
    import wse_models
    from wse_systems.training.plan import memory_plan, plan_activations

    from wse_trainer.config import OptimizerConfig
    from wse_trainer.optimizer import base_transform
    from wse_trainer.stream import StreamedTrainer

    model = _tiny_model()
    batch, seq, steps = 16, 128, 3 if quick else 10
    rng = np.random.default_rng(seed)
    data = rng.integers(0, model.vocab_size, (steps + 1, batch, seq + 1)).astype(np.int32)
    out = []
    for n in (1, 2):
        params = wse_models.init_params(model, jax.random.key(seed))
        tr = StreamedTrainer(
            model,
            params,
            base_transform(OptimizerConfig(), 100),
            num_csx=n,
            global_batch=batch,
            seq_len=seq,
            plan=plan_activations(model, assumed_spec("small"), batch // n, seq),
        )
        tr.step(data[0])  # compile
        stats = [tr.step(b) for b in data[1:]]
        wall = sum(s.wall_s for s in stats)
        spec = assumed_spec("small")
        pred = predict_step(
            model,
            spec,
            num_csx=n,
            batch_per_system=batch // n,
            seq_len=seq,
            layout=StepLayout(memory_plan(model, spec, batch // n, seq, streaming=tr.plan)),
        )
        out.append(
            {
                "model": "tiny-gpt2 (d=128, 4 layers)",
                "systems": n,
                "devices": len(jax.devices()),
                "steps": steps,
                "measured_stall_fraction": sum(s.stall_s for s in stats) / wall,
                "measured_tokens_per_s": sum(s.tokens for s in stats) / wall,
                "measured_step_s": wall / steps,
                "predicted_step_s_small_wafer": pred.predicted_s,
                "predicted_stall_fraction_small_wafer": pred.extra["stall_fraction"],
            }
        )
    return out


def _figure(curves: dict[str, Any]):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    for name, pts in curves.items():
        n = [p[0] for p in pts]
        line = a.loglog(n, [p[1] for p in pts], "o-", label=f"{name} WSE-3")[0]
        a.loglog(
            n,
            [p[2] for p in pts],
            "s--",
            color=line.get_color(),
            label=f"{name} {GPUS_PER_SYSTEM}x{gpum.H100.name} per system",
        )
        b.semilogx(n, [p[3] for p in pts], "s--", color=line.get_color(), label=name)
    a.set(xlabel="systems", ylabel="tokens / s", title="Predicted training throughput")
    b.set(
        xlabel="systems (GPU count / 8)",
        ylabel="scaling efficiency",
        ylim=(0, 1.05),
        title="GPU cluster (wse_systems.gpu: layout, ring all-reduce)",
    )
    a.legend(fontsize=7)
    b.legend(fontsize=7)
    fig.tight_layout()
    return fig


def run(*, quick: bool, seed: int) -> ExperimentResult:
    rows, curves = _predictions()
    config = {
        "systems": list(NUM_CSX),
        "cases": [list(c) for c in CASES],
        "wafer": WAFER,
        "gpu": gpum.H100.to_dict(),
        "gpus_per_system": GPUS_PER_SYSTEM,
        "gpu_train_mfu": gpum.TRAIN_MFU,  # where no --assume gpu.train_mfu changes it
        "assumptions": "wafer: each row's RunReport (wse_systems.training.performance.ASSUMPTIONS, "
        "the spec's assumed fields, wse_core.cost.calibration); GPU at gpu.train_mfu of peak "
        "(wse_systems.gpu.TRAIN_MFU); each row lists the constants its pricing read",
    }
    return ExperimentResult(NAME, seed, config, _measure(quick, seed), rows, _figure(curves))
