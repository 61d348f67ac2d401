"""Hunt 80 (holes 2, 3, 4, 5, 7, 12): ModelZoo's params-file keys and their lines.

2: `eval_input.shuffle: false` (every ModelZoo eval_input) was refused as "batches are always
   shuffled", though eval batches never are; `train_input.shuffle: true`, what runs, refused.
3: the data processors' `vocab_size` was "did you mean 'batch_size'?".
4: a ModelZoo Llama file: `extra_attention_params.num_kv_groups` refused bare; with no preset,
   six refusals "use a llama preset", `model.arch: llama` named nowhere; with it, the run
   called the llama "tiny-gpt2".
5: "did you mean" of another meaning (max_gradient_value -> max_gradient_norm, grad_accum_steps
   -> decay_steps, ...); correct_bias: true, log_summaries, precision_opt_level and the
   initializers refused with no hint.
7: `train_input.eval_steps` and `eval_input.shuffle_seed` accepted and read by nothing.
12: `--mode eval_all` -> "did you mean 'eval'?"; then refused, "run --mode eval once per
    step": now it evaluates each checkpoint in step order, as those runs do.

Oracles: ModelZoo's own files and code as its repository has them (params_gpt3_xl.yaml,
params_mistral_7B.yaml, Cerebras_GPT/111m.yaml; MultiQueryAttention's key/value projection
of num_kv_groups x head_dim; create_initializer's defaults; run_cstorch_flow's
clip_grad_value_), transformers' LlamaForCausalLM for the parameter count, torch's
clip_grad_value_ and AdamW for the clipped steps, NumPy statistics of the initial draw;
for eval_all, one `--mode eval --checkpoint-path` run per step.
"""

from __future__ import annotations

import dataclasses
import math
import shutil
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import typer
import wse_models
import yaml
from wse_cli.app import app
from wse_cli.testing import invoke, refused_in_one_line
from wse_trainer import evaluation
from wse_trainer.config import ConfigError, OptimizerConfig, load_config
from wse_trainer.config_check import check_config, config_notes
from wse_trainer.data import BatchIterator
from wse_trainer.metrics import eval_line, read_metrics
from wse_trainer.reference import loss_fn
from wse_trainer.session import model_config
from wse_trainer.testing import (
    max_diff,
    run_on_preset,
    stream_batches,
    stream_model,
    streamed_run,
    tensorboard_scalars,
    tiny_config,
    tiny_params,
)

ROOT = typer.main.get_command(app)


def _refused(overrides, base="tiny") -> str:
    with pytest.raises(ConfigError) as e:
        config = load_config(base, overrides)
        check_config(config)
        model_config(config)
    return str(e.value)


def _read_as_left_out(tmp_path, section: str, key: str, value: str) -> list[str]:
    """The run with `section.key: value` in a file is the one without the key (its config; a
    model key's: its model); its notes naming the key."""
    path = tmp_path / "p.yaml"
    sections = {section: f"  {key}: {value}\n", "runconfig": "  mode: train_and_eval\n"}
    if section == "runconfig":
        sections["runconfig"] += f"  {key}: {value}\n"
    path.write_text("".join(f"{name}:\n{body}" for name, body in sections.items()))
    config, without = load_config(path), load_config(path, [f"{section}.{key}=null"])
    if section == "model":
        assert model_config(config) == model_config(without)
    else:
        assert config == without
    return [n for n in config_notes(config) if f"{section}.{key}" in n]


# 2: shuffle ---------------------------------------------------------------------------------


def test_what_runs_training_batches_shuffled_eval_batches_in_order(monkeypatch):
    # the claims the lines make: training batches a seeded permutation of the rows, not file
    # order; an evaluation its split's first batches in order (evaluation.evaluate)
    rows = np.arange(40, dtype=np.int32).reshape(20, 2)
    first = next(BatchIterator(rows, 4, seed=0))
    assert not np.array_equal(first, rows[:4]) and set(first[:, 0]) <= set(rows[:, 0])
    seen = []
    monkeypatch.setattr(
        evaluation, "_eval_fn", lambda model: lambda p, b, seg: seen.append(b) or (0.0, 0)
    )
    s = types.SimpleNamespace(
        config=types.SimpleNamespace(eval_input=types.SimpleNamespace(
            batch_size=4, eval_steps=3, packing=False)),
        eval_rows=rows, model=None, segments=lambda b, packing: None,
        trainer=types.SimpleNamespace(memx=types.SimpleNamespace(params_tree=lambda: None)),
    )  # fmt: skip
    evaluation.evaluate(s)
    assert [b.tolist() for b in seen] == [rows[i * 4 : i * 4 + 4].tolist() for i in range(3)]


@pytest.mark.parametrize(
    ("section", "value"),
    [("train_input", "true"), ("eval_input", "false"), ("train_input", "null"),
     ("eval_input", "null")],
)  # fmt: skip
def test_shuffle_at_what_runs_is_read_with_a_note(tmp_path, section, value):
    notes = _read_as_left_out(tmp_path, section, "shuffle", value)
    assert len(notes) == 1
    assert "seeded shuffle" in notes[0] and "eval split's order" in notes[0]


@pytest.mark.parametrize(
    ("override", "says"),
    [("train_input.shuffle=false", "train_input.shuffle false asks for the training rows in "
      "file order; a run here always draws its batches in a seeded shuffle"),
     ("eval_input.shuffle=true", "eval_input.shuffle true asks for the eval batches in a "
      "shuffled order; each evaluation here reads the eval split's first"),
     ("eval_input.shuffle=2", "eval_input.shuffle must be true or false, got 2")],
)  # fmt: skip
def test_shuffle_at_another_value_is_refused_with_what_runs(override, says):
    line = _refused([override])
    assert line.startswith(says) and "always shuffled" not in line


# 3: vocab_size ------------------------------------------------------------------------------

# ModelZoo's params_gpt3_xl.yaml gives the data processors and the model 50257
GPT3_XL_VOCAB = """\
train_input:
    vocab_size: 50257
eval_input:
    vocab_size: 50257
model:
    vocab_size: 50257
"""


def test_a_data_processors_vocab_size_equal_to_the_models_is_read(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(GPT3_XL_VOCAB)
    config = load_config(path)
    assert config == load_config(
        path, ["train_input.vocab_size=null", "eval_input.vocab_size=null"]
    )
    (note,) = [n for n in config_notes(config) if "vocab_size" in n]
    assert "train_input.vocab_size, eval_input.vocab_size" in note and "model.vocab_size" in note


def test_a_vocab_size_other_than_the_models_is_refused_naming_it(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(GPT3_XL_VOCAB)
    with pytest.raises(ConfigError) as e:
        load_config(path, ["model.vocab_size=512"])
    line = str(e.value)
    assert (
        "train_input.vocab_size 50257 is not the model's vocabulary (model.vocab_size 512)" in line
    )
    assert "eval_input.vocab_size 50257" in line and "did you mean" not in line
    # no model.vocab_size in the file: the preset's is the model's
    preset = wse_models.preset_config("tiny-gpt2").vocab_size
    line = _refused([f"train_input.vocab_size={preset + 1}", "model.vocab_size=null"])
    assert f"(model.vocab_size {preset}, preset tiny-gpt2's)" in line
    assert load_config("tiny", ["model.vocab_size=null", f"eval_input.vocab_size={preset}"])


# 4: a ModelZoo Llama file -------------------------------------------------------------------

# The model section of ModelZoo's params_mistral_7B.yaml / params_llama2_70b.yaml (1.x form),
# key for key, at tiny sizes
LLAMA = """\
model:
    vocab_size: 512
    hidden_size: 64
    position_embedding_type: "rotary"
    rotary_dim: 16
    share_embedding_weights: False
    max_position_embeddings: 64
    embedding_dropout_rate: 0.0
    num_hidden_layers: 2
    dropout_rate: 0.0
    layer_norm_epsilon: 1.0e-5
    norm_type: "rmsnorm"
    num_heads: 4
    attention_type: "scaled_dot_product"
    attention_module: "multiquery_attention"
    extra_attention_params:
        num_kv_groups: 2
    attention_dropout_rate: 0.0
    use_projection_bias_in_attention: False
    use_ffn_bias_in_attention: False
    filter_size: 128
    nonlinearity: "swiglu"
    use_ffn_bias: False
    use_bias_in_output: False
"""
LLAMA_KEYS = ["position_embedding_type", "rotary_dim", "norm_type", "attention_module",
              "use_projection_bias_in_attention", "use_ffn_bias_in_attention", "nonlinearity",
              "use_ffn_bias"]  # fmt: skip


def _llama(tmp_path, *overrides):
    path = tmp_path / "llama.yaml"
    path.write_text(LLAMA)
    return model_config(load_config(path, ["model.arch=llama", *overrides]))


def test_a_llama_file_with_no_preset_is_one_line_naming_model_arch_llama(tmp_path):
    path = tmp_path / "llama.yaml"
    path.write_text(LLAMA)
    line = refused_in_one_line(ROOT, ["train", path, "--validate-only"], "model.arch: llama")
    assert line.count("model.arch: llama") == 1 and "settings of the params file" not in line
    assert all(f"model.{k}" in line for k in LLAMA_KEYS), line
    assert "this model is gpt2 (preset tiny-gpt2's arch)" in line


def test_num_kv_groups_is_the_key_value_heads_of_modelzoos_multiquery_attention(tmp_path):
    model = _llama(tmp_path)
    # ModelZoo's MultiQueryAttention projects keys and values to num_kv_groups x head_dim
    params = jax.eval_shape(lambda: wse_models.init_params(model, jax.random.key(0)))
    widths = {k: v.shape[-1] for k, v in params["layers"]["attn"].items() if k in ("wk", "wv")}
    assert widths == {"wk": 2 * 16, "wv": 2 * 16}
    transformers = pytest.importorskip("transformers")
    hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False))  # fmt: skip
    assert model.num_params() == sum(p.numel() for p in hf.parameters())
    assert model.name.startswith("llama") and "tiny-gpt2's other settings" in model.name


def test_the_run_names_the_llama_by_its_arch(tmp_path):
    path = tmp_path / "llama.yaml"
    path.write_text(LLAMA)
    # hunt 81: the excerpt gives no step count, which a training run needs (ModelZoo's too)
    given = ["model.arch=llama", "train_input.max_sequence_length=64",
             "eval_input.max_sequence_length=64", "runconfig.max_steps=2"]  # fmt: skip
    code, out = invoke(ROOT, ["train", path, *given, "--validate-only", "-o", tmp_path / "r"])
    assert code == 0, out[-2000:]
    assert "model llama (preset tiny-gpt2's other settings):" in " ".join(out.split())
    assert "model tiny-gpt2" not in out


@pytest.mark.parametrize(
    ("overrides", "kv"),
    [([], 2), (["model.extra_attention_params={num_kv_groups: 4}"], 4),
     (["model.extra_attention_params=null"], 1),  # ModelZoo's default num_kv_groups
     (["model.attention_module=aiayn_attention", "model.extra_attention_params=null"], 4),
     (["model.attention_module=null", "model.extra_attention_params=null"], 4),
     # a Llama-2 file with no attention_module: ModelZoo's aiayn_attention (before: tiny-gpt2's
     # 4 key/value heads for 8 heads)
     (["model.attention_module=null", "model.extra_attention_params=null", "model.num_heads=8",
       "model.rotary_dim=8"], 8)],
)  # fmt: skip
def test_the_attention_keys_give_modelzoos_key_value_heads(tmp_path, overrides, kv):
    assert _llama(tmp_path, *overrides).n_kv_heads == kv


def test_a_llama_2_file_with_no_attention_module_has_a_key_value_head_a_head(tmp_path):
    # ModelZoo's params_llama2_7b.yaml names no attention_module: its aiayn_attention (before:
    # tiny-gpt2's 4 key/value heads for 8 heads, grouped-query attention unasked)
    text = "".join(line + "\n" for line in LLAMA.splitlines()
                   if "attention_module" not in line and "num_kv_groups" not in line
                   and "extra_attention_params" not in line)  # fmt: skip
    path = tmp_path / "llama2.yaml"
    path.write_text(text.replace("num_heads: 4", "num_heads: 8").replace("rotary_dim: 16", ""))
    model = model_config(load_config(path, ["model.arch=llama"]))
    assert (model.n_heads, model.n_kv_heads) == (8, 8)


@pytest.mark.parametrize(
    ("overrides", "says"),
    [(["model.extra_attention_params={num_kv_groups: 3}"], "model.extra_attention_params."
      "num_kv_groups 3 does not divide the model's 4 attention heads"),
     (["model.attention_module=aiayn_attention"], "model.extra_attention_params is read by "
      "attention_module multiquery_attention only"),
     (["model.attention_module=null"], "(ModelZoo's aiayn_attention, its default, takes none)"),
     (["model.attention_module=flash"], "model.attention_module 'flash' has no equivalent"),
     (["model.extra_attention_params={num_kv_groups: 2, window: 8}"],
      "model.extra_attention_params.window has no equivalent here"),
     (["model.n_kv_heads=4"], "give model.n_kv_heads 2, and model.n_kv_heads is 4; give it once"),
     (["model.rotary_dim=8"], "model.rotary_dim 8: rotary position embeddings here turn each "
      "head's whole 16 dims")],
)  # fmt: skip
def test_attention_keys_that_cannot_run_say_why(tmp_path, overrides, says):
    with pytest.raises(ConfigError) as e:
        _llama(tmp_path, *overrides)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_grouped_query_attention_on_a_gpt2_names_model_arch_llama():
    line = _refused(["model.attention_module=multiquery_attention",
                     "model.extra_attention_params={num_kv_groups: 2}"])  # fmt: skip
    assert load_config("tiny").model["n_kv_heads"] == 4  # the shipped file's: gpt2 first
    assert "grouped-query attention, the llama arch's here" in line
    assert "give model.arch: llama (or a llama preset) to run it" in line
    assert wse_models.preset_config("tiny-gpt2").n_heads == 4
    given = ["model.attention_module=multiquery_attention",
             "model.extra_attention_params={num_kv_groups: 4}"]  # fmt: skip
    model = model_config(load_config("tiny", given))
    assert model.n_kv_heads == model.n_heads == 4


# 5: keys of another meaning and keys that change nothing ------------------------------------


def test_clipping_by_value_is_torchs_clip_grad_value_before_adamw():
    torch = pytest.importorskip("torch")
    model = stream_model()
    params = wse_models.init_params(model, jax.random.key(1))
    batches = stream_batches(model)

    def grads(p, batch):
        return jax.tree.leaves(jax.grad(lambda q: loss_fn(model, q, jnp.asarray(batch)))(p))

    first = np.concatenate([np.abs(np.asarray(g)).ravel() for g in grads(params, batches[0])])
    value = float(np.quantile(first, 0.5))  # half of the first gradient's elements clipped
    opt = OptimizerConfig(learning_rate=1e-3, lr_schedule="constant", eps=1e-6, weight_decay=0.0,
                          max_gradient_value=value, eps_placement="torch")  # fmt: skip
    ours, _ = streamed_run(model, opt)
    # torch, as ModelZoo's optimizer_step_with_summaries: clip_grad_value_, then the step (eps
    # where torch adds it: `eps_placement` above)
    leaves, tree = jax.tree.flatten(params)
    tensors = [torch.tensor(np.asarray(x), requires_grad=True) for x in leaves]
    adamw = torch.optim.AdamW(tensors, lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0)
    for batch in batches:
        now = jax.tree.unflatten(tree, [jnp.asarray(t.detach().numpy()) for t in tensors])
        for t, g in zip(tensors, grads(now, batch), strict=True):
            t.grad = torch.tensor(np.asarray(g))
        torch.nn.utils.clip_grad_value_(tensors, value)
        adamw.step()
    theirs = jax.tree.unflatten(tree, [jnp.asarray(t.detach().numpy()) for t in tensors])
    # 1e-5: testing.py's bound for three Adam steps at eps 1e-6 (ulp noise amplified by lr/eps)
    assert max_diff(ours, theirs) < 1e-5
    plain, _ = streamed_run(model, dataclasses.replace(opt, max_gradient_value=None))
    assert max_diff(plain, theirs) > 100 * 1e-5  # the clip changed the run


@pytest.mark.parametrize(
    ("overrides", "says"),
    [(["optimizer.max_gradient_value=0"], "optimizer.max_gradient_value must be positive"),
     (["optimizer.max_gradient_value=1.0", "optimizer.max_gradient_norm=1.0"],
      "both clip the gradient (by its global norm; each element by value), and ModelZoo "
      "takes one")],
)  # fmt: skip
def test_clipping_by_value_is_checked_as_modelzoo_checks_it(overrides, says):
    assert says in _refused(overrides)


# hunt 80's list: (key=value, the key of another meaning the line offered)
OTHER_MEANING = [
    ("optimizer.max_gradient_value=1.0", "max_gradient_norm"),
    ("optimizer.grad_accum_steps=2", "decay_steps"),
    ("optimizer.adjust_learning_rate={decoder_kernel: 0.5}", "did you mean 'learning_rate'"),
    ("model.use_position_embedding=false", "tie_embeddings"),
    ("model.embeddings_scale=2.0", "tie_embeddings"),
    ("runconfig.log_summaries=true", "log_steps"),
    ("train_input.vocab_size=1", "batch_size"),
]


@pytest.mark.parametrize(("override", "wrong"), OTHER_MEANING)
def test_no_key_of_another_meaning_is_offered(override, wrong):
    try:
        config = load_config("tiny", [override])
        model_config(config)
    except ConfigError as e:
        said = str(e).split("; valid keys: ")[0]
        assert wrong not in said and "did you mean" not in said, said


def test_a_typo_of_ours_is_still_offered():
    assert "(did you mean 'learning_rate'?)" in _refused(["optimizer.lerning_rate=0.1"])
    assert "(did you mean 'max_seq_len'?)" in _refused(["model.seq_len=64"])


@pytest.mark.parametrize(
    ("override", "says"),
    [("optimizer.grad_accum_steps=2", "train_input.micro_batch_size"),
     ("optimizer.correct_bias=false", "turns off Adam's bias correction"),
     ("optimizer.adjust_learning_rate={decoder_kernel: 0.5}", "every weight here trains at "
      "optimizer.learning_rate's schedule"),
     ("runconfig.precision_opt_level=2", "lower-precision kernels"),
     ("runconfig.precision_opt_level=3", "must be 0, 1 or 2"),
     ("runconfig.log_summaries=true", "optimizer.log_summaries"),
     ("model.use_position_embedding=false", "every model here has positions"),
     ("model.embeddings_scale=2.0", "the embeddings are not scaled here")],
)  # fmt: skip
def test_values_that_would_change_the_run_say_what_runs(override, says):
    line = _refused([override])
    assert says in line and "\n" not in line


@pytest.mark.parametrize(
    ("section", "key", "value", "note"),
    [("optimizer", "correct_bias", "true", "adam and adamw here always apply"),
     ("optimizer", "grad_accum_steps", "1", "train_input.micro_batch_size"),
     ("optimizer", "log_summaries", "true", "which change no step"),
     ("optimizer", "adjust_learning_rate", "{decoder_kernel: 1.0}", "at 1 (none)"),
     ("runconfig", "save_losses", "true", "either way"),
     ("runconfig", "precision_opt_level", "1", "at levels 0 and 1 alike"),
     ("model", "precision_opt_level", "0", "at levels 0 and 1 alike"),
     ("model", "use_position_embedding", "true", None),
     ("model", "embeddings_scale", "1.0", None)],
)  # fmt: skip
def test_keys_that_change_nothing_are_read(tmp_path, section, key, value, note):
    notes = _read_as_left_out(tmp_path, section, key, value)
    assert (note is None and not notes) or (len(notes) == 1 and note in notes[0]), notes


# ModelZoo's Cerebras_GPT/111m.yaml initializers (10 layers: 0.02 / sqrt(20) for the outputs)
INITIALIZERS = """\
model:
    num_hidden_layers: 10
    embedding_initializer: {mean: 0.0, name: truncated_normal, std: 0.02, a: -0.04, b: 0.04}
    initializer: {mean: 0.0, name: truncated_normal, std: 0.02, a: -0.04, b: 0.04}
    output_layer_initializer: {mean: 0.0, name: truncated_normal, std: 0.004472135954999579,
        a: -0.008944271909999158, b: 0.008944271909999158}
"""


def test_modelzoos_default_initializers_are_read_with_what_is_drawn(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(INITIALIZERS)
    config = load_config(path)
    without = ["model.embedding_initializer=null", "model.initializer=null",
               "model.output_layer_initializer=null"]  # fmt: skip
    assert model_config(config) == model_config(load_config(path, without))
    (note,) = [n for n in config_notes(config) if "initializer" in n]
    assert "model.embedding_initializer, model.initializer, model.output_layer_initializer" in note
    # what the note says is drawn: untruncated N(0, 0.02), outputs N(0, 0.02 / sqrt(2 L))
    model = stream_model(n_layers=10, d_model=256, d_ff=1024)
    params = wse_models.init_params(model, jax.random.key(0))
    for name, std in (("w_up", 0.02), ("w_down", 0.02 / math.sqrt(20))):
        w = np.asarray(params["layers"]["mlp"][name], np.float64).ravel()
        # the sample std within 4 standard errors (n = 2.6e6: 0.2%), and 4.55% past 2 std as
        # an untruncated normal has (a truncated one none)
        assert abs(w.std() / std - 1) < 4 / math.sqrt(2 * w.size)
        assert abs(np.mean(np.abs(w) > 2 * std) - 0.0455) < 0.002


@pytest.mark.parametrize(
    ("override", "says"),
    [("model.initializer_range=0.01", "model.initializer_range 0.01 scales ModelZoo's"),
     ("model.embedding_initializer={name: xavier_uniform}", "a run here draws the embeddings "
      "from N(0, 0.02), untruncated"),
     ("model.output_layer_initializer={name: normal, std: 0.02}", "N(0, 0.01)"),  # tiny: 2 layers
     ("model.initializer={name: normal, std: 0.02}", "model.initializer without "
      "model.output_layer_initializer draws the residual output projections from it too")],
)  # fmt: skip
def test_another_initial_draw_is_refused(override, says):
    assert wse_models.preset_config("tiny-gpt2").n_layers == 2
    line = _refused([override, "model.n_layers=null"])
    assert says in line and "\n" not in line


# 7: settings read by nothing ----------------------------------------------------------------


@pytest.mark.parametrize("value", [-5, 3])
def test_train_input_eval_steps_is_refused_naming_eval_input_eval_steps(value):
    line = _refused([f"train_input.eval_steps={value}"])
    assert line.startswith(f"train_input.eval_steps={value} is read by nothing")
    assert "eval_input.eval_steps (ModelZoo's runconfig.eval_steps)" in line
    config = load_config("tiny")  # from Python too
    train = dataclasses.replace(config.train_input, eval_steps=value)
    with pytest.raises(ConfigError, match="is read by nothing"):
        check_config(dataclasses.replace(config, train_input=train))


def test_an_eval_shuffle_seed_is_said_to_order_nothing():
    config = load_config("tiny", ["eval_input.shuffle_seed=99", "runconfig.mode=train_and_eval"])
    (note,) = [n for n in config_notes(config) if "shuffle_seed" in n]
    assert note.startswith("note: eval_input.shuffle_seed=99 orders nothing")
    quiet = [load_config("tiny", ["eval_input.shuffle_seed=99", "runconfig.mode=train"]),
             load_config("tiny", ["runconfig.mode=train_and_eval"])]  # fmt: skip
    assert not [n for c in quiet for n in config_notes(c) if "shuffle_seed" in n]
    # a seed no generator reads is no seed NumPy refuses: said, not refused (train's is read)
    check_config(load_config("tiny", ["eval_input.shuffle_seed=-1"]))
    assert "train_input.shuffle_seed must be >= 0" in _refused(["train_input.shuffle_seed=-1"])


# 12: eval_all -------------------------------------------------------------------------------


def _eval_all_base(tmp_path):
    """A tiny run saving checkpoints at steps 2 and 4 (train mode: no eval on record)."""
    where = tmp_path / "base"
    config = tiny_config(where, "runconfig.max_steps=4", "runconfig.checkpoint_steps=2")
    run_on_preset(config)
    return where


def _evals(model_dir):
    return [m for m in read_metrics(model_dir) if m["mode"] == "eval"]


def test_mode_eval_all_evaluates_each_checkpoint_as_mode_eval_does(tmp_path):
    base = _eval_all_base(tmp_path)
    assert sorted(p.name for p in (base / "model_dir" / "checkpoints").iterdir()) == ["2", "4"]
    one, every = (shutil.copytree(base, tmp_path / n, symlinks=True) for n in ("one", "all"))
    for step in (2, 4):  # the oracle: one --mode eval run per checkpoint, in step order
        path = one / "model_dir" / "checkpoints" / str(step)
        run_on_preset(tiny_config(one, "runconfig.mode=eval", f"runconfig.checkpoint_path={path}"))
    params = tmp_path / "params.yaml"
    params.write_text(
        yaml.safe_dump(tiny_params(every / "data" / "corpus.jsonl", every / "model_dir"))
    )
    args = ["train", params, "--mode", "eval_all", "-o", every / "model_dir"]
    code, out = invoke(ROOT, args)
    assert code == 0, out[-2000:]
    oracle = _evals(one / "model_dir")
    assert [m["step"] for m in oracle] == [2, 4]
    assert _evals(every / "model_dir") == oracle  # the same records, in step order
    shown = tensorboard_scalars(every / "model_dir" / "eval")
    assert shown == tensorboard_scalars(one / "model_dir" / "eval")
    assert [s for s, _ in shown["accuracy"]] == [2, 4]
    lines = [eval_line(m["step"], m["loss"], m["accuracy"]) for m in oracle]
    said = out.splitlines()
    assert [x for x in said if x.startswith("| Eval")] == lines  # one line a step
    assert said[-1] == f"evaluated 2 checkpoints (steps 2, 4); model_dir {every / 'model_dir'}"
    log = (every / "model_dir" / "run.log").read_text()
    assert all(line in log for line in lines)
    again, _ = invoke(ROOT, args)  # a second eval_all replaces each record, never doubles it
    assert again == 0 and _evals(every / "model_dir") == oracle


def test_mode_eval_all_refuses_a_folder_with_no_checkpoint_in_one_line(tmp_path):
    run = tmp_path / "run"
    line = refused_in_one_line(
        ROOT, ["train", "tiny", "--mode", "eval_all", "-o", run], "no committed checkpoint"
    )
    assert f"{str(run / 'checkpoints')!r}" in line and "did you mean" not in line
    refused_in_one_line(
        ROOT, ["train", "tiny", "--mode", "eval_all", "--validate-only", "-o", run],
        "no committed checkpoint",
    )  # fmt: skip
    step = tmp_path / "other" / "checkpoints" / "2"  # a step folder: mode eval's to evaluate
    step.mkdir(parents=True)
    refused_in_one_line(
        ROOT,
        ["train", "tiny", "--mode", "eval_all", "-o", run, "--checkpoint-path", step],
        "names one: use --mode eval",
    )
