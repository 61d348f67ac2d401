"""wse_trainer: weight-streaming data-parallel training (MemoryX, SwarmX, wafer replicas).

Contract (see the trainer issue): MemoryX holds fp32 master weights and optax state and
applies each layer's update as its gradient arrives; SwarmX broadcasts each layer's weights to
`num_csx` wafer replicas and sum-reduces their gradients (bytes counted); replicas compute one
layer at a time with the next layer's weights prefetched. `wse train params.yaml` follows
Cerebras ModelZoo conventions.

Modules: `config` (params files; `config_check`: what their values cannot run), `data`
(corpus, tokenizer, packing, iterator), `memoryx`, `swarmx`, `replica` (pure per-layer
functions and the stages between a layer's products; `head`: the head in row chunks),
`stream` (`StreamedTrainer`, the step; `step_inputs`: its shape and batches checked;
`layout` and `device_loop`: how this machine computes it), `chunked` (weight streaming below
the layer: matrices in column chunks), `optimizer`, `checkpoints` (orbax), `metrics` (logs),
`run` (the `wse train` shell; `session`: the model, tokenizer and evaluation a run opens;
`resume`: the checkpoint it starts from; `run_folder` and `run_lock`: its model_dir, held by
one run at a time; `export`: its `hf/`, written whole; `predicted`: what it predicts for the
wafer), `sample`, `reference` (the fused baseline), `studies/` (`weight-streaming`,
`trillion-scaling` and others), `demo`, `testing`. The predicted wafer step and its SRAM plan
live in `wse_systems.training` (issue 40: `plan`, `performance`, `placement`, `layer_cost`,
`stream_cost`, `stall`, `chunks`); `plan_activations`, `memory_plan` and `predict_step` are
re-exported here from there.
Names below are imported lazily, so `import wse_trainer` does not start JAX.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "ConfigError",
    "TrainConfig",
    "load_config",
    "shipped_config",
    "run",
    "validate",
    "RunResult",
    "TrainingDivergedError",
    "StreamedTrainer",
    "StepStats",
    "MemoryX",
    "SwarmX",
    "plan_activations",
    "memory_plan",
    "predict",
    "predict_step",
]

_PLAN, _PERF = "wse_systems.training.plan", "wse_systems.training.performance"
_WHERE = {
    "ConfigError": "config", "TrainConfig": "config", "load_config": "config",
    "shipped_config": "config", "run": "run", "validate": "run", "RunResult": "run",
    "TrainingDivergedError": "run", "StreamedTrainer": "stream", "StepStats": "stream",
    "MemoryX": "memoryx", "SwarmX": "swarmx", "predict": "run",
}  # fmt: skip
_WHERE = {k: f"wse_trainer.{v}" for k, v in _WHERE.items()} | {
    "plan_activations": _PLAN, "memory_plan": _PLAN, "predict_step": _PERF,
}  # fmt: skip


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'wse_trainer' has no attribute {name!r}")
