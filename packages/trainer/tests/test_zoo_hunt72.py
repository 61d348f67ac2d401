"""hunt 72 (zoo): `wse train` against ModelZoo's and HF Trainer's conventions.

- AdamW's weight decay shrank the LayerNorm / RMSNorm gains and the biases, which ModelZoo's
  param groups (`common/optim_utils.py`) and HF Trainer's (`get_decay_parameter_names`)
  leave undecayed. Oracles: a float64 NumPy AdamW (torch's arithmetic) over every tree
  MemoryX updates, HF's no-decay leaves named by hand; a whole run against torch's AdamW
  with the two param groups HF Trainer builds (`get_decay_parameter_names` itself), the HF
  model in float64 on the same batches; a run folder saved with the old transform restores,
  and a run resumed halfway is bit-identical to a straight one.
- The learning rate of a step was written nowhere: metrics.jsonl and TensorBoard's train/
  hold `lr`, against the schedule computed by hand.
- eval_input.eval_steps left out evaluated 4 batches; ModelZoo's `run_cstorch_eval`
  evaluates the whole split: the eval loss against HF's mean over every batch, the line
  saying how many, the prediction priced at those.
- ModelZoo's `runconfig.eval_steps` and `optimizer.betas` were refused with a wrong hint
  ("did you mean 'max_steps'?", "'beta2'"): read as ours, equal to our spelling's config.
- `--mode eval` of a folder with no checkpoint printed "0 tokens/s; stalled 0.0%": the
  summary says the weights were random and prints no rates of steps never run.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import jax
import numpy as np
import optax
import pytest
import typer
import wse_models
import yaml
from wse_cli.app import app
from wse_cli.testing import invoke
from wse_trainer.config import ConfigError, OptimizerConfig, config_from_dict, load_config
from wse_trainer.memoryx import split_groups
from wse_trainer.optimizer import base_transform, full_transform, schedule
from wse_trainer.testing import run_on_preset, tensorboard_scalars, tiny_params, write_corpus

ROOT = typer.main.get_command(app)

# p1.yaml of the hunt: a warm-up of 2 steps to 1e-2, cosine to 1e-3 at step 6; eps where
# torch's AdamW adds it, the oracles' (hunt 82: ModelZoo's AdamBase form runs by default)
OPT = {"optimizer_type": "adamw", "learning_rate": 1e-2, "lr_schedule": "cosine",
       "warmup_steps": 2, "min_learning_rate": 1e-3, "decay_steps": 6, "weight_decay": 0.1,
       "beta2": 0.95, "eps": 1e-8, "eps_placement": "torch"}  # fmt: skip
STEPS = 4


def _lr(step: int) -> float:
    """The rate of 1-based `step` by hand: the updates before it count (torch's scheduler
    after `step - 1` calls); linear from 0 over 2 steps, then cosine 1e-2 -> 1e-3 over 4."""
    n = step - 1
    if n < 2:
        return 1e-2 * n / 2
    return 1e-3 + (1e-2 - 1e-3) * 0.5 * (1 + math.cos(math.pi * min(n - 2, 4) / 4))


# HF's no-decay parameters (Trainer: a name holding "bias" or a norm) as our leaves hold them
# (wse_models.checkpoint's map): ln_1 / ln_2 / ln_f and input_layernorm /
# post_attention_layernorm / norm are attn_norm, mlp_norm and the final norm; the biases of
# c_attn, attn.c_proj, c_fc and mlp.c_proj are bq, bk, bv, bo, b_up and b_down
NO_DECAY = {("attn_norm", "scale"), ("attn_norm", "bias"), ("mlp_norm", "scale"),
            ("mlp_norm", "bias"), ("norm", "scale"), ("norm", "bias"), ("attn", "bq"),
            ("attn", "bk"), ("attn", "bv"), ("attn", "bo"), ("mlp", "b_up"),
            ("mlp", "b_down")}  # fmt: skip


def _leaves(tree) -> dict[tuple[str, ...], np.ndarray]:
    flat = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {tuple(str(k.key) for k in path): np.asarray(x, np.float64) for path, x in flat}


def _numpy_adamw(tree, grads: list, wd: float) -> dict:
    """torch's AdamW in float64 (the decay first, `p *= 1 - lr * wd`, then the bias-corrected
    step), `wd` on every leaf but NO_DECAY's."""
    p = _leaves(tree)
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v = {k: np.zeros_like(x) for k, x in p.items()}
    for t, g in enumerate(grads, 1):
        lr = _lr(t)
        for k in p:
            decay = 0.0 if k[-2:] in NO_DECAY else wd
            m[k] = 0.9 * m[k] + 0.1 * g[k]
            v[k] = 0.95 * v[k] + 0.05 * g[k] ** 2
            step = (m[k] / (1 - 0.9**t)) / (np.sqrt(v[k] / (1 - 0.95**t)) + 1e-8)
            p[k] = p[k] * (1 - lr * decay) - lr * step
    return p


@pytest.mark.parametrize("preset", ["tiny-gpt2", "tiny-llama"])
def test_adamw_leaves_norms_and_biases_undecayed_in_every_tree_memoryx_updates(preset):
    model = wse_models.preset_config(preset, n_layers=2)
    params = jax.tree.map(np.asarray, wse_models.init_params(model, jax.random.key(0)))
    cfg = OptimizerConfig(**OPT)
    trees = {**split_groups(params, model.n_layers), "whole": params}  # the groups, the model
    rng = np.random.default_rng(1)
    for name, tree in trees.items():
        tx = base_transform(cfg, 10) if name != "whole" else full_transform(cfg, 10)
        grads = [jax.tree.map(lambda x: rng.standard_normal(x.shape), tree) for _ in range(3)]
        state, got = tx.init(tree), tree
        for g in grads:
            g32 = jax.tree.map(lambda x: x.astype(np.float32), g)
            updates, state = tx.update(g32, state, got)
            got = optax.apply_updates(got, updates)
        want = _numpy_adamw(tree, [_leaves(g) for g in grads], OPT["weight_decay"])
        for key, x in _leaves(got).items():  # before: each norm gain 1.5e-3 below torch's
            np.testing.assert_allclose(x, want[key], rtol=0, atol=2e-6, err_msg=f"{name} {key}")


def test_the_masked_decay_keeps_the_saved_optimizer_states_shape():
    """A step saved before hunt 72 restores: the state is optax.adamw's (optax's own `mask=`
    wraps it in a MaskedState, which orbax refuses to restore into)."""
    p = {"attn_norm": {"scale": np.ones(3, np.float32)}, "w": np.ones((2, 2), np.float32)}
    cfg = OptimizerConfig(**OPT)
    before = optax.adamw(schedule(cfg, 10), b1=0.9, b2=0.95, eps=1e-8, weight_decay=0.1)
    assert jax.tree.structure(base_transform(cfg, 10).init(p)) == jax.tree.structure(before.init(p))


def _records(run: Path, mode: str) -> dict[int, dict]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return {r["step"]: r for r in map(json.loads, lines) if r["mode"] == mode}


def _params(tmp: Path, name: str, **runconfig) -> dict:
    data = tiny_params(tmp / "data" / "corpus.jsonl", tmp / name)
    data["optimizer"] = {**OPT, "max_gradient_norm": 0.5}
    data["runconfig"].update(max_steps=STEPS, checkpoint_steps=2, log_steps=1, **runconfig)
    return data


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A straight run of STEPS steps; one stopped halfway and resumed; one whose first half
    ran with the transform before hunt 72 (optax.adamw, every leaf decayed)."""
    tmp = tmp_path_factory.mktemp("zoo")
    write_corpus(tmp / "data")
    straight = run_on_preset(config_from_dict(_params(tmp, "straight")))
    run_on_preset(config_from_dict(_params(tmp, "split", num_steps=STEPS // 2)))
    resumed = run_on_preset(config_from_dict(_params(tmp, "split")))

    def old(cfg: OptimizerConfig, max_steps: int):
        lr = schedule(cfg, max_steps)
        return optax.adamw(lr, b1=cfg.beta1, b2=cfg.beta2, eps=cfg.eps, weight_decay=0.1)

    with pytest.MonkeyPatch.context() as mp:  # the Session imports it when it is built
        mp.setattr("wse_trainer.optimizer.base_transform", old)
        run_on_preset(config_from_dict(_params(tmp, "old", num_steps=STEPS // 2)))
    lines: list[str] = []
    old_resumed = run_on_preset(config_from_dict(_params(tmp, "old")), echo=lines.append)
    return tmp, straight, resumed, old_resumed, lines


def _hf_model(params: Path, tmp: Path):
    """The initial weights of a run of the params file `params` (`init_params` of its seed,
    as the Session draws them) as an HF model in float64, dropout off."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = load_config(params)
    from wse_trainer.session import model_config

    m = model_config(config)
    key = jax.random.fold_in(jax.random.key(config.runconfig.seed), 0)
    params_tree = wse_models.init_params(m, key)
    folder = tmp / f"hf_init_{params.parent.name}"
    wse_models.save_pretrained(wse_models.Transformer(m, params=params_tree), folder)
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder).double()
    hf.train(False)
    return torch, transformers, hf, config


def _rows(run: Path, inp) -> np.ndarray:
    from tokenizers import Tokenizer
    from wse_trainer.data import EOS, corpus_texts, pack

    tok = Tokenizer.from_file(str(run / "tokenizer.json"))
    ids = [e.ids for e in tok.encode_batch(corpus_texts(inp))]
    return pack(ids, inp.max_sequence_length, tok.token_to_id(EOS))


def test_a_run_trains_as_torch_adamw_with_hf_trainers_param_groups(runs):
    tmp, straight, _, _, _ = runs
    params = straight.model_dir / "train" / "params_train.yaml"
    torch, transformers, hf, config = _hf_model(params, tmp)
    from wse_trainer.data import BatchIterator

    inp = config.train_input
    batches = BatchIterator(_rows(straight.model_dir, inp), inp.batch_size, inp.shuffle_seed)
    decayed = set(transformers.Trainer.get_decay_parameter_names(None, hf))  # HF's own rule
    named = list(hf.named_parameters())
    groups = [
        {"params": [p for n, p in named if n in decayed], "weight_decay": 0.1},
        {"params": [p for n, p in named if n not in decayed], "weight_decay": 0.0},
    ]
    assert any("ln_f" in n for n, _ in named) and not any("ln_f" in n for n in decayed)
    opt = torch.optim.AdamW(groups, lr=1.0, betas=(0.9, 0.95), eps=1e-8)
    losses = []
    for step in range(1, STEPS + 1):
        b = torch.tensor(next(batches), dtype=torch.long)
        loss = hf(input_ids=b, labels=b).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(hf.parameters(), 0.5)
        for g in opt.param_groups:
            g["lr"] = _lr(step)
        opt.step()
        losses.append(loss.item())
    got = [straight.losses[s] for s in range(1, STEPS + 1)]
    np.testing.assert_allclose(got, losses, rtol=0, atol=5e-6)  # before: 3e-5 apart at step 3
    from safetensors.numpy import load_file

    exported = load_file(straight.model_dir / "hf" / "model.safetensors")
    mine = {n: p.detach().numpy() for n, p in hf.named_parameters()}
    for name in [n for n in exported if n in mine]:  # before: every ln gain 1e-3 too small
        np.testing.assert_allclose(exported[name], mine[name], rtol=0, atol=2e-5, err_msg=name)


def test_each_steps_learning_rate_is_recorded(runs):
    _, straight, _, _, _ = runs
    want = [_lr(s) for s in range(1, STEPS + 1)]
    records = _records(straight.model_dir, "train")
    np.testing.assert_allclose([records[s]["lr"] for s in range(1, STEPS + 1)], want, rtol=1e-6)
    tb = tensorboard_scalars(straight.model_dir / "train")  # TensorBoard's, float32
    assert [s for s, _ in tb["lr"]] == list(range(1, STEPS + 1))
    np.testing.assert_allclose([x for _, x in tb["lr"]], want, rtol=1e-6, atol=1e-12)
    for s, r in records.items():  # ModelZoo's local_samples_per_sec: the batch over the wall
        assert r["samples_per_s"] == pytest.approx(4 / r["wall_s"], rel=1e-12), s


def test_a_run_resumed_halfway_is_bit_identical(runs):
    _, straight, resumed, _, _ = runs
    assert resumed.losses == {s: straight.losses[s] for s in resumed.losses}
    a, b = _records(straight.model_dir, "train"), _records(resumed.model_dir, "train")
    keys = ("loss", "grad_norm", "lr")
    assert {s: [r[k] for k in keys] for s, r in a.items()} == {
        s: [r[k] for k in keys] for s, r in b.items()
    }
    from safetensors.numpy import load_file

    a = load_file(straight.model_dir / "hf" / "model.safetensors")
    b = load_file(resumed.model_dir / "hf" / "model.safetensors")
    assert all(np.array_equal(a[k], b[k]) for k in a)


def test_a_run_saved_before_the_mask_restores(runs):
    _, _, _, old_resumed, lines = runs
    assert f"resumed from checkpoint step {STEPS // 2}" in lines
    assert old_resumed.global_step == STEPS and set(old_resumed.losses) == {3, 4}


def _eval_params(tmp: Path) -> Path:
    data = tiny_params(write_corpus(tmp / "data"), tmp / "eval_run")
    data["eval_input"] = {**data["train_input"], "data_dir": str(write_corpus(tmp / "ev", 40))}
    data["runconfig"]["mode"] = "eval"
    (path := tmp / "params.yaml").write_text(yaml.safe_dump(data))
    return path


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    """`wse train --mode eval` of a folder with no checkpoint, eval_steps left out."""
    tmp = tmp_path_factory.mktemp("eval")
    code, out = invoke(ROOT, ["train", _eval_params(tmp)])
    assert code == 0, out[-3000:]
    return tmp, out.splitlines()


def test_eval_steps_left_out_evaluates_the_whole_split(evaluated):
    tmp, lines = evaluated
    run = tmp / "eval_run"
    torch, _, hf, config = _hf_model(run / "eval" / "params_eval.yaml", tmp)
    ev = config.eval_input
    rows, bsz = _rows(run, ev), ev.batch_size
    n = len(rows) // bsz
    with torch.no_grad():  # every batch of the split, in order
        batches = [torch.tensor(rows[i * bsz : (i + 1) * bsz], dtype=torch.long) for i in range(n)]
        want = [hf(input_ids=b, labels=b).loss.item() for b in batches]
    (record,) = _records(run, "eval").values()
    assert n > 4 and record["loss"] == pytest.approx(np.mean(want), abs=1e-5)  # before: 4
    held, total = n * bsz, len(rows)  # hunt 81: the sequences a last partial batch drops, said
    said = f"{held} of the eval split's {total} sequences; the last {total - held} make no whole "
    said += "batch and are not evaluated (ModelZoo's drop_last)"
    if held == total:
        said = f"the whole eval split, {total} sequences"
    assert f"evaluating {n} batches of 4: {said} (eval_input.eval_steps unset)" in lines
    priced = rf"predicted eval pass .* for {n} batch\(es\) of 4 x 32 tokens"
    assert re.search(priced, "\n".join(lines))  # the prediction prices the batches it runs
    saved = yaml.safe_load((run / "eval" / "params_eval.yaml").read_text())
    assert saved["eval_input"]["eval_steps"] is None  # as given: the split, whatever it holds
    again: list[str] = []  # a number given: that many, said against the split's
    result = run_on_preset(load_config(_eval_params(tmp), ["eval_input.eval_steps=2"]),
                           echo=again.append)  # fmt: skip
    said = f"2 of {n} batches of 4: 8 of the eval split's {total} sequences"
    assert f"evaluating {said} (eval_input.eval_steps=2)" in again
    assert result.eval_loss == pytest.approx(np.mean(want[:2]), abs=1e-5)


def test_an_eval_of_random_weights_says_so_and_no_rates(evaluated):
    tmp, lines = evaluated
    assert "No checkpoint was provided. Using randomly initialized model parameters." in lines
    (summary,) = [ln for ln in lines if ln.startswith("global step 0; ")]
    assert summary == (  # before: "global step 0; 0 tokens/s; stalled 0.0% of the time; ..."
        "global step 0; no step trained; evaluated randomly initialised weights (no checkpoint "
        f"found); model_dir {tmp / 'eval_run'}"
    )


def _zoo_file(tmp: Path, run: dict, opt: dict) -> Path:
    data = {"runconfig": {"max_steps": 6, **run}, "optimizer": {"optimizer_type": "AdamW", **opt}}
    (path := tmp / "zoo.yaml").write_text(yaml.safe_dump(data))
    return path


def test_modelzoos_eval_steps_and_betas_are_read_as_ours(tmp_path):
    zoo = load_config(_zoo_file(tmp_path, {"eval_steps": 3}, {"betas": [0.8, 0.95]}))
    ours = config_from_dict({"runconfig": {"max_steps": 6}, "eval_input": {"eval_steps": 3},
                             "optimizer": {"optimizer_type": "adamw", "beta1": 0.8,
                                           "beta2": 0.95}})  # fmt: skip
    assert zoo == ours  # before: "unknown key runconfig.eval_steps (did you mean 'max_steps'?)"
    overrides = ["runconfig.eval_steps=3", "optimizer.betas=[0.8, 0.95]"]
    assert load_config(_zoo_file(tmp_path, {}, {}), overrides) == ours
    assert config_from_dict(ours.to_dict()) == ours  # saved in our spelling, read back


@pytest.mark.parametrize(
    ("run", "opt", "message"),
    [({"eval_steps": 3}, {}, None),
     ({}, {"betas": [0.9, 0.95], "beta2": 0.99}, "optimizer.betas gives optimizer.beta2 0.95, "
      "and optimizer.beta2 is 0.99; give it once"),
     ({}, {"betas": 0.9}, "optimizer.betas must be a list [beta1, beta2], got 0.9"),
     ({}, {"betas": [0.9, 0.95, 0.99]}, "optimizer.betas must be a list [beta1, beta2], got "
      "[0.9, 0.95, 0.99]")],
)  # fmt: skip
def test_modelzoos_keys_given_twice_differently_are_refused(tmp_path, run, opt, message):
    path = _zoo_file(tmp_path, run, opt)
    if message is None:  # the same value both ways is one setting
        assert load_config(path, ["eval_input.eval_steps=3"]).eval_input.eval_steps == 3
        # an override replaces the file's value in either spelling (session 73: it was
        # refused as the same setting given twice)
        assert load_config(path, ["eval_input.eval_steps=4"]).eval_input.eval_steps == 4
        return
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert str(e.value) == message and "\n" not in str(e.value)
