"""Hunt 74 (train10), the predicted training step's streams against hand counts. Before:

- hole 1: a tied model's head gradient was priced without the embedding's share, which the
  trainer's SwarmX reduces with it every micro-batch (`wse train tiny --num-csx 2`: 11,065,344
  bytes reduced a step, 8,706,048 priced);
- hole 2: with global-norm clipping (every shipped config: optimizer.max_gradient_norm 1.0)
  MemoryX holds every gradient and applies the updates after the last, while the step priced
  each update per group, overlapped with the backward;
- hole 3: a chunked layer's vectors were priced streaming in three times a step (forward, the
  backward's recompute, the backward), where the trainer streams them twice (26,114,048
  bytes broadcast priced against 26,060,800 run).

Oracles: the parameter counts of GPT-2 and Llama by hand from their config fields (GPT-2
124M: 124,439,808), bytes at the operand width, and seconds as bytes over min(memoryx,
swarmx) plus `system_latency_s` per SwarmX level and item. The run's own bytes are the
oracle of `packages/trainer/tests/test_training_streams_hunt74.py`.
"""

from __future__ import annotations

import math

import pytest
import wse_models
from wse_core.cost.assumptions import assumed_spec
from wse_systems.training.performance import StepLayout, predict_step
from wse_systems.training.plan import memory_plan
from wse_systems.training.stream_cost import PARTS, stream_bytes

WSE3 = assumed_spec("wse3")


CLIPPED = StepLayout(clip_gradients=True)  # a run's with optimizer.max_gradient_norm set


def _bytes(report, spec=WSE3) -> dict[str, float]:
    """Bytes each stream moves per replica in the step (`stream_cost.stream_bytes`)."""
    return stream_bytes(report, spec)


def _gpt2_counts(m) -> tuple[int, int, int, int]:
    """(embedding, layer, final, layer vectors) of a GPT-2 by hand: token and position
    tables; per layer qkv, o, up, down with biases and two LayerNorms (gain and bias); the
    final LayerNorm (the head is the tied embedding)."""
    d, ff = m.d_model, m.d_ff
    embed = m.vocab_size * d + m.max_seq_len * d
    vectors = 4 * d + 3 * d + d + ff + d
    layer = 4 * d * d + 2 * d * ff + vectors
    return embed, layer, 2 * d, vectors


def test_gpt2_124m_counts_by_hand():
    m = wse_models.preset_config("gpt2-124m")
    embed, layer, final, _ = _gpt2_counts(m)
    assert embed + m.n_layers * layer + final == 124_439_808 == m.num_params()


# ---- hole 1: a tied head's gradient carries the embedding's -----------------------------


@pytest.mark.parametrize("name", ["gpt2-124m", "llama3-8b"])
def test_gradients_out_are_every_parameter_and_the_tied_share(name):
    m = wse_models.preset_config(name, dtype="bfloat16")
    seq = 1024
    r = predict_step(m, WSE3, num_csx=2, batch_per_system=1, seq_len=seq)
    n = m.num_params()
    if name == "gpt2-124m":  # tied: the head's gradient has the embedding group's shape
        assert m.tie_embeddings
        embed, *_ = _gpt2_counts(m)
        want = 2 * (n + embed)
    else:  # untied: every parameter once
        assert not m.tie_embeddings
        want = 2 * n
    got = _bytes(r)
    assert got["gradients_out"] == pytest.approx(want, rel=1e-12)
    # MemoryX updates every parameter once: the tied share joins the embedding's gradient
    assert got["memoryx_update"] == pytest.approx(2 * n, rel=1e-12)


# ---- hole 2: clipping holds the update to the end of the step -----------------------------


def _update_s(n_params: int, items: int, num_csx: int, spec=WSE3) -> float:
    """`n_params` updated as `items` streamed items: bf16 bytes at the rate, plus each
    item's SwarmX levels (a fanout-2 tree: ceil(log2 num_csx))."""
    rate = min(spec.memoryx_bytes_per_s, spec.swarmx_bytes_per_s)
    levels = math.ceil(math.log(num_csx, spec.swarmx_fanout)) if num_csx > 1 else 0
    return 2 * n_params / rate + items * levels * spec.system_latency_s


@pytest.mark.parametrize(("num_csx", "batch", "micro"), [(1, 1, 1), (4, 1, 1), (1, 8, 2)])
def test_clipping_adds_the_held_updates_after_the_last_gradient(num_csx, batch, micro):
    """Per group, only the embedding's update (the last group) is exposed; held, all L + 2
    groups' updates run after it, one after another: the step grows by every group's update
    but the embedding's."""
    m = wse_models.preset_config("gpt2-124m", dtype="bfloat16")
    kw = dict(num_csx=num_csx, batch_per_system=batch, micro_batch=micro, seq_len=1024)
    free = predict_step(m, WSE3, **kw)
    held = predict_step(m, WSE3, **kw, layout=CLIPPED)
    embed, *_ = _gpt2_counts(m)
    extra = _update_s(m.num_params() - embed, m.n_layers + 1, num_csx)
    assert held.predicted_s - free.predicted_s == pytest.approx(extra, rel=1e-9)
    assert "max_gradient_norm set" in held.assumptions["MemoryX update"]
    assert "max_gradient_norm unset" in free.assumptions["MemoryX update"]
    assert "max_gradient_norm unset" in predict_step(m, WSE3, **kw).assumptions["MemoryX update"]


def test_a_clipped_step_updates_nothing_before_its_last_gradient():
    """MemoryX's order (`wse_trainer.memoryx.MemoryX.finish_step`): every update after the
    step's last gradient out, every parameter once."""
    m = wse_models.preset_config("gpt2-124m", dtype="bfloat16")
    r = predict_step(m, WSE3, num_csx=1, batch_per_system=1, seq_len=1024, layout=CLIPPED)
    leaves = [(leaf, k) for leaf, k in r.phases.leaves() if leaf.name in PARTS]
    last_out = max(i for i, (leaf, _) in enumerate(leaves) if leaf.name == "gradients_out")
    before = [leaf for leaf, _ in leaves[:last_out] if leaf.name == "memoryx_update"]
    assert all(leaf.work.host_io_bytes == 0 for leaf in before)
    rate = min(WSE3.memoryx_bytes_per_s, WSE3.swarmx_bytes_per_s)
    after = sum(k * leaf.work.host_io_bytes for leaf, k in leaves[last_out + 1 :])
    assert {leaf.name for leaf, _ in leaves[last_out + 1 :]} == {"memoryx_update"}
    assert after * rate / WSE3.host_io_bytes_per_s == pytest.approx(2 * m.num_params(), rel=1e-12)


# ---- hole 3: a chunked layer's vectors stream once per use --------------------------------


@pytest.mark.parametrize("num_csx", [1, 2])
def test_chunked_weights_in_by_hand(num_csx):
    """Forward: the embedding, each layer (vectors and matrices), the head (final and the
    tied embedding); backward: each layer's vectors once and its matrices twice (recompute,
    gradients), the embedding again. fp32: 4 bytes a parameter."""
    m = wse_models.preset_config("tiny-gpt2")
    spec = assumed_spec("small")
    plan = memory_plan(m, spec, 2, 64, stride=1, chunks=2)
    assert plan.streaming.chunked
    embed, layer, final, vectors = _gpt2_counts(m)
    assert plan.streaming.chunks.vector_params == vectors
    mats = layer - vectors
    per_layer = 2 * vectors + 3 * mats
    want = 4 * (2 * embed + final + embed + m.n_layers * per_layer)
    r = predict_step(m, spec, num_csx=num_csx, batch_per_system=2, seq_len=64,
                     layout=StepLayout(plan))  # fmt: skip
    got = _bytes(r, spec)
    assert got["weights_in"] == pytest.approx(want, rel=1e-12)
    assert got["gradients_out"] == pytest.approx(4 * (m.num_params() + embed), rel=1e-12)
