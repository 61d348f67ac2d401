"""Hunt 69's holes in `wse train`'s configs and data as a ModelZoo user writes them. Before:
- `adam` ignored weight_decay and `sgd` ignored momentum (and beta1/beta2), exit 0 unsaid;
- ModelZoo's `AdamW` / `SGD` were refused, `AdamW` with "did you mean 'adam'?";
- a folder of ModelZoo HDF5 shards trained on its README.md, the .h5 files skipped unsaid;
- `max_corpus_bytes` did not bound what was read of .jsonl (datasets read and cached it
  whole), and a wrong text_key was found only after that, --validate-only passing it;
- 100,000 small text files took minutes to load (datasets built a dataset of each);
- a separate eval_input.data_dir was cut to its held-out twentieth, unsaid;
- `['dir', 'dir/']` read every document twice;
- `runconfig.model_dir: ''` trained into the current folder, `checkpoint_path: ''` was unset;
- decay_steps <= warmup_steps made a one-step decay; a warm-up as long as the run was unsaid;
- ModelZoo's `learning_rate:` scheduler list was refused with a repr of its dicts;
- a bad jsonl record was named by a 0-based row over the split; `{"text": 0}` was skipped.
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
import yaml
from wse_trainer.config import ConfigError, InputConfig, OptimizerConfig, load_config
from wse_trainer.config_check import check_config, config_notes
from wse_trainer.data import corpus_texts
from wse_trainer.data_files import check_data_dir, data_files
from wse_trainer.optimizer import base_transform, schedule
from wse_trainer.run_folder import check_resume
from wse_trainer.session import model_config
from wse_trainer.testing import updated

P0 = np.array([1.0, -2.0, 0.5])
GRADS = [np.array([0.1, -0.2, 0.3]), np.array([-0.3, 0.1, 0.2])]
WORDS = "the quick brown fox jumps over lazy dog alpha beta gamma delta wafer stream".split()


def _params(tmp_path: Path, optimizer: dict, **sections) -> Path:
    """A small params file as a ModelZoo user writes it (its optimizer section as given)."""
    data = {"optimizer": {"learning_rate": 0.1, "lr_schedule": "constant", **optimizer},
            "runconfig": {"max_steps": 10}, **sections}  # fmt: skip
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _steps(opt: OptimizerConfig) -> np.ndarray:
    """The parameters after two updates of `opt`'s transform from P0 with GRADS."""
    return updated(opt, P0, GRADS)


def _adam_np(wd: float, decoupled: bool, lr=0.1, b1=0.9, b2=0.999, eps=1e-6) -> np.ndarray:
    """torch.optim.Adam (wd: L2 added to the gradient) or AdamW (decoupled), by hand."""
    p, m, v = P0.copy(), 0.0, 0.0
    for t, g in enumerate(GRADS, 1):
        g = g if decoupled else g + wd * p
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        step = (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps)
        p = p - lr * (step + (wd * p if decoupled else 0))
    return p


def _sgd_np(wd: float, mu: float, nesterov: bool, lr=0.1) -> np.ndarray:
    """torch.optim.SGD (dampening 0) by hand: the buffer starts at the first gradient."""
    p, buf = P0.copy(), None
    for g in GRADS:
        g = g + wd * p
        buf = g if buf is None else mu * buf + g
        p = p - lr * ((g + mu * buf) if nesterov else buf)
    return p


@pytest.mark.parametrize(
    ("given", "oracle"),
    [
        # torch's eps placement (hunt 82: ModelZoo's AdamBase form runs unless asked for it)
        ({"optimizer_type": "Adam", "weight_decay": 0.5, "eps_placement": "torch"},
         lambda: _adam_np(0.5, False)),
        ({"optimizer_type": "AdamW", "weight_decay": 0.5, "eps_placement": "torch"},
         lambda: _adam_np(0.5, True)),
        ({"optimizer_type": "SGD"}, lambda: _sgd_np(0.0, 0.0, False)),
        ({"optimizer_type": "SGD", "momentum": 0.9}, lambda: _sgd_np(0.0, 0.9, False)),
        ({"optimizer_type": "sgd", "momentum": 0.9, "nesterov": True, "weight_decay": 0.1},
         lambda: _sgd_np(0.1, 0.9, True)),
        ({"optimizer_type": "momentum", "weight_decay": 0.1}, lambda: _sgd_np(0.1, 0.9, False)),
    ],
)  # fmt: skip
def test_each_optimizer_setting_moves_the_update_as_torch_does(tmp_path, given, oracle):
    config = load_config(_params(tmp_path, given))
    check_config(config)
    # float32 arithmetic against float64 by hand, two steps of size ~lr: a few ulps of 1
    np.testing.assert_allclose(_steps(config.optimizer), oracle(), rtol=0, atol=2e-6)


def test_weight_decay_and_plain_sgd_keep_the_saved_optimizer_states_shape():
    """A run saved before hunt 69 restores: L2 adds no state, momentum 0 no trace."""
    p = {"w": jnp.ones(3)}
    for kind, before in (("adam", optax.adam), ("sgd", optax.sgd)):  # what was built then
        cfg = OptimizerConfig(optimizer_type=kind, weight_decay=0.1)
        saved = before(schedule(cfg, 10)).init(p)
        assert jax.tree.structure(base_transform(cfg, 10).init(p)) == jax.tree.structure(saved)
    assert OptimizerConfig(optimizer_type="sgd").momentum == 0.0  # ModelZoo's SGD default
    assert OptimizerConfig().momentum == 0.9  # as adamw runs saved it (unread)


@pytest.mark.parametrize(
    ("spelled", "field", "value"),
    [("AdamW", "optimizer_type", "adamw"), ("SGD", "optimizer_type", "sgd"),
     ("CosineDecay", "lr_schedule", "cosine"), ("LinearLR", "lr_schedule", "linear")],
)  # fmt: skip
def test_modelzoo_spellings_are_taken(tmp_path, spelled, field, value):
    config = load_config(_params(tmp_path, {field: spelled}))
    check_config(config)
    assert getattr(config.optimizer, field) == value


@pytest.mark.parametrize(
    ("given", "line"),
    [
        ({"optimizer_type": "Adam W"}, "optimizer.optimizer_type='Adam W' is not valid (did you "
         "mean 'adamw'?); choose one of: adamw, adam, sgd, momentum"),
        ({"optimizer_type": "sgd", "beta1": 0.9}, "optimizer.beta1=0.9 has no effect with "
         "optimizer_type sgd, which reads momentum and nesterov; drop it (optimizer.beta1=null), "
         "or use optimizer_type adamw or adam"),
        ({"optimizer_type": "SGD", "beta1": 0.5, "beta2": 0.99}, "optimizer.beta1=0.5 and "
         "optimizer.beta2=0.99 have no effect with optimizer_type sgd, which reads momentum and "
         "nesterov; drop them (optimizer.beta1=null optimizer.beta2=null), or use optimizer_type "
         "adamw or adam"),
        ({"optimizer_type": "adamw", "momentum": 0.9}, "optimizer.momentum=0.9 has no effect "
         "with optimizer_type adamw, which reads beta1, beta2, eps and eps_placement; drop it "
         "(optimizer.momentum=null), or use optimizer_type sgd or momentum"),
        ({"optimizer_type": "sgd", "nesterov": True}, "optimizer.nesterov needs "
         "optimizer.momentum above 0 (got 0.0); set momentum, e.g. 0.9, or drop nesterov"),
        ({"lr_schedule": "cosine", "warmup_steps": 20, "decay_steps": 10}, "optimizer."
         "decay_steps=10 is not past optimizer.warmup_steps=20 (decay_steps counts from step "
         "0, warmup included); use more than 20"),
        ({"learning_rate": [
            {"scheduler": "Linear", "initial_learning_rate": 0.0, "end_learning_rate": 0.001,
             "total_iters": 10},
            {"scheduler": "CosineDecay", "initial_learning_rate": 0.001,
             "end_learning_rate": 0.0001, "total_iters": 90}]},
         "optimizer.learning_rate is a ModelZoo scheduler list; wse train takes one number "
         "plus lr_schedule (constant|cosine|linear), warmup_steps, decay_steps and "
         "min_learning_rate: for this list, learning_rate: 0.001, warmup_steps: 10, "
         "lr_schedule: cosine, decay_steps: 100, min_learning_rate: 0.0001"),
        ({"learning_rate": {"scheduler": "Exponential", "initial_learning_rate": 0.001}},
         "min_learning_rate: e.g. learning_rate: 0.001, warmup_steps: 10, lr_schedule: cosine, "
         "min_learning_rate: 0.0001"),
    ],
)  # fmt: skip
def test_what_an_optimizer_cannot_do_is_one_line(tmp_path, given, line):
    with pytest.raises(ConfigError) as e:
        check_config(load_config(_params(tmp_path, given)))
    assert str(e.value).endswith(line), str(e.value)


def test_the_translated_schedule_is_the_lists_schedule(tmp_path):
    """The translation's oracle: ModelZoo's Linear then CosineDecay, evaluated by hand."""
    opt = OptimizerConfig(learning_rate=0.001, warmup_steps=10, lr_schedule="cosine",
                          decay_steps=100, min_learning_rate=0.0001)  # fmt: skip
    lr = schedule(opt, 100)
    for t in (0, 5, 10, 40, 99):
        want = 0.001 * t / 10 if t < 10 else (
            0.0001 + 0.5 * (0.001 - 0.0001) * (1 + np.cos(np.pi * (t - 10) / 90)))  # fmt: skip
        assert float(lr(t)) == pytest.approx(want, rel=1e-5)


def test_a_warmup_as_long_as_the_run_is_a_note(tmp_path):
    config = load_config(_params(tmp_path, {"warmup_steps": 20}, runconfig={"max_steps": 2}))
    check_config(config)  # not refused: `--max-steps 2` of a shipped config stays a smoke test
    assert config_notes(config) == [
        "note: optimizer.warmup_steps=20 is not below runconfig.max_steps=2: the learning rate "
        "ramps up from 0 and reaches 0.005 at the last step, not optimizer.learning_rate=0.1; "
        "use fewer warm-up steps to train at it"
    ]


@pytest.mark.parametrize(
    ("key", "value", "line"),
    [("model_dir", "", "runconfig.model_dir is empty; give a folder name, e.g. model_dir/run1"),
     ("model_dir", "  ", "runconfig.model_dir is empty ('  '); give a folder name"),
     ("checkpoint_path", "", "runconfig.checkpoint_path is empty; give a run folder or one of "
      "its steps, or leave it out")],
)  # fmt: skip
def test_an_empty_run_path_is_refused(tmp_path, key, value, line):
    with pytest.raises(ConfigError, match=f"^{line.replace('(', '.').replace(')', '.')}"):
        check_config(load_config(_params(tmp_path, {}, runconfig={key: value})))


def _texts(folder: Path, n: int = 40) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for i in range(n):
        (folder / f"doc{i:03d}.txt").write_text(" ".join(rng.choice(WORDS, 200)) + "\n")
    return folder


def test_a_folder_of_modelzoo_hdf5_is_refused_naming_them(tmp_path):
    h5 = tmp_path / "h5"
    h5.mkdir()
    for i in range(3):
        (h5 / f"data-{i:05d}.h5").write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(4000))
    (h5 / "README.md").write_text("# Preprocessed with ModelZoo\n" * 3)
    tail = ("(.h5: ModelZoo's preprocessed token ids), which this trainer does not read: it "
            "trains its own tokenizer on text; give the raw .txt, .jsonl or .parquet corpus it "
            "was made from")  # fmt: skip
    with pytest.raises(ConfigError) as e:
        check_data_dir(InputConfig(data_dir=str(h5)))
    assert str(e.value) == f"data_dir '{h5}' holds 3 HDF5 files {tail}"
    with pytest.raises(ConfigError) as e:
        data_files(str(h5 / "data-00000.h5"))
    assert str(e.value) == f"data file '{h5 / 'data-00000.h5'}' is HDF5 {tail}"


def _no_datasets(monkeypatch):
    import datasets

    def refuse(*a, **kw):
        raise AssertionError("local text and JSON are read without datasets (no cache)")

    monkeypatch.setattr(datasets, "load_dataset", refuse)


def test_jsonl_is_read_within_the_cap_and_never_past_it(tmp_path, monkeypatch):
    _no_datasets(monkeypatch)
    line = json.dumps({"text": "lorem ipsum dolor sit amet " * 40}) + "\n"  # 1,093 bytes
    path = tmp_path / "big.jsonl"
    path.write_text(line * 100 + '{"text": broken \0 json\n' * 1000)  # past the budget: unread
    cfg = InputConfig(data_dir=str(path), split="all", max_corpus_bytes=10_000)
    check_data_dir(cfg)  # the scan stops at 4 x the cap, as the reader does
    texts = corpus_texts(cfg)
    assert texts == [json.loads(line)["text"]] * 9  # 9 x 1,080 characters <= 10,000 < 10 x


def test_a_wrong_text_key_is_refused_from_the_first_record(tmp_path):
    path = tmp_path / "big.jsonl"
    path.write_text(json.dumps({"text": "a b c " * 100, "id": 1}) + "\n" + "{broken\n" * 5)
    for key in ("content", ""):
        with pytest.raises(ConfigError) as e:
            check_data_dir(InputConfig(data_dir=str(path), text_key=key))
        assert str(e.value) == (f"data file '{path}' line 1 has no column {key!r}; columns: "
                                "text, id (set train_input.text_key)")  # fmt: skip


def test_a_json_array_past_what_the_split_reads_is_refused_up_front(tmp_path):
    path = tmp_path / "a.json"
    path.write_text(json.dumps([{"text": "word " * 100}] * 100))
    with pytest.raises(ConfigError) as e:
        check_data_dir(InputConfig(data_dir=str(path), max_corpus_bytes=10_000))
    assert str(e.value).startswith(
        f"data file '{path}' is one JSON value of {path.stat().st_size:,} bytes (parsed whole), "
        "past what train_input.max_corpus_bytes reads (4 bytes a character at most); write one"
    )
    small = InputConfig(data_dir=str(path), split="all", max_corpus_bytes=1_000_000)
    assert corpus_texts(small) == ["word " * 100] * 100  # within it, parsed whole as before


def test_many_small_text_files_load_in_one_pass_without_datasets(tmp_path, monkeypatch):
    _no_datasets(monkeypatch)
    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(2000):
        (folder / f"{i:05d}.txt").write_text(f"hello world number {i}\r\n")
    cfg = InputConfig(data_dir=str(folder), split="all", batch_size=2, max_sequence_length=16)
    check_data_dir(cfg)
    # a line each, its CRLF dropped: `datasets`' text builder's rows (hunt 75)
    assert corpus_texts(cfg) == [f"hello world number {i}" for i in range(2000)]


def test_a_separate_eval_data_dir_is_read_whole(tmp_path):
    txt, val = _texts(tmp_path / "txt"), _texts(tmp_path / "val", 12)
    inp = {"batch_size": 2, "max_sequence_length": 16}
    apart = load_config(_params(tmp_path, {}, train_input={**inp, "data_dir": str(txt)},
                                eval_input={**inp, "data_dir": str(val)}))  # fmt: skip
    assert (apart.train_input.split, apart.eval_input.split) == ("all", "all")
    assert (len(corpus_texts(apart.train_input)), len(corpus_texts(apart.eval_input))) == (40, 12)
    same = load_config(_params(tmp_path, {}, train_input={**inp, "data_dir": str(txt)},
                               eval_input={**inp, "data_dir": f"{txt}/"}))  # fmt: skip
    assert (len(corpus_texts(same.train_input)), len(corpus_texts(same.eval_input))) == (38, 2)
    given = load_config(_params(tmp_path, {}, eval_input={"data_dir": str(val), "split": "eval"}))
    assert given.eval_input.split == "eval"  # a split given is kept


def test_data_listed_twice_is_read_once_with_a_note(tmp_path):
    txt = _texts(tmp_path / "txt")
    lists = [[str(txt), f"{txt}/"], [str(txt), str(txt / "doc003.txt")]]
    for data_dir in lists:
        assert data_files(data_dir)[1] == data_files(str(txt))[1]
    config = load_config(_params(tmp_path, {}, train_input={"data_dir": lists[1]}))
    assert config_notes(config) == [
        f"note: train_input.data_dir lists '{txt / 'doc003.txt'}', inside '{txt}'; each file "
        "is read once"
    ]


@pytest.mark.parametrize(
    ("record", "said"),
    [({"text": 5}, "'text' is 5, not a string"), ({"text": 0}, "'text' is 0, not a string"),
     ({"text": False}, "'text' is false, not a string")],
)  # fmt: skip
def test_a_bad_jsonl_record_is_named_by_file_and_line(tmp_path, record, said):
    path = tmp_path / "m.jsonl"
    rows = [{"text": "alpha beta gamma delta " * 20}] * 30 + [record]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(ConfigError) as e:
        corpus_texts(InputConfig(data_dir=str(path), split="all"))
    assert str(e.value) == f"data file '{path}' line 31: {said}; every 'text' must be text"


def test_a_line_that_is_not_json_or_not_an_object_is_named(tmp_path):
    path = tmp_path / "j.jsonl"
    path.write_text('{"text": "hello there"}\n' * 3 + "\n" + '{"text": "ab\n')
    with pytest.raises(ConfigError, match=r"^data file '.*j.jsonl' line 5 is not JSON \("):
        corpus_texts(InputConfig(data_dir=str(path), split="all"))
    path.write_text('["a list"]\n["another"]\n')  # lines, not one array of records
    with pytest.raises(ConfigError) as e:
        check_data_dir(InputConfig(data_dir=str(path)))
    assert str(e.value) == (f"data file '{path}' line 1 is a list, not an object of fields; give "
                            'one JSON object per line, e.g. {"text": "..."}')  # fmt: skip


def test_a_runs_resolved_params_file_runs_again(tmp_path):
    """`to_dict` (the run folder's params_train.yaml) holds what the optimizer reads only:
    written back, it is not refused for beta1 on sgd, and it is the same config."""
    config = load_config(_params(tmp_path, {"optimizer_type": "SGD", "momentum": 0.9}))
    assert not {"beta1", "beta2", "eps"} & set(config.to_dict()["optimizer"])
    again = tmp_path / "again.yaml"
    again.write_text(yaml.safe_dump(config.to_dict()))
    assert load_config(again) == config


def test_a_falsy_non_text_parquet_value_is_refused_as_5_is(tmp_path):
    import pandas as pd

    path = tmp_path / "n.parquet"
    pd.DataFrame({"text": [0, 5] * 200}).to_parquet(path)
    with pytest.raises(ConfigError, match=r"^row 0 of .* has 'text': 0, not text"):
        corpus_texts(InputConfig(data_dir=str(path), split="all"))


def test_an_eval_of_a_momentum_run_as_plain_sgd_is_refused(tmp_path):
    """sgd keeps a trace only with momentum, so momentum now shapes the saved state: an
    eval of a momentum run as plain sgd is refused (let through, it restored no step and
    evaluated step 0, exit 0)."""
    run = {"model_dir": str(tmp_path / "run"), "mode": "eval", "max_steps": 10}
    saved = load_config(
        _params(tmp_path, {"optimizer_type": "sgd", "momentum": 0.9}, runconfig=run)
    )
    meta = tmp_path / "run" / "checkpoints" / "3" / "meta"
    meta.mkdir(parents=True)
    model = json.loads(json.dumps(dataclasses.asdict(model_config(saved))))
    (meta / "metadata").write_text(
        json.dumps({"step": 3, "model": model, "config": saved.to_dict()})
    )
    check_resume(saved, model_config(saved))  # the same optimizer evaluates
    plain = load_config(_params(tmp_path, {"optimizer_type": "sgd"}, runconfig=run))
    with pytest.raises(ConfigError, match=r"trained with optimizer.momentum=0.9 \(0.0 here\)"):
        check_resume(plain, model_config(plain))
