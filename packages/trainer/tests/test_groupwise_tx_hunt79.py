"""Hunt 79: `StreamedTrainer(tx=optax.chain(optax.clip_by_global_norm(c), opt))` ran: MemoryX
applies `tx` group by group (embed, each layer, final), so the "global" norm was each
group's, and the parameters were 6e-3 off a plain optax step after 3 steps, unsaid.

Oracle: a plain optax step of the whole model (`reference.fused_step`, `jax.value_and_grad`
and `tx.update` on the whole params tree). A `tx` that couples the groups is refused when
the trainer is made, in one line naming `max_gradient_norm=`; with that argument instead the
streamed run matches the plain step of `chain(clip_by_global_norm(c), sgd)`. A reduction over
a stacked leaf (optax.clip_by_block_rms: all layers' RMS in the plain step, each layer's
streamed) is refused too, and so is LAMB's and LARS's trust ratio (review 79: the probe's
stand-in weights were zeros, where the ratio is 1, so it took them). Transforms of each
element are accepted and match the plain step of themselves."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
import pytest
import wse_models
from wse_core import preset
from wse_core.errors import WseError
from wse_trainer import StreamedTrainer, plan_activations
from wse_trainer.memoryx import groupwise_problem
from wse_trainer.reference import fused_step
from wse_trainer.testing import B, S, max_diff, stream_batches, stream_model

pytestmark = pytest.mark.timeout(600)


def _trainer(model, tx, max_gradient_norm=None):
    plan = plan_activations(model, preset("small"), B, S, 1, 0)
    params = wse_models.init_params(model, jax.random.key(1))
    return StreamedTrainer(model, params, tx, num_csx=1, global_batch=B, seq_len=S, plan=plan,
                           max_gradient_norm=max_gradient_norm)  # fmt: skip


def _plain(model, tx):
    """The params after a plain optax step of each of `stream_batches(model)`."""
    params = wse_models.init_params(model, jax.random.key(1))
    state, step = tx.init(params), jax.jit(fused_step(model, tx))
    for batch in stream_batches(model):
        params, state, _ = step(params, state, batch)
    return params


def _streamed(trainer, model):
    for batch in stream_batches(model):
        trainer.step(batch)
    return trainer.memx.params_tree()


COUPLED = {  # adam after the clip is scale-free at one step: the probe takes two
    "global_sgd": optax.chain(optax.clip_by_global_norm(0.05), optax.sgd(0.5)),
    "global_adamw_high": optax.chain(optax.clip_by_global_norm(1e6), optax.adamw(1e-3)),
    "global_adamw_low": optax.chain(optax.clip_by_global_norm(1e-9), optax.adamw(1e-3)),
    # a reduction over a stacked leaf: each layer's RMS streamed, all layers' in optax
    "block_rms_clip": optax.chain(optax.clip_by_block_rms(0.01), optax.sgd(0.5)),
    # the trust ratio: each leaf's norm, all layers' in optax (review 79: a zero stand-in's
    # ratio is 1, so the probe took these)
    "lamb": optax.lamb(1e-2),
    "lars": optax.lars(1e-2),
    "lamb_decay": optax.lamb(1e-3, weight_decay=0.1),
}


@pytest.mark.parametrize("name", COUPLED)
def test_a_coupling_tx_is_refused_naming_max_gradient_norm(name):
    model = stream_model()
    with pytest.raises(WseError) as e:
        _trainer(model, COUPLED[name])
    line = str(e.value)
    assert "\n" not in line and "max_gradient_norm=" in line and "clip_by_global_norm" in line
    assert "lamb" in line


@pytest.mark.parametrize("name", ["lamb", "lars"])
def test_the_trust_ratio_applied_by_group_differs_from_the_whole_tree(name):
    """Why LAMB and LARS are refused: one update of the whole tree and MemoryX's, group by
    group, differ on the stacked layers where the layers' norms differ (layer i's weights
    scaled by i + 1 here): optax's ratio takes all layers' norm, MemoryX's each layer's
    (review 79: 0.0185 at lr 1e-2). Oracle: optax's update of the whole tree."""
    from wse_trainer.memoryx import join_groups, split_groups

    model, tx, n = stream_model(), COUPLED[name], stream_model().n_layers
    params = wse_models.init_params(model, jax.random.key(1))
    scale = lambda x: x * jnp.arange(1.0, n + 1).reshape((n,) + (1,) * (x.ndim - 1))
    params = {**params, "layers": jax.tree.map(scale, params["layers"])}
    grads = jax.tree.map(lambda p: jnp.sin(7 * p + 1), params)
    whole, _ = tx.update(grads, tx.init(params), params)
    gp, gg = split_groups(params, n), split_groups(grads, n)
    apart = join_groups({k: tx.update(gg[k], tx.init(gp[k]), gp[k])[0] for k in gp}, n)
    rel = lambda a, b: float(jnp.abs(a - b).max() / jnp.abs(a).max())  # LARS: a 1e-3 ratio
    assert max(jax.tree.leaves(jax.tree.map(rel, whole["layers"], apart["layers"]))) > 0.1
    assert max_diff(whole["embed"], apart["embed"]) == 0.0  # a whole leaf: the same ratio


def test_the_refused_clip_would_have_differed_from_the_plain_step(monkeypatch):
    """What the refusal prevents (the hunt's numbers): the clip in tx, applied per group."""
    from wse_trainer import memoryx

    monkeypatch.setattr(memoryx, "groupwise_problem", lambda tx, params: None)
    model, tx = stream_model(), COUPLED["global_sgd"]
    assert max_diff(_streamed(_trainer(model, tx), model), _plain(model, tx)) > 1e-3


def test_max_gradient_norm_is_the_plain_optax_global_clip():
    model = stream_model()
    got = _streamed(_trainer(model, optax.sgd(0.5), max_gradient_norm=0.05), model)
    want = _plain(model, optax.chain(optax.clip_by_global_norm(0.05), optax.sgd(0.5)))
    assert max_diff(got, want) < 1e-6


ELEMENTWISE = {
    "adamw": optax.adamw(1e-2, weight_decay=0.1),
    "sgd_momentum": optax.sgd(0.3, momentum=0.9),
    "element_clip": optax.chain(optax.clip(0.001), optax.adam(1e-2)),
}


@pytest.mark.parametrize("name", ELEMENTWISE)
def test_a_per_element_or_per_leaf_tx_runs_and_matches_the_plain_step(name):
    model, tx = stream_model(), ELEMENTWISE[name]
    params = wse_models.init_params(model, jax.random.key(1))
    assert groupwise_problem(tx, params) is None
    # fp32 sums in another order (test_trainer_stream: 1e-5 at lr 1e-3)
    assert max_diff(_streamed(_trainer(model, tx), model), _plain(model, tx)) < 1e-4


def test_lion_is_taken_by_the_probe():
    """Lion is a sign of each element (plus decay): accepted. Its run is not compared with
    the plain step: a gradient summed in another order flips the sign of elements near 0,
    2 * lr apart, a property of Lion, not of MemoryX."""
    params = wse_models.init_params(stream_model(), jax.random.key(1))
    assert groupwise_problem(optax.lion(1e-3, weight_decay=0.1), params) is None


@pytest.mark.parametrize(
    "kw",
    [dict(optimizer_type="adamw", weight_decay=0.1), dict(optimizer_type="adam", weight_decay=0.01),
     dict(optimizer_type="sgd", momentum=0.9, nesterov=True, weight_decay=0.01),
     dict(optimizer_type="sgd", momentum=0.0)],
)  # fmt: skip
def test_the_trainers_own_transforms_skip_the_probe_and_would_pass_it(kw, monkeypatch):
    """`optimizer.base_transform` marks its tx elementwise: `wse train` pays no probe (1-5 s
    at its first run). The mark is sound: the probe itself, run on the unmarked transform,
    finds each of them per element; and a marked tx is never probed."""
    from wse_trainer import memoryx
    from wse_trainer.config import OptimizerConfig
    from wse_trainer.optimizer import _base_transform, base_transform

    model = stream_model()
    params = wse_models.init_params(model, jax.random.key(1))
    cfg = OptimizerConfig(**kw)
    assert groupwise_problem(_base_transform(cfg, 10), params) is None  # probed: unmarked

    def probe(*a):
        raise AssertionError("a marked tx was probed")

    monkeypatch.setattr(memoryx, "_groupwise", probe)
    assert groupwise_problem(base_transform(cfg, 10), params) is None
    with pytest.raises(AssertionError, match="probed"):
        groupwise_problem(optax.sgd(0.1), params)
