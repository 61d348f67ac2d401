"""Data: the corpus, a byte-level BPE tokenizer, packing and a checkpointable iterator.

- `corpus_texts(input_config)` reads the documents of local text files (a line each, as
  `datasets`' text builder reads them; .py and .md files whole: `hf_data.by_line`), folders
  `save_to_disk` wrote (`hf_data.load_saved`) and JSON files (record by record,
  `wse_trainer.json_data`) itself, in one pass within the split's `max_corpus_bytes`; Parquet
  files and dataset names through HF `datasets`; for `data_dir: stdlib`, the Python standard
  library's own source files (present on every machine, different in each Python version).
  hunt 69: `datasets` built a dataset of each file (100,000 small files took 251 s) and
  cached a copy of the JSON it read whole in ~/.cache, whatever the cap kept. The eval split
  is a twentieth of the corpus by bytes (`held_out`), so its size follows what is there
  rather than how the documents happen to be cut, and it shares no document with the train
  split of the same data at any caps or list order (`wse_trainer.splits`: hunt 70).
- `train_tokenizer(texts, vocab_size)` trains a byte-level BPE with HF `tokenizers`;
  `tokenizer_identity` is the sha256 of its JSON, stored with every checkpoint.
- `pack(token_lists, seq_len, eos_id)` joins documents with EOS and cuts rows of
  `seq_len + 1` tokens (inputs and shifted targets), int32.
- `segments(inputs, eos_id)`: for `packing: true`, each row's documents as segment ids and
  positions restarting at 0 in each (an EOS opens the next document, as a BOS would), so a
  token attends only within its own document and no padding is needed.
- `pad_documents(token_lists, seq_len, pad_id)`: the padded alternative (one document per
  row, longer ones cut into rows) with its mask of real tokens: what packing saves.
- `BatchIterator` (`wse_trainer.batches`, re-exported): the seeded, checkpointable batches.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from wse_trainer import hf_data
from wse_trainer.batches import BatchIterator
from wse_trainer.config import ConfigError, InputConfig
from wse_trainer.data_files import check_data_dir, data_files, unreadable_parquet
from wse_trainer.json_data import PAST, json_records, past_budget, record_text
from wse_trainer.splits import EVAL_EVERY, held_out, stdlib_eval, stdlib_files

__all__ = [
    "EOS",
    "EVAL_EVERY",
    "stdlib_files",
    "check_data_dir",
    "held_out",
    "corpus_texts",
    "train_tokenizer",
    "tokenizer_identity",
    "read_tokenizer",
    "pack",
    "pad_documents",
    "segments",
    "Segments",
    "BatchIterator",
]

EOS = "<|endoftext|>"


def _load_documents(cfg: InputConfig) -> list[str]:
    if cfg.data_dir == "stdlib":
        files = list(stdlib_files(cfg.max_corpus_bytes))
        if not files:  # hunt 57: datasets' "Empty 'data_files'" traceback
            raise ConfigError(
                f"max_corpus_bytes={cfg.max_corpus_bytes:,} holds no standard library file; "
                "give at least 100000"
            )
        if cfg.split != "all":  # split as it is read, by the whole library's marks
            files = [f for f in files if (f in stdlib_eval()) == (cfg.split == "eval")]
        return _text_documents(files, cfg, whole=True)
    found = data_files(cfg.data_dir)
    if found is None:
        return _texts(_named_dataset(cfg), cfg)
    builder, files = found
    if builder == "saved":
        return _texts(hf_data.load_saved(cfg), cfg)
    if builder == "text":
        return _text_documents(files, cfg)
    if builder == "json":
        return _json_documents(files, cfg)
    import datasets
    import pyarrow as pa

    datasets.disable_progress_bars()
    log = logging.getLogger("datasets")  # its error lines would precede the one line
    level, _ = log.level, log.setLevel(logging.CRITICAL)
    try:
        ds = datasets.load_dataset(builder, data_files=files, split="train")
    except (datasets.exceptions.DatasetGenerationError, OSError, pa.ArrowException) as e:
        raise _unreadable(builder, files, cfg, e) from None
    finally:
        log.setLevel(level)
    return _texts(ds, cfg)


def _named_dataset(cfg: InputConfig):
    import datasets

    datasets.disable_progress_bars()
    hf_data.check_name(str(cfg.data_dir), "train_input" if cfg.split != "eval" else "eval_input")
    try:
        with hf_data.quiet():  # hunt 75: 11 lines of retries before the one line
            return datasets.load_dataset(str(cfg.data_dir), split="train")
    except (OSError, ValueError, ConnectionError) as e:  # not found, offline, bad
        why = " ".join(str(e).split())[:200]
        raise ConfigError(
            f"data_dir {cfg.data_dir!r} is no local file or folder, and no dataset "
            f"of that name could be loaded: {type(e).__name__}: {why}"
        ) from None


class _Kept:
    """Documents kept in order up to the split's cap of characters: a document that would
    pass it ends the split, unless it is the first (kept whole, it broke the cap: hunt 64)."""

    def __init__(self, cfg: InputConfig) -> None:
        self.cfg, self.docs, self.total = cfg, [], 0

    def full(self, text: str, where: str) -> bool:
        """Keep `text` (of `where`); True once the cap is reached (it is not kept then)."""
        if self.total + len(text) > self.cfg.max_corpus_bytes:
            if self.docs:
                return True
            raise _first_past_cap(where, len(text), self.cfg)
        self.docs.append(text)
        self.total += len(text)
        return False


def _text_documents(files: list[str], cfg: InputConfig, *, whole: bool = False) -> list[str]:
    """The documents of text files read in text mode (a CRLF or CR read as LF, as `datasets`
    reads them): a line each, its "\n" dropped (`datasets`' text builder's rows, hunt 75: a
    .txt was one document), or each file whole (`whole`, .py and .md: `hf_data.by_line`);
    empty ones are no document, as `_texts` skips a dataset's empty rows. A file is read only
    while the cap is not reached (hunt 64: `datasets` read every file it was given whole)."""
    kept = _Kept(cfg)
    for path in files:
        try:
            with open(path, encoding="utf-8") as f:
                if whole or not hf_data.by_line(path):
                    docs = ((f.read(), f"data file {path!r}"),)
                else:
                    docs = (
                        (t.rstrip("\n"), f"data file {path!r} line {n}") for n, t in enumerate(f, 1)
                    )
                for text, where in docs:
                    if text and kept.full(text, where):
                        return kept.docs
        except (OSError, UnicodeDecodeError) as e:  # changed since `check_data_dir`
            why = e.strerror if isinstance(e, OSError) else f"not UTF-8 text ({e.reason})"
            raise ConfigError(f"data file {path!r} cannot be read: {why}") from None
    return kept.docs


def _json_documents(files: list[str], cfg: InputConfig) -> list[str]:
    """The `text_key` of each record, read while the files' bytes stay within 4 x the cap
    (no character takes more than 4 bytes) and the text within the cap."""
    kept, left = _Kept(cfg), 4 * cfg.max_corpus_bytes
    first = True
    for path in files:
        read = 0
        for where, record, end in json_records(path, left):
            if record is PAST:
                if kept.docs:
                    return kept.docs
                raise past_budget(path, where, 4 * cfg.max_corpus_bytes)
            text = record_text(path, where, record, cfg.text_key, first=first)
            read, first = end, False
            if text and kept.full(text, f"data file {path!r} {where}"):
                return kept.docs
        left -= read
        if left <= 0:
            break
    return kept.docs


def _unreadable(builder: str, files: list[str], cfg: InputConfig, e: Exception) -> ConfigError:
    """The one line for Parquet data `datasets` could not read: pages corrupt under a good
    footer, or pyarrow's own OSError / ArrowInvalid, raised unwrapped while `datasets` reads
    a footer for its schema (hunt 64: an 82-line traceback)."""
    import datasets

    cause = (e.__cause__ or e) if isinstance(e, datasets.exceptions.DatasetGenerationError) else e
    if len(files) == 1:
        return unreadable_parquet(files[0], cause)
    why = " ".join(f"{type(cause).__name__}: {cause}".split())[:200]
    return ConfigError(
        f"the {builder} files of {cfg.data_dir!r} cannot be read: {why}; rewrite them with "
        "pyarrow or pandas"
    )


def _texts(ds, cfg: InputConfig) -> list[str]:
    """The `text_key` column of a `datasets` dataset (Parquet files or a dataset's name)."""
    if cfg.text_key not in ds.column_names:
        raise ConfigError(
            f"the data has no column {cfg.text_key!r}; columns: "
            f"{', '.join(ds.column_names)} (set text_key)"
        )
    kept = _Kept(cfg)
    for i, text in enumerate(ds[cfg.text_key]):
        if text is None or text == "":
            continue
        if not isinstance(text, str):  # hunt 57: {"text": 5}; hunt 69: 0 and false passed
            raise ConfigError(
                f"row {i} of {cfg.data_dir!r} has {cfg.text_key!r}: {text!r:.40}, not text; "
                f"every {cfg.text_key!r} must be a string"
            )
        if kept.full(text, f"row {i} of {cfg.data_dir!r}"):
            break
    return kept.docs


def _first_past_cap(where: str, size: int, cfg: InputConfig) -> ConfigError:
    """The split's first document alone is longer than its cap (a record of JSON, Parquet or
    a dataset; `check_data_dir` refuses such text files up front): a document is tokenized
    whole, so it cannot be read within the cap."""
    return ConfigError(
        f"{where} has a {cfg.text_key!r} of {size:,} characters, past the split's "
        f"max_corpus_bytes={cfg.max_corpus_bytes:,} (the most text it reads; a document is "
        "read whole); split the document, or raise max_corpus_bytes"
    )


def corpus_texts(cfg: InputConfig) -> list[str]:
    """The documents of `cfg`'s split, in a fixed order: marked by `held_out` as they are
    read, the standard library's by `stdlib_eval` (`wse_trainer.splits`: disjoint from the
    other split whatever its cap or list order)."""
    docs = _load_documents(cfg)
    if cfg.split == "all":
        return docs
    picked = docs  # stdlib: split as it was read
    if cfg.data_dir != "stdlib" and not hf_data.own_split(cfg):  # a DatasetDict's own split
        marks = held_out([len(d.encode()) for d in docs])
        picked = [d for d, m in zip(docs, marks, strict=True) if m == (cfg.split == "eval")]
    if not picked and cfg.data_dir == "stdlib":  # its few files there are the other split's
        raise ConfigError(
            f"the {cfg.split} split of 'stdlib' is empty within max_corpus_bytes="
            f"{cfg.max_corpus_bytes:,}; raise max_corpus_bytes (e.g. to 100000)"
        )
    if not picked:
        raise ConfigError(
            f"the {cfg.split} split of {cfg.data_dir!r} is empty; add documents or use split: all"
        )
    return picked


def train_tokenizer(texts: Sequence[str], vocab_size: int) -> Tokenizer:
    """A byte-level BPE of `vocab_size` tokens (id 0 is EOS) trained on `texts`."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def tokenizer_identity(tok: Tokenizer) -> str:
    return hashlib.sha256(tok.to_str().encode()).hexdigest()


def pack(token_lists: Sequence[Sequence[int]], seq_len: int, eos_id: int) -> np.ndarray:
    """Documents joined with EOS, cut into rows of `seq_len + 1` tokens: (n, seq_len + 1)."""
    flat = np.fromiter((t for ids in token_lists for t in (*ids, eos_id)), dtype=np.int32)
    n = (len(flat) - 1) // seq_len
    if n < 1:
        raise ConfigError(
            f"the corpus has {len(flat)} tokens, fewer than one sequence of "
            f"{seq_len + 1}; lower max_sequence_length or add data"
        )
    # Row i covers tokens [i*seq_len, (i+1)*seq_len]: consecutive rows overlap by one token
    # so every token is a target exactly once.
    idx = np.arange(n)[:, None] * seq_len + np.arange(seq_len + 1)[None, :]
    return flat[idx]


class Segments(NamedTuple):
    """Packed documents of a batch's inputs: int32 [b, s] each."""

    segment_ids: np.ndarray  # document index within the row
    positions: np.ndarray  # 0, 1, ... restarting at each document


def segments(inputs: np.ndarray, eos_id: int) -> Segments:
    """Segment ids and per-document positions of packed rows inputs int [b, s].

    An EOS token opens a new segment: in a row ``a a EOS b b b EOS c`` the documents are
    ``a a | EOS b b b | EOS c`` at positions ``0 1 | 0 1 2 3 | 0 1``. Each token's target (the
    next token) then belongs to its own document, with EOS standing in for a BOS; a document
    cut by a row boundary continues as a segment of its own in the next row."""
    inputs = np.asarray(inputs)
    is_eos = inputs == eos_id
    seg = np.cumsum(is_eos, axis=1, dtype=np.int32)
    idx = np.broadcast_to(np.arange(inputs.shape[1], dtype=np.int32), inputs.shape)
    start = np.maximum.accumulate(np.where(is_eos, idx, 0), axis=1)
    return Segments(seg, (idx - start).astype(np.int32))


def pad_documents(
    token_lists: Sequence[Sequence[int]], seq_len: int, eos_id: int, pad_id: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """The padded way: each document (ending in EOS, as `pack` joins them) starts a row of
    `seq_len + 1` tokens, is cut into several rows when longer (consecutive rows overlap by
    one token, as in `pack`), and its last row is filled up with `pad_id` -> (rows int32
    (n, seq_len + 1), real bool (n, seq_len + 1)). A target is padding where `real[:, 1:]`
    is False."""
    rows, real = [], []
    for ids in token_lists:
        doc = np.asarray([*ids, eos_id], np.int32)
        for a in range(0, max(len(doc) - 1, 1), seq_len):
            piece = doc[a : a + seq_len + 1]
            row = np.full(seq_len + 1, pad_id, np.int32)
            row[: len(piece)] = piece
            rows.append(row)
            real.append(np.arange(seq_len + 1) < len(piece))
    return np.stack(rows), np.stack(real)


def read_tokenizer(path: Path) -> Any:
    """A `tokenizers.Tokenizer` from its file; ConfigError (one line) when it is not one or
    has no EOS token (`wse_trainer.data.EOS`: the runs pack documents with it; hunt 64: a
    58-line TypeError in `pack` after 18 s), a LimitError when it is no regular file or past
    `file_bytes` (hunt 62: a FIFO hung the run, a link to /dev/zero read until memory ran
    out)."""
    from wse_core.host.readers import read_text

    try:
        text = read_text(path, "tokenizer file")
    except (OSError, UnicodeDecodeError) as e:
        why = e.strerror if isinstance(e, OSError) else f"not UTF-8 text ({e.reason})"
        raise ConfigError(f"cannot read tokenizer file {str(path)!r}: {why}") from None
    try:
        tok = Tokenizer.from_str(text)
    except Exception as e:  # tokenizers raises a bare Exception for a file it cannot parse
        why = " ".join(str(e).split())[:200]
        raise ConfigError(f"{path} is not a readable tokenizer file: {why}") from None
    if tok.token_to_id(EOS) is None:
        raise ConfigError(
            f"tokenizer file {str(path)!r} has no {EOS!r} token (the end-of-document token a "
            "run packs documents with); remove it to train one, or add it"
        )
    return tok
