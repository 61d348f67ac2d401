"""Data: datasets loading, the BPE tokenizer, packing and the checkpointable iterator."""

import json

import numpy as np
import pandas as pd
import pytest
from wse_trainer.config import ConfigError, InputConfig
from wse_trainer.data import (
    EVAL_EVERY,
    BatchIterator,
    corpus_texts,
    held_out,
    pack,
    stdlib_files,
    tokenizer_identity,
    train_tokenizer,
)
from wse_trainer.testing import write_corpus


@pytest.mark.smoke
def test_pack_makes_every_token_a_target_once():
    docs = [[1, 2, 3], [4, 5], [6, 7, 8, 9]]
    rows = pack(docs, seq_len=3, eos_id=0)
    flat = [1, 2, 3, 0, 4, 5, 0, 6, 7, 8, 9, 0]
    assert rows.dtype == np.int32 and rows.shape == (3, 4)
    np.testing.assert_array_equal(rows[:, :-1].ravel(), flat[:9])  # inputs
    np.testing.assert_array_equal(rows[:, 1:].ravel(), flat[1:10])  # targets: shifted by one
    with pytest.raises(ConfigError, match="fewer than one sequence"):
        pack([[1]], seq_len=8, eos_id=0)


def test_iterator_is_seeded_and_resumes_mid_epoch():
    rows = np.arange(40 * 3, dtype=np.int32).reshape(40, 3)
    a = BatchIterator(rows, batch_size=6, seed=5)
    seen = [next(a) for _ in range(15)]  # crosses two epoch boundaries (6 batches each)
    b = BatchIterator(rows, batch_size=6, seed=5)
    for _ in range(4):
        next(b)
    c = BatchIterator(rows, batch_size=6, seed=5)
    c.restore(b.state())
    for want in seen[4:]:
        np.testing.assert_array_equal(next(c), want)
    epoch0 = np.concatenate(seen[:6])[:, 0]
    assert len(set(epoch0.tolist())) == 36  # no row twice within an epoch
    assert not np.array_equal(seen[0], seen[6])  # a fresh permutation per epoch
    with pytest.raises(ConfigError, match="shuffle_seed"):
        c.restore({"seed": 9, "epoch": 0, "index": 0})


@pytest.mark.smoke
def test_tokenizer_round_trips_text_and_has_an_identity(tmp_path):
    texts = corpus_texts(InputConfig(data_dir=str(write_corpus(tmp_path)), split="all"))
    tok = train_tokenizer(texts, 300)
    assert tok.get_vocab_size() <= 300 and tok.token_to_id("<|endoftext|>") == 0
    sample = "def f7(a, b):\n    return a + b  # ünïcode ✓\n"
    assert tok.decode(tok.encode(sample).ids) == sample
    tok.save(str(tmp_path / "t.json"))
    from tokenizers import Tokenizer

    again = Tokenizer.from_file(str(tmp_path / "t.json"))
    assert tokenizer_identity(again) == tokenizer_identity(tok)


@pytest.mark.parametrize("kind", ["txt", "jsonl", "parquet"])
def test_local_files_load_through_datasets(tmp_path, kind):
    docs = [f"document {i}\nsecond line {i}" for i in range(40)]
    path = tmp_path / f"data.{kind}"
    if kind == "txt":
        docs = [d.replace("\n", " ") for d in docs]  # a .txt is a document a line (hunt 75)
        for i, d in enumerate(docs):
            (tmp_path / f"d{i:02d}.txt").write_text(d)
        path = tmp_path
    elif kind == "jsonl":
        path.write_text("".join(json.dumps({"body": d}) + "\n" for d in docs))
    else:
        pd.DataFrame({"body": docs}).to_parquet(path)
    key = "text" if kind == "txt" else "body"
    train = corpus_texts(InputConfig(data_dir=str(path), text_key=key, split="train"))
    held = corpus_texts(InputConfig(data_dir=str(path), text_key=key, split="eval"))
    assert sorted(train + held) == sorted(docs)
    assert len(held) == 40 // EVAL_EVERY and not set(train) & set(held)


@pytest.mark.smoke
def test_eval_split_is_a_twentieth_of_the_bytes_whatever_the_document_sizes():
    equal = held_out([100] * 60)  # equal documents: every 20th, as a count would give
    assert [i for i, m in enumerate(equal) if m] == [10, 30, 50]
    # the standard library's first megabyte: a few big files, then many small ones
    rng = np.random.default_rng(0)
    sizes = [230_000, 190_000, 120_000, *rng.integers(500, 9_000, size=150).tolist()]
    marks = held_out(sizes)
    held = sum(s for s, m in zip(sizes, marks, strict=True) if m)
    # hand bound: after each document the held-out bytes are within half a document of the
    # running twentieth, so at the end within half the largest document held out or not
    small = max(sizes[3:])
    assert abs(held - sum(sizes) / 20) <= small / 2
    assert not any(marks[:3])  # no big file is worth holding out
    every_20th_file = sum(s for i, s in enumerate(sizes) if i % 20 == 19)
    assert held > 2 * every_20th_file  # what the old count-based split held here


def test_missing_column_and_file_are_readable_errors(tmp_path):
    path = write_corpus(tmp_path)
    with pytest.raises(ConfigError, match="no column 'body'; columns: text"):
        corpus_texts(InputConfig(data_dir=str(path), text_key="body"))
    with pytest.raises(ConfigError, match="does not exist"):
        corpus_texts(InputConfig(data_dir=[str(tmp_path / "nope.jsonl")]))


def test_stdlib_corpus_is_present_and_capped():
    files = stdlib_files(200_000)
    assert files and all(f.endswith(".py") for f in files)
    assert sum(len(open(f, "rb").read()) for f in files) <= 200_000
