"""Hunt 64's holes in `wse train`'s data and config, each now refused in one line (exit 2)
before a run folder is made. Before:
- a .parquet file with PAR1 magic but a corrupt or truncated footer was pyarrow's 81-82-line
  traceback (`OSError: Couldn't deserialize thrift`, `ArrowInvalid: Parquet file size is ...`):
  `check_data_dir` checked only the magic bytes, and `datasets` raised pyarrow's errors
  unwrapped where the data was read;
- one .txt file past `max_corpus_bytes` was read and tokenized whole (the cap kept the first
  document whatever its size: 24 MB took 6.8 GB and 41 s), and `datasets` read every file
  of a folder whole however few the cap kept;
- a run folder's tokenizer.json without `<|endoftext|>` was a 58-line TypeError in `pack`
  after 18 s;
- `optimizer.min_learning_rate` above `learning_rate` passed: the cosine "decay" rose 333x;
- a UTF-16 .txt was refused as "binary ... give .txt, .jsonl or .parquet files".
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke, refused_in_one_line
from wse_trainer.config import ConfigError, InputConfig, OptimizerConfig
from wse_trainer.config_check import _check_optimizer
from wse_trainer.data import corpus_texts
from wse_trainer.data_files import check_data_dir

ROOT = typer.main.get_command(app)
QUICK = ["runconfig.max_steps=1", "model.vocab_size=300", "train_input.batch_size=2",
         "eval_input.batch_size=2", "runconfig.sample_tokens=0"]  # fmt: skip


def _train(d: Path, *extra: str, mode: str = "train") -> list[str]:
    return ["train", "tiny", *QUICK, f"runconfig.mode={mode}", *extra, "-o", str(d / "run")]


def _files(d: Path) -> set[str]:
    return {str(p.relative_to(d)) for p in d.rglob("*")}


def _parquet(path: Path, rows: int = 200) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"text": [f"word {i} " * 50 for i in range(rows)]}), path)
    return path.read_bytes()


def _xored(raw: bytes, start: int, stop: int) -> bytes:
    """The hunt's corruption: every 7th byte of [start, stop) flipped."""
    b = bytearray(raw)
    for i in range(start, stop, 7):
        b[i] ^= 0x5A
    return bytes(b)


_BROKEN_FOOTERS = {
    "corrupt": (lambda raw: _xored(raw, 100, len(raw) - 100), "Couldn't deserialize thrift"),
    "truncated": (lambda raw: raw[: len(raw) // 2] + b"PAR1", "smaller than the size reported"),
}


@pytest.mark.parametrize("kind", sorted(_BROKEN_FOOTERS))
def test_a_parquet_file_whose_footer_does_not_parse_is_one_line(tmp_path, kind):
    bad, why = _BROKEN_FOOTERS[kind]
    path = tmp_path / "pq" / "a.parquet"
    path.write_bytes(bad(_parquet(path)))
    before = _files(tmp_path)
    line = refused_in_one_line(
        ROOT, _train(tmp_path, f"train_input.data_dir={path.parent}"),
        f"Error: data file '{path}' is not a readable Parquet file (",
    )  # fmt: skip
    assert why in line and line.endswith("); rewrite it with pyarrow or pandas"), line
    assert _files(tmp_path) == before  # no run folder


def test_pyarrows_errors_where_the_data_is_read_are_one_line(tmp_path):
    # corpus_texts reads without check_data_dir's footer check: pyarrow's OSError escaped
    path = tmp_path / "a.parquet"
    path.write_bytes(_BROKEN_FOOTERS["corrupt"][0](_parquet(path)))
    with pytest.raises(ConfigError, match=f"^data file '{path}' is not a readable Parquet file"):
        corpus_texts(InputConfig(data_dir=str(path), split="all"))


def test_parquet_pages_corrupt_under_a_good_footer_are_one_line(tmp_path):
    # the footer parses (check_data_dir passes); the pages fail where datasets reads them
    path = tmp_path / "a.parquet"
    raw = _parquet(path, rows=2000)
    footer = struct.unpack("<i", raw[-8:-4])[0]
    path.write_bytes(_xored(raw, 200, len(raw) - footer - 208))
    check_data_dir(InputConfig(data_dir=str(path)))
    with pytest.raises(ConfigError) as got:
        corpus_texts(InputConfig(data_dir=str(path), split="all"))
    line = str(got.value)
    assert (
        line.startswith(f"data file '{path}' is not a readable Parquet file (") and "\n" not in line
    )


def _text(path: Path, n_bytes: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(("abcd " * (n_bytes // 5 + 1))[:n_bytes])
    return path


@pytest.mark.parametrize("section", ["train_input", "eval_input"])
def test_a_text_file_past_max_corpus_bytes_is_refused_up_front(tmp_path, section):
    big = _text(tmp_path / "giant" / "a.md", 20_000)  # one document (a .txt: a line each)
    args = [f"{s}.data_dir={big.parent}" for s in ("train_input", "eval_input")]
    before = _files(tmp_path)
    refused_in_one_line(
        ROOT,
        _train(tmp_path, *args, f"{section}.max_corpus_bytes=10000", mode="train_and_eval"),
        f"Error: data file '{big}' is 20,000 bytes, past {section}.max_corpus_bytes=10,000 (the "
        "most text the split reads; a .py or .md file is one document, read whole); split it into "
        f"files of at most 10,000 bytes, or raise {section}.max_corpus_bytes",
    )
    assert _files(tmp_path) == before


def test_a_text_file_at_the_cap_is_still_read(tmp_path):
    path = _text(tmp_path / "a.txt", 10_000)
    check_data_dir(InputConfig(data_dir=str(path), max_corpus_bytes=10_000))
    assert corpus_texts(InputConfig(data_dir=str(path), split="all", max_corpus_bytes=10_000)) == [
        path.read_text()
    ]


def test_a_first_record_past_the_cap_is_refused_not_kept_whole(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text(json.dumps({"text": "x" * 5000}) + "\n" + json.dumps({"text": "y"}) + "\n")
    with pytest.raises(ConfigError, match="^data file .*a.jsonl' line 1 goes on past the "
                       "4,000 bytes its split reads "):  # fmt: skip
        corpus_texts(InputConfig(data_dir=str(path), split="all", max_corpus_bytes=1000))


def test_only_the_text_files_the_cap_can_reach_are_read(tmp_path, monkeypatch):
    import wse_trainer.data

    folder = tmp_path / "many"
    for k in range(30):
        _text(folder / f"{k:02d}.txt", 1000 + k)
    given = []
    monkeypatch.setattr(  # hunt 69: read here, not by datasets (which read every file given)
        wse_trainer.data, "open", lambda f, *a, **kw: given.append(f) or open(f, *a, **kw),
        raising=False,
    )  # fmt: skip
    texts = corpus_texts(InputConfig(data_dir=str(folder), split="all", max_corpus_bytes=3500))
    files = sorted(folder.iterdir())
    assert texts == [f.read_text() for f in files[:3]]  # the cap's documents, as before
    # files 0-3: 3,003 characters in 0-2, and the 4th's 1,003 would pass the cap of 3,500
    assert [Path(f) for f in given] == files[:4]


def _tokenizer_without_eos(path: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<pad>"], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )  # fmt: skip
    tok.train_from_iterator(["def foo(x): return x + 1\n"] * 50, trainer=trainer)
    tok.save(str(path))


def test_a_run_folders_tokenizer_without_eos_is_refused_at_the_start(tmp_path):
    (tmp_path / "run").mkdir()
    _tokenizer_without_eos(tmp_path / "run" / "tokenizer.json")
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    refused_in_one_line(
        ROOT, _train(tmp_path),
        f"Error: tokenizer file '{tmp_path / 'run' / 'tokenizer.json'}' has no '<|endoftext|>' "
        "token (the end-of-document token a run packs documents with); remove it to train one, "
        "or add it",
    )  # fmt: skip
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_min_learning_rate_above_learning_rate_is_refused():
    refused_in_one_line(
        ROOT, ["train", "tiny", "optimizer.min_learning_rate=1", "--validate-only"],
        "Error: optimizer.min_learning_rate=1.0 exceeds optimizer.learning_rate=0.003: the cosine "
        "schedule would rise to it, not decay; use at most 0.003",
    )  # fmt: skip
    with pytest.raises(ConfigError, match="the linear schedule would rise"):
        _check_optimizer(OptimizerConfig(learning_rate=1e-3, min_learning_rate=2e-3,
                                         lr_schedule="linear"))  # fmt: skip


# constant does not read min_learning_rate: refused as unread (test_trainer_hunt70.py)
@pytest.mark.parametrize("schedule", ["cosine", "linear"])
def test_min_learning_rate_at_most_learning_rate_still_passes(schedule):
    _check_optimizer(
        OptimizerConfig(learning_rate=1e-3, min_learning_rate=1e-3, lr_schedule=schedule)
    )
    code, _ = invoke(
        ROOT, ["train", "tiny", "optimizer.min_learning_rate=0.003", "--validate-only"]
    )
    assert code == 0


_WIDE = {
    "utf16-bom": ("hello world\n" * 50).encode("utf-16"),
    "utf16be-bom": b"\xfe\xff" + ("hello world\n" * 50).encode("utf-16-be"),
    "utf16le": ("hello world\n" * 50).encode("utf-16-le"),
    "utf16be": ("hello world\n" * 50).encode("utf-16-be"),
    "utf32-bom": ("hello world\n" * 50).encode("utf-32"),
    "hunt": b"\xff\xfeh\0i\0\n\0",
}
_SAID = {
    "utf16-bom": "is UTF-16 text (a BOM FF FE), not UTF-8; convert it: iconv -f utf-16 -t utf-8",
    "utf16be-bom": "is UTF-16 text (a BOM FE FF), not UTF-8; convert it: iconv -f utf-16 -t utf-8",
    "utf16le": "looks like UTF-16LE text (no BOM; every other byte NUL), not UTF-8; convert it: "
    "iconv -f utf-16le -t utf-8",
    "utf16be": "looks like UTF-16BE text (no BOM; every other byte NUL), not UTF-8; convert it: "
    "iconv -f utf-16be -t utf-8",
    "utf32-bom": "is UTF-32 text (a BOM FF FE 00 00), not UTF-8; convert it: iconv -f utf-32 -t "
    "utf-8",
    "hunt": "is UTF-16 text (a BOM FF FE), not UTF-8; convert it: iconv -f utf-16 -t utf-8",
}


@pytest.mark.parametrize("kind", sorted(_WIDE))
def test_utf16_and_utf32_text_is_named_with_its_iconv(tmp_path, kind):
    path = tmp_path / "a.txt"
    path.write_bytes(_WIDE[kind])
    with pytest.raises(ConfigError) as got:
        check_data_dir(InputConfig(data_dir=str(path), batch_size=1, max_sequence_length=8))
    assert str(got.value) == f"data file '{path}' {_SAID[kind]}"


def test_utf16_text_through_the_cli(tmp_path):
    (tmp_path / "u16").mkdir()
    (tmp_path / "u16" / "a.txt").write_bytes(_WIDE["hunt"])
    refused_in_one_line(
        ROOT, _train(tmp_path, f"train_input.data_dir={tmp_path / 'u16'}"),
        f"Error: data file '{tmp_path / 'u16' / 'a.txt'}' {_SAID['hunt']}",
    )  # fmt: skip
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("raw", "offset"),
    [(b"abc\0def" * 100, 3), (b"ab\0" * 1000, 2), (bytes(range(256)) * 8, 0),
     (b"\0" * 4000, 0), (("hi\n" * 50).encode("utf-32-le"), 1)],
)  # fmt: skip
def test_binary_is_still_binary(tmp_path, raw, offset):
    path = tmp_path / "b.txt"
    path.write_bytes(raw)
    with pytest.raises(ConfigError, match=f"is binary \\(a NUL byte at offset {offset}\\), not"):
        check_data_dir(InputConfig(data_dir=str(path), batch_size=1, max_sequence_length=8))
