"""A split's local data files, found and checked before they are read (no JAX).

`data_files(data_dir)` is (builder, files) for local paths ("text", "json" or "parquet", one
kind per split, each file once however often data_dir names it), or None when `data_dir`
names a dataset. `check_data_dir(cfg, name)` refuses, each in one line naming the file: a
path that is not there or not a regular file (a FIFO would block the reader), a folder
without data files or holding ModelZoo's HDF5 shards (token ids: hunt 69), text or JSON that
is empty, UTF-16 or UTF-32 (a BOM, or every other byte NUL: the iconv that converts it),
binary (a NUL byte) or not UTF-8, a .py or .md file past `max_corpus_bytes` (one document,
read whole: hunt 64, 24 MB took 6.8 GB), a JSON array past what it reads, a save_to_disk folder
that does not load or a name no Hub can give (`hf_data`), a .parquet file without Parquet's magic
bytes or whose footer does not parse (hunt 64: pyarrow's traceback), a first JSON record or
a Parquet schema without `text_key` (hunt 69), JSON nested deeper than `json_depth`, a
record of more fields than `json_fields` or records naming more distinct fields in all than
`json_keys` (wse_core.host.limits), and a corpus that cannot hold one batch: byte-level BPE
tokens cover at least one byte each, so a split's tokens are at most its files' bytes plus
one EOS per document, and fewer than `batch_size x max_sequence_length + 1` cannot fill a
batch (hunt 57: these were `datasets` tracebacks, or refused after the run folder was made).
"""

from __future__ import annotations

import codecs
import os
from pathlib import Path

from wse_core.host.limits import lift, limit
from wse_core.host.readers import not_regular

from wse_trainer import hf_data, json_data
from wse_trainer.config import ConfigError, InputConfig

__all__ = [
    "BUILDERS",
    "SCAN_BYTES",
    "data_files",
    "repeated_entries",
    "check_data_dir",
    "unreadable_parquet",
]

BUILDERS = {
    ".txt": "text",
    ".py": "text",
    ".md": "text",
    ".jsonl": "json",
    ".json": "json",
    ".parquet": "parquet",
}
SCAN_BYTES = 1 << 30  # bytes of text / JSON read by the check per split, at most (1 GiB)
# Data files of one split, and entries walked to find them, are at most the limits
# `data_files` and `data_entries` of wse_core.host.limits (hunt 57: data_dir=/ walked the
# whole filesystem): a corpus of more files is packed into .jsonl or .parquet shards first.
_CHUNK = 1 << 20
# Data files this trainer cannot read, found beside those it can (hunt 69: a folder of
# ModelZoo's HDF5 shards trained on its README.md alone, the .h5 files skipped unsaid)
UNREAD = frozenset({".h5", ".hdf5"})


def _path_like(entry: str) -> bool:
    """Whether `entry` names a local path (a suffix, a leading / . or ~), not a dataset."""
    return bool(Path(entry).suffix) or entry.startswith(("/", ".", "~"))


def _walk(folder: Path) -> list[str]:
    """The data files under `folder` (what `folder.rglob("*")` finds: symlinked folders are
    not entered, unreadable ones skipped), sorted; ConfigError past the limits `data_files`,
    `data_entries` or `data_folders`, counted while each folder is read. `os.scandir` makes
    no Path per entry and reads each entry's type from the folder itself: data_dir=/ walked
    its 10^6 entries in ~0.9 s, not rglob's ~10 s (hunt 59); each folder read costs ~90 us
    with a cold cache, so `data_folders` bounds a cold walk of / (3.5 s) too (hunt 60)."""
    found: list[str] = []
    unread: list[str] = []
    max_files, max_walked, max_below = (limit(n) for n in ("data_files", "data_entries",
                                                           "data_folders"))  # fmt: skip
    walked, below, folders = 0, 0, [str(folder)]
    while folders:
        try:
            with os.scandir(folders.pop()) as entries:
                for entry in entries:
                    walked += 1
                    if _is_folder(entry):  # hunt 60: a folder named notes.md was a data file
                        folders.append(entry.path)
                        below += 1
                    elif os.path.splitext(entry.name)[1] in BUILDERS:
                        found.append(entry.path)
                    elif os.path.splitext(entry.name)[1].lower() in UNREAD:
                        unread.append(entry.path)
                    if len(found) > max_files or walked > max_walked or below > max_below:
                        raise _too_many(folder, len(found) > max_files, walked > max_walked)
        except OSError:  # a folder that cannot be read (permissions, gone meanwhile)
            continue
    if unread:
        raise _unread(str(folder), sorted(unread))
    return sorted(found)


def _unread(where: str, paths: list[str]) -> ConfigError:
    if paths == [where]:
        what = f"data file {where!r} is HDF5"
    else:
        what = f"data_dir {where!r} holds {len(paths):,} HDF5 file{'s' * (len(paths) > 1)}"
    return ConfigError(
        f"{what} ({', '.join(sorted({os.path.splitext(p)[1] for p in paths}))}: ModelZoo's "
        "preprocessed token ids), which this trainer does not read: it trains its own "
        "tokenizer on text; give the raw .txt, .jsonl or .parquet corpus it was made from"
    )


def _is_folder(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


def _too_many(folder: Path, files: bool, entries: bool) -> ConfigError:
    name, unit = (("data_files", "data files") if files else ("data_entries", "entries")
                  if entries else ("data_folders", "folders"))  # fmt: skip
    what = f"more than {limit(name):,} {unit}"
    return ConfigError(
        f"data_dir {str(folder)!r} holds {what}; give the corpus's own folder, or pack its "
        f"documents into .jsonl or .parquet shards ({lift(name)})"
    )


def data_files(data_dir: str | list[str]) -> tuple[str, list[str]] | None:
    """(builder, files) for local paths ("saved", [folder] for a save_to_disk folder), or None
    when `data_dir` is a dataset name; a list's files in real-path order (hunt 70)."""
    if isinstance(data_dir, str) and hf_data.saved_dataset(data_dir):
        return "saved", [data_dir]
    entries = [data_dir] if isinstance(data_dir, str) else list(data_dir)
    files: list[str] = []
    for entry in entries:
        p = Path(entry)
        if p.is_dir():
            files += _walk(p)
        elif os.path.lexists(p):  # a file, or a link that cannot be followed (a loop)
            _size(str(p))
            if p.suffix.lower() in UNREAD:
                raise _unread(entry, [entry])
            files.append(str(p))
        elif isinstance(data_dir, str) and len(entries) == 1 and not _path_like(entry):
            return None  # a dataset's name
        else:
            raise ConfigError(f"data file {entry!r} does not exist")
    if not files:
        raise ConfigError(f"no .txt, .py, .md, .jsonl, .json or .parquet files in {data_dir!r}")
    if len(entries) > 1:  # hunt 69: 'dir' and 'dir/' read every document twice; hunt 70:
        first: dict[str, str] = {}  # in real-path order, `[a, b]` and `[b, a]` are one list
        for f in files:
            first.setdefault(os.path.realpath(f), f)  # each file once, by its first path
        files = [first[real] for real in sorted(first)]
    kinds = {BUILDERS.get(os.path.splitext(f)[1], "text") for f in files}  # no Path per file
    if len(kinds) > 1:
        raise ConfigError(f"data_dir mixes file kinds {sorted(kinds)}; use one kind per split")
    return kinds.pop(), files


def repeated_entries(data_dir: str | list[str]) -> list[tuple[str, str]]:
    """(earlier entry, entry) for each entry of a data_dir list that an earlier one names
    again or holds (`data_files` reads each file once)."""
    if isinstance(data_dir, str):
        return []
    first: dict[str, str] = {}
    out = []
    for entry in data_dir:
        real = os.path.realpath(entry)
        above = (first.get(str(a)) for a in (real, *map(str, Path(real).parents)))
        if (held := next((e for e in above if e is not None), None)) is not None:
            out.append((held, entry))
        first.setdefault(real, entry)
    return out


def _size(path: str) -> int:
    """The bytes of the regular file `path`; ConfigError for anything else (a FIFO would block
    the reader, hunt 60; a folder, a dangling link or a link loop were tracebacks)."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise ConfigError(
            f"data file {path!r} cannot be read ({e.strerror or e}); give a file"
        ) from None
    if why := not_regular(path):
        raise ConfigError(f"data file {path!r} {why}; give a file")
    return st.st_size


def _scan_text(path: str, budget: int, keys: set[str] | None = None) -> int:
    """Bytes of `path` read (at most `budget`); ConfigError for UTF-16/32 text, a NUL byte,
    bad UTF-8 or, given the field names of the split's JSON files so far (`keys`, updated),
    JSON nested deeper than the limit `json_depth`, wider than `json_fields` or naming more
    fields in all than `json_keys`."""
    decoder, offset = codecs.getincrementaldecoder("utf-8")(), 0
    depth = None if keys is None else _JsonLines(path, keys)
    with open(path, "rb") as f:
        while offset < budget and (chunk := f.read(min(_CHUNK, budget - offset))):
            if offset == 0 and (wide := _wide_text(chunk)):  # its NULs are not binary's
                what, encoding = wide
                raise ConfigError(
                    f"data file {path!r} {what}, not UTF-8; convert it: iconv -f "
                    f"{encoding} -t utf-8"
                )
            if depth is not None:
                depth.feed(chunk, offset)
            nul = chunk.find(b"\0")
            if nul >= 0:
                raise ConfigError(
                    f"data file {path!r} is binary (a NUL byte at offset {offset + nul:,}), not "
                    "text; give .txt, .jsonl or .parquet files"
                )
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as e:
                bad = chunk[e.start : e.start + 1].hex()
                raise ConfigError(
                    f"data file {path!r} is not UTF-8 text (byte 0x{bad} at offset "
                    f"{offset + e.start:,}); convert it, e.g. iconv -f latin1 -t utf-8"
                ) from None
            offset += len(chunk)
    return offset


# Byte order marks of the wide Unicode encodings, UTF-32's first (FF FE starts both)
_BOMS = (
    (b"\xff\xfe\x00\x00", "UTF-32", "utf-32"),
    (b"\x00\x00\xfe\xff", "UTF-32", "utf-32"),
    (b"\xff\xfe", "UTF-16", "utf-16"),
    (b"\xfe\xff", "UTF-16", "utf-16"),
)


def _wide_text(head: bytes) -> tuple[str, str] | None:
    """(what it is, iconv's name) when `head`, a file's first bytes, is UTF-16 or UTF-32
    text: a BOM (never valid UTF-8), or no BOM and NULs in half the bytes of one parity, few in
    the other (UTF-16 of Latin text; binary data has NULs at both, BOM-less UTF-32 at both).
    hunt 64: a UTF-16 .txt was refused as "binary ... give .txt"."""
    for bom, name, encoding in _BOMS:
        if head.startswith(bom):
            return f"is {name} text (a BOM {bom.hex(' ').upper()})", encoding
    pairs = min(len(head), 4096) // 2
    if pairs < 2 or b"\0" not in head[: 2 * pairs]:
        return None
    even, odd = (head[side : 2 * pairs : 2].count(0) for side in (0, 1))
    for nul, other, order in ((odd, even, "le"), (even, odd, "be")):
        if 2 * nul >= pairs and 10 * other <= nul:
            return (
                f"looks like UTF-16{order.upper()} text (no BOM; every other byte NUL)",
                f"utf-16{order}",
            )
    return None


class _JsonLines:
    """The nesting of a JSON data file read in chunks, each cut after its last newline (hunt
    61: a .jsonl line 100,000 levels deep crashed the process in pyarrow's JSON reader, a
    segmentation fault after the run folder was made), the width of its records (hunt 61: a
    record of 200,000 fields, each a column to HF datasets, took 61 s to load) and the field
    names of the split so far, `keys` (shared by its files: 20,000 narrow records, each of
    its own field, made 20,001 columns of 20,000 rows: 47 s to load, 90 s to a 2-step run)."""

    def __init__(self, path: str, keys: set[str]) -> None:
        self.path, self.depth, self.rest, self.keys = path, 0, b"", keys
        self.lines, self.open = 0, 0  # lines done; fields so far of a line past a chunk

    def feed(self, chunk: bytes, offset: int) -> None:
        from wse_core.host.readers import lines_run

        text = self.rest + chunk
        cut = text.rfind(b"\n") + 1 or len(text)  # a line past a chunk: its brackets now
        text, self.rest = text[:cut], text[cut:]
        seen = lines_run(text.decode("utf-8", "ignore"), self.depth, self.open, self.keys)
        deepest, self.depth, fields, line, self.open = seen
        if deepest > (most := limit("json_depth")):
            raise ConfigError(
                f"data file {self.path!r} nests JSON {deepest:,} levels deep (before byte "
                f"{offset + len(chunk):,}), over the limit of {most} ({lift('json_depth')}); "
                "give one flat JSON object per line"
            )
        ended = text.count(b"\n")  # lines this piece ends
        if fields > (most := limit("json_fields")):
            partial = self.open and line == ended  # that line goes on: counted so far
            count = f"{'at least ' if partial else ''}{fields:,}"
            raise ConfigError(
                f"data file {self.path!r} has a record of {count} fields (line "
                f"{self.lines + line + 1:,}), over the limit of {most:,} ({lift('json_fields')}); "
                "training reads one text field: give records of a few fields, e.g. "
                "jq -c '{text}' in.jsonl > out.jsonl"
            )
        self.lines += ended
        if len(self.keys) > (most := limit("json_keys")):
            raise ConfigError(
                f"the split's JSON records name {len(self.keys):,} distinct fields by line "
                f"{self.lines:,} of data file {self.path!r}, over the limit of {most:,} "
                f"({lift('json_keys')}); HF datasets makes a column of each name for every row, "
                "and training reads one text field: give records of the same few fields, e.g. "
                "jq -c '{text}' in.jsonl > out.jsonl"
            )


def _check_parquet(path: str) -> list[str]:
    """Its columns; ConfigError unless `path` has Parquet's magic bytes and a footer that
    parses (its schema and row groups; reading it costs well under a millisecond): a corrupt
    or truncated body's footer was pyarrow's OSError / ArrowInvalid traceback (hunt 64).
    Pages corrupt under a good footer are found where they are read (`wse_trainer.data`)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    with open(path, "rb") as f:
        head = f.read(4)
        f.seek(max(0, Path(path).stat().st_size - 4))
        tail = f.read(4)
        if head != b"PAR1" or tail != b"PAR1":
            raise ConfigError(
                f"data file {path!r} is not a Parquet file (no PAR1 magic bytes at its start "
                "and end); give .parquet files written by pyarrow or pandas"
            )
        try:
            return pq.ParquetFile(f).schema_arrow.names
        except (OSError, pa.ArrowException) as e:
            raise unreadable_parquet(path, e) from None


def unreadable_parquet(path: str, error: BaseException) -> ConfigError:
    """The one line for a Parquet file pyarrow cannot read (`error`, its exception)."""
    why = " ".join(str(error).split())[:200] or type(error).__name__
    return ConfigError(
        f"data file {path!r} is not a readable Parquet file ({why}); rewrite it with "
        "pyarrow or pandas"
    )


def _past_cap(path: str, size: int, cap: int, name: str) -> ConfigError:
    """A .py or .md file past the cap: one document, read whole (hunt 64: 24 MB took 6.8 GB)."""
    return ConfigError(
        f"data file {path!r} is {size:,} bytes, past {name}.max_corpus_bytes={cap:,} (the "
        "most text the split reads; a .py or .md file is one document, read whole); split it "
        f"into files of at most {cap:,} bytes, or raise {name}.max_corpus_bytes"
    )


def _check_first_record(files: list[str], sizes: list[int], cfg: InputConfig, name: str) -> None:
    """ConfigError when the split's first JSON record is no object or has no `text_key`
    (hunt 69: a wrong text_key was found after every file was read and cached, and
    --validate-only passed it)."""
    path = next(f for f, size in zip(files, sizes, strict=True) if size)
    first = next(json_data.json_records(path, 4 * cfg.max_corpus_bytes), None)
    if first is None:
        return  # only blank lines
    where, record, _ = first
    if record is json_data.PAST:
        raise json_data.past_budget(path, where, 4 * cfg.max_corpus_bytes)
    json_data.record_text(path, where, record, cfg.text_key, first=True, setting=f"{name}.text_key")


def check_data_dir(cfg: InputConfig, name: str = "train_input") -> None:
    """ConfigError when `cfg.data_dir`'s local files cannot give one batch of its split (the
    module docstring; `name`, the config section of `cfg`, is what the lines name); a
    dataset's name is checked when it is loaded."""
    if cfg.data_dir == "stdlib":
        return
    if (found := data_files(cfg.data_dir)) is None:
        return hf_data.check_name(str(cfg.data_dir), name)
    builder, files = found
    if builder == "saved":
        return hf_data.check_saved(cfg, name)
    sizes = [_size(f) for f in files]
    one = len(files) == 1
    where = f"data file {files[0]!r}" if one else f"the {len(files)} data files in {cfg.data_dir!r}"
    if not any(sizes):
        raise ConfigError(f"{where} {'is' if one else 'are all'} empty (0 bytes); give text")
    if builder == "parquet":
        columns = [_check_parquet(f) for f in files]
        if cfg.text_key not in columns[0]:  # hunt 69: found once datasets cached them all
            raise json_data.no_column(
                f"data file {files[0]!r}", cfg.text_key, columns[0], f"{name}.text_key"
            )
        return
    budget, keys = SCAN_BYTES, set[str]() if builder == "json" else None
    if builder == "json":  # what the split reads of them (`json_data`), at most
        budget = min(budget, 4 * cfg.max_corpus_bytes)
    for f, size in zip(files, sizes, strict=True):
        if builder == "text" and size > cfg.max_corpus_bytes and not hf_data.by_line(f):
            _scan_text(f, min(budget, _CHUNK))  # what it is first (UTF-16, binary)
            raise _past_cap(f, size, cfg.max_corpus_bytes, name)
        if builder == "json" and size > 4 * cfg.max_corpus_bytes and json_data.json_array(f):
            raise json_data.whole_past(f, size, f"{name}.max_corpus_bytes")
        budget -= _scan_text(f, budget, keys)
    if builder == "json":
        _check_first_record(files, sizes, cfg, name)
    holds = f"{where} hold{'s' if one else ''}"  # a file at least one document
    if error := hf_data.short_of_a_batch(holds, sum(sizes), len(files), cfg):
        raise error
