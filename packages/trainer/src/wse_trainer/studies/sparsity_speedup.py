"""Experiment `sparsity-speedup`: how sparse a ReLU transformer's MLP activations become in
training, and what skipping the zeros would buy on the wafer against a GPU.

Measured: a small GPT-2-shaped model with a ReLU MLP (OPT's activation) and its GELU twin
are trained here with `wse train`'s shell (`run`) on the Python standard library's source;
the trainer logs each layer's MLP zero fraction per step (metrics.jsonl), and
`wse_models.sparsity.zero_fraction` measures the trained checkpoint (its HF export) on
held-out tokens. The per-layer speedup predicted from that measurement is in the
measurements, because it moves with training length (`--quick` trains fewer steps).

Predicted (the same with `--quick`): the layer's forward time ratio for zero fractions
0 .. 0.95 from `wse_models.sparsity.sparse_time_ratio` on this model's shape.

Mechanism and assumption: the down projection multiplies the hidden activation by w_down;
on the wafer each activation travels as a wavelet and a PE's FMACs fire only for nonzero
wavelets (Cerebras states that its hardware skips zero operands), so the down projection
takes (1 - s) of its dense time, and nothing else changes (the skip is assumed free, the
rest of the layer is not assumed to overlap it better or worse). A GPU's dense tensor-core
matmul does the same work whatever the values: speedup 1.0 (2:4 structured sparsity needs
pruned weights, not sparse activations). No published figure is in shared/REFERENCES.md:
`published` stays empty.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from wse_core import ExperimentResult, PredictionRow

__all__ = ["run", "MODEL", "SPARSITIES"]

NAME = "sparsity-speedup"
MODEL = {
    "preset": "tiny-gpt2",
    "vocab_size": 512,
    "d_model": 64,
    "n_layers": 4,
    "n_heads": 4,
    "n_kv_heads": 4,
    "d_ff": 256,
    "max_seq_len": 64,
}
SEQ, BATCH = 64, 16
SPARSITIES = (0.0, 0.5, 0.8, 0.9, 0.95)
ACTIVATIONS = ("relu", "gelu")


def _params(model_dir: Path, activation: str, steps: int, seed: int) -> dict[str, Any]:
    inp = {"data_dir": "stdlib", "batch_size": BATCH, "max_sequence_length": SEQ,
           "max_corpus_bytes": 600_000, "shuffle_seed": seed}  # fmt: skip
    return {
        "train_input": inp,
        "eval_input": {**inp, "eval_steps": 2},
        "model": {**MODEL, "mlp_activation": activation},
        "optimizer": {"learning_rate": 3e-3, "warmup_steps": 10, "max_gradient_norm": 1.0},
        "runconfig": {"max_steps": steps, "checkpoint_steps": steps, "log_steps": steps,
                      "model_dir": str(model_dir), "seed": seed, "mode": "train_and_eval"},
    }  # fmt: skip


def _train_and_measure(activation: str, steps: int, seed: int, folder: Path) -> dict[str, Any]:
    import wse_models
    from tokenizers import Tokenizer

    from wse_trainer.config import config_from_dict
    from wse_trainer.data import EOS, corpus_texts, pack
    from wse_trainer.metrics import read_metrics
    from wse_trainer.run import run as train

    cfg = config_from_dict(_params(folder / activation, activation, steps, seed))
    result = train(cfg)
    model = wse_models.from_pretrained(result.model_dir / "hf")
    tok = Tokenizer.from_file(str(result.model_dir / "tokenizer.json"))
    ids = [e.ids for e in tok.encode_batch(corpus_texts(cfg.eval_input))]
    rows = pack(ids, SEQ, tok.token_to_id(EOS))[:32, :-1]  # held-out tokens
    frac = wse_models.sparsity.zero_fraction(model.params(), model.config, rows)
    train_log = [m for m in read_metrics(result.model_dir) if m["mode"] == "train"]
    logged = train_log[-1].get("mlp_zero_fraction")
    ratio, whole = wse_models.sparsity.sparse_time_ratio(model.config, frac, (SEQ + 1) // 2)
    return {"activation": activation, "steps": steps, "eval_loss": result.eval_loss,
            "held_out_tokens": int(rows.size), "zero_fraction": frac.tolist(),
            "trainer_logged_zero_fraction": logged, "layer_time_ratio": ratio.tolist(),
            "model_time_ratio": whole}  # fmt: skip


def _measurements(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for r in runs:
        for i, (s, t) in enumerate(zip(r["zero_fraction"], r["layer_time_ratio"], strict=True)):
            logged = r["trainer_logged_zero_fraction"]
            out.append({
                "activation": r["activation"], "layer": i, "train_steps": r["steps"],
                "eval_loss": r["eval_loss"], "zero_fraction_held_out": s,
                "zero_fraction_last_train_step": None if logged is None else logged[i],
                "mlp_down_speedup_wafer": 1.0 / (1.0 - s) if s < 1 else float("inf"),
                "layer_speedup_wafer": 1.0 / t, "layer_speedup_gpu": 1.0,
            })  # fmt: skip
        out.append({"activation": r["activation"], "layer": "model",
                    "layer_speedup_wafer": 1.0 / r["model_time_ratio"],
                    "layer_speedup_gpu": 1.0})  # fmt: skip
    return out


def _predictions() -> list[PredictionRow]:
    import wse_models

    fields = {k: v for k, v in MODEL.items() if k != "preset"}
    config = wse_models.preset_config(MODEL["preset"], **fields, mlp_activation="relu")
    rows = []
    for s in SPARSITIES:
        ratio, whole = wse_models.sparsity.sparse_time_ratio(config, s, (SEQ + 1) // 2)
        p = {"zero_fraction": s, "seq_len": SEQ, "model": "tiny-gpt2 relu d64 L4 ff256"}
        rows += [
            PredictionRow("layer_speedup_wafer", 1.0 / float(ratio[0]), "x", p),
            PredictionRow("model_speedup_wafer", 1.0 / whole, "x", p),
            PredictionRow("layer_speedup_gpu", 1.0, "x", p),
        ]
    return rows


def _figure(runs: list[dict[str, Any]]):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
    width = 0.8 / len(runs)
    for k, r in enumerate(runs):
        x = np.arange(len(r["zero_fraction"])) + k * width
        a.bar(x, r["zero_fraction"], width, label=r["activation"])
        b.bar(x, 1.0 / np.asarray(r["layer_time_ratio"]), width, label=f"{r['activation']} wafer")
    n = len(runs[0]["zero_fraction"])
    b.axhline(1.0, color="k", ls="--", label="GPU (any activation)")
    a.set(xlabel="layer", ylabel="MLP zero fraction (held out)", title="Measured sparsity")
    b.set(xlabel="layer", ylabel="predicted layer speedup", title="Zero-skipping, forward")
    for ax in (a, b):
        ax.set_xticks(np.arange(n) + width * (len(runs) - 1) / 2, [str(i) for i in range(n)])
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def run(*, quick: bool, seed: int) -> ExperimentResult:
    steps = 40 if quick else 400
    with tempfile.TemporaryDirectory() as tmp:
        runs = [_train_and_measure(a, steps, seed, Path(tmp)) for a in ACTIVATIONS]
    config = {"model": MODEL, "seq_len": SEQ, "batch_size": BATCH, "train_steps": steps,
              "corpus": "Python standard library source (600 kB), every 20th file held out",
              "mechanism": "wafer FMACs fire only on nonzero wavelets (zero operands of the "
              "MLP down projection skipped); GPU dense matmuls gain nothing",
              "formula": "layer time ratio = (MACs other than down proj + (1 - s) x down "
              "proj MACs) / all MACs, per token, forward (wse_models.sparsity)"}  # fmt: skip
    return ExperimentResult(NAME, seed, config, _measurements(runs), _predictions(), _figure(runs))
