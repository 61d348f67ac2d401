"""Hunt 75b: a `save_to_disk` folder too small for one batch is refused at validate time, as
a .txt of the same text is.

Before: 50 short rows saved with `Dataset.save_to_disk` passed `wse train ... --validate-only`
("config is valid"); the run then failed ("the split has 1 sequences, fewer than
batch_size=16"), where the same rows as a .txt were refused up front ("holds 952 bytes ...
fewer than one batch"). The oracle is the .txt check's bound, computed here from the rows
themselves: a batch needs batch_size x max_sequence_length + 1 tokens, and text gives at most
one token a UTF-8 byte plus one EOS a document.
"""

from __future__ import annotations

import datasets
import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import refused_in_one_line
from wse_trainer.config import ConfigError, InputConfig
from wse_trainer.data_files import check_data_dir

ROOT = typer.main.get_command(app)
BATCH, SEQ = 4, 32  # one batch: 4 x 32 + 1 = 129 tokens


def _most_tokens(rows):
    """The oracle's bound: a token a UTF-8 byte, an EOS a row."""
    return sum(len(r.encode("utf-8")) for r in rows) + len(rows)


def _saved(path, rows):
    datasets.Dataset.from_list([{"text": r, "n": i} for i, r in enumerate(rows)]).save_to_disk(
        str(path)
    )
    return str(path)


def _cfg(data_dir, **kw):
    return InputConfig(data_dir=data_dir, batch_size=BATCH, max_sequence_length=SEQ, **kw)


def test_the_hunters_folder_is_refused_by_validate_only_as_its_txt_is(tmp_path):
    """50 short rows (default batch 16 x 128): the bound is under one batch, so both forms
    are refused, each in one line naming what it holds."""
    rows = [f"line {i} some words here" for i in range(50)]
    assert _most_tokens(rows) < 16 * 128 + 1
    saved = _saved(tmp_path / "d_ds", rows)
    txt = tmp_path / "a.txt"
    txt.write_text("".join(r + "\n" for r in rows))
    for data_dir in (saved, str(txt)):
        args = [f"train_input.data_dir={data_dir}", f"eval_input.data_dir={data_dir}"]
        line = refused_in_one_line(
            ROOT, ["train", "tiny", *args, "--validate-only", "-o", str(tmp_path / "r")],
            "fewer than one batch of batch_size 16 x max_sequence_length 128 (+1) = 2,049",
        )  # fmt: skip
        assert repr(data_dir) in line
    nbytes = sum(len(r.encode()) for r in rows)
    with pytest.raises(ConfigError, match=f"50 rows of text\\) holds {nbytes:,} bytes"):
        check_data_dir(InputConfig(data_dir=saved))


@pytest.mark.parametrize("char", ["a", "é", "漢"])  # 1, 2 and 3 UTF-8 bytes
def test_the_bound_is_the_txt_checks_at_its_edge(tmp_path, char):
    """Rows sized so the bound is exactly one batch pass; one byte less is refused: as the
    .txt check decides for the same bytes (a .txt of k lines holds the same bytes plus k
    newlines, the EOS count the folder's rows give)."""
    need = BATCH * SEQ + 1
    rows = [char * 10] * 3
    rest = need - _most_tokens(rows) - 1  # one more row of `rest` bytes meets it exactly
    assert rest > 1
    rows.append("a" * rest)
    assert _most_tokens(rows) == need
    check_data_dir(_cfg(_saved(tmp_path / "ok", rows)))
    txt = tmp_path / "ok.txt"
    txt.write_bytes(b"".join(r.encode() + b"\n" for r in rows[:-1]) + rows[-1].encode())
    check_data_dir(_cfg(str(txt)))  # the .txt check agrees: one file, one EOS, same bytes
    short = [*rows[:-1], "a" * (rest - 1)]
    assert _most_tokens(short) == need - 1
    with pytest.raises(ConfigError, match="at most 128 tokens, fewer than one batch"):
        check_data_dir(_cfg(_saved(tmp_path / "short", short)))


def test_a_dataset_dict_is_sized_by_the_split_it_gives(tmp_path):
    """A saved DatasetDict gives its own "validation" split to eval: a large train split
    passes, its small validation split is refused for eval_input."""
    train = [f"train row {i} " + "x" * 20 for i in range(40)]
    valid = ["v1", "v2"]
    assert _most_tokens(train) >= BATCH * SEQ + 1 > _most_tokens(valid)
    saved = tmp_path / "dd"
    datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_list([{"text": t} for t in train]),
            "validation": datasets.Dataset.from_list([{"text": t} for t in valid]),
        }
    ).save_to_disk(str(saved))
    check_data_dir(_cfg(str(saved), split="train"))
    with pytest.raises(ConfigError, match="2 rows of text\\) holds 4 bytes"):
        check_data_dir(_cfg(str(saved), split="eval"), "eval_input")


def test_null_rows_count_no_document(tmp_path):
    """A null text is no document (the reader skips it): neither bytes nor an EOS."""
    rows = ["a" * 60, None, None, "b" * 60]
    saved = tmp_path / "nulls"
    datasets.Dataset.from_list([{"text": r} for r in rows]).save_to_disk(str(saved))
    with pytest.raises(ConfigError, match="2 rows of text\\) holds 120 bytes: at most 122"):
        check_data_dir(_cfg(str(saved)))
