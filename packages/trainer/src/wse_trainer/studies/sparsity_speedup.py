"""Experiment `sparsity-speedup`: how sparse a ReLU transformer's MLP activations become in
training, and what skipping the zeros would buy on the wafer against a GPU.

Measured: a small GPT-2-shaped model with a ReLU MLP (OPT's activation) and its GELU twin
are trained here with `wse train`'s shell (`run`) on the Python standard library's source;
the trainer logs each layer's MLP zero fraction per step (metrics.jsonl), and
`wse_models.sparsity.zero_fraction` measures the trained checkpoint (its HF export) on
held-out tokens. The per-layer speedup predicted from that measurement is in the
measurements, because it moves with training length (`--quick` trains fewer steps).

Predicted (the same with `--quick`), by the wafer cost model, dense and sparse side by side
for zero fractions 0 .. 0.95: a training step of this model on one WSE-3 (batch BATCH x
SEQ; `wse_systems.training.performance.predict_step(..., sparsity=Sparsity(s))`) and a
batch-1 decode step on its pipeline plan (`wse_systems.decoder.decode_phases(...,
mlp_zero_fraction=s)`); the measurements carry the same two speedups at the sparsity
measured per layer.

Mechanism and assumption: the down projection multiplies the hidden activation by w_down;
on the wafer each activation travels as a wavelet and a PE's FMACs fire only for nonzero
wavelets (Cerebras states that its hardware skips zero operands), so those FMACs and their
SRAM traffic shrink to (1 - s); in training so do the products whose operand is the
activation's gradient (zero where the activation is, through the ReLU's derivative): the
down projection's weight gradient and the up projection's input and weight gradients. Zeros
still cross the fabric (no sender-side filter is assumed). The skip is free. A GPU's dense
tensor-core matmul does the same work whatever the values: speedup 1.0 (2:4 structured
sparsity needs pruned weights, not sparse activations). No published figure is in
docs/references/calibration-rows.md: `published` stays empty.
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
# A model that fills the wafer, for contrast: the tiny model leaves a WSE-3 fabric- and
# latency-bound, where skipping FMACs buys little; a large one is compute-bound in training.
LARGE = ("llama3-8b", 4, 2048)  # preset (with a ReLU MLP), batch per system, sequence
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
    from wse_core.cost.assumptions import assumed_spec

    from wse_trainer.config import config_from_dict
    from wse_trainer.data import EOS, corpus_texts, pack
    from wse_trainer.metrics import read_metrics
    from wse_trainer.run import run as train

    cfg = config_from_dict(_params(folder / activation, activation, steps, seed))
    result = train(cfg, assumed_spec(cfg.runconfig.wafer))
    model = wse_models.from_pretrained(result.model_dir / "hf")
    tok = Tokenizer.from_file(str(result.model_dir / "tokenizer.json"))
    ids = [e.ids for e in tok.encode_batch(corpus_texts(cfg.eval_input))]
    rows = pack(ids, SEQ, tok.token_to_id(EOS))[:32, :-1]  # held-out tokens
    frac = wse_models.sparsity.zero_fraction(model.params(), model.config, rows)
    train_log = [m for m in read_metrics(result.model_dir) if m["mode"] == "train"]
    logged = train_log[-1].get("mlp_zero_fraction")
    train_x, decode_x = wafer_speedups(model.config, frac)
    return {"activation": activation, "steps": steps, "eval_loss": result.eval_loss,
            "held_out_tokens": int(rows.size), "zero_fraction": frac.tolist(),
            "trainer_logged_zero_fraction": logged, "train_step_speedup_wafer": train_x,
            "decode_speedup_wafer": decode_x}  # fmt: skip


def wafer_speedups(
    config: Any, zero_fraction: Any, *, batch: int = BATCH, seq: int = SEQ
) -> tuple[float, float]:
    """(training step, batch-1 decode step) dense time over sparse time on one WSE-3, from
    the wafer cost model at the given zero fraction (one value, or one per layer: training
    takes their mean, since one step's products share one placement)."""
    from wse_core.cost.assumptions import assumed_spec
    from wse_core.cost.perf import PerfModel
    from wse_systems.decoder import decode_phases
    from wse_systems.pipeline import plan_pipeline
    from wse_systems.training.performance import Sparsity, predict_step

    spec = assumed_spec("wse3")
    s = np.asarray(zero_fraction, np.float64)

    def step(z: float) -> float:
        return predict_step(
            config, spec, num_csx=1, batch_per_system=batch, seq_len=seq, sparsity=Sparsity(z)
        ).predicted_s

    plan = plan_pipeline(config, spec, num_wafers=1, context_len=seq)
    model = PerfModel(spec)
    dense = model.seconds(decode_phases(config, plan))
    sparse = model.seconds(decode_phases(config, plan, mlp_zero_fraction=s))
    return step(0.0) / step(float(s.mean())), dense / sparse


def _measurements(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for r in runs:
        for i, s in enumerate(r["zero_fraction"]):
            logged = r["trainer_logged_zero_fraction"]
            out.append({
                "activation": r["activation"], "layer": i, "train_steps": r["steps"],
                "eval_loss": r["eval_loss"], "zero_fraction_held_out": s,
                "zero_fraction_last_train_step": None if logged is None else logged[i],
            })  # fmt: skip
        out.append({"activation": r["activation"], "layer": "model",
                    "zero_fraction_held_out": float(np.mean(r["zero_fraction"])),
                    "train_step_speedup_wafer": r["train_step_speedup_wafer"],
                    "decode_speedup_wafer": r["decode_speedup_wafer"],
                    "speedup_gpu": 1.0})  # fmt: skip
    return out


def _predictions() -> list[PredictionRow]:
    import wse_models

    fields = {k: v for k, v in MODEL.items() if k != "preset"}
    config = wse_models.preset_config(MODEL["preset"], **fields, mlp_activation="relu")
    large = wse_models.preset_config(LARGE[0], mlp_activation="relu")
    cases = [(config, "tiny-gpt2 relu d64 L4 ff256", BATCH, SEQ),
             (large, f"{LARGE[0]} relu", LARGE[1], LARGE[2])]  # fmt: skip
    rows = []
    for cfg, name, batch, seq in cases:
        for s in SPARSITIES:
            train_x, decode_x = wafer_speedups(cfg, s, batch=batch, seq=seq)
            p = {"zero_fraction": s, "seq_len": seq, "batch": batch, "wafer": "wse3",
                 "model": name}  # fmt: skip
            rows += [
                PredictionRow("train_step_speedup_wafer", train_x, "x", p),
                PredictionRow("decode_speedup_wafer", decode_x, "x", p),
                PredictionRow("speedup_gpu", 1.0, "x", p),
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
    n = len(runs[0]["zero_fraction"])
    labels = ["training step", "batch-1 decode"]
    for k, r in enumerate(runs):
        vals = [r["train_step_speedup_wafer"], r["decode_speedup_wafer"]]
        b.bar(np.arange(2) + k * width, vals, width, label=f"{r['activation']} wafer")
    b.axhline(1.0, color="k", ls="--", label="GPU (any activation)")
    a.set(xlabel="layer", ylabel="MLP zero fraction (held out)", title="Measured sparsity")
    b.set(ylabel="predicted speedup (dense / sparse)", title="Zero-skipping on WSE-3")
    a.set_xticks(np.arange(n) + width * (len(runs) - 1) / 2, [str(i) for i in range(n)])
    b.set_xticks(np.arange(2) + width * (len(runs) - 1) / 2, labels)
    for ax in (a, b):
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def run(*, quick: bool, seed: int) -> ExperimentResult:
    steps = 40 if quick else 400
    with tempfile.TemporaryDirectory() as tmp:
        runs = [_train_and_measure(a, steps, seed, Path(tmp)) for a in ACTIVATIONS]
    config = {"model": MODEL, "seq_len": SEQ, "batch_size": BATCH, "train_steps": steps,
              "corpus": "Python standard library source (600 kB), 1/20 of its bytes held out",
              "mechanism": "wafer FMACs fire only on nonzero wavelets (zero operands of the "
              "MLP down projection skipped); GPU dense matmuls gain nothing",
              "priced by": "the wafer cost model: predict_step and decode_phases with "
              "mlp_zero_fraction (dense and sparse side by side)"}  # fmt: skip
    return ExperimentResult(NAME, seed, config, _measurements(runs), _predictions(), _figure(runs))
