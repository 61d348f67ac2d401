"""Hunt 78 (wse_trainer as a library): a batch with ids outside the vocabulary wrote NaN into
every weight; `__all__` named three names that did not import; a trainer whose batch cannot
be split built, then failed in a reshape (or a ZeroDivisionError); a cosine schedule from a
learning rate of 0 divided by zero.

Oracles: the fused reference (`wse_trainer.reference`: its `ModelError` and its step), the
divisibility rule enumerated by brute force, `wse_systems.training`'s own objects, optax's
schedules and the cosine's closed form (NumPy)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import wse_models
from wse_core import preset
from wse_core.errors import WseError
from wse_models.errors import ModelError
from wse_systems.training.plan import plan_activations
from wse_trainer.config import OptimizerConfig
from wse_trainer.optimizer import base_transform, full_transform, schedule
from wse_trainer.reference import fused_step, loss_fn
from wse_trainer.step_inputs import check_batch, micro_size
from wse_trainer.stream import StreamedTrainer
from wse_trainer.testing import ADAMW, max_diff, stream_model

MODEL = stream_model()
V, S = MODEL.vocab_size, 16


def _trainer(gb=4, num_csx=1, micro=None, seq=S):
    plan = plan_activations(MODEL, preset("small"), max(gb // max(num_csx, 1), 1), seq, 1, 0)
    return StreamedTrainer(
        MODEL, wse_models.init_params(MODEL, jax.random.key(1)), base_transform(ADAMW, 10),
        num_csx=num_csx, global_batch=gb, seq_len=seq, plan=plan,
        devices=jax.devices()[:1], micro_batch=micro,
    )  # fmt: skip


def _batch(gb=4, seed=0):
    return np.random.default_rng(seed).integers(0, V, (gb, S + 1)).astype(np.int32)


def _reference_error(batch) -> str:
    params = wse_models.init_params(MODEL, jax.random.key(1))
    with pytest.raises(ModelError) as err:
        loss_fn(MODEL, params, jnp.asarray(batch))
    return str(err.value)


# 1. ids outside the vocabulary: refused before anything is updated ----------------------
@pytest.mark.parametrize(
    ("row", "col", "bad"),
    [(0, 3, V), (2, 0, -1), (1, S, V + 5), (3, S, -2)],  # inputs; the targets' last id
    ids=["input-past", "input-negative", "target-past", "target-negative"],
)
def test_ids_outside_vocabulary_refused_as_the_reference(row, col, bad):
    tr = _trainer()
    before = jax.tree.map(np.asarray, tr.memx.params_tree())
    batch = _batch()
    batch[row, col] = bad
    with pytest.raises(ModelError) as err:
        tr.step(batch)
    assert str(err.value) == _reference_error(batch)  # the fused reference's own line
    assert str(err.value) == f"token id {bad} is outside the vocabulary 0..{V - 1}"
    assert tr.memx.updates_applied == 0
    assert max_diff(tr.memx.params_tree(), before) == 0.0
    # the trainer is whole: its next step is the fused reference's first step
    good = _batch(seed=1)
    stats = tr.step(good)
    tx = full_transform(ADAMW, 10)
    p = wse_models.init_params(MODEL, jax.random.key(1))
    p2, _, loss = jax.jit(fused_step(MODEL, tx))(p, tx.init(p), good)
    assert math.isfinite(stats.loss)
    assert abs(stats.loss - float(loss)) < 1e-5  # fp32 sums in another order (testing.py)
    assert max_diff(tr.memx.params_tree(), p2) < 1e-5


def test_packed_positions_and_segments_checked():
    batch = _batch()
    seg = np.zeros((4, S), np.int32)
    pos = np.broadcast_to(np.arange(S, dtype=np.int32), (4, S))
    check_batch(MODEL, batch, (seg, pos), (4, S))  # well formed: nothing raised
    with pytest.raises(WseError, match=r"positions shape \(4, 8\) .* \(4, 16\)"):
        check_batch(MODEL, batch, (seg, pos[:, :8]), (4, S))
    far = pos + MODEL.max_seq_len  # past the gpt2 position table: the model's own refusal
    with pytest.raises(ModelError, match="position table"):
        check_batch(MODEL, batch, (seg, far), (4, S))


# 2. every name in __all__ imports; the docstring names modules that exist ---------------
def test_star_import_and_every_public_name():
    import importlib.util
    import re

    import wse_systems.training.performance as perf
    import wse_systems.training.plan as plan
    import wse_trainer

    namespace: dict = {}
    exec("from wse_trainer import *", namespace)
    assert set(wse_trainer.__all__) <= set(namespace)
    for name in wse_trainer.__all__:
        assert getattr(wse_trainer, name) is namespace[name]
    assert wse_trainer.plan_activations is plan.plan_activations
    assert wse_trainer.memory_plan is plan.memory_plan
    assert wse_trainer.predict_step is perf.predict_step
    listed = wse_trainer.__doc__.split("Modules:")[1]
    assert "`studies/`" in listed and importlib.util.find_spec("wse_trainer.studies")
    for name in set(re.findall(r"`([a-z_]+)`", listed)) - set(wse_trainer.__all__):
        found = [importlib.util.find_spec(f"{base}.{name}") for base in
                 ("wse_trainer", "wse_systems.training")]  # fmt: skip
        assert any(found), name


# 3. a trainer's batch split, and a step's batch shape ----------------------------------
@pytest.mark.parametrize(
    ("gb", "num_csx", "micro", "match"),
    [
        (5, 2, None, "num_csx 2 must divide global_batch 5"),
        (1, 2, None, "num_csx 2 must divide global_batch 1"),
        (4, 0, None, "num_csx must be a positive integer, got 0"),
        (4, 1, 0, r"micro_batch 0 must be a positive divisor of the per-system batch 4"),
        (4, 1, -2, r"micro_batch -2 must be a positive divisor"),
        (8, 2, 3, r"micro_batch 3 must be a positive divisor of the per-system batch 4 "
                  r"\(global_batch 8 / num_csx 2\); give one of \[1, 2, 4\]"),
    ],
)  # fmt: skip
def test_trainer_refuses_a_split_it_cannot_make(gb, num_csx, micro, match):
    with pytest.raises(ValueError, match=match) as err:
        _trainer(gb, num_csx, micro)
    assert "\n" not in str(err.value)


def test_micro_size_is_the_divisibility_rule():
    """Brute force: accepted exactly when num_csx divides the batch and the micro-batch (or
    None: the whole share) divides the share."""
    for gb in range(1, 13):
        for n in range(1, 5):
            for m in [None, *range(-1, 8)]:
                share = gb / n
                ok = share == int(share) and (m is None or (m >= 1 and share / m == share // m))
                if ok:
                    assert micro_size(n, gb, S, m) == (m or int(share))
                else:
                    with pytest.raises(WseError):
                        micro_size(n, gb, S, m)


def test_divisors_listed_are_every_divisor():
    from wse_trainer.step_inputs import _divisors

    for n in range(1, 300):
        assert _divisors(n, most=n) == str([d for d in range(1, n + 1) if n % d == 0])


@pytest.mark.parametrize(
    "shape", [(8, S + 1), (2, S + 1), (4, 9), (4, S + 2), (4 * (S + 1),)], ids=str
)
def test_step_refuses_a_batch_of_another_shape(shape):
    tr = _trainer()
    batch = np.zeros(shape, np.int32)
    want = rf"batch shape \({', '.join(map(str, shape))},?\) is not the trainer's "
    with pytest.raises(ValueError, match=want + r"\(global_batch, seq_len \+ 1\) = \(4, 17\)"):
        tr.step(batch)
    assert tr.memx.updates_applied == 0


# 4. a cosine schedule from a learning rate of 0 ----------------------------------------
def _rates(fn, n=14):
    return np.array([float(fn(jnp.asarray(i, jnp.int32))) for i in range(n)])


@pytest.mark.parametrize("warmup", [0, 3])
def test_cosine_from_zero_is_optax_zero_schedule(warmup):
    cfg = OptimizerConfig(learning_rate=0.0, lr_schedule="cosine", warmup_steps=warmup)
    decay = 10 - warmup
    want = optax.cosine_decay_schedule(0.0, decay)
    if warmup:
        warm = optax.linear_schedule(0.0, 0.0, warmup)
        want = optax.join_schedules([warm, want], [warmup])
    np.testing.assert_array_equal(_rates(schedule(cfg, 10)), _rates(want))
    base_transform(cfg, 10)  # builds


def test_cosine_from_zero_rises_to_min_learning_rate():
    """min + (0 - min) * (1 + cos(pi t / T)) / 2, the cosine's closed form."""
    cfg = OptimizerConfig(learning_rate=0.0, lr_schedule="cosine", min_learning_rate=1e-3)
    t = np.minimum(np.arange(14), 10)
    want = 1e-3 - 1e-3 * 0.5 * (1 + np.cos(np.pi * t / 10))
    np.testing.assert_allclose(_rates(schedule(cfg, 10)), want, rtol=0, atol=1e-9)  # fp32


def test_cosine_from_a_positive_rate_is_still_optax():
    cfg = OptimizerConfig(learning_rate=2e-3, lr_schedule="cosine", min_learning_rate=1e-4)
    want = optax.cosine_decay_schedule(2e-3, 10, alpha=1e-4 / 2e-3)
    np.testing.assert_array_equal(_rates(schedule(cfg, 10)), _rates(want))
