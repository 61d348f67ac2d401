"""The emulator's layout of a step on this machine (`wse_trainer.layout`: shards, kept
residuals, the device loop) changes only the order of float sums: each trains the model the
host loop and the fused `jax.grad` oracle train, with the same stream of bytes.

Tolerances: the module docstring of `wse_trainer.testing`.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import wse_models
from wse_core import preset
from wse_systems.training.plan import plan_activations
from wse_trainer.config import OptimizerConfig
from wse_trainer.layout import Layout
from wse_trainer.testing import (
    ADAMW,
    CHUNKS,
    STEPS,
    B,
    S,
    fused_run,
    max_diff,
    stream_batches,
    stream_model,
    stream_run,
    streamed_run,
)


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
    model = stream_model(mlp_activation="relu") if relu else stream_model()
    p_ref, losses = fused_run(model, ADAMW)
    p, stats = streamed_run(model, ADAMW, num_csx=2, layout=layout)
    _, plain = streamed_run(model, ADAMW, num_csx=2)
    np.testing.assert_allclose([s.loss for s in stats], losses, rtol=1e-6)
    assert max_diff(p, p_ref) < 1e-5
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

    model = stream_model()
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
    parameters 1e-5 absolute (Adam's 1 / eps: `wse_trainer.testing`' docstring)."""
    model = stream_model(mlp_activation="relu") if relu else stream_model()
    plan = plan_activations(model, preset("small"), micro_batch or B // num_csx, S, stride, chunks)
    keep = stride == 1 and not chunks
    kw = {"num_csx": num_csx, "micro_batch": micro_batch}
    p_host, s_host, host = stream_run(model, opt, plan, Layout(keep_residuals=keep), **kw)
    loop = Layout(keep_residuals=keep, device_loop=True)
    p_dev, s_dev, dev = stream_run(model, opt, plan, loop, **kw)
    assert dev._device_loop is not None and host._device_loop is None
    np.testing.assert_allclose([s.loss for s in s_dev], [s.loss for s in s_host], rtol=1e-6)
    np.testing.assert_allclose(
        [s.grad_norm for s in s_dev], [s.grad_norm for s in s_host], rtol=1e-5
    )
    assert max_diff(p_dev, p_host) < 1e-5
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
    assert np.isfinite(dev.step(stream_batches(model)[0]).loss)


def test_device_loop_packed_documents_and_its_fallback():
    """Packed documents (segment ids and positions as the program's inputs) train as the
    host loop does; workers on several devices (or processes) keep the host loop."""
    from wse_trainer.data import segments as packed_segments

    model = stream_model()
    plan = plan_activations(model, preset("small"), B, S, 1)
    rows = stream_batches(model)[0]
    rows[:, ::5] = 0  # EOS every 5 tokens: several documents per row
    seg = packed_segments(rows[:, :-1], 0)
    assert seg.segment_ids.max() >= 2
    p_host, s_host, _ = stream_run(model, ADAMW, plan, Layout(), segments=seg)
    p_dev, s_dev, _ = stream_run(model, ADAMW, plan, Layout(device_loop=True), segments=seg)
    _, s_unpacked, _ = stream_run(model, ADAMW, plan, Layout(device_loop=True))
    np.testing.assert_allclose([s.loss for s in s_dev], [s.loss for s in s_host], rtol=1e-6)
    assert abs(s_dev[0].loss - s_unpacked[0].loss) > 1e-4  # the segments were used
    assert max_diff(p_dev, p_host) < 1e-5
    if len(jax.devices()) > 1:
        _, _, spread = stream_run(model, ADAMW, plan, Layout(shards=2, device_loop=True), one=False)
        assert spread._device_loop is None
