"""Experiment `weight-streaming`: predicted step time, stall and throughput scaling of
weight-streaming training on WSE-3 for GPT-2 124M, Llama-3 8B and 70B at num_csx 1..64,
next to a data-parallel GPU cluster (8 GPUs per CS-3, ring allreduce), and the stall
fraction measured in the emulator on a tiny model.

The per-system batches are those of the shipped configs (`gpt2_124m`, `llama3_8b`,
`llama3_70b`: 112 x 1024, 64 / 4 x 8192, 64 / 16 x 8192 tokens); the global batch grows with
num_csx (weak scaling). No published training figure is in shared/REFERENCES.md, so
`published` stays empty. Predictions are the same with `--quick`; only the measured part
shrinks.
"""

from __future__ import annotations

from typing import Any

from wse_core import ExperimentResult, PredictionRow, preset

from wse_trainer.performance import H100, predict_gpu, predict_stream

__all__ = ["run", "CASES", "NUM_CSX"]

NAME = "weight-streaming"
NUM_CSX = (1, 2, 4, 8, 16, 32, 64)
CASES = (("gpt2-124m", 112, 1024), ("llama3-8b", 16, 8192), ("llama3-70b", 4, 8192))
GPUS_PER_SYSTEM = 8


def _predictions() -> tuple[list[PredictionRow], dict[str, Any]]:
    import wse_models

    spec, rows, curves = preset("wse3"), [], {}
    for name, batch, seq in CASES:
        model = wse_models.preset_config(name)
        for n in NUM_CSX:
            p = predict_stream(model, spec, num_csx=n, batch=batch, seq_len=seq)
            g = predict_gpu(
                model,
                H100,
                num_gpus=GPUS_PER_SYSTEM * n,
                batch=max(1, batch // GPUS_PER_SYSTEM),
                seq_len=seq,
            )
            params = {
                "model": name,
                "num_csx": n,
                "batch_per_system": batch,
                "seq_len": seq,
                "wafer": "wse3",
            }
            gparams = {
                "model": name,
                "num_gpus": GPUS_PER_SYSTEM * n,
                "gpu": H100.name,
                "fits_memory": bool(g["fits_memory"]),
            }
            rows += [
                PredictionRow("step_s", p.step_s, "s", params),
                PredictionRow("samples_per_s", p.samples_per_s, "samples/s", params),
                PredictionRow("stall_fraction", p.stall_fraction, "", params),
                PredictionRow("gpu_samples_per_s", g["samples_per_s"], "samples/s", gparams),
                PredictionRow("gpu_scaling_efficiency", g["scaling_efficiency"], "", gparams),
            ]
            curves.setdefault(name, []).append(
                (n, p.samples_per_s, g["samples_per_s"], g["scaling_efficiency"])
            )
        rows.append(
            PredictionRow(
                "no_stall_batch",
                p.no_stall_batch,
                "sequences per system",
                {"model": name, "seq_len": seq, "wafer": "wse3"},
            )
        )
    return rows, curves


def _measure(quick: bool, seed: int) -> list[dict[str, Any]]:
    """Stall fraction and throughput of the tiny model streamed in the emulator."""
    import jax
    import numpy as np
    import wse_models

    from wse_trainer.config import OptimizerConfig
    from wse_trainer.optimizer import base_transform
    from wse_trainer.plan import plan_activations
    from wse_trainer.stream import StreamedTrainer

    model = wse_models.preset_config(
        "tiny-gpt2",
        vocab_size=512,
        d_model=128,
        n_layers=4,
        n_heads=4,
        n_kv_heads=4,
        d_ff=512,
        max_seq_len=128,
    )
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
            plan=plan_activations(model, preset("small"), batch // n, seq),
        )
        tr.step(data[0])  # compile
        stats = [tr.step(b) for b in data[1:]]
        wall = sum(s.wall_s for s in stats)
        pred = predict_stream(model, preset("wse3"), num_csx=n, batch=batch // n, seq_len=seq)
        out.append(
            {
                "model": "tiny-gpt2 (d=128, 4 layers)",
                "num_csx": n,
                "devices": len(jax.devices()),
                "steps": steps,
                "measured_stall_fraction": sum(s.stall_s for s in stats) / wall,
                "measured_tokens_per_s": sum(s.tokens for s in stats) / wall,
                "predicted_stall_fraction_wse3": pred.stall_fraction,
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
            label=f"{name} {GPUS_PER_SYSTEM}x{H100.name} per system",
        )
        b.semilogx(n, [p[3] for p in pts], "s--", color=line.get_color(), label=name)
    a.set(xlabel="num_csx (systems)", ylabel="samples / s", title="Predicted training throughput")
    b.set(
        xlabel="num_csx (GPU count / 8)",
        ylabel="scaling efficiency",
        ylim=(0, 1.05),
        title="Data-parallel GPU cluster (ring allreduce)",
    )
    a.legend(fontsize=7)
    b.legend(fontsize=7)
    fig.tight_layout()
    return fig


def run(*, quick: bool, seed: int) -> ExperimentResult:
    rows, curves = _predictions()
    config = {
        "num_csx": list(NUM_CSX),
        "cases": [list(c) for c in CASES],
        "wafer": "wse3",
        "gpu": H100.to_dict(),
        "gpus_per_system": GPUS_PER_SYSTEM,
        "assumptions": "wafer compute at bf16 peak (upper bound); GPU at mfu of peak; "
        "see wse_trainer.performance",
    }
    return ExperimentResult(NAME, seed, config, _measure(quick, seed), rows, _figure(curves))
