"""Test helpers: a tiny corpus, a tiny model and a tiny run config (seconds to train).

Shared by the trainer's tests and the CLI's tests; nothing here is used at run time.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from wse_trainer.config import TrainConfig, apply_overrides, config_from_dict

__all__ = ["TINY_MODEL", "write_corpus", "tiny_params", "tiny_config", "run_on_preset"]

TINY_MODEL: dict[str, Any] = {
    "preset": "tiny-gpt2",
    "vocab_size": 320,
    "d_model": 32,
    "n_layers": 3,
    "n_heads": 2,
    "n_kv_heads": 2,
    "d_ff": 64,
    "max_seq_len": 64,
}


def write_corpus(folder: Path, n_docs: int = 60) -> Path:
    """A jsonl file of small, varied Python-like documents (deterministic)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "corpus.jsonl"
    with open(path, "w") as f:
        for i in range(n_docs):
            body = "\n".join(f"    x{j} = {i} * {j} + len('{'ab' * (j % 3)}')" for j in range(12))
            f.write(json.dumps({"text": f"def f{i}(a, b):\n{body}\n    return a + b\n"}) + "\n")
    return path


def tiny_params(corpus: Path, model_dir: Path) -> dict[str, Any]:
    """A params mapping that trains the tiny model on `corpus` into `model_dir`."""
    inp = {"data_dir": str(corpus), "batch_size": 4, "max_sequence_length": 32, "shuffle_seed": 3}
    return {
        "train_input": inp,
        "eval_input": {**inp, "eval_steps": 2},
        "model": dict(TINY_MODEL),
        "optimizer": {"learning_rate": 3e-3, "warmup_steps": 2},
        "runconfig": {
            "max_steps": 6,
            "checkpoint_steps": 3,
            "log_steps": 2,
            "model_dir": str(model_dir),
            "wafer": "small",
        },
    }


def tiny_config(tmp_path: Path, *overrides: str) -> TrainConfig:
    """The tiny run config with its corpus written under `tmp_path`."""
    corpus = write_corpus(tmp_path / "data")
    data = tiny_params(corpus, tmp_path / "model_dir")
    return config_from_dict(apply_overrides(data, overrides))


def run_on_preset(config: TrainConfig, **kwargs: Any) -> Any:
    """`wse_trainer.run.run` on the config's own `runconfig.wafer` preset (a test is an
    edge: it resolves the name once, as the CLI does)."""
    from wse_core import preset

    from wse_trainer.run import run

    return run(config, preset(config.runconfig.wafer), **kwargs)
