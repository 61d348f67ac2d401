"""Weight streaming gives the model plain training gives: the oracle is `jax.grad` of the
whole model's `forward` with the same optax transform.

Tolerances: fp32 throughout. The streamed and fused steps sum the same numbers in another
order (layer-by-layer vjp vs one fused graph; per-replica partial sums), so gradients differ
by a few ulp (~1e-9 absolute here). Adam's update is lr * m / (sqrt(v) + eps): a gradient
difference dg moves a parameter by at most ~lr * dg / eps per step, so a near-zero gradient
element amplifies ulp noise by 1 / eps. With lr 1e-3 and eps 1e-6 that bound is ~1e-6 per
step; 1e-5 after 3 steps is the tolerance used (with eps 1e-8 the same noise reaches 1e-4).
"""

import functools

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
from wse_trainer.layout import Layout
from wse_trainer.optimizer import base_transform, full_transform
from wse_trainer.reference import fused_step, loss_fn
from wse_trainer.stream import StreamedTrainer
from wse_trainer.swarmx import SwarmX, to_device, tree_bytes

B, S, STEPS = 8, 16, 3
ADAMW = OptimizerConfig(learning_rate=1e-3, weight_decay=0.01, eps=1e-6)


def _model(arch="tiny-gpt2", **kw):
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


def _batches(model):
    rng = np.random.default_rng(0)
    return [rng.integers(0, model.vocab_size, (B, S + 1)).astype(np.int32) for _ in range(STEPS)]


def _run(model, opt, plan, layout, *, num_csx=1, micro_batch=None, segments=None, one=True):
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
    stats = [tr.step(b, segments) for b in _batches(model)]
    return tr.memx.params_tree(), stats, tr


@functools.cache
def _streamed(model, opt, *, num_csx=1, stride=1, chunks=0, layout=None, micro_batch=None):
    plan = plan_activations(model, preset("small"), micro_batch or B // num_csx, S, stride, chunks)
    assert plan.chunked == (chunks > 0)
    kw = {"num_csx": num_csx, "micro_batch": micro_batch, "one": False}
    return _run(model, opt, plan, layout, **kw)[:2]


@functools.cache
def _fused(model, opt):
    params = wse_models.init_params(model, jax.random.key(1))
    tx = full_transform(opt, 10)
    state, step, losses = tx.init(params), jax.jit(fused_step(model, tx)), []
    for b in _batches(model):
        params, state, loss = step(params, state, b)
        losses.append(float(loss))
    return params, losses


def _max_diff(a, b):
    return max(
        float(jnp.abs(x - y).max())
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    )


@pytest.mark.parametrize("arch", ["tiny-gpt2", pytest.param("tiny-llama", marks=pytest.mark.slow)])
def test_streamed_equals_plain_jax_grad(arch):
    model, opt = _model(arch), ADAMW
    p_stream, stats = _streamed(model, opt)
    p_ref, losses = _fused(model, opt)
    np.testing.assert_allclose([s.loss for s in stats], losses, rtol=1e-6)
    assert _max_diff(p_stream, p_ref) < 1e-5


@pytest.mark.parametrize("num_csx, micro_batch", [(1, None), (2, 2)])
def test_step_gradient_norm_is_the_whole_models_global_norm(num_csx, micro_batch):
    """`StepStats.grad_norm` is the global L2 norm (optax.tree.norm) of `jax.grad` of the
    whole model's loss at the step's starting weights (replicas and micro-batches summed).
    fp32 sums in another order: ~1e-7 relative; 1e-5 leaves room for the ulp-level weight
    drift of 3 steps."""
    model, opt = _model(), ADAMW
    _, stats = _streamed(model, opt, num_csx=num_csx, micro_batch=micro_batch)
    params = wse_models.init_params(model, jax.random.key(1))
    tx = full_transform(opt, 10)
    state, step = tx.init(params), jax.jit(fused_step(model, tx))
    grad = jax.jit(jax.grad(lambda p, b: loss_fn(model, p, b)))
    norms = []
    for b in _batches(model):
        norms.append(float(optax.tree.norm(grad(params, b))))
        params, state, _ = step(params, state, b)
    np.testing.assert_allclose([s.grad_norm for s in stats], norms, rtol=1e-5)


@pytest.mark.parametrize("n", [4, pytest.param(8, marks=pytest.mark.slow)])
def test_num_csx_1_equals_n_at_equal_global_batch(n):
    # n = 8: one replica on each of the 8 virtual devices, one sequence each.
    model, opt = _model(), ADAMW
    p1, s1 = _streamed(model, opt, num_csx=1)
    p4, s4 = _streamed(model, opt, num_csx=n)
    np.testing.assert_allclose([s.loss for s in s1], [s.loss for s in s4], rtol=1e-6)
    assert _max_diff(p1, p4) < 1e-5


def test_swarmx_counts_every_broadcast_and_reduce():
    model, opt = _model(), ADAMW
    params = wse_models.init_params(model, jax.random.key(1))
    groups = {"embed": params["embed"], "final": params["final"]}
    layer = tree_bytes(params["layers"]) // model.n_layers
    embed, final = tree_bytes(groups["embed"]), tree_bytes(groups["final"])
    for num_csx in (1, 4):
        _, stats = _streamed(model, opt, num_csx=num_csx)
        # forward: embed + every layer + head (final and the tied embedding);
        # backward: every layer again + the embedding.
        sent = 2 * embed + final + 2 * model.n_layers * layer + embed
        assert stats[-1].broadcast_bytes == num_csx * sent
        assert stats[-1].reduce_bytes == num_csx * (embed + final + model.n_layers * layer + embed)


def test_recomputing_activations_changes_nothing():
    model, opt = _model(), ADAMW
    p_keep, s_keep = _streamed(model, opt, stride=1)
    p_re, s_re = _streamed(model, opt, stride=2)
    assert s_re[0].recomputed_layers == 1 and s_keep[0].recomputed_layers == 0
    assert [s.loss for s in s_keep] == [s.loss for s in s_re]
    assert _max_diff(p_keep, p_re) == 0.0


@pytest.mark.slow
def test_clipping_waits_for_the_global_norm():
    # A max norm small enough that every step clips.
    model = _model()
    opt = OptimizerConfig(learning_rate=1e-3, max_gradient_norm=0.05, optimizer_type="sgd")
    p_stream, _ = _streamed(model, opt)
    p_ref, _ = _fused(model, opt)
    assert _max_diff(p_stream, p_ref) < 1e-6


@pytest.mark.slow
def test_bf16_compute_keeps_fp32_masters_close():
    opt = OptimizerConfig(learning_rate=1e-3)
    p16, s16 = _streamed(_model(dtype="bfloat16"), opt)
    p32, s32 = _streamed(_model(), opt)
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(p16))
    # bf16 has 8 mantissa bits: losses agree to ~1e-2 relative.
    np.testing.assert_allclose([s.loss for s in s16], [s.loss for s in s32], rtol=2e-2)


def test_sram_ledger_forces_recompute_then_chunks_then_refuses():
    model = _model(n_layers=8, d_model=64, n_heads=4, n_kv_heads=4)
    tiny = preset("tiny")
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


# Weight streaming below the layer: every matrix forced into 4 column chunks gives the same
# model as whole-layer streaming and as the fused step; the tolerances are the ones above (the
# chunks' input-gradient shares are summed in another order: float round-off only).
CHUNKS = 4


@pytest.mark.parametrize("arch", ["tiny-gpt2", pytest.param("tiny-llama", marks=pytest.mark.slow)])
def test_chunked_streaming_equals_whole_layers_and_the_fused_step(arch):
    model, opt = _model(arch), ADAMW
    p_chunk, s_chunk = _streamed(model, opt, stride=2, chunks=CHUNKS)
    p_whole, s_whole = _streamed(model, opt, stride=2)
    p_ref, losses = _fused(model, opt)
    assert s_chunk[0].recomputed_layers == s_whole[0].recomputed_layers == 1
    np.testing.assert_allclose([s.loss for s in s_chunk], [s.loss for s in s_whole], rtol=1e-6)
    np.testing.assert_allclose([s.loss for s in s_chunk], losses, rtol=1e-6)
    assert _max_diff(p_chunk, p_whole) < 1e-5
    assert _max_diff(p_chunk, p_ref) < 1e-5


def test_chunked_num_csx_1_equals_4_and_counts_its_streams():
    model, opt = _model(), ADAMW
    p1, s1 = _streamed(model, opt, stride=2, chunks=CHUNKS)
    p4, s4 = _streamed(model, opt, num_csx=4, stride=2, chunks=CHUNKS)
    np.testing.assert_allclose([s.loss for s in s1], [s.loss for s in s4], rtol=1e-6)
    assert _max_diff(p1, p4) < 1e-5
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


@pytest.mark.parametrize(
    "layout",
    [
        Layout(shards=2),
        Layout(keep_residuals=True),
        Layout(shards=4, keep_residuals=True),
        pytest.param(Layout(shards=2, keep_residuals=True), id="relu", marks=pytest.mark.slow),
    ],
    ids=str,
)
def test_the_emulator_layout_changes_only_the_order_of_sums(layout):
    """Shards (a replica's batch over CPU devices) and kept residuals (no recompute inside a
    layer) give the fused jax.grad oracle's training and leave the wafer's accounting
    alone: the same bytes streamed as one device per replica."""
    relu = layout == Layout(shards=2, keep_residuals=True)
    model = _model(mlp_activation="relu") if relu else _model()
    p_ref, losses = _fused(model, ADAMW)
    p, stats = _streamed(model, ADAMW, num_csx=2, layout=layout)
    _, plain = _streamed(model, ADAMW, num_csx=2)
    np.testing.assert_allclose([s.loss for s in stats], losses, rtol=1e-6)
    assert _max_diff(p, p_ref) < 1e-5
    for key in ("broadcast_bytes", "reduce_bytes", "recomputed_layers", "tokens"):
        assert [getattr(s, key) for s in stats] == [getattr(s, key) for s in plain]
    if relu:  # zeros counted over the same tokens: equal to a ulp-level flip at most
        np.testing.assert_allclose(
            stats[0].mlp_zero_fraction, plain[0].mlp_zero_fraction, atol=1e-3
        )


def test_choose_layout_follows_the_cores_the_batch_and_the_plan(monkeypatch):
    """One shard per usable core (within the devices and a divisor of the batch); residuals
    kept only at stride 1, and their bytes are those of the VJP a forward really keeps.
    The cores and devices are given (4 and 8), not this host's (a GPU host has 1 device)."""
    from wse_trainer import layout as lay
    from wse_trainer.replica import layer_fns

    model = _model()
    plan1 = plan_activations(model, preset("small"), 6, S, 1)
    plan2 = plan_activations(model, preset("small"), 6, S, 2)
    pick = functools.partial(lay.choose_layout, model, seq_len=S, cores=4, devices=8)
    loop = jax.default_backend() != "cpu"  # an accelerator runs the step as one program
    assert pick(plan1, micro_batch=6, local_replicas=1) == Layout(
        shards=3, keep_residuals=True, device_loop=loop
    )
    assert pick(plan1, micro_batch=8, local_replicas=2).shards == 2
    assert pick(plan1, micro_batch=8, local_replicas=1, devices=2).shards == 2  # devices bind
    assert pick(plan1, micro_batch=6, local_replicas=1, devices=1).shards == 1  # one GPU
    assert pick(plan2, micro_batch=6, local_replicas=1, shards=1) == Layout(device_loop=loop)
    params = wse_models.init_params(model, jax.random.key(0))
    w0 = jax.tree.map(lambda x: x[0], params["layers"])
    h = jnp.ones((6, S, model.d_model), model.dtype)
    pos = jnp.broadcast_to(jnp.arange(S, dtype=jnp.int32), (6, S))
    _, vjp = layer_fns(model, 1.0).layer_fwd_vjp(w0, h, pos, None)
    kept = sum(x.nbytes for x in jax.tree.leaves(vjp))
    assert lay.residual_bytes(model, 6, S) == kept
    monkeypatch.setattr(lay, "RESIDUAL_SHARE", kept * model.n_layers / 2**50)
    assert not pick(plan1, micro_batch=6, local_replicas=1).keep_residuals


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
    amplifies a near-zero gradient's ulp noise by 1 / eps (module docstring): its bound is
    the module's 1e-5 absolute."""
    model = _model()
    p_one, s_one = _streamed(model, opt, num_csx=num_csx, stride=2, chunks=chunks)
    p_acc, s_acc = _streamed(
        model, opt, num_csx=num_csx, stride=2, chunks=chunks, micro_batch=micro_batch
    )
    np.testing.assert_allclose([s.loss for s in s_acc], [s.loss for s in s_one], rtol=1e-6)
    if opt is SGD:
        for a, b in zip(jax.tree.leaves(p_acc), jax.tree.leaves(p_one), strict=True):
            b = np.asarray(b)
            ulp = float(np.finfo(np.float32).eps * np.abs(b).max())
            np.testing.assert_allclose(np.asarray(a), b, rtol=1e-5, atol=max(1e-9, 4 * ulp))
    else:
        assert _max_diff(p_acc, p_one) < 1e-5
    k = B // num_csx // micro_batch
    assert s_acc[0].broadcast_bytes == k * s_one[0].broadcast_bytes
    assert s_acc[0].reduce_bytes == k * s_one[0].reduce_bytes
    assert s_acc[0].recomputed_layers == k * s_one[0].recomputed_layers
    assert s_acc[0].tokens == s_one[0].tokens == B * S


CLIPPED = OptimizerConfig(learning_rate=1e-3, max_gradient_norm=0.05)


@pytest.mark.parametrize(
    ("num_csx", "micro_batch", "stride", "chunks", "opt", "relu"),
    [
        (1, None, 1, 0, ADAMW, False),  # whole layers, residuals kept
        (2, 2, 2, 0, CLIPPED, False),  # replicas, micro-batches, recompute, global-norm clip
        (1, None, 2, CHUNKS, ADAMW, True),  # column chunks, ReLU zero counts
    ],
    ids=["whole-kept", "2x2-micro-clipped", "chunked-relu"],
)
def test_device_loop_is_the_host_loop_as_one_program(
    num_csx, micro_batch, stride, chunks, opt, relu
):
    """`Layout.device_loop` (what an accelerator chooses): the same host loop traced once into
    one jitted program trains the model the host loop trains, with the same stream: every
    byte counter, update and recomputed layer of every step equal, the stall 0. Tolerances:
    XLA fuses across the host loop's call boundaries (float round-off): losses rtol 1e-6,
    parameters 1e-5 absolute (Adam's 1 / eps, as above)."""
    model = _model(mlp_activation="relu") if relu else _model()
    plan = plan_activations(model, preset("small"), micro_batch or B // num_csx, S, stride, chunks)
    keep = stride == 1 and not chunks
    kw = {"num_csx": num_csx, "micro_batch": micro_batch}
    p_host, s_host, host = _run(model, opt, plan, Layout(keep_residuals=keep), **kw)
    loop = Layout(keep_residuals=keep, device_loop=True)
    p_dev, s_dev, dev = _run(model, opt, plan, loop, **kw)
    assert dev._device_loop is not None and host._device_loop is None
    np.testing.assert_allclose([s.loss for s in s_dev], [s.loss for s in s_host], rtol=1e-6)
    np.testing.assert_allclose(
        [s.grad_norm for s in s_dev], [s.grad_norm for s in s_host], rtol=1e-5
    )
    assert _max_diff(p_dev, p_host) < 1e-5
    for key in ("broadcast_bytes", "reduce_bytes", "recomputed_layers", "tokens"):
        assert [getattr(s, key) for s in s_dev] == [getattr(s, key) for s in s_host]
    assert dev.swarm.counters() == host.swarm.counters()
    assert dev.memx.updates_applied == host.memx.updates_applied == STEPS * (model.n_layers + 2)
    assert all(s.stall_s == 0.0 for s in s_dev)
    if relu:
        np.testing.assert_allclose(
            s_dev[0].mlp_zero_fraction, s_host[0].mlp_zero_fraction, atol=1e-3
        )
        assert 0.2 < min(s_dev[0].mlp_zero_fraction) < 0.8  # ReLU zeros were counted
    # the trace leaves no tracer behind: the host loop still runs on the same trainer
    dev._device_loop = None
    assert np.isfinite(dev.step(_batches(model)[0]).loss)


def test_device_loop_packed_documents_and_its_fallback():
    """Packed documents (segment ids and positions as the program's inputs) train as the
    host loop does; workers on several devices (or processes) keep the host loop."""
    from wse_trainer.data import segments as packed_segments

    model = _model()
    plan = plan_activations(model, preset("small"), B, S, 1)
    rows = _batches(model)[0]
    rows[:, ::5] = 0  # EOS every 5 tokens: several documents per row
    seg = packed_segments(rows[:, :-1], 0)
    assert seg.segment_ids.max() >= 2
    p_host, s_host, _ = _run(model, ADAMW, plan, Layout(), segments=seg)
    p_dev, s_dev, _ = _run(model, ADAMW, plan, Layout(device_loop=True), segments=seg)
    _, s_unpacked, _ = _run(model, ADAMW, plan, Layout(device_loop=True))
    np.testing.assert_allclose([s.loss for s in s_dev], [s.loss for s in s_host], rtol=1e-6)
    assert abs(s_dev[0].loss - s_unpacked[0].loss) > 1e-4  # the segments were used
    assert _max_diff(p_dev, p_host) < 1e-5
    if len(jax.devices()) > 1:
        _, _, spread = _run(model, ADAMW, plan, Layout(shards=2, device_loop=True), one=False)
        assert spread._device_loop is None
