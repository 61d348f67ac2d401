"""Hunt 74 (train10): the predicted step streams the bytes the run streams, and holds
MemoryX's update as the run's MemoryX holds it. Before: a tied head's gradient was priced
without the embedding's share the run's SwarmX reduces (tiny, 2 systems: 8,706,048 bytes a
step priced, 11,065,344 run); a chunked layer's vectors were priced three times a step, the
run streams them twice; with global-norm clipping the run applies every update after the
last gradient (`MemoryX.finish_step`), the prediction per group during the backward.

Oracles: the run's own SwarmX counters (`StepStats`, metrics.jsonl's `broadcast_bytes` and
`reduce_bytes`) and MemoryX's own count of the updates it has applied.
"""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
import wse_models
from wse_core import preset
from wse_systems.training.performance import StepLayout, predict_step
from wse_systems.training.plan import memory_plan, plan_activations
from wse_systems.training.stream_cost import stream_bytes
from wse_trainer.memoryx import MemoryX, group_names
from wse_trainer.optimizer import base_transform
from wse_trainer.session import predict, validate
from wse_trainer.testing import (
    ADAMW,
    CHUNKS,
    B,
    S,
    run_on_preset,
    stream_model,
    streamed_run,
    tiny_config,
)

CLIPPED = StepLayout(clip_gradients=True)  # a run's with optimizer.max_gradient_norm set


def _planned(report, spec) -> dict[str, int]:
    """Bytes each stream moves in the predicted step, every system together."""
    return {k: round(v * report.systems) for k, v in stream_bytes(report, spec).items()}


def _predicted(model, num_csx: int, chunks: int):
    """The step `streamed_run` runs (its plan), priced."""
    spec = preset("small")
    act = plan_activations(model, spec, B // num_csx, S, 1, chunks)
    plan = memory_plan(model, spec, B // num_csx, S, streaming=act)
    r = predict_step(model, spec, num_csx=num_csx, batch_per_system=B // num_csx, seq_len=S,
                     layout=StepLayout(plan))  # fmt: skip
    return _planned(r, spec)


@pytest.mark.parametrize(
    ("arch", "chunks"),
    [
        ("tiny-gpt2", 0),
        ("tiny-gpt2", CHUNKS),
        pytest.param("tiny-llama", 0, marks=pytest.mark.slow),
    ],
)
def test_the_planned_streams_are_the_runs(arch, chunks):
    model = stream_model(arch)
    assert model.tie_embeddings == (arch == "tiny-gpt2")
    _, stats = streamed_run(model, ADAMW, num_csx=2, chunks=chunks)
    planned = _predicted(model, 2, chunks)
    assert planned["weights_in"] == stats[-1].broadcast_bytes
    assert planned["gradients_out"] == stats[-1].reduce_bytes


def test_wse_train_tiny_on_two_systems_streams_what_it_was_priced(tmp_path):
    """`wse train` on 2 systems with every matrix in 2 column chunks (tied GPT-2): each
    step's metrics.jsonl bytes against `session.predict`'s step of the same config."""
    config = tiny_config(tmp_path, "runconfig.max_steps=2", "runconfig.num_csx=2",
                         "runconfig.weight_chunks=2", "runconfig.checkpoint_steps=2",
                         "runconfig.log_steps=1", "runconfig.mode=train",
                         "runconfig.sample_tokens=0")  # fmt: skip
    run_on_preset(config, echo=lambda _line: None)
    spec = preset(config.runconfig.wafer)
    model, plan = validate(config, spec)
    assert plan.streaming.chunked and model.tie_embeddings
    planned = _planned(predict(config, spec, model, plan), spec)
    metrics = Path(config.runconfig.model_dir) / "metrics.jsonl"
    steps = [json.loads(x) for x in metrics.read_text().splitlines()]
    steps = [r for r in steps if r["mode"] == "train"]
    assert len(steps) == 2
    for r in steps:
        got = (r["broadcast_bytes"], r["reduce_bytes"])
        assert got == (planned["weights_in"], planned["gradients_out"])


@pytest.mark.parametrize("clip", [None, 1.0])
def test_memoryx_holds_every_update_until_the_step_ends_when_clipping(clip):
    """MemoryX's order: without clipping each group's update as its gradient arrives;
    clipping, none until `finish_step`, then every group's. The predicted clipped step
    applies the same groups after the last gradient: every parameter once."""
    model = stream_model()
    params = wse_models.init_params(model, jax.random.key(1))
    memx = MemoryX(params, model.n_layers, base_transform(ADAMW, 10), max_gradient_norm=clip)
    names = group_names(model.n_layers)
    for i, name in enumerate(names):
        memx.receive(name, jax.tree.map(jnp.ones_like, memx.params[name]))
        assert memx.updates_applied == (0 if clip else i + 1)
    memx.finish_step()
    assert memx.updates_applied == len(names)
    if clip is None:
        return
    spec = preset("small")
    r = predict_step(model, spec, num_csx=1, batch_per_system=B, seq_len=S, layout=CLIPPED)
    held = [n for n in r.phases.parts if n.name == "held_update"]
    assert len(held) == 1
    items = sum(k for leaf, k in held[0].leaves() if leaf.name == "memoryx_update")
    assert items == len(names)
    n_params = sum(x.size for x in jax.tree.leaves(memx.params))
    assert _planned(r, spec)["memoryx_update"] == 4 * n_params  # fp32: 4 bytes each
