"""Test helpers: a tiny corpus, a tiny model and a tiny run config (seconds to train); and
weight streaming's cases (`stream_model`, its `stream_batches`, a streamed run of STEPS
steps `stream_run` / `streamed_run` and the fused `jax.grad` oracle `fused_run`, for
test_trainer_stream.py and test_trainer_layout.py).

Shared by the trainer's tests and the CLI's tests; nothing here is used at run time.

Streaming's tolerances: fp32 throughout. The streamed and fused steps sum the same numbers
in another order (layer-by-layer vjp vs one fused graph; per-replica partial sums), so
gradients differ by a few ulp (~1e-9 absolute here). Adam's update is lr * m / (sqrt(v) +
eps): a gradient difference dg moves a parameter by at most ~lr * dg / eps per step, so a
near-zero gradient element amplifies ulp noise by 1 / eps. With lr 1e-3 and eps 1e-6 that
bound is ~1e-6 per step; 1e-5 after 3 steps is the tolerance used (with eps 1e-8 the same
noise reaches 1e-4).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import wse_models
from wse_core import preset
from wse_systems.training.plan import plan_activations

from wse_trainer.config import OptimizerConfig, TrainConfig, apply_overrides, config_from_dict
from wse_trainer.optimizer import base_transform, full_transform
from wse_trainer.reference import fused_step
from wse_trainer.stream import StreamedTrainer

__all__ = ["QUICK_OVERRIDES", "updated", "TINY_MODEL", "write_corpus", "text_docs", "narrow_jsonl",
           "tiny_params", "tiny_config", "run_on_preset", "ADAMW", "B", "CHUNKS", "S", "STEPS",
           "fused_run", "max_diff", "stream_batches", "stream_model", "stream_run",
           "streamed_run", "tensorboard_scalars", "crc32c", "masked_crc32c"]  # fmt: skip

# `wse train tiny` overrides for tests whose subject is not the data: a 200 KB slice of the
# stdlib corpus, so the tokenizer trains and the rows pack in a fraction of the 3 MB
# default's time (stop 69's suite trim), a 300-token vocabulary, batch 2, no samples
QUICK_OVERRIDES = ("model.vocab_size=300", "train_input.batch_size=2",
                   "runconfig.sample_tokens=0", "train_input.max_corpus_bytes=200000",
                   "eval_input.max_corpus_bytes=200000")  # fmt: skip

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


def text_docs(folder: Path) -> Path:
    """`folder` made, holding one text file of ~40 KB (words no stdlib tokenizer merges
    alike)."""
    folder.mkdir()
    words = ["wafer", "stream", "weight", "memory", "fabric", "kernel", "tensor", "router"]
    lines = (" ".join(words[(i * 7 + j * 3) % 8] for j in range(12)) for i in range(500))
    (folder / "a.txt").write_text("\n".join(lines) + "\n")
    return folder


def narrow_jsonl(folder: Path) -> Path:
    """`folder` made, holding a.jsonl and b.jsonl of 600 records of two fields each, each
    but "text" named for its record: 1,201 distinct field names in all (`json_keys`)."""
    folder.mkdir()
    text = "the wafer streams weights " + "x" * 200
    for name, first in (("a.jsonl", 0), ("b.jsonl", 600)):
        rows = (json.dumps({"text": text, f"k{first + i}": i}) for i in range(600))
        (folder / name).write_text("\n".join(rows) + "\n")
    return folder


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
        "optimizer": {"learning_rate": 3e-3, "lr_schedule": "cosine", "warmup_steps": 2},
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


# Weight streaming's cases ---------------------------------------------------------------
B, S, STEPS = 8, 16, 3
ADAMW = OptimizerConfig(learning_rate=1e-3, weight_decay=0.01, eps=1e-6)


def stream_model(arch="tiny-gpt2", **kw):
    base = {
        "vocab_size": 96,
        "d_model": 32,
        "n_layers": 3,
        "n_heads": 4,
        "d_ff": 64,
        "max_seq_len": 32,
    }
    if arch == "tiny-gpt2":
        base["n_kv_heads"] = 4
    return wse_models.preset_config(arch, **{**base, **kw})


def stream_batches(model):
    rng = np.random.default_rng(0)
    return [rng.integers(0, model.vocab_size, (B, S + 1)).astype(np.int32) for _ in range(STEPS)]


def stream_run(model, opt, plan, layout, *, num_csx=1, micro_batch=None, segments=None, one=True):
    """(params tree, stats, trainer) of STEPS steps; `one`: every worker on the first device."""
    tr = StreamedTrainer(
        model,
        wse_models.init_params(model, jax.random.key(1)),
        base_transform(opt, 10),
        num_csx=num_csx,
        global_batch=B,
        seq_len=S,
        plan=plan,
        max_gradient_norm=opt.max_gradient_norm,
        devices=jax.devices()[:1] if one else None,
        layout=layout,
        micro_batch=micro_batch,
    )
    stats = [tr.step(b, segments) for b in stream_batches(model)]
    return tr.memx.params_tree(), stats, tr


@functools.cache
def streamed_run(model, opt, *, num_csx=1, stride=1, chunks=0, layout=None, micro_batch=None):
    plan = plan_activations(model, preset("small"), micro_batch or B // num_csx, S, stride, chunks)
    assert plan.chunked == (chunks > 0)
    kw = {"num_csx": num_csx, "micro_batch": micro_batch, "one": False}
    return stream_run(model, opt, plan, layout, **kw)[:2]


@functools.cache
def fused_run(model, opt):
    params = wse_models.init_params(model, jax.random.key(1))
    tx = full_transform(opt, 10)
    state, step, losses = tx.init(params), jax.jit(fused_step(model, tx)), []
    for b in stream_batches(model):
        params, state, loss = step(params, state, b)
        losses.append(float(loss))
    return params, losses


def max_diff(a, b):
    return max(
        float(jnp.abs(x - y).max())
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    )


# Weight streaming below the layer: every matrix forced into 4 column chunks gives the same
# model as whole-layer streaming and as the fused step; the tolerances are the ones above (the
# chunks' input-gradient shares are summed in another order: float round-off only).
CHUNKS = 4


def updated(opt: OptimizerConfig, p0: np.ndarray, grads: list[np.ndarray]) -> np.ndarray:
    """The parameters `p0` after one update of `opt`'s transform (decay over 10 steps) per
    gradient of `grads`: what a NumPy optimizer oracle is compared with."""
    tx = base_transform(opt, 10)
    p = {"w": jnp.asarray(p0, jnp.float32)}
    state = tx.init(p)
    for g in grads:
        up, state = tx.update({"w": jnp.asarray(g, jnp.float32)}, state, p)
        p = jax.tree.map(lambda a, b: a + b, p, up)
    return np.asarray(p["w"])


def tensorboard_scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """(step, value) by tag of the TensorBoard event files in `folder`, in file order, parsed
    by hand (TFRecord framing: length, its crc, the record, its crc; the Event protobuf
    tensorboardX ships), so the tests read what a run wrote without TensorBoard."""
    import struct

    from tensorboardX.proto.event_pb2 import Event

    out: dict[str, list[tuple[int, float]]] = {}
    for path in sorted(folder.glob("events.out.tfevents*")):
        data, at = path.read_bytes(), 0
        while at < len(data):
            (n,) = struct.unpack("<Q", data[at : at + 8])
            event = Event.FromString(data[at + 12 : at + 12 + n])
            at += 12 + n + 4
            for v in event.summary.value:
                out.setdefault(v.tag, []).append((event.step, v.simple_value))
    return out


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli, reflected 0x82F63B78) of `data`, bit by bit from its definition:
    the tests' oracle for TFRecord's checks (its published check value: 0xE3069283 for
    b"123456789")."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC-32C of `data`: rotated right by 15 bits, plus 0xA282EAD8."""
    crc = crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF
