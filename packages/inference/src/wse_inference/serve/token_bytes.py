"""A token's own bytes, as OpenAI's chat logprobs report them (`bytes`).

`bytes` exists so a client can join the tokens that split one character between them: each
such token alone decodes to U+FFFD, so the bytes of its decoded text are U+FFFD's, [239, 191,
189], exactly where they matter (hunt 65). `token_bytes(tokenizer, token, text)` gives the
bytes the token stands for instead, read from the tokenizer's vocabulary:

- the byte tokenizer (`kind` "bytes"): the id is the byte;
- a byte-fallback name ("<0x80>", SentencePiece's and `ByteTokenizer.vocab`'s): that byte;
- a byte-level BPE (its vocabulary holds GPT-2's 256 byte symbols, "Ġ" for a space): each
  symbol of the token's name mapped back to its byte;
- another piece of a byte-fallback vocabulary: its name with SentencePiece's "▁" as a space.

A token whose `text` (its decoded text) is empty has no bytes when it decodes to nothing even
after itself: a special token, skipped as vLLM skips it, as its `token` text is "". One that
decodes to text after itself is a piece whose only space the decoder stripped (Llama-2's
`Strip(" ", 1, 0)` on "▁", the second space of a double space): its bytes are its name's,
[32] (hunt 71: b"", so its `token` text lost the space and every `text_offset` after it was
one character early). Any other token, and a tokenizer without `vocab()`, gets its decoded
text's UTF-8.

`unfinished_tail(pieces)` reads tokens' bytes the other way: how many of the last tokens hold
a UTF-8 character still arriving (an emoji's first 3 bytes of 4), whose text is no text yet
(`openai_response`'s logprobs texts, as vLLM's: hunt 71). `Hold` (`held_tail`) is the
detokenizer's hold, which `TextStream` and the logprobs texts share: the last tokens whose
text still ends in U+FFFD or in a character still arriving.
"""

from __future__ import annotations

import codecs
import collections
import functools
import re
from collections.abc import Sequence
from typing import Any, NamedTuple

__all__ = ["HELD_TOKENS", "Hold", "character_start", "held_tail", "token_bytes", "unfinished_tail"]

_BYTE_NAME = re.compile(r"<0x([0-9A-Fa-f]{2})>")


@functools.cache
def _byte_of_symbol() -> dict[str, int]:
    """GPT-2's byte-level table inverted (symbol -> byte): printable Latin-1 bytes stand for
    themselves, the other 68 for chr(256 + i) in byte order."""
    own = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
           *range(ord("®"), ord("ÿ") + 1)]  # fmt: skip
    moved = [b for b in range(256) if b not in own]
    return {chr(b): b for b in own} | {chr(256 + i): b for i, b in enumerate(moved)}


class _Vocab(NamedTuple):
    names: dict[int, str]  # id -> the token's name in the vocabulary
    byte_level: bool  # GPT-2's byte symbols are all tokens
    byte_fallback: bool  # "<0x00>".."<0xFF>" are tokens


def _read_vocab(tokenizer: Any) -> _Vocab | None:
    vocab = getattr(tokenizer, "vocab", None)
    if not callable(vocab):
        return None
    table = vocab()
    byte_level = all(symbol in table for symbol in _byte_of_symbol())
    return _Vocab({i: name for name, i in table.items()}, byte_level, "<0x00>" in table)


@functools.lru_cache(maxsize=4)  # a server has one tokenizer; its vocabulary is read once
def _cached_vocab(tokenizer: Any) -> _Vocab | None:
    return _read_vocab(tokenizer)


def _vocab(tokenizer: Any) -> _Vocab | None:
    try:
        return _cached_vocab(tokenizer)
    except TypeError:  # an unhashable tokenizer: read each time
        return _read_vocab(tokenizer)


def token_bytes(tokenizer: Any, token: int, text: str) -> bytes:
    """The bytes `token` stands for (module docstring); `text` is its decoded text."""
    if getattr(tokenizer, "kind", None) == "bytes":
        return bytes([token]) if 0 <= token < 256 else b""
    if not text and not tokenizer.decode([token, token]):  # a special token: no text anywhere
        return b""
    vocab = _vocab(tokenizer)
    name = None if vocab is None else vocab.names.get(token)
    if vocab is None or name is None:
        return text.encode("utf-8")
    byte = _BYTE_NAME.fullmatch(name)
    if byte:
        return bytes([int(byte.group(1), 16)])
    symbols = _byte_of_symbol()
    if vocab.byte_level and all(c in symbols for c in name):
        return bytes(symbols[c] for c in name)
    if vocab.byte_fallback:
        return name.replace("\u2581", " ").encode("utf-8")
    return text.encode("utf-8")


def unfinished_tail(pieces: Sequence[bytes]) -> int:
    """How many of the last `pieces` (tokens' own bytes, oldest first) hold a UTF-8 character
    still arriving: its lead byte and fewer continuation bytes than it announces (the tokens
    after it with no bytes, special tokens, count too). 0 when the bytes end a character, or
    end in bytes no later byte makes UTF-8 (a lone 0x80, F0 then "A"): those are U+FFFD for
    good. Python's incremental decoder keeps exactly such a tail back; a character is at most
    4 bytes, so the last 4 tokens' bytes hold its lead."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    decoder.decode(b"".join(pieces))
    left = len(decoder.getstate()[0])  # the bytes of the character still arriving
    count = 0
    for piece in reversed(pieces):
        if left <= 0:
            break
        left, count = left - len(piece), count + 1
    return count


HELD_TOKENS = 4  # a run held past this many tokens keeps only a character still arriving


class Hold:
    """What a detokenizer holds back (`TextStream`'s, vLLM's: `detokenize_incrementally` and
    tokenizers' `DecodeStream.step` emit nothing while the text ends in U+FFFD), read off the
    tokens' own bytes fed in order (`push`): the tokens after the last whose text grew the
    text and left it ending neither in U+FFFD (bytes that are no UTF-8, or the character
    itself) nor in a character still arriving (`bad`). Past a run of HELD_TOKENS only the
    tokens of a character still arriving are held (hunt 62: a run that keeps ending in U+FFFD
    was held whole and decoded again each token; vLLM holds it all); the count depends on
    the last tokens alone, so a reader that starts within a run counts the same. `held` is
    how many; at the end of an answer they are dropped, as vLLM's (hunt 82)."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._run = 0  # tokens since the text last ended in a character
        self._run_chars = 0  # characters they decoded
        self._last: collections.deque[int] = collections.deque(maxlen=HELD_TOKENS)  # bytes
        self._last_bad = False  # the last character decoded is U+FFFD

    @property
    def bad(self) -> bool:
        """The text ends in U+FFFD, or in bytes of a character still arriving."""
        return self._last_bad or bool(self._decoder.getstate()[0])

    @property
    def settled(self) -> bool:
        """No run: the text last ended in a character (the next token starts afresh)."""
        return not self._run

    @property
    def held(self) -> int:
        if self._run <= HELD_TOKENS:
            return self._run
        arriving, keep = len(self._decoder.getstate()[0]), 0
        while arriving > 0:  # the tokens of the character still arriving (at most 3 bytes)
            keep += 1
            arriving -= self._last[-keep]
        return keep

    def push(self, piece: bytes) -> None:
        """One token's bytes."""
        self._last.append(len(piece))
        if not piece and not self._run:  # no text of its own (a special token) after text
            return  # nothing to hold
        out = self._decoder.decode(piece)
        self._last_bad = out[-1] == "\ufffd" if out else self._last_bad
        self._run, self._run_chars = self._run + 1, self._run_chars + len(out)
        if self._run_chars and not self.bad:  # the text ends in a character: let go
            self._run = self._run_chars = 0


def held_tail(pieces: Sequence[bytes]) -> Hold:
    """`Hold` after the `pieces` (tokens' own bytes, oldest first, from a clean start): how
    many of the last it holds back (`held`), and whether it is `settled`."""
    hold = Hold()
    for piece in pieces:
        hold.push(piece)
    return hold


def character_start(pieces: Sequence[bytes], lead: int) -> int:
    """The index of the first of `pieces` (tokens' own bytes, oldest first), at `lead` or
    after, that begins a character: one with bytes before which Python's incremental UTF-8
    decoder, fed the pieces from the first, holds no byte (a stray 0x80 is a character of its
    own, U+FFFD); `len(pieces)` when none does. The `lead` pieces before are read only to know
    where characters begin: a character spans at most 4 bytes (RFC 3629), so 4 suffice. HF's
    ByteFallback decodes a run of "<0xXX>" tokens that is no UTF-8 as one U+FFFD per byte, so
    a decode window must begin here (hunt 72: a window begun inside the character before
    turned '中国😊' into "", "", "", "����")."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    for i, piece in enumerate(pieces):
        if i >= lead and piece and not decoder.getstate()[0]:
            return i
        decoder.decode(piece)
    return len(pieces)
