"""Hunt 71's holes in `wse train`'s params reading and data splits, below the CLI.

Before the fixes:
- an override with an empty value (`train_input.data_dir=`, what an unset `$DATA` gives)
  was read as null and dropped the key: the run trained on the standard library, unsaid;
- `KEY=null` on a key no section has (`model.vocab_szie=null`) was taken silently, where
  `KEY=5` is refused with a did-you-mean;
- eval data that training also reads (eval `d2` of train `[d1, d2]`, eval files inside the
  train folder) was evaluated on trained text with no note;
- `runconfig.eval_frequency` with mode train or eval was taken and did nothing, unsaid (now a note);
- a data_dir list's null was read as the file 'None', a nested list as its repr, '' as the
  current folder (blamed on the model_dir), and `d1,d2` as a dataset (HF's HFValidationError).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from wse_core.testing import one_line_error
from wse_trainer.config import ConfigError, apply_overrides, config_from_dict, load_config
from wse_trainer.config_check import check_config, config_notes
from wse_trainer.overlap import overlap_note
from wse_trainer.testing import tiny_config

WORDS = ("alpha", "beta", "gamma", "delta")


def _docs(folder: Path, n: int, words: int = 50) -> Path:
    """`n` text files, each one document of its own text (ASCII: characters are bytes)."""
    folder.mkdir(parents=True)
    for i in range(n):
        body = " ".join(WORDS[(i * 7 + j * 3) % 4] for j in range(words))
        (folder / f"doc{i:02d}.txt").write_text(f"{folder.name} document {i} {body}\n")
    return folder


def _refused(match: str, fn, *args):
    with pytest.raises(ConfigError) as e:
        fn(*args)
    assert one_line_error(e.value) and match in str(e.value), str(e.value)
    return str(e.value)


# hole 5: an empty override value ------------------------------------------------------
@pytest.mark.parametrize("raw", ["", " ", "  # a comment"])
def test_an_empty_override_value_is_refused_not_dropped(raw):
    item = f"train_input.data_dir={raw}"
    line = _refused("has an empty value", apply_overrides, {"train_input": {"data_dir": "d"}},
                    [item])  # fmt: skip
    assert line == (
        f"override {item!r} has an empty value; give a value ('' for empty text), or "
        "train_input.data_dir=null to drop the key and take its default"
    )


def test_null_and_empty_text_still_mean_what_yaml_says():
    data = {"train_input": {"data_dir": "d"}, "runconfig": {"sample_prompt": "x"}}
    for null in ("null", "~", "NULL"):
        out = apply_overrides(data, [f"train_input.data_dir={null}"])
        assert "data_dir" not in out["train_input"]  # the default, as Hydra's `~key`
    out = apply_overrides(data, ["runconfig.sample_prompt=''"])
    assert out["runconfig"]["sample_prompt"] == ""


# hole 11: null on a key that does not exist ---------------------------------------------
@pytest.mark.parametrize(
    ("key", "near"),
    [("model.vocab_szie", "vocab_size"), ("optimizer.learnig_rate", "learning_rate"),
     ("runconfig.max_stpes", "max_steps"), ("train_input.data_dri", "data_dir")],
)  # fmt: skip
def test_null_on_an_unknown_key_is_refused_as_a_value_is(key, near):
    section, name = key.split(".")
    line = _refused("unknown key", load_config, "tiny", [f"{key}=null"])
    assert line.startswith(f"unknown key {key} (did you mean {near!r}?) in override ")
    # the same suggestion the key with a value gets (the model's is found by model_config)
    with pytest.raises(ConfigError) as valued:
        from wse_trainer.session import model_config

        model_config(load_config("tiny", [f"{key}=5"]))
    assert f"unknown key {key} (did you mean {near!r}?)" in str(valued.value)


def test_null_on_a_known_key_or_a_files_own_typo_drops_it():
    assert "decay_steps" not in apply_overrides({}, ["optimizer.decay_steps=null"])["optimizer"]
    data = {"model": {"preset": "tiny-gpt2", "vocab_szie": 5}}  # the file's typo, dropped
    assert apply_overrides(data, ["model.vocab_szie=null"])["model"] == {"preset": "tiny-gpt2"}


# hole 13: eval_frequency where nothing evaluates between steps -----------------------------
@pytest.mark.parametrize(
    ("mode", "does"), [("train", "never evaluates"), ("eval", "evaluates once, training nothing")]
)
def test_eval_frequency_outside_train_and_eval_is_said(tmp_path, mode, does):
    """Said, not refused: one params file serves every mode (ModelZoo's `--mode eval` of a
    train_and_eval file)."""
    cfg = tiny_config(tmp_path, f"runconfig.mode={mode}", "runconfig.eval_frequency=3")
    check_config(cfg)
    assert (
        f"note: runconfig.eval_frequency=3 has no effect with mode {mode}, which {does}; it "
        "applies to mode train_and_eval"
    ) in config_notes(cfg)
    both = tiny_config(tmp_path / "t", "runconfig.mode=train_and_eval",
                       "runconfig.eval_frequency=3")  # fmt: skip
    check_config(both)
    assert not [n for n in config_notes(both) if "eval_frequency" in n]


# minor: data_dir entries that name no data --------------------------------------------
@pytest.mark.parametrize(
    ("value", "line"),
    [(["d1", None], "lists null (entry 2 of 2); each entry names a file or folder: give "
      "train_input.data_dir=[d1]"),
     (["d1", ["d2"]], "lists a list, [d2] (entry 2 of 2); each entry names a file or folder: "
      "give train_input.data_dir=[d1, d2]"),
     (["d1", ""], "lists an empty name (entry 2 of 2)"),
     ("", "is empty; give a file, a folder, a list of them, stdlib or a dataset"),
     ("d1,d2", "'d1,d2' is no file or folder, and no dataset's name holds a ','; to read "
      "several, give a list: train_input.data_dir=[d1, d2]")],
    ids=["null", "nested", "empty entry", "empty", "commas"],
)  # fmt: skip
def test_a_data_dir_entry_naming_no_data_is_said_plainly(tmp_path, monkeypatch, value, line):
    monkeypatch.chdir(tmp_path)  # nothing named 'd1,d2' here
    said = _refused(line, config_from_dict, {"train_input": {"data_dir": value}})
    assert said.startswith("train_input.data_dir ") and "None" not in said


def test_a_folder_named_with_commas_or_a_number_is_data(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a,b").mkdir()
    assert config_from_dict({"train_input": {"data_dir": "a,b"}}).train_input.data_dir == "a,b"
    listed = config_from_dict({"train_input": {"data_dir": [2024, "d1"]}}).train_input
    assert listed.data_dir == ["2024", "d1"]


# hole 10: eval data the training also reads ------------------------------------------
def _splits(train, evals, *extra):
    data = {"train_input": {"data_dir": train}, "eval_input": {"data_dir": evals}}
    c = config_from_dict(apply_overrides(data, extra))
    return c.train_input, c.eval_input


@pytest.fixture
def corpus(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return _docs(tmp_path / "d1", 30), _docs(tmp_path / "d2", 30)


def test_eval_data_inside_the_training_list_is_counted(corpus):
    d1, d2 = map(str, corpus)
    note = overlap_note(*_splits([d1, d2], d2))
    assert note == (  # every file of d2 is one document, and train reads all 60 within its cap
        f"note: all 30 eval documents of eval_input.data_dir {d2!r} are also training "
        f"documents (train_input.data_dir {[d1, d2]!r}): the eval loss is on trained text; "
        "give eval data apart from the training data for a held-out loss"
    )
    files = [f"{d1}/doc00.txt", f"{d1}/doc01.txt"]  # eval files inside the train folder
    assert overlap_note(*_splits(d1, files)).startswith("note: all 2 eval documents of ")


def test_a_partial_overlap_counts_only_the_shared_documents(corpus, tmp_path):
    d1, d2 = map(str, corpus)
    mixed = [f"{d2}/doc{i:02d}.txt" for i in range(5)] + [str(_docs(tmp_path / "d3", 7))]
    note = overlap_note(*_splits(d2, mixed))
    assert note.startswith("note: 5 of the 12 eval documents of ") and "partly on" in note


def test_the_count_is_what_the_train_split_reads_within_its_cap(corpus):
    d1, d2 = corpus
    files = sorted([*d1.iterdir(), *d2.iterdir()], key=lambda p: os.path.realpath(p))
    cap, total, read = 12_000, 0, []
    for f in files:  # by hand: whole files in real-path order while within the cap
        if total + f.stat().st_size > cap:
            break
        total += f.stat().st_size
        read.append(f)
    shared = sum(f.parent == d2 for f in read)
    assert 0 < shared < 30  # the cap stops inside d2
    note = overlap_note(*_splits([str(d1), str(d2)], str(d2),
                                 f"train_input.max_corpus_bytes={cap}"))  # fmt: skip
    assert note.startswith(f"note: {shared} of the 30 eval documents ")


def test_the_same_data_split_in_two_and_other_data_say_nothing(corpus):
    d1, d2 = map(str, corpus)
    train, evals = _splits([d1, d2], [d2, d1, d1])  # hunt 70: the same data, held out
    assert (train.split, evals.split) == ("train", "eval")
    assert overlap_note(train, evals) is None
    assert overlap_note(*_splits(d1, d2)) is None
    assert overlap_note(*_splits(d1, "stdlib")) is None
