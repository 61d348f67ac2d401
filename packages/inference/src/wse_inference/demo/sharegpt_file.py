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
UTF-8, not JSON, not a list, or whose used turns are not objects with a text "value"; also
for a used text holding a lone UTF-16 surrogate (JSON's `\\ud800` without its pair: no
character, it cannot be sent as UTF-8; hunt 71: a 99-line traceback from httpx) and for an
integer anywhere of more digits than Python makes (4,300: hunt 71, a 76-line traceback).

Memory: vLLM's `json.load` holds the file's text and every object of it at once. Here the
file is decoded a window at a time and the list's entries one at a time (`_Window`), only the
two texts of each kept, as UTF-8 bytes end to end in one buffer with 8 bytes of offsets a
conversation (`Conversations`; each text is decoded when asked for). So the peak is the kept
texts' bytes (at most the file's: an escape is never shorter as JSON than as UTF-8), 8 bytes
a conversation and a window (16 MiB, or twice the largest entry): one str of the whole file
would take 4 bytes a character for all of it as soon as one character (an emoji) is past
U+FFFF, 2.7 GB for ShareGPT V3; a tuple of two str a conversation took ~230 bytes for texts of
a few (hunt 71: a 184 MB file of 3 million short conversations peaked at 701 MB, a file at
the 1 GiB cap could pass 4 GB; now 221 MB). So the cap bounds memory too: at most the file's
size in texts, 8 bytes a conversation here and 4 more in `bench_data`'s draw.
"""

from __future__ import annotations

import codecs
import json
import re
import sys
from array import array
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO

__all__ = ["MAX_SHAREGPT_BYTES", "Conversations", "ShareGPTFileError", "read_sharegpt"]

# ShareGPT_V3_unfiltered_cleaned_split.json, the file vLLM's docs name, is 0.67 GB
MAX_SHAREGPT_BYTES = 1 << 30
_OFFSET = "I"  # the kept texts' bytes are at most the file's: below 2**32, 4-byte offsets
assert MAX_SHAREGPT_BYTES < 2 ** (8 * array(_OFFSET).itemsize)
_CHUNK_BYTES = 1 << 24
_SHAPE = ('a JSON list of {"conversations": [{"from": "human", "value": "..."}, '
          '{"from": "gpt", "value": "..."}]} (ShareGPT, as vLLM reads it)')  # fmt: skip
_BLANK = re.compile(r"[ \t\n\r]*")
# A JSON string, or a JSON number (its integer digits, fraction, exponent): the integer that
# Python refused to make is the first number without a fraction or exponent past its limit
_STRING_OR_NUMBER = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|-?([0-9]+)(\.[0-9]+)?([eE][-+]?[0-9]+)?')
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

    def too_long(self, n: int) -> ShareGPTFileError:
        """The refusal of entry `n`, from `pos` on, holding an integer longer than Python
        makes (`int` raised its plain ValueError inside `raw_decode`)."""
        limit = sys.get_int_max_str_digits()
        for m in _STRING_OR_NUMBER.finditer(self.text, self.pos):
            if m.group(1) and not (m.group(2) or m.group(3)) and len(m.group(1)) > limit:
                at = f"{len(m.group(1)):,} digits (at character {self.done + m.start():,})"
                return _bad(f"{self.where}:", f"entry {n} holds an integer of {at}, past the "
                            f"{limit:,} Python's JSON reader makes")  # fmt: skip
        return _bad(f"{self.where}:", f"entry {n} holds an integer past the {limit:,} digits "
                    "Python's JSON reader makes")  # fmt: skip

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
            except ValueError:  # an integer past Python's digits (JSONDecodeError is above)
                raise self.too_long(n) from None
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


class Conversations(Sequence[tuple[str, str]]):
    """The (prompt, reply) texts kept, in the file's order (module docstring: memory): their
    UTF-8 bytes end to end in one buffer, and where each text ends; decoded when read."""

    def __init__(self) -> None:
        self._bytes, self._ends = bytearray(), array(_OFFSET)

    def add(self, prompt: bytes, reply: bytes) -> None:
        for text in (prompt, reply):
            self._bytes += text
            self._ends.append(len(self._bytes))

    def __len__(self) -> int:
        return len(self._ends) // 2

    def __getitem__(self, k):  # type: ignore[override]  # an int, or a slice (a list)
        if isinstance(k, slice):
            return [self[i] for i in range(len(self))[k]]
        i = 2 * range(len(self))[k]  # IndexError past the end, as a tuple's
        start, mid, end = self._ends[i - 1] if i else 0, self._ends[i], self._ends[i + 1]
        return self._bytes[start:mid].decode(), self._bytes[mid:end].decode()


def _utf8(text: str, k: int, n: int, where: str) -> bytes:
    """Turn `k` of entry `n`'s text as UTF-8; a lone surrogate (a JSON escape of half a
    character: it has no UTF-8) is refused, naming where it is."""
    try:
        return text.encode()
    except UnicodeEncodeError as e:
        raise ShareGPTFileError(
            f"{where}: turn {k} of entry {n} holds a lone UTF-16 surrogate "
            f"(\\u{ord(text[e.start]):04x} at character {e.start:,}), half of a character, not "
            "text; mend or drop the entry (a character past U+FFFF is a pair, e.g. "
            "\\ud83d\\ude00)"
        ) from None


def _first_turns(n: int, entry: Any, where: str) -> tuple[bytes, bytes] | None:
    """Entry `n`'s first two turns' texts, as UTF-8; None for an entry vLLM skips."""
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
    return _utf8(texts[0], 0, n, where), _utf8(texts[1], 1, n, where)


def read_sharegpt(path: str | Path) -> Conversations:
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
            kept = Conversations()
            for n, entry in _entries(f, where):
                if turns := _first_turns(n, entry, where):
                    kept.add(*turns)
    except FileNotFoundError:
        raise ShareGPTFileError(
            f"{where} does not exist; give a local ShareGPT JSON file"
        ) from None
    except OSError as e:
        raise ShareGPTFileError(f"{where} cannot be read: {e.strerror or e}") from None
    if not kept:
        raise _bad(where, "holds no conversation of two turns")
    return kept
