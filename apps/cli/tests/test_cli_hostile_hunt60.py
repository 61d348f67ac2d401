"""Hostile inputs fixed by hunt 60: each exits 2 with one line naming the input and what
would be right. Before the fixes: `wse train tiny model.vocab_size=300 model.vocab_size=1`
took the last value (and `runconfig.max_steps=2 --max-steps 5` the flag's), where a
single-valued option given twice is refused (`wse_cli.option_repeats`); `WSE_DEVICES=' '`
was refused as "got ''" (the blank stripped away); data_dir=/ read 48,000 folders (3.5 s
with a cold cache) before its 100,001st data file was refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke, refused_in_one_line

pytestmark = pytest.mark.timeout(120)
ROOT = typer.main.get_command(app)
CHECK = ["train", "tiny", "--validate-only"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["model.vocab_size=300", "model.vocab_size=1"],
         "model.vocab_size is given twice ('300', then '1'); give it once"),
        (["optimizer.learning_rate=1e-3", "runconfig.seed=1", "optimizer.learning_rate=2e-3"],
         "optimizer.learning_rate is given twice ('1e-3', then '2e-3')"),
        (["runconfig.max_steps=2", "--max-steps", "5"],
         "runconfig.max_steps is given twice ('2', then --max-steps '5'); give it once"),
        (["runconfig.model_dir=a", "-o", "b"], "runconfig.model_dir is given twice ('a', then "
         "--model-dir 'b')"),
    ],
    ids=["model key", "optimizer key", "override and flag", "model_dir and -o"],
)  # fmt: skip
def test_one_key_given_two_values_is_refused_naming_both(tmp_path, overrides, message):
    refused_in_one_line(ROOT, [*CHECK, *overrides], message)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "overrides",
    [
        ["model.vocab_size=300", "model.vocab_size=300"],
        ["runconfig.max_steps=5", "--max-steps", "5"],
    ],
)
def test_one_key_given_its_value_twice_is_taken(overrides):
    code, output = invoke(ROOT, [*CHECK, *overrides])
    assert code == 0 and "config is valid" in output, output


@pytest.mark.parametrize(("value", "shown"), [(" ", "got ' '"), ("\t", "got '\\t'"),
                                              (" x ", "got ' x '")])  # fmt: skip
def test_a_blank_or_padded_wse_devices_is_echoed_as_given(value, shown):
    line = refused_in_one_line(ROOT, ["wafer", "info"], "WSE_DEVICES", {"WSE_DEVICES": value})
    assert line.endswith(shown), line


def _corpus(root: Path, folders: int) -> Path:
    """`folders` folders of one 200-word document each (one batch of tiny at batch 2 needs
    257 tokens: 1,000 bytes each is plenty)."""
    for i in range(folders):
        (root / f"doc{i}").mkdir(parents=True)
        (root / f"doc{i}" / "text.txt").write_text("the wafer streams weights " * 40)
    return root


def test_a_data_dir_of_too_many_folders_is_refused_while_walking(tmp_path, monkeypatch):
    from wse_trainer.data_files import data_files

    monkeypatch.setenv("WSE_LIMIT_DATA_FOLDERS", "4")
    corpus = _corpus(tmp_path / "corpus", 5)
    args = ["train", "tiny", "train_input.batch_size=2", f"train_input.data_dir={corpus}",
            "-o", tmp_path / "run"]  # fmt: skip
    refused_in_one_line(ROOT, args, "holds more than 4 folders; give the corpus's own folder, "
                        "or pack its documents into .jsonl or .parquet shards (set "
                        "WSE_LIMIT_DATA_FOLDERS to lift it)")  # fmt: skip
    assert not (tmp_path / "run").exists()
    monkeypatch.setenv("WSE_LIMIT_DATA_FOLDERS", "5")  # at the limit: every document found
    builder, files = data_files(str(corpus))
    assert builder == "text" and sorted(files) == sorted(map(str, corpus.rglob("*.txt")))
