"""JSON data files read record by record, as `datasets`' json builder reads them, without
its cache: each line's value of a JSON-lines file, or the elements of a file of one JSON
array (or the rows of one object of columns), each named by its file and its 1-based line or
record. `json_records` reads lines while they end within a byte budget, so a split past its
`max_corpus_bytes` never reads a file whole (hunt 69: `datasets` read a 546 MB .jsonl whole
and cached a 517 MB copy in ~/.cache to keep 100,000 characters, and named a bad record by a
0-based row counted over the whole split); `record_text` is a record's text or the one line
that says why it has none. Used by `data_files.check_data_dir` (the first record) and
`data.corpus_texts` (no JAX)."""

from __future__ import annotations

import codecs
import json
import os
from collections.abc import Iterator
from typing import Any

from wse_core.errors import shown

from wse_trainer.config import ConfigError

__all__ = [
    "PAST",
    "json_array",
    "json_records",
    "no_column",
    "past_budget",
    "record_text",
    "whole_past",
]


def json_records(path: str, budget: int) -> Iterator[tuple[str, Any, int]]:
    """(where, value, bytes read) of each record of the JSON data file `path`: a value per
    line ("line 31", 1-based; blank lines skipped), else the elements of one JSON array or
    the rows of one object of columns, parsed whole ("record 31"), as `datasets`' json
    builder reads them. Lines are read while they end within `budget` bytes (a split reads
    4 x max_corpus_bytes at most; the value of the line that goes on past it is `PAST`); a
    file of one value is read whole, and refused past the budget (`whole_past`)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if _array(f.read(4096)):  # an array of records, or lines that are lists (refused)
            if size > budget:
                raise whole_past(path, size)
            if (rows := _whole_json(f, size)) is not None:
                yield from rows
                return
        f.seek(0)
        number = used = 0
        while used < budget and (line := f.readline(budget - used + 1)):
            number, used = number + 1, used + len(line)
            if used > budget and not line.endswith(b"\n"):
                yield f"line {number}", PAST, used  # it goes on past the budget: not read
                return
            text = line.removeprefix(codecs.BOM_UTF8) if number == 1 else line
            if not text.strip():
                continue
            try:
                value = json.loads(text)
            except (ValueError, RecursionError) as e:
                rows = _whole_json(f, size) if number == 1 and size <= budget else None
                if rows is not None:  # one value over several lines
                    yield from rows
                    return
                raise _not_json(path, f"line {number}", e) from None
            yield f"line {number}", value, used


# The value of a line that goes on past the budget (not read, so not parsed)
PAST = object()


def past_budget(path: str, where: str, budget: int) -> ConfigError:
    """The line for a split whose first record goes on past what it reads."""
    return ConfigError(
        f"data file {path!r} {where} goes on past the {budget:,} bytes its split reads (4 x "
        "max_corpus_bytes; a record is read whole); split the record's text into records, "
        "or raise max_corpus_bytes"
    )


def _array(head: bytes) -> bool:
    return head.lstrip(codecs.BOM_UTF8).lstrip()[:1] == b"["


def json_array(path: str) -> bool:
    """Whether the JSON data file `path` holds one array (parsed whole), not lines."""
    with open(path, "rb") as f:
        return _array(f.read(4096))


def whole_past(path: str, size: int, setting: str = "max_corpus_bytes") -> ConfigError:
    """The line for a file of one JSON value (an array) past what its split reads."""
    return ConfigError(
        f"data file {path!r} is one JSON value of {size:,} bytes (parsed whole), past what "
        f"{setting} reads (4 bytes a character at most); write one JSON object per line, "
        "e.g. jq -c '.[]' in.json > out.jsonl, or raise max_corpus_bytes"
    )


def _whole_json(f: Any, size: int) -> list[tuple[str, Any, int]] | None:
    """The records of the open file `f` read whole as one JSON value; None if it is not one."""
    f.seek(0)
    try:
        value = json.loads(f.read().removeprefix(codecs.BOM_UTF8))
    except (ValueError, RecursionError):
        return None
    if isinstance(value, dict) and _columns(value):  # {"text": [...], ...}: a row each
        value = [dict(zip(value, row, strict=True)) for row in zip(*value.values(), strict=True)]
    rows = value if isinstance(value, list) else [value]
    return [(f"record {i}", row, size) for i, row in enumerate(rows, 1)]


def _columns(value: dict[str, Any]) -> bool:
    lists = [v for v in value.values() if isinstance(v, list)]
    return bool(value) and len(lists) == len(value) and len({len(v) for v in lists}) == 1


def _not_json(path: str, where: str, e: BaseException) -> ConfigError:
    why = " ".join(str(e).split())[:120] or type(e).__name__
    return ConfigError(
        f"data file {path!r} {where} is not JSON ({why}); give one JSON object per line"
    )


def record_text(
    path: str, where: str, record: Any, key: str, *, first: bool = False, setting: str = "text_key"
) -> str | None:
    """The text of a JSON record (None: none, null or ""); ConfigError naming the file and
    line for a record that is no object, whose `key` is no string (hunt 69: 0 and false
    were skipped unsaid while 5 was refused, by a row counted over the whole split) or, the
    split's `first`, has no `key` (`setting`, the option that names it)."""
    if not isinstance(record, dict):
        kinds = {list: "a list", str: "a string", bool: "true or false", type(None): "null"}
        raise ConfigError(
            f"data file {path!r} {where} is {kinds.get(type(record), 'a number')}, not an "
            f'object of fields; give one JSON object per line, e.g. {{"{key}": "..."}}'
        )
    if first and key not in record:
        raise no_column(f"data file {path!r} {where}", key, list(record), setting)
    text = record.get(key)
    if text is None or isinstance(text, str):
        return text or None
    raise ConfigError(
        f"data file {path!r} {where}: {key!r} is {json.dumps(text)[:40]}, not a string; "
        f"every {key!r} must be text"
    )


def no_column(where: str, key: str, names: list[str], setting: str) -> ConfigError:
    """The line for data without the text column `key` (`names`: the columns it has)."""
    columns = shown(", ".join(map(str, names)) or "none", quote=False)
    return ConfigError(f"{where} has no column {key!r}; columns: {columns} (set {setting})")
