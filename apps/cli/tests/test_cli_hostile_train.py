"""Hostile `wse train` inputs of hunt 57: data files and run folders, each refused in one line
before a run folder, tokenizer or checkpoint is made, and with nothing moved. Before: a
binary or Latin-1 corpus, a broken .jsonl, a non-string "text" and a foreign .parquet were
`datasets` / pyarrow tracebacks; an empty or too-small corpus was refused only after the
run folder (and its tokenizer.json) was written; `-o` at a folder of someone's files trained
into it; a model_dir of another model's checkpoints had them moved aside as "corrupt" and
trained again from step 0; `--checkpoint-path` of another model was orbax's shape error."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import refused_in_one_line

ROOT = typer.main.get_command(app)
QUICK = ["runconfig.max_steps=2", "runconfig.mode=train", "model.vocab_size=300",
         "train_input.batch_size=2", "runconfig.sample_tokens=0"]  # fmt: skip


def _train(d: Path, *extra: str) -> list[str]:
    return ["train", "tiny", *QUICK, *extra, "-o", str(d / "run")]


def _data(d: Path, name: str, raw: bytes) -> str:
    (d / name).write_bytes(raw)
    return f"train_input.data_dir={d / name}"


def _files(d: Path) -> set[str]:
    return {str(p.relative_to(d)) for p in d.rglob("*")}


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: _data(d, "e.txt", b""), "e.txt' is empty (0 bytes); give text"),
        (lambda d: _data(d, "b.txt", b"abc\0def" * 100),
         "b.txt' is binary (a NUL byte at offset 3), not text"),
        (lambda d: _data(d, "l.txt", "café ".encode("latin-1") * 100),
         "l.txt' is not UTF-8 text (byte 0xe9 at offset 3); convert it"),
        (lambda d: _data(d, "s.txt", b"hello world\n"),
         "s.txt' holds 12 bytes: at most 13 tokens, fewer than one batch of batch_size 2 x "
         "max_sequence_length 128 (+1) = 257 tokens"),
        (lambda d: _data(d, "b.jsonl", b'{"text": "a"}\n\xff\xfe\0\0' * 50), "is binary"),
        (lambda d: _data(d, "x.parquet", b"not parquet" * 100), "is not a Parquet file"),
        (lambda d: (d / "docs").mkdir() or _data(d, "docs/a.csv", b"a,b\n" * 100).replace(
            "/a.csv", ""), "no .txt, .py, .md, .jsonl, .json or .parquet files in"),
        (lambda d: os.mkfifo(d / "f.txt") or f"train_input.data_dir={d / 'f.txt'}",
         "f.txt' is a FIFO, not a regular file"),
        (lambda d: _data(d, "n.jsonl", b"".join(
            json.dumps({"text": i}).encode() + b"\n" for i in range(1, 200))),
         "n.jsonl' line 1: 'text' is 1, not a string"),  # hunt 69: by file and line
        (lambda d: _data(d, "j.jsonl", b'{"text": "hello there"}\n' * 200 + b'{"text": "ab\n'),
         "j.jsonl' line 201 is not JSON ("),  # hunt 69: read here, by file and line
    ],
)  # fmt: skip
def test_a_bad_data_file_is_refused_before_the_run_folder(tmp_path, make, message):
    override = make(tmp_path)
    before = _files(tmp_path)
    refused_in_one_line(ROOT, _train(tmp_path, override), message)
    assert _files(tmp_path) == before  # no run folder, no tokenizer.json


def test_output_at_a_folder_of_other_files_is_refused_and_left_alone(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "thesis.tex").write_text("precious\n")
    refused_in_one_line(
        ROOT, _train(tmp_path), "holds thesis.tex and is no run folder (no checkpoints/"
    )
    assert _files(tmp_path) == {"run", "run/thesis.tex"}


def _fake_step(run: Path, step: int, **model) -> Path:
    """A step folder whose meta names the tiny config's model with `model`'s fields changed
    (all `check_resume` reads; the orbax state itself is not needed to be refused)."""
    from wse_trainer.config import load_config
    from wse_trainer.session import model_config

    config = load_config("tiny", QUICK)
    own = json.loads(json.dumps(dataclasses.asdict(model_config(config))))
    meta = {"step": step, "model": {**own, **model}}
    folder = run / "checkpoints" / str(step) / "meta"
    folder.mkdir(parents=True)
    (folder / "metadata").write_text(json.dumps(meta))
    return folder.parent


def test_a_model_dir_of_another_models_checkpoints_is_refused_not_moved_aside(tmp_path):
    _fake_step(tmp_path / "run", 2, d_model=64)
    before = _files(tmp_path)
    line = refused_in_one_line(
        ROOT,
        _train(tmp_path),
        "checkpoint step 2 (" + str(tmp_path / "run" / "checkpoints" / "2") + ") is of another "
        "model (d_model 64 there, 128 here); resume with its model settings (model.d_model=64)",
    )
    assert "give a new model_dir (-o)" in line
    assert _files(tmp_path) == before  # nothing moved to checkpoints_aside


def test_a_checkpoint_path_of_another_model_is_refused_before_the_run_folder(tmp_path):
    step = _fake_step(tmp_path / "other", 3, n_layers=2)
    before = _files(tmp_path)
    line = refused_in_one_line(
        ROOT,
        [*_train(tmp_path), "--checkpoint-path", str(step)],
        "--checkpoint-path: checkpoint step 3 (",
    )
    assert "n_layers 2 there, 4 here" in line and "drop --checkpoint-path" in line
    assert _files(tmp_path) == before


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("train_input.max_corpus_bytes=0", "train_input.max_corpus_bytes must be positive, got 0"),
        # hunt 70: its one file (97 B) is the eval split's at every cap
        (
            "train_input.max_corpus_bytes=100",
            "the train split of 'stdlib' is empty within "
            "max_corpus_bytes=100; raise max_corpus_bytes (e.g. to 100000)",
        ),
    ],
)
def test_a_corpus_cap_too_small_is_one_line_and_leaves_no_run_folder(tmp_path, override, message):
    # hunt 57: 0 was datasets' "Empty 'data_files'" traceback
    refused_in_one_line(ROOT, _train(tmp_path, override), message)
    assert _files(tmp_path) == set()


def test_a_data_dir_of_too_many_files_is_refused_while_walking(tmp_path, monkeypatch):
    # hunt 57: data_dir=/ walked the whole filesystem (the limit is 100,000 files; its
    # override sets 3 here)
    monkeypatch.setenv("WSE_LIMIT_DATA_FILES", "3")
    (tmp_path / "docs").mkdir()
    for i in range(5):
        (tmp_path / "docs" / f"{i}.txt").write_text("text " * 100)
    refused_in_one_line(
        ROOT, _train(tmp_path, f"train_input.data_dir={tmp_path / 'docs'}"),
        "holds more than 3 data files; give the corpus's own folder, or pack its documents "
        "into .jsonl or .parquet shards (set WSE_LIMIT_DATA_FILES to lift it)",
    )  # fmt: skip
