"""vLLM's ShareGPT file, read with bounds for `wse infer bench --dataset-name sharegpt`.

Contract. `read_sharegpt(path)` is the (prompt, reply) texts of the file's conversations in
its order: the first two turns' "value" of each entry whose "conversations" holds two turns
or more; an entry without "conversations", or with fewer turns, is skipped, as vLLM's
ShareGPTDataset skips it (it also reads the two turns whatever their "from"). The file is
vLLM's shape, a JSON list of {"conversations": [{"from": "human", "value": ...}, {"from":
"gpt", "value": ...}, ...]} (ShareGPT_V3_unfiltered_cleaned_split.json), a local file only
(nothing is downloaded). `ShareGPTFileError`, one line naming the file, what is wrong and the
shape expected, for a file that is missing, not a regular file (a FIFO is refused before it
is opened), over `MAX_SHAREGPT_BYTES` (refused from its size, before a byte is read), not
UTF-8, not JSON, not a list, or whose used turns are not objects with a text "value".

Memory: vLLM's `json.load` holds the file's text and every object of it at once. Here the
file is decoded a window at a time and the list's entries one at a time (`_Window`), only the
two texts of each kept, so the peak is the kept texts and a window (16 MiB, or twice the
largest entry): one str of the whole file would take 4 bytes a character for all of it as
soon as one character (an emoji) is past U+FFFF, 2.7 GB for ShareGPT V3.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

__all__ = ["MAX_SHAREGPT_BYTES", "ShareGPTFileError", "read_sharegpt"]

# ShareGPT_V3_unfiltered_cleaned_split.json, the file vLLM's docs name, is 0.67 GB
MAX_SHAREGPT_BYTES = 1 << 30
_CHUNK_BYTES = 1 << 24
_SHAPE = ('a JSON list of {"conversations": [{"from": "human", "value": "..."}, '
          '{"from": "gpt", "value": "..."}]} (ShareGPT, as vLLM reads it)')  # fmt: skip
_BLANK = re.compile(r"[ \t\n\r]*")
_KINDS = {str: "a string", int: "a number", float: "a number", list: "a list", bool: "true or "
          "false", type(None): "null", dict: "an object"}  # fmt: skip


class ShareGPTFileError(ValueError):
    """A file that is not a ShareGPT file this bench reads (its message: one line)."""


def _bad(where: str, what: str) -> ShareGPTFileError:
    """`where` (the file) is `what`: the refusal, with the shape expected."""
    return ShareGPTFileError(f"{where} {what}; expected {_SHAPE}")


class _Window:
    """The file's text from `pos` on, read and decoded as needed: at least `_CHUNK_BYTES`
    at a time, and as much again as the window holds (an entry longer than the window is
    parsed again only as often as the window doubles: linear in its size)."""

    def __init__(self, f: BinaryIO, where: str) -> None:
        self.f, self.where = f, where
        self.decoder = codecs.getincrementaldecoder("utf-8-sig")()  # a BOM is no JSON
        self.text, self.pos = "", 0
        self.done, self.lines = 0, 0  # characters and newlines dropped before `text`
        self.read_bytes, self.eof = 0, False

    def more(self) -> None:
        """Drop what was read, add the next bytes (EOF: `eof`)."""
        chunk = self.f.read(max(_CHUNK_BYTES, len(self.text) - self.pos))
        try:
            added = self.decoder.decode(chunk, final=not chunk)
        except UnicodeDecodeError as e:
            at = self.read_bytes + e.start
            raise _bad(self.where, f"is not UTF-8 text (byte {at:,})") from None
        self.read_bytes += len(chunk)
        if self.read_bytes > MAX_SHAREGPT_BYTES:  # it grew since its size was checked
            raise ShareGPTFileError(f"{self.where} grew past {MAX_SHAREGPT_BYTES:,} bytes")
        self.done += self.pos
        self.lines += self.text.count("\n", 0, self.pos)
        self.text, self.pos, self.eof = self.text[self.pos :] + added, 0, not chunk

    def char(self) -> str:
        """The next character that is not JSON whitespace ("" at the end), not consumed."""
        while True:
            self.pos = _BLANK.match(self.text, self.pos).end()  # type: ignore[union-attr]
            if self.pos < len(self.text) or self.eof:
                return self.text[self.pos : self.pos + 1]
            self.more()

    def value(self, decoder: json.JSONDecoder, n: int) -> Any:
        """The JSON value at `pos` (entry `n`), consumed; read on while it is cut off."""
        while True:
            try:
                value, end = decoder.raw_decode(self.text, self.pos)
                if end < len(self.text) or self.eof:  # a number may go on past the window
                    self.pos = end
                    return value
            except json.JSONDecodeError as e:
                if self.eof:
                    line = self.lines + self.text.count("\n", 0, e.pos) + 1
                    at = f"{e.msg} at line {line:,}, character {self.done + e.pos:,}"
                    raise _bad(self.where, f"is not JSON ({at})") from None
            except RecursionError:
                deep = f"entry {n} nests deeper than Python's JSON reader goes"
                raise _bad(f"{self.where}:", deep) from None
            self.more()


def _entries(f: BinaryIO, where: str) -> Iterator[tuple[int, Any]]:
    """The elements of the file's JSON list, decoded one at a time."""
    w, decoder, n = _Window(f, where), json.JSONDecoder(), 0
    if w.char() != "[":
        raise _bad(where, "is not a JSON list")
    w.pos += 1
    while w.char() != "]" or n:  # after a ",", a value (JSON has no trailing comma)
        yield n, w.value(decoder, n)
        n += 1
        if (c := w.char()) == "]":
            break
        if c != ",":
            at = f"',' or ']' expected at character {w.done + w.pos:,}"
            raise _bad(f"{where}:", f"the list is not closed after entry {n - 1} ({at})")
        w.pos += 1
    w.pos += 1
    if w.char():
        raise _bad(where, "holds more after its list")


def _first_turns(n: int, entry: Any, where: str) -> tuple[str, str] | None:
    """Entry `n`'s first two turns' texts; None for an entry vLLM skips."""
    if not isinstance(entry, dict):
        raise _bad(f"{where}:", f"entry {n} is {_KINDS.get(type(entry), 'not an object')}")
    turns = entry.get("conversations")
    if turns is None:
        return None
    if not isinstance(turns, list):
        kind = _KINDS.get(type(turns), "not a list")
        raise _bad(f"{where}:", f'entry {n}\'s "conversations" is {kind}, not a list of turns')
    if len(turns) < 2:
        return None
    texts = [t.get("value") if isinstance(t, dict) else None for t in turns[:2]]
    for k, v in enumerate(texts):
        if not isinstance(v, str):
            raise _bad(f"{where}:", f'turn {k} of entry {n} has no text "value"')
    return texts[0], texts[1]


def read_sharegpt(path: str | Path) -> tuple[tuple[str, str], ...]:
    """The (prompt, reply) texts of the ShareGPT file at `path` (module docstring)."""
    from wse_core.host.readers import not_regular

    path, where = Path(path), f"--dataset-path {str(path)!r}"
    if why := not_regular(path):
        raise ShareGPTFileError(f"{where} {why}; give a ShareGPT JSON file")
    try:
        with open(path, "rb") as f:
            if (size := path.stat().st_size) > MAX_SHAREGPT_BYTES:
                cap = f"the {MAX_SHAREGPT_BYTES:,} a ShareGPT file is read within"
                raise ShareGPTFileError(f"{where} is {size:,} bytes, over {cap} (ShareGPT V3's "
                                        "is 0.67 GB); give a smaller file")  # fmt: skip
            kept = tuple(p for n, e in _entries(f, where) if (p := _first_turns(n, e, where)))
    except FileNotFoundError:
        raise ShareGPTFileError(
            f"{where} does not exist; give a local ShareGPT JSON file"
        ) from None
    except OSError as e:
        raise ShareGPTFileError(f"{where} cannot be read: {e.strerror or e}") from None
    if not kept:
        raise _bad(where, "holds no conversation of two turns")
    return kept
