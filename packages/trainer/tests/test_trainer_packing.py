"""Packed documents and measured activation sparsity in the trainer.

Packing oracle: the summed loss over a packed batch equals the sum, over every document
segment of every row, of that segment run alone (its own forward, positions 0..n-1), and so
do the gradients. Tolerance: fp32 throughout; masked keys get probability exactly 0
(exp(-1e30 - max) underflows), so the two sides add the same products and differ only in
the order XLA sums them (matmuls over another number of rows, per-segment sums of the loss
and gradients added on the host): a few ulp of the largest partial sums of the backward
pass, which are of the order of the model's largest gradient element, whatever an element's
own size (the key bias's gradient is 0 in exact arithmetic and comes out as ~1e-10 noise on
both sides). So elements are compared with atol = 1e-6 x the largest |gradient| of the whole
model (~8 ulp of it; 1.5 ulp seen) and rtol 1e-5: room for summation order and nothing else.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import wse_models
from wse_core import preset
from wse_systems.training.plan import plan_activations
from wse_trainer.config import OptimizerConfig, load_config
from wse_trainer.data import pack, pad_documents, segments
from wse_trainer.metrics import read_metrics
from wse_trainer.optimizer import base_transform
from wse_trainer.reference import loss_fn
from wse_trainer.replica import token_loss
from wse_trainer.stream import StreamedTrainer
from wse_trainer.studies.varlen_packing import _segment_lengths, padding_fraction
from wse_trainer.testing import run_on_preset as run
from wse_trainer.testing import tiny_config

EOS, B, S = 0, 4, 24


def _model(arch="tiny-gpt2", **kw):
    base = dict(vocab_size=50, d_model=32, n_layers=2, n_heads=4, d_ff=64, max_seq_len=32)
    if arch == "tiny-gpt2":
        base["n_kv_heads"] = 4
    return wse_models.preset_config(arch, **{**base, **kw})


def _docs(n=14, seed=0):
    """Documents of 1..30 tokens (ids 1..49; 0 is EOS), lengths spread as a lognormal."""
    rng = np.random.default_rng(seed)
    lens = np.clip(rng.lognormal(2.0, 0.8, n).astype(int), 1, 30)
    return [rng.integers(1, 50, n_).tolist() for n_ in lens]


def test_segments_by_hand():
    seg, pos = segments(np.array([[5, 5, 0, 7, 7, 7, 0, 9]]), eos_id=0)
    np.testing.assert_array_equal(seg, [[0, 0, 1, 1, 1, 1, 2, 2]])
    np.testing.assert_array_equal(pos, [[0, 1, 0, 1, 2, 3, 0, 1]])


def test_padding_fraction_equals_count_on_the_batches():
    docs = [[1, 2, 3], [4] * 10, [5]]  # + EOS: 4, 11, 2 tokens; seq_len 4 -> rows of 5
    rows, real = pad_documents(docs, seq_len=4, eos_id=0, pad_id=9)
    # doc 1: 4 tokens, one row (1 pad); doc 2: 11 tokens, rows [0:5] [4:9] [8:11] (2 pads);
    # doc 3: 2 tokens, one row (3 pads)
    assert rows.shape == (5, 5)
    np.testing.assert_array_equal(rows[0], [1, 2, 3, 0, 9])
    np.testing.assert_array_equal(rows[3], [4, 4, 0, 9, 9])
    assert int((~real[:, 1:]).sum()) == 1 + 2 + 3 == int((rows[:, 1:] == 9).sum())
    # every real token of every document is a target exactly once
    assert int(real[:, 1:].sum()) == sum(len(d) + 1 for d in docs) - len(docs)
    assert padding_fraction(real) == 6 / 20  # the experiment's figure is that count


def test_packed_segment_lengths_cover_every_token():
    rows = pack(_docs(), S, EOS)
    lens = _segment_lengths(rows, EOS)
    assert lens.sum() == rows[:, 1:].size and lens.min() >= 1
    seg = segments(rows[:, :-1], EOS).segment_ids
    assert len(lens) == sum(len(np.unique(r)) for r in seg)
    np.testing.assert_array_equal(lens[: len(np.unique(seg[0]))], np.bincount(seg[0]))


def _largest(tree) -> float:
    return max(float(np.abs(np.asarray(x)).max()) for x in jax.tree.leaves(tree))


def _packed_batch(model):
    rows = pack(_docs(), S, EOS)[:B]
    return rows, segments(rows[:, :-1], EOS)


def _one_by_one(model, params, rows):
    """Summed loss and gradient over every segment of every row, each run alone."""
    seg, _ = segments(rows[:, :-1], EOS)

    def seg_loss(p, toks, tgts):
        return token_loss(wse_models.forward(model, p, toks)[0], tgts)

    grad_fn = jax.jit(jax.value_and_grad(seg_loss))
    total, grads, n_segments = 0.0, None, 0
    for r in range(rows.shape[0]):
        for s in np.unique(seg[r]):
            idx = np.flatnonzero(seg[r] == s)
            toks, tgts = rows[r, idx][None], rows[r, idx + 1][None]
            loss, g = grad_fn(params, jnp.asarray(toks), jnp.asarray(tgts))
            total += float(loss)
            grads = g if grads is None else jax.tree.map(jnp.add, grads, g)
            n_segments += 1
    return total, grads, n_segments


@functools.cache
def _oracle(arch: str):
    """`_one_by_one` of `arch`'s initial parameters on the packed batch, computed once (each
    segment length is a compile of its own): the packed and the streamed tests share it."""
    model = _model(arch)
    params = wse_models.init_params(model, jax.random.key(0))
    return _one_by_one(model, params, _packed_batch(model)[0])


@pytest.mark.parametrize("arch", ["tiny-gpt2", "tiny-llama"])
def test_packed_loss_and_gradients_equal_documents_one_by_one(arch):
    model = _model(arch)
    params = wse_models.init_params(model, jax.random.key(0))
    rows, segs = _packed_batch(model)
    n = rows[:, 1:].size

    def packed(p):
        return loss_fn(model, p, jnp.asarray(rows), jax.tree.map(jnp.asarray, segs)) * n

    loss, grads = jax.jit(jax.value_and_grad(packed))(params)
    total, ref, n_segments = _oracle(arch)
    assert n_segments > B  # several documents per row
    np.testing.assert_allclose(float(loss), total, rtol=1e-6)
    atol = 1e-6 * _largest(ref)
    for a, b in zip(jax.tree.leaves(grads), jax.tree.leaves(ref), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=atol)
    # and packing matters: without segment ids the loss is another number
    unpacked = float(loss_fn(model, params, jnp.asarray(rows))) * n
    assert abs(unpacked - total) > 1e-3


def _streamed(model, params):
    plan = plan_activations(model, preset("small"), B, S, 1)
    tx = base_transform(OptimizerConfig(optimizer_type="sgd", learning_rate=1.0), 10)
    return StreamedTrainer(
        model, params, tx, num_csx=1, global_batch=B, seq_len=S, plan=plan, max_gradient_norm=None
    )


def test_streamed_packed_step_is_the_packed_gradient():
    """Streaming layer by layer with segment ids: one SGD step (lr 1) moves the parameters
    by minus the mean gradient of the packed batch (the oracle above, divided by tokens)."""
    model = _model()
    params = wse_models.init_params(model, jax.random.key(0))
    rows, segs = _packed_batch(model)
    tr = _streamed(model, params)
    st = tr.step(rows, segs)
    total, grads, _ = _oracle("tiny-gpt2")  # `_model()`'s arch, the same parameters and rows
    n = rows[:, 1:].size
    assert st.loss == pytest.approx(total / n, rel=1e-6) and st.mlp_zero_fraction is None
    after = jax.tree.leaves(tr.memx.params_tree())
    # p - (p - g) also rounds at the parameters' own ulp: 2 ulp of the largest |p| more
    atol = 1e-6 * _largest(grads) / n + 2 * np.finfo(np.float32).eps * _largest(params)
    for p, q, g in zip(jax.tree.leaves(params), after, jax.tree.leaves(grads), strict=True):
        np.testing.assert_allclose(np.asarray(p) - q, np.asarray(g) / n, rtol=1e-5, atol=atol)


def test_streamed_step_reports_the_measured_zero_fraction():
    model = _model(mlp_activation="relu")
    params = wse_models.init_params(model, jax.random.key(0))
    rows = pack(_docs(), S, EOS)[:B]
    expected = wse_models.sparsity.zero_fraction(params, model, rows[:, :-1])
    st = _streamed(model, params).step(rows)
    np.testing.assert_allclose(st.mlp_zero_fraction, expected, rtol=0, atol=1e-12)


def test_run_writes_sparsity_and_trains_packed(tmp_path):
    cfg = tiny_config(
        tmp_path,
        "model.mlp_activation=relu2",
        "train_input.packing=true",
        "eval_input.packing=true",
        "runconfig.max_steps=2",
        "runconfig.mode=train_and_eval",
    )
    result = run(cfg)
    train = [m for m in read_metrics(result.model_dir) if m["mode"] == "train"]
    assert len(train) == 2 and np.isfinite(result.eval_loss)
    for m in train:
        assert len(m["mlp_zero_fraction"]) == 3
        assert m["mlp_zero_fraction_mean"] == pytest.approx(np.mean(m["mlp_zero_fraction"]))
        assert 0.0 < m["mlp_zero_fraction_mean"] < 1.0
    assert wse_models.from_pretrained(result.model_dir / "hf").config.mlp_activation == "relu2"


def test_params_yaml_validates_activation_and_packing(tmp_path):
    from wse_trainer.config import ConfigError
    from wse_trainer.run import model_config

    p = tmp_path / "p.yaml"
    p.write_text("train_input: {packing: yes please}\n")
    with pytest.raises(ConfigError, match="train_input.packing must be bool"):
        load_config(p)
    with pytest.raises(wse_models.ModelConfigError, match="mlp_activation='gleu'"):
        model_config(load_config("tiny", ["model.mlp_activation=gleu"]))
