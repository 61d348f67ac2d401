"""Weight streaming gives the model plain training gives: the oracle is `jax.grad` of the
whole model's `forward` with the same optax transform.

Tolerances: the module docstring of `wse_trainer.testing`, where the shared
cases live (fp32; 1e-5 absolute on parameters after 3 Adam steps).
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import wse_models
from wse_core import SramBudgetError, preset
from wse_systems.training.plan import plan_activations
from wse_trainer import swarmx
from wse_trainer.config import OptimizerConfig
from wse_trainer.optimizer import full_transform
from wse_trainer.reference import fused_step, loss_fn
from wse_trainer.swarmx import SwarmX, to_device, tree_bytes
from wse_trainer.testing import (
    ADAMW,
    CHUNKS,
    B,
    S,
    fused_run,
    max_diff,
    stream_batches,
    stream_model,
    streamed_run,
)


@pytest.mark.parametrize("arch", ["tiny-gpt2", pytest.param("tiny-llama", marks=pytest.mark.slow)])
def test_streamed_equals_plain_jax_grad(arch):
    model, opt = stream_model(arch), ADAMW
    p_stream, stats = streamed_run(model, opt)
    p_ref, losses = fused_run(model, opt)
    np.testing.assert_allclose([s.loss for s in stats], losses, rtol=1e-6)
    assert max_diff(p_stream, p_ref) < 1e-5


@pytest.mark.parametrize("num_csx, micro_batch", [(1, None), (2, 2)])
def test_step_gradient_norm_is_the_whole_models_global_norm(num_csx, micro_batch):
    """`StepStats.grad_norm` is the global L2 norm (optax.tree.norm) of `jax.grad` of the
    whole model's loss at the step's starting weights (replicas and micro-batches summed).
    fp32 sums in another order: ~1e-7 relative; 1e-5 leaves room for the ulp-level weight
    drift of 3 steps."""
    model, opt = stream_model(), ADAMW
    _, stats = streamed_run(model, opt, num_csx=num_csx, micro_batch=micro_batch)
    params = wse_models.init_params(model, jax.random.key(1))
    tx = full_transform(opt, 10)
    state, step = tx.init(params), jax.jit(fused_step(model, tx))
    grad = jax.jit(jax.grad(lambda p, b: loss_fn(model, p, b)))
    norms = []
    for b in stream_batches(model):
        norms.append(float(optax.tree.norm(grad(params, b))))
        params, state, _ = step(params, state, b)
    np.testing.assert_allclose([s.grad_norm for s in stats], norms, rtol=1e-5)


@pytest.mark.parametrize("n", [4, pytest.param(8, marks=pytest.mark.slow)])
def test_num_csx_1_equals_n_at_equal_global_batch(n):
    # n = 8: one replica on each of the 8 virtual devices, one sequence each.
    model, opt = stream_model(), ADAMW
    p1, s1 = streamed_run(model, opt, num_csx=1)
    p4, s4 = streamed_run(model, opt, num_csx=n)
    np.testing.assert_allclose([s.loss for s in s1], [s.loss for s in s4], rtol=1e-6)
    assert max_diff(p1, p4) < 1e-5


def test_swarmx_counts_every_broadcast_and_reduce():
    model, opt = stream_model(), ADAMW
    params = wse_models.init_params(model, jax.random.key(1))
    groups = {"embed": params["embed"], "final": params["final"]}
    layer = tree_bytes(params["layers"]) // model.n_layers
    embed, final = tree_bytes(groups["embed"]), tree_bytes(groups["final"])
    for num_csx in (1, 4):
        _, stats = streamed_run(model, opt, num_csx=num_csx)
        # forward: embed + every layer + head (final and the tied embedding);
        # backward: every layer again + the embedding.
        sent = 2 * embed + final + 2 * model.n_layers * layer + embed
        assert stats[-1].broadcast_bytes == num_csx * sent
        assert stats[-1].reduce_bytes == num_csx * (embed + final + model.n_layers * layer + embed)


def test_recomputing_activations_changes_nothing():
    model, opt = stream_model(), ADAMW
    p_keep, s_keep = streamed_run(model, opt, stride=1)
    p_re, s_re = streamed_run(model, opt, stride=2)
    assert s_re[0].recomputed_layers == 1 and s_keep[0].recomputed_layers == 0
    assert [s.loss for s in s_keep] == [s.loss for s in s_re]
    assert max_diff(p_keep, p_re) == 0.0


@pytest.mark.slow
def test_clipping_waits_for_the_global_norm():
    # A max norm small enough that every step clips.
    model = stream_model()
    opt = OptimizerConfig(learning_rate=1e-3, max_gradient_norm=0.05, optimizer_type="sgd")
    p_stream, _ = streamed_run(model, opt)
    p_ref, _ = fused_run(model, opt)
    assert max_diff(p_stream, p_ref) < 1e-6


@pytest.mark.slow
def test_bf16_compute_keeps_fp32_masters_close():
    opt = OptimizerConfig(learning_rate=1e-3)
    p16, s16 = streamed_run(stream_model(dtype="bfloat16"), opt)
    p32, s32 = streamed_run(stream_model(), opt)
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(p16))
    # bf16 has 8 mantissa bits: losses agree to ~1e-2 relative.
    np.testing.assert_allclose([s.loss for s in s16], [s.loss for s in s32], rtol=2e-2)


def test_sram_ledger_forces_recompute_then_chunks_then_refuses():
    model = stream_model(n_layers=8, d_model=64, n_heads=4, n_kv_heads=4)
    # every byte of these hand-sized PEs is data's (no code and stack reserve: hunt 81), so
    # the counts below are the data budget's
    tiny = preset("tiny").replace(code_stack_bytes_per_pe=0)
    roomy = plan_activations(model, preset("small"), 8, 32)
    assert roomy.stride == 1 and not roomy.chunked
    # Per PE of the 8 x 8 wafer: two layers of weights, one gradient and the working set take
    # 5304 B; one layer input takes 1024 B, so 8 kept inputs need 13496 B in all, and the
    # cheapest recompute schedule (stride 2: 4 kept + 1 segment) 10424 B.
    tight = plan_activations(model, tiny.replace(sram_bytes_per_pe=12000), 8, 32)
    assert (tight.stride, tight.held_layers) == (2, 5) and not tight.chunked
    assert tight.sram["used_bytes_per_pe"] == 10424
    # 9000 B: the whole layer (10424 B with 5 inputs) does not fit; its six 64 x 64 matrices
    # stream in column chunks. The floor chunk (one output column per PE row: 64 x 8
    # parameters, 32 B a PE) in its three buffers (96 B), the vectors (640 parameters, 40 B,
    # three buffers 120 B) and the working set (576 B) leave room for all 8 inputs (8192 B):
    # stride 1. The chunk then takes the 112 B left: 37 B a buffer = 592 parameters = 9
    # columns of 64 inputs -> 8 chunks of 8 columns per matrix.
    chunked = plan_activations(model, tiny.replace(sram_bytes_per_pe=9000), 8, 32)
    assert (chunked.stride, chunked.held_layers) == (1, 8) and chunked.chunked
    assert chunked.chunks.counts == (8,) * 6 and chunked.chunks.largest_params == 64 * 8
    assert "column chunks of at most 592 parameters (37 B per PE" in chunked.chunks.reason
    assert chunked.sram["used_bytes_per_pe"] == 8192 + 576 + 120 + 3 * 32
    # 5800 B: even the floor chunk leaves 5008 B, under the 5 inputs of stride 2 (5120 B)
    with pytest.raises(SramBudgetError, match="activations: 5 layer inputs"):
        plan_activations(model, tiny.replace(sram_bytes_per_pe=5800), 8, 32)


@pytest.mark.cpu_devices
def test_swarmx_gives_each_process_its_block_of_replicas():
    # Process 1 of 2 with num_csx=4 computes replicas 2 and 3 on its own devices.
    devs = jax.devices()[:2]
    swarm = SwarmX(num_csx=4, devices=devs, home=devs[0], first=2, local=2, processes=2)
    assert list(swarm.replicas) == [2, 3]
    assert [swarm.replica_device(r) for r in range(2)] == [devs[0], devs[1]]
    batch = np.arange(8 * 3).reshape(8, 3)
    shards = swarm.scatter(batch)
    np.testing.assert_array_equal(np.concatenate([np.asarray(x) for x in shards]), batch[4:])
    assert len(swarm.broadcast(jnp.zeros(5))) == 2 and swarm.broadcast_bytes == 4 * 20


@pytest.mark.cpu_devices
@pytest.mark.parametrize("batched", [True, False])
def test_to_device_copies_a_tree_as_device_put_does(batched, monkeypatch):
    # The batched copy (and its fallback, jax.device_put itself) against jax.device_put: the
    # same values, dtypes (weak types too), tree and device; a tree already there is kept.
    if not batched:
        monkeypatch.setattr(swarmx, "_batched_copy", None)
    src, dst = jax.devices()[:2]
    tree = {
        "w": jax.device_put(jnp.arange(12.0).reshape(3, 4), src),
        "b": [jax.device_put(jnp.array([1, 2], jnp.int8), src), jax.device_put(2.5, src)],
    }
    want = jax.device_put(tree, dst)
    got = to_device(tree, dst)
    assert jax.tree.structure(got) == jax.tree.structure(want)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        assert g.sharding.device_set == {dst} and g.committed
        assert g.dtype == w.dtype and g.weak_type == w.weak_type
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    assert to_device(got, dst) is got
    # a leaf that is not a jax.Array (a process's gathered NumPy copy) goes through device_put
    mixed = to_device({"a": np.ones(3, np.float32), "b": tree["w"]}, dst)
    assert {x.sharding.device_set == {dst} for x in jax.tree.leaves(mixed)} == {True}


# Weight streaming below the layer (`CHUNKS` column chunks a matrix): the same model as
# whole-layer streaming and as the fused step.
@pytest.mark.parametrize("arch", ["tiny-gpt2", pytest.param("tiny-llama", marks=pytest.mark.slow)])
def test_chunked_streaming_equals_whole_layers_and_the_fused_step(arch):
    model, opt = stream_model(arch), ADAMW
    p_chunk, s_chunk = streamed_run(model, opt, stride=2, chunks=CHUNKS)
    p_whole, s_whole = streamed_run(model, opt, stride=2)
    p_ref, losses = fused_run(model, opt)
    assert s_chunk[0].recomputed_layers == s_whole[0].recomputed_layers == 1
    np.testing.assert_allclose([s.loss for s in s_chunk], [s.loss for s in s_whole], rtol=1e-6)
    np.testing.assert_allclose([s.loss for s in s_chunk], losses, rtol=1e-6)
    assert max_diff(p_chunk, p_whole) < 1e-5
    assert max_diff(p_chunk, p_ref) < 1e-5


def test_chunked_num_csx_1_equals_4_and_counts_its_streams():
    model, opt = stream_model(), ADAMW
    p1, s1 = streamed_run(model, opt, stride=2, chunks=CHUNKS)
    p4, s4 = streamed_run(model, opt, num_csx=4, stride=2, chunks=CHUNKS)
    np.testing.assert_allclose([s.loss for s in s1], [s.loss for s in s4], rtol=1e-6)
    assert max_diff(p1, p4) < 1e-5
    # By hand: a layer's vectors stream with each use of the layer, its matrices three times
    # (forward, the backward's inner recompute, the backward); the recomputed layer (stride
    # 2 of 3 layers: layer 1 from layer 0's input) streams once more. Gradients: each
    # parameter once.
    params = wse_models.init_params(model, jax.random.key(1))
    layer = tree_bytes(params["layers"]) // model.n_layers
    mats = sum(tree_bytes(params["layers"][g][m]) for g, m in wse_models.layer_matrices(model))
    vectors = layer - mats // model.n_layers
    embed, final = tree_bytes(params["embed"]), tree_bytes(params["final"])
    per_layer = 2 * vectors + 3 * (layer - vectors)
    sent = 2 * embed + final + embed + model.n_layers * per_layer + layer
    reduced = embed + final + model.n_layers * layer + embed
    for n, stats in ((1, s1), (4, s4)):
        assert stats[-1].broadcast_bytes == n * sent
        assert stats[-1].reduce_bytes == n * reduced


SGD = OptimizerConfig(optimizer_type="sgd", learning_rate=0.1)


@pytest.mark.parametrize(
    ("num_csx", "micro_batch", "chunks", "opt"),
    [
        (1, 2, 0, SGD),
        (2, 1, 0, ADAMW),
        pytest.param(2, 2, CHUNKS, SGD, marks=pytest.mark.slow),
    ],
    ids=["1x4-as-2x2-sgd", "2x4-as-4x1-adamw", "chunked-sgd"],
)
def test_accumulated_micro_batches_equal_one_batch(num_csx, micro_batch, chunks, opt):
    """Gradient accumulation (ModelZoo's micro_batch_size): the per-replica batch of B /
    num_csx rows as micro-batches of `micro_batch`, MemoryX summing their gradients, trains
    the model the whole batch trains (the same run without micro-batching), and streams
    every weight and gradient once per micro-batch (hand count: the whole step's bytes
    times the micro-batches).

    Tolerances: fp32; the two runs sum the same products in another order (per
    micro-batch, then across them), a few ulp of each gradient. Losses rtol 1e-6. SGD moves
    a parameter by lr * g, so its parameters agree to rtol 1e-5, absolutely to 1e-9 (elements
    that start at zero: lr * a gradient ulp) or to a few ulp of the tensor's largest entries
    (an element that cancels to near zero in w - lr * g keeps its operands' rounding: seen
    1.4e-9 on 1.45e-5 in a matrix whose entries reach 0.03, on another CPU than CI's). Adam
    amplifies a near-zero gradient's ulp noise by 1 / eps (`wse_trainer.testing`'
    docstring): its bound is the module's 1e-5 absolute."""
    model = stream_model()
    p_one, s_one = streamed_run(model, opt, num_csx=num_csx, stride=2, chunks=chunks)
    p_acc, s_acc = streamed_run(
        model, opt, num_csx=num_csx, stride=2, chunks=chunks, micro_batch=micro_batch
    )
    np.testing.assert_allclose([s.loss for s in s_acc], [s.loss for s in s_one], rtol=1e-6)
    if opt is SGD:
        for a, b in zip(jax.tree.leaves(p_acc), jax.tree.leaves(p_one), strict=True):
            b = np.asarray(b)
            ulp = float(np.finfo(np.float32).eps * np.abs(b).max())
            np.testing.assert_allclose(np.asarray(a), b, rtol=1e-5, atol=max(1e-9, 4 * ulp))
    else:
        assert max_diff(p_acc, p_one) < 1e-5
    k = B // num_csx // micro_batch
    assert s_acc[0].broadcast_bytes == k * s_one[0].broadcast_bytes
    assert s_acc[0].reduce_bytes == k * s_one[0].reduce_bytes
    assert s_acc[0].recomputed_layers == k * s_one[0].recomputed_layers
    assert s_acc[0].tokens == s_one[0].tokens == B * S
