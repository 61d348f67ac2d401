"""Data read as HF `datasets` reads it, where its users expect that (hunt 75; no JAX).

- `by_line(path)`: a text file other than .py and .md is one document a line, as `datasets`'
  text builder reads it by default (`sample_by="line"`: text mode, split at "\\n", the "\\n"
  dropped); `wse_trainer.data` reads it so. Source and Markdown files stay one document each.
- `saved_dataset(path)`: a folder `Dataset.save_to_disk` or `DatasetDict.save_to_disk` wrote
  (state.json and dataset_info.json, or dataset_dict.json), loaded with `datasets.load_from_disk`
  (`load_saved`): a DatasetDict's "train" split is the train split, and its "validation" (or
  "valid", "val", "test") split the eval split (`own_split`: then nothing is held out of
  "train"); without one the eval split is held out of "train" as for files. Before, its
  metadata JSON was read as the corpus.
- `check_name(name, setting)`: a data_dir that is no local path is a Hub dataset's name; where
  the Hub cannot be reached (no network) and `datasets` is not told to read its cache
  (HF_DATASETS_OFFLINE / HF_HUB_OFFLINE), it is refused at once, in one line, by the check and
  --validate-only too (before: 27 s of huggingface_hub's retries and their log lines). `quiet()`
  keeps `datasets`' and huggingface_hub's log lines off stderr while a dataset loads.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

from wse_trainer.config import ConfigError, InputConfig

__all__ = ["by_line", "check_name", "check_saved", "load_saved", "own_split", "quiet",
           "saved_dataset", "short_of_a_batch"]  # fmt: skip

WHOLE = (".py", ".md")  # text files read as one document each
EVAL_SPLITS = ("validation", "valid", "val", "test")  # a DatasetDict's eval split, first found
SIZE_ROWS = 10_000  # rows read at a time while a saved split's text is sized
HUB_PROBE_S = 3.0  # how long the Hub is waited for before it is taken as unreachable


def by_line(path: str) -> bool:
    """Whether the text file `path` is one document a line (module docstring)."""
    return not path.endswith(WHOLE)


def saved_dataset(path: str | Path) -> bool:
    """Whether `path` is a folder `save_to_disk` wrote (a Dataset or a DatasetDict)."""
    p = Path(path)
    return (p / "dataset_dict.json").is_file() or (
        (p / "state.json").is_file() and (p / "dataset_info.json").is_file()
    )


def _splits(path: str) -> list[str] | None:
    """A saved DatasetDict's split names, or None for a saved Dataset."""
    try:
        listed = json.loads((Path(path) / "dataset_dict.json").read_text())["splits"]
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"data_dir {path!r}: its dataset_dict.json does not parse: {e}") from None
    return [str(s) for s in listed]


def _eval_split(splits: list[str]) -> str | None:
    return next((s for s in EVAL_SPLITS if s in splits), None)


def own_split(cfg: InputConfig) -> bool:
    """Whether `cfg`'s split is a saved DatasetDict's own (nothing held out of it)."""
    if cfg.split == "all" or not isinstance(cfg.data_dir, str) or not saved_dataset(cfg.data_dir):
        return False
    splits = _splits(cfg.data_dir)
    return splits is not None and _eval_split(splits) is not None


def load_saved(cfg: InputConfig):
    """The `datasets.Dataset` of `cfg`'s split of a saved folder (module docstring)."""
    import datasets

    path = str(cfg.data_dir)
    try:
        with quiet():
            loaded = datasets.load_from_disk(path)
    except (OSError, ValueError, FileNotFoundError) as e:
        why = " ".join(f"{type(e).__name__}: {e}".split())[:200]
        raise ConfigError(
            f"data_dir {path!r} is a datasets save_to_disk folder that cannot be loaded: {why}"
        ) from None
    if not isinstance(loaded, datasets.DatasetDict):
        return loaded
    splits = list(loaded)
    held = _eval_split(splits)
    name = held if cfg.split == "eval" and held else "train"
    if name not in loaded:
        raise ConfigError(
            f"data_dir {path!r} is a saved DatasetDict of splits {', '.join(splits)}, none "
            "named 'train'; save the training split as 'train'"
        )
    return loaded[name]


def check_saved(cfg: InputConfig, setting: str) -> None:
    """ConfigError when a saved folder cannot be loaded, has no `text_key` column, or its
    split's text cannot give one batch (`short_of_a_batch`, the bound the local files get:
    hunt 75b, 50 short rows passed --validate-only and the run then failed)."""
    ds = load_saved(cfg)
    where = f"data_dir {cfg.data_dir!r} (a datasets save_to_disk folder)"
    if cfg.text_key not in ds.column_names:
        raise ConfigError(
            f"{where} has no column {cfg.text_key!r}; columns: {', '.join(ds.column_names)} "
            f"(set {setting}.text_key)"
        )
    import pyarrow as pa
    import pyarrow.compute as pc

    column = ds.select_columns([cfg.text_key]).with_format("arrow")
    kind = column.features.arrow_schema.field(0).type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        return  # not text: the split's reader says what it is
    need, nbytes, rows = cfg.batch_size * cfg.max_sequence_length + 1, 0, 0
    for table in column.iter(batch_size=SIZE_ROWS):  # until one batch is certain, at most
        texts = table.column(0)
        nbytes += pc.sum(pc.binary_length(texts)).as_py() or 0
        rows += len(texts) - texts.null_count
        if nbytes + rows >= need:
            return
    holds = f"{where[:-1]}: {rows:,} rows of text) holds"
    if error := short_of_a_batch(holds, nbytes, rows, cfg):
        raise error


def short_of_a_batch(holds: str, nbytes: int, documents: int, cfg: InputConfig):
    """The ConfigError when `nbytes` of text in `documents` cannot give one batch of `cfg`
    (at most a token a byte, plus an EOS a document), else None; `holds` leads the line
    ("data file 'a.txt' holds"). Local files and saved folders both (`check_saved`,
    `data_files.check_data_dir`)."""
    need = cfg.batch_size * cfg.max_sequence_length + 1
    most = nbytes + documents
    if most >= need:
        return None
    return ConfigError(
        f"{holds} {nbytes:,} bytes: at most {most:,} tokens, fewer than one batch of "
        f"batch_size {cfg.batch_size} x max_sequence_length {cfg.max_sequence_length} (+1) = "
        f"{need:,} tokens; add data, or lower batch_size or max_sequence_length"
    )


def _offline() -> bool:
    """Whether `datasets` is told to read its cache only (then a name is tried there)."""
    return any(
        os.environ.get(v, "").upper() in ("1", "ON", "YES", "TRUE")
        for v in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE")
    )


@functools.lru_cache(maxsize=1)
def hub_reachable() -> bool:
    """Whether a TCP connection to the Hub (HF_ENDPOINT's host) opens within `HUB_PROBE_S`;
    the name lookup too is waited for at most that long."""
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    host, port = url.hostname or "huggingface.co", url.port or (80 if url.scheme == "http" else 443)
    opened: list[bool] = []

    def probe() -> None:
        try:
            socket.create_connection((host, port), timeout=HUB_PROBE_S).close()
            opened.append(True)
        except OSError:
            pass

    t = threading.Thread(target=probe, name="wse-hub-probe", daemon=True)
    t.start()
    t.join(HUB_PROBE_S)
    return bool(opened)


def check_name(name: str, setting: str) -> None:
    """ConfigError at once for `name`, no local path, where no Hub dataset of that name can
    be loaded: the Hub cannot be reached and `datasets` is not told to read its cache."""
    if _offline() or hub_reachable():
        return
    raise ConfigError(
        f"{setting}.data_dir {name!r}: no such file or folder (in {os.getcwd()!r}), and this "
        "machine cannot reach the Hugging Face Hub for a dataset of that name (a Hub dataset "
        "id is name or org/name; HF_DATASETS_OFFLINE=1 loads one from the datasets cache)"
    )


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """`datasets`' and huggingface_hub's log lines (retries, warnings) off while inside."""
    logs = [logging.getLogger(n) for n in ("datasets", "huggingface_hub", "urllib3", "fsspec")]
    levels = [log.level for log in logs]
    for log in logs:
        log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for log, level in zip(logs, levels, strict=True):
            log.setLevel(level)
