"""Hunt 75: data read as HF `datasets` reads it.

- A .txt was one document: `train_and_eval` of one .txt had an empty eval split, and its lines
  were joined with no separator. It is now a document a line, `datasets`' text builder's rows
  (the oracle: `datasets.load_dataset("text", ...)`, its empty rows skipped as a dataset's are).
- A `save_to_disk` folder was read as its metadata JSON ("record 1 has no column 'text'"). It is
  loaded with `datasets.load_from_disk` (the oracle: the same records as .jsonl, read by our
  own JSON reader, give the same documents in each split).
- A mistyped relative data folder was taken for a Hub dataset: 27 s of retries and 11 lines
  offline, and --validate-only passed it. It is refused at once in one line where no Hub can
  be reached.
"""

from __future__ import annotations

import json
import time

import datasets
import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke, refused_in_one_line
from wse_trainer import hf_data
from wse_trainer.config import InputConfig
from wse_trainer.data import corpus_texts
from wse_trainer.data_files import check_data_dir

ROOT = typer.main.get_command(app)
QUICK = ["runconfig.max_steps=1", "model.vocab_size=300", "train_input.batch_size=2",
         "eval_input.batch_size=2", "runconfig.sample_tokens=0"]  # fmt: skip


def _lines_corpus(path):
    rows = [f"line {i} " + "word " * (i % 7) for i in range(120)]
    rows[5:5] = ["", "   ", ""]  # blank lines: rows of "" (and one of spaces) for datasets
    path.write_bytes(("\r\n".join(rows[:60]) + "\n" + "\n".join(rows[60:]) + "\n").encode())
    return path


def test_a_txt_reads_as_the_rows_of_datasets_text_builder(tmp_path):
    path = _lines_corpus(tmp_path / "corpus.txt")
    rows = datasets.load_dataset("text", data_files=str(path), split="train")["text"]
    assert "" in rows  # the oracle keeps empty lines as rows of ""
    ours = corpus_texts(InputConfig(data_dir=str(path), split="all"))
    assert ours == [r for r in rows if r != ""]
    train = corpus_texts(InputConfig(data_dir=str(path), split="train"))
    held = corpus_texts(InputConfig(data_dir=str(path), split="eval"))
    assert held and sorted(train + held) == sorted(ours)  # one .txt has an eval split now


def test_train_and_eval_of_one_txt_runs(tmp_path):
    path = _lines_corpus(tmp_path / "corpus.txt")
    data = [f"{s}.data_dir={path}" for s in ("train_input", "eval_input")]
    args = ["train", "tiny", *QUICK, "runconfig.mode=train_and_eval", *data, "--validate-only"]
    code, out = invoke(ROOT, [*args, "-o", str(tmp_path / "run")])
    assert code == 0, out[-2000:]


def _records(n, tag):
    return [{"text": f"{tag} record {i} " + "abc " * (i % 5), "n": i} for i in range(n)]


def _jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def test_a_saved_dataset_reads_as_its_records_in_jsonl(tmp_path):
    records = _records(120, "one")
    saved = tmp_path / "saved"
    datasets.Dataset.from_list(records).save_to_disk(str(saved))
    jsonl = _jsonl(tmp_path / "same.jsonl", records)
    for split in ("train", "eval", "all"):
        got = corpus_texts(InputConfig(data_dir=str(saved), split=split))
        assert got == corpus_texts(InputConfig(data_dir=jsonl, split=split)), split
    check_data_dir(InputConfig(data_dir=str(saved)))  # --validate-only's check passes it


def test_a_saved_dataset_dict_gives_its_train_and_validation_splits(tmp_path):
    train, validation = _records(100, "train"), _records(20, "valid")
    saved = tmp_path / "dd"
    datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_list(train),
            "validation": datasets.Dataset.from_list(validation),
        }  # fmt: skip
    ).save_to_disk(str(saved))
    want_train = corpus_texts(
        InputConfig(data_dir=_jsonl(tmp_path / "t.jsonl", train), split="all")
    )
    want_eval = corpus_texts(
        InputConfig(data_dir=_jsonl(tmp_path / "v.jsonl", validation), split="all")
    )
    assert corpus_texts(InputConfig(data_dir=str(saved), split="train")) == want_train
    assert corpus_texts(InputConfig(data_dir=str(saved), split="eval")) == want_eval


def test_a_saved_dataset_without_the_text_key_is_refused_in_one_line(tmp_path):
    saved = tmp_path / "saved"
    datasets.Dataset.from_list([{"body": f"x {i}"} for i in range(50)]).save_to_disk(str(saved))
    refused_in_one_line(
        ROOT,
        [
            "train",
            "tiny",
            *QUICK,
            f"train_input.data_dir={saved}",
            "--validate-only",
            "-o",
            str(tmp_path / "run"),
        ],  # fmt: skip
        "(a datasets save_to_disk folder) has no column 'text'; columns: body (set "
        "train_input.text_key)",
    )


@pytest.mark.parametrize("validate", [True, False])
def test_a_missing_folder_is_refused_at_once_where_no_hub_can_be_reached(
    tmp_path, monkeypatch, validate
):
    monkeypatch.setattr(hf_data, "hub_reachable", lambda: False)
    for var in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)
    args = ["train", "tiny", *QUICK, "train_input.data_dir=mydata_typo", "-o", "run"]
    t0 = time.monotonic()
    refused_in_one_line(
        ROOT,
        [*args, "--validate-only"] if validate else args,
        "train_input.data_dir 'mydata_typo': no such file or folder",
    )
    assert time.monotonic() - t0 < 10
    assert not (tmp_path / "run").exists()


def test_the_hub_probe_gives_up_within_its_bound(monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.invalid")  # RFC 6761: never resolves
    hf_data.hub_reachable.cache_clear()
    try:
        t0 = time.monotonic()
        assert hf_data.hub_reachable() is False
        assert time.monotonic() - t0 < hf_data.HUB_PROBE_S + 1
    finally:
        hf_data.hub_reachable.cache_clear()
