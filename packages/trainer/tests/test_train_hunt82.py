"""Hunt 82's `wse train` holes (1-8), each against an oracle:

1. `--validate-only` said "config is valid" for a checkpoint the run refused (another model,
   another optimizer): it skipped `run_folder.check_resume`. Oracle: the run's own line.
2. adam and adamw added eps to sqrt(v_hat) after the bias correction (optax's and torch's
   form); ModelZoo's AdamBase adds it to sqrt(v) before it. Oracle: AdamBase's step
   (Cerebras/modelzoo 1.9.1 modelzoo/common/pytorch/optim/AdamBase.py, cerebras.pytorch 2.x
   optim/AdamBase.py) in float64 NumPy, steps 1..5, weight decay as AdamW applies it.
3. with the newest checkpoint corrupt, the max_steps and decay notes and the resume checks
   read it, while the run resumed the one before. Oracle: the step count by hand.
4. ModelZoo 1.x's `model.use_bfloat16` was an unknown key. Oracle: its PyTorchBaseModel
   (true: the half type bfloat16; mixed_precision sets whether it is used).
5. `loss_scaling: batch_size` with `loss_weight: 1/max_sequence_length` was refused, though
   the same loss here. Oracle: ModelZoo's GPTLMHeadModelLoss formula in float64 NumPy.
6. "another model" showed `head_dim None there, None here`. Oracle: d_model // n_heads.
7. an eval with `load_checkpoint_states: model` was recorded at the checkpoint's step, unsaid;
   ModelZoo's global step stays 0 where global_step is not loaded.
8. `--mode eval` said the training schedule's default note.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import typer
import wse_models
from wse_cli.app import app
from wse_cli.testing import refused_in_one_line
from wse_trainer.config import ConfigError, OptimizerConfig, load_config
from wse_trainer.config_check import check_config, config_notes
from wse_trainer.metrics import read_metrics
from wse_trainer.optimizer import base_transform, decays, full_transform, schedule
from wse_trainer.optimizer_names import schedule_note
from wse_trainer.reference import loss_fn
from wse_trainer.run_folder import check_resume
from wse_trainer.seals import SEALED_KEY, seal_step
from wse_trainer.session import check_inputs, checked_resume, model_config
from wse_trainer.testing import run_on_preset, tiny_config

ROOT = typer.main.get_command(app)
QUICK = ["runconfig.max_steps=2", "runconfig.mode=train", "model.vocab_size=300",
         "train_input.batch_size=2", "runconfig.sample_tokens=0"]  # fmt: skip


# 2: ModelZoo's AdamBase ---------------------------------------------------------------------

LR, WD = 1e-2, 0.1


def _tree(rng: np.random.Generator) -> dict:
    """Leaves named as the model's: decayed weights, an undecayed bias and norm gain."""
    return {
        "attn": {"wq": rng.standard_normal((3, 4)), "bq": rng.standard_normal(4)},
        "attn_norm": {"scale": 1.0 + 0.1 * rng.standard_normal(4)},
        "embed": {"tok": rng.standard_normal((5, 3))},
    }


def _grads(rng: np.random.Generator, tree: dict, steps: int) -> list[dict]:
    """Gradients whose elements span 1e-9..1e-1 in size: eps (1e-6) matters to many of them."""
    return [jax.tree.map(lambda x: rng.standard_normal(x.shape) * 10.0 ** rng.uniform(
        -9, -1, x.shape), tree) for _ in range(steps)]  # fmt: skip


def _adam_base_np(tree: dict, grads: list, decoupled: bool, b1=0.9, b2=0.999, eps=1e-6) -> dict:
    """ModelZoo's AdamBase.step in float64 (correct_bias true): for Adam the weight decay is
    an L2 term added to the gradient (`l2_regularization_rate`), for AdamW added to the
    update after the bias correction (decoupled); both on the decayed groups only (ModelZoo's
    param groups: no bias, no norm)."""
    flat, treedef = jax.tree_util.tree_flatten_with_path(tree)
    p = [np.asarray(x, np.float64) for _, x in flat]
    on = [decays(path) for path, _ in flat]
    m, v = [np.zeros_like(x) for x in p], [np.zeros_like(x) for x in p]
    for t, g_tree in enumerate(grads, 1):
        for i, g in enumerate(jax.tree.leaves(g_tree)):
            g = g + WD * p[i] if (not decoupled and on[i]) else g
            m[i] = b1 * m[i] + (1 - b1) * g
            v[i] = b2 * v[i] + (1 - b2) * g * g
            update = m[i] / (np.sqrt(v[i]) + eps)
            update = update * (np.sqrt(1 - b2**t) / (1 - b1**t))  # step_size
            if decoupled and on[i]:
                update = update + WD * p[i]
            p[i] = p[i] - LR * update
    return jax.tree.unflatten(treedef, p)


def _ours(opt: OptimizerConfig, tree: dict, grads: list) -> dict:
    tx = full_transform(opt, 10)
    p = jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), tree)
    state = tx.init(p)
    for g in grads:
        up, state = tx.update(jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), g), state, p)
        p = optax.apply_updates(p, up)
    return jax.tree.map(np.asarray, p)


def _max_diff(a: dict, b: dict) -> float:
    pairs = zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    return max(float(np.max(np.abs(x - y))) for x, y in pairs)


@pytest.mark.parametrize(("kind", "decoupled"), [("adamw", True), ("adam", False)])
def test_adam_steps_1_to_5_are_modelzoos_adambase(kind, decoupled):
    rng = np.random.default_rng(82)
    tree = _tree(rng)
    grads = _grads(rng, tree, 5)
    opt = OptimizerConfig(optimizer_type=kind, learning_rate=LR, lr_schedule="constant",
                          weight_decay=WD)  # fmt: skip
    assert opt.eps_placement == "modelzoo"  # the default
    for steps in range(1, 6):
        want = _adam_base_np(tree, grads[:steps], decoupled)
        # float32 against float64: 5 steps of at most ~lr each on values ~1, a few ulps of 1
        assert _max_diff(_ours(opt, tree, grads[:steps]), want) < 2e-6, steps
    # optax's form (eps on sqrt(v_hat)) is another update: small gradients move ~a whole lr
    torch_form = dataclasses.replace(opt, eps_placement="optax")
    first = _adam_base_np(tree, grads[:1], decoupled)
    assert _max_diff(_ours(torch_form, tree, grads[:1]), first) > 1e-3


def test_the_adambase_form_keeps_optaxs_state_so_saved_steps_restore():
    p = {"w": jnp.ones(3)}
    for kind, before in (("adamw", optax.adamw), ("adam", optax.adam)):
        cfg = OptimizerConfig(optimizer_type=kind, weight_decay=0.1)
        saved = before(schedule(cfg, 10)).init(p)  # what a run saved before hunt 82
        assert jax.tree.structure(base_transform(cfg, 10).init(p)) == jax.tree.structure(saved)


def test_the_eps_placement_is_read_and_said(tmp_path):
    config = tiny_config(tmp_path, "optimizer.eps_placement=Torch")
    assert config.optimizer.eps_placement == "optax"
    (note,) = [n for n in config_notes(config) if "eps_placement" in n]
    # AdamBase's eps on sqrt(v_hat) at step 1: eps / sqrt(1 - beta2) = 1e-6 / sqrt(0.001)
    assert "optax's and torch.optim.AdamW's form" in note and "3.16e-05 at step 1" in note
    assert not [n for n in config_notes(tiny_config(tmp_path)) if "eps_placement" in n]
    with pytest.raises(ConfigError, match="optimizer.eps_placement='hf' is not valid"):
        check_config(tiny_config(tmp_path, "optimizer.eps_placement=hf"))
    sgd = tiny_config(tmp_path, "optimizer.optimizer_type=sgd", "optimizer.beta2=null",
                      "optimizer.eps=null", "optimizer.eps_placement=optax")  # fmt: skip
    with pytest.raises(ConfigError, match="optimizer.eps_placement=optax has no effect"):
        check_config(sgd)


def _fake_step(run: Path, step: int, config, model=None, sealed: bool = True, **changed) -> Path:
    """A step folder of `run` whose meta is what a save of `config` writes (the model with
    `changed` fields, the config as saved); its seal written when `sealed` (all the cheap
    checks read: no orbax state)."""
    own = json.loads(json.dumps(dataclasses.asdict(model or model_config(config))))
    meta = {"step": step, "model": {**own, **changed}, "config": config.to_dict(),
            "data": {"seed": config.train_input.shuffle_seed}, SEALED_KEY: True}  # fmt: skip
    folder = run / "checkpoints" / str(step)
    (folder / "meta").mkdir(parents=True)
    (folder / "meta" / "metadata").write_text(json.dumps(meta))
    if sealed:
        seal_step(folder)
    return folder


def test_a_checkpoint_saved_before_the_placement_resumes_only_with_its_form(tmp_path):
    config = tiny_config(tmp_path, "runconfig.mode=train")
    step = _fake_step(Path(config.runconfig.model_dir), 3, config, sealed=False)
    meta_path = step / "meta" / "metadata"
    meta = json.loads(meta_path.read_text())
    del meta["config"]["optimizer"]["eps_placement"]  # as every run saved before hunt 82
    meta_path.write_text(json.dumps(meta))
    seal_step(step)
    with pytest.raises(ConfigError, match=r"optimizer.eps_placement=optax \(modelzoo here\)"):
        check_resume(config, model_config(config))
    kept = tiny_config(tmp_path, "runconfig.mode=train", "optimizer.eps_placement=optax")
    assert check_resume(kept, model_config(kept)) == []


# 1 and 6: the checks of the step a run starts from ------------------------------------------


def test_validate_only_refuses_another_models_checkpoint_with_the_runs_line(tmp_path):
    from wse_trainer.config import load_config as load

    other = load("tiny", QUICK)
    step = _fake_step(tmp_path / "other", 3, other, n_layers=2)
    args = ["train", "tiny", *QUICK, "-o", str(tmp_path / "run"), "--checkpoint-path", str(step)]
    line = "is of another model (n_layers 2 there"
    run_line = refused_in_one_line(ROOT, args, line)
    assert refused_in_one_line(ROOT, [*args, "--validate-only"], line) == run_line  # before: 0


def test_validate_only_refuses_another_optimizer_in_its_model_dir(tmp_path):
    from wse_trainer.config import load_config as load

    _fake_step(tmp_path / "run", 2, load("tiny", QUICK))
    args = ["train", "tiny", *QUICK, "-o", str(tmp_path / "run"), "optimizer.optimizer_type=sgd",
            "optimizer.beta2=null", "optimizer.eps=null"]  # fmt: skip
    line = "was trained with optimizer.optimizer_type=adamw (sgd here)"
    assert refused_in_one_line(ROOT, [*args, "--validate-only"], line)  # before: "valid"


def test_another_models_line_shows_head_dim_as_computed(tmp_path):
    config = tiny_config(tmp_path, "runconfig.mode=train", "model.d_model=64")
    other = tiny_config(tmp_path / "o")  # d_model 32, n_heads 2: head_dim 32 // 2 = 16
    step = _fake_step(tmp_path / "other", 3, other)
    config = dataclasses.replace(
        config, runconfig=dataclasses.replace(config.runconfig, checkpoint_path=str(step))
    )
    with pytest.raises(ConfigError) as e:
        check_resume(config, model_config(config))
    assert "d_model 32 there, 64 here; head_dim 16 there, 32 here (d_model // n_heads)" in str(
        e.value
    )  # before: "head_dim None there, None here"


# 3: a corrupt newest step -------------------------------------------------------------------


def test_the_notes_and_checks_read_the_step_the_run_resumes(tmp_path):
    config = tiny_config(tmp_path, "runconfig.mode=train", "runconfig.max_steps=null",
                         "runconfig.num_steps=2", "optimizer.decay_steps=null")  # fmt: skip
    run = Path(config.runconfig.model_dir)
    _fake_step(run, 3, config)
    # step 6: of another model, its seal missing though its meta promised one (a copy cut
    # short): the run moves it aside and resumes step 3
    _fake_step(run, 6, config, sealed=False, d_model=64)
    check_inputs(config)
    resolved, notes = checked_resume(config, model_config(config))
    assert resolved.runconfig.max_steps == 3 + 2  # by hand: step 3's, not 6 + 2
    assert (
        "runconfig.num_steps=2 from checkpoint step 3, so the run trains to step 5" in notes[0]
    )  # before: "from checkpoint step 6 ... to step 8" and "another model" of step 6
    seal = run / "checkpoints" / "6" / "wse_sha256.json"
    seal_step(run / "checkpoints" / "6")  # the same step sealed: it is the one resumed
    assert seal.is_file()
    with pytest.raises(ConfigError, match="is of another model"):
        checked_resume(config, model_config(config))


def test_a_seal_whose_files_changed_size_is_not_the_step_resumed(tmp_path):
    config = tiny_config(tmp_path, "runconfig.mode=train", "runconfig.max_steps=null",
                         "runconfig.num_steps=1")  # fmt: skip
    run = Path(config.runconfig.model_dir)
    _fake_step(run, 3, config)
    meta = _fake_step(run, 6, config) / "meta" / "metadata"
    meta.write_text(meta.read_text() + " ")  # one byte more than sealed
    resolved, _ = checked_resume(config, model_config(config))
    assert resolved.runconfig.max_steps == 4


# 4: use_bfloat16 ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "dtype"),
    [
        (["model.mixed_precision=true", "model.use_bfloat16=true"], "bfloat16"),
        (["model.mixed_precision=false", "model.use_bfloat16=true"], "float32"),
        (["model.mixed_precision=false", "model.use_bfloat16=false"], "float32"),
        (["model.use_bfloat16=true"], "float32"),  # no mixed precision: read by nothing
        (["model.mixed_precision=true", "model.use_bfloat16=true",
          "model.fp16_type=bfloat16"], "bfloat16"),
    ],
)  # fmt: skip
def test_use_bfloat16_is_modelzoo_1x_half_type(tmp_path, given, dtype):
    config = tiny_config(tmp_path, *given)
    assert model_config(config).dtype == dtype
    assert any("model.use_bfloat16" in n for n in config_notes(config))


@pytest.mark.parametrize(
    ("given", "says"),
    [
        (["model.mixed_precision=true", "model.use_bfloat16=false"],
         "model.mixed_precision true with use_bfloat16 false (ModelZoo 1.x's float16): there "
         "is no float16 here"),
        (["model.use_bfloat16=true", "model.fp16_type=float16"],
         "model.use_bfloat16 true (ModelZoo 1.x's bfloat16) and model.fp16_type 'float16' "
         "name two 16-bit types"),
        (["model.use_bfloat16=yes please"], "model.use_bfloat16 must be true or false"),
    ],
)  # fmt: skip
def test_use_bfloat16_that_cannot_run_is_refused(tmp_path, given, says):
    with pytest.raises(ConfigError, match="use_bfloat16") as e:
        tiny_config(tmp_path, *given)
    assert says in str(e.value) and "unknown key" not in str(e.value)


# 5: loss_scaling batch_size -----------------------------------------------------------------


def _modelzoo_batch_size_loss(model, params, batch: np.ndarray, weight: float) -> float:
    """ModelZoo's GPTLMHeadModelLoss with loss_scaling batch_size in float64: the summed
    cross-entropy over the mask's tokens (every target here) / the batch's rows x weight."""
    logits = np.asarray(wse_models.forward(model, params, jnp.asarray(batch[:, :-1]))[0],
                        np.float64)  # fmt: skip
    top = logits.max(-1, keepdims=True)
    logp = logits - top - np.log(np.exp(logits - top).sum(-1, keepdims=True))
    ce = -np.take_along_axis(logp, batch[:, 1:, None], -1)[..., 0]
    return float(ce.sum() / batch.shape[0] * weight)


def test_batch_size_scaling_at_one_over_the_length_is_the_loss_that_runs(tmp_path):
    seq = 32  # tiny_params' max_sequence_length
    config = tiny_config(tmp_path, "model.loss_scaling=batch_size",
                         f"model.loss_weight={1 / seq}")  # fmt: skip
    note = [n for n in config_notes(config) if "model.loss_scaling" in n]
    assert note and "the loss that runs (num_tokens)" in note[0]
    model = model_config(config)
    params = wse_models.init_params(model, jax.random.key(0))
    batch = np.random.default_rng(0).integers(0, model.vocab_size, (4, seq + 1))
    ours = float(loss_fn(model, params, jnp.asarray(batch)))
    assert ours == pytest.approx(_modelzoo_batch_size_loss(model, params, batch, 1 / seq),
                                 rel=1e-6)  # float32 logits: a few ulp  # fmt: skip


@pytest.mark.parametrize(
    ("given", "says"),
    [
        (["model.loss_scaling=batch_size", "model.loss_weight=0.01"],
         "would be the mean over the batch's tokens x 0.32, the loss and its gradients scaled "
         "by that; the loss here is that mean: give loss_weight 1/32 = 0.03125"),
        (["model.loss_scaling=batch_size"], "x 32, the loss"),
        (["model.loss_weight=0.5"], "with loss_scaling num_tokens: ModelZoo asserts 1.0"),
        (["model.loss_scaling=tokens"], "is none of ModelZoo's"),
        # eval_input's length too where the run evaluates (0.03125 x 64 = 2)
        (["model.loss_scaling=batch_size", "model.loss_weight=0.03125",
          "eval_input.max_sequence_length=64", "runconfig.mode=train_and_eval"],
         "max_sequence_length 64 targets"),
    ],
)  # fmt: skip
def test_a_loss_weight_that_is_not_the_mean_is_refused_naming_its_factor(tmp_path, given, says):
    with pytest.raises(ConfigError, match="model.loss_") as e:
        tiny_config(tmp_path, *given)
    assert says in str(e.value)


# 7 and 8: an eval ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """The tiny run trained 3 steps on a cosine (saved at step 3)."""
    where = tmp_path_factory.mktemp("t82")
    run_on_preset(tiny_config(where, "runconfig.max_steps=3", "runconfig.mode=train",
                              "runconfig.sample_tokens=0"))  # fmt: skip
    return where


def _eval(where: Path, *overrides: str):
    """`trained`'s mode eval, its optimizer section leaving lr_schedule out (a constant
    rate's note, which a train says)."""
    return tiny_config(where, "runconfig.mode=eval", "optimizer.lr_schedule=null",
                       "optimizer.warmup_steps=0", *overrides)  # fmt: skip


def test_an_eval_of_the_weights_alone_is_recorded_at_step_0(trained):
    config = _eval(trained, "runconfig.load_checkpoint_states=model")
    lines: list[str] = []
    result = run_on_preset(config, echo=lines.append)
    assert result.global_step == 0  # ModelZoo: global_step not loaded, its step stays 0
    step = Path(config.runconfig.model_dir).resolve() / "checkpoints" / "3"
    said = (
        f"evaluating checkpoint step 3's weights ({step}) at step 0: "
        "runconfig.load_checkpoint_states=model loads no global_step, so the eval is recorded "
        "at step 0, as ModelZoo records it"
    )
    assert any(line.startswith(said) for line in lines), lines
    evals = [m for m in read_metrics(config.runconfig.model_dir) if m["mode"] == "eval"]
    assert [m["step"] for m in evals] == [0]  # before: 4 (here 3), unsaid
    whole = run_on_preset(_eval(trained))  # every state: the checkpoint's step
    assert whole.global_step == 3
    # 8: an eval trains nothing; no schedule line (before: "lr_schedule unset: constant")
    assert not [n for n in result.notes if "lr_schedule" in n]
    assert schedule_note(config.optimizer) in config.notes  # the config holds it; unsaid


def test_eval_all_of_the_weights_alone_is_refused(trained):
    config = _eval(trained, "runconfig.load_checkpoint_states=model")
    config = dataclasses.replace(
        config, runconfig=dataclasses.replace(config.runconfig, mode="eval_all")
    )
    with pytest.raises(ConfigError, match="each checkpoint's weights would be evaluated at"):
        check_inputs(config)


def test_the_schedule_note_is_a_training_runs_only(tmp_path):
    unset = ["optimizer.lr_schedule=null", "optimizer.warmup_steps=0",
             "optimizer.decay_steps=null", "optimizer.min_learning_rate=0"]  # fmt: skip
    config = load_config("tiny", unset)
    said = schedule_note(config.optimizer)
    for mode, held in (("train", True), ("train_and_eval", True), ("eval", False),
                       ("eval_all", False)):  # fmt: skip
        run = dataclasses.replace(config.runconfig, mode=mode, max_steps=10)
        assert (said in config_notes(dataclasses.replace(config, runconfig=run))) is held, mode
