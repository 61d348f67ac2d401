"""Incremental detokenization with stop strings, for streaming responses.

`TextStream(tokenizer, stop=..., stop_token_ids=...)` takes generated token ids as they come
(`push(ids) -> (new_text, stopped)`) and returns only text that is final:

- bytes of an unfinished UTF-8 character (decoded as U+FFFD) are held until complete; the
  decode window is short (the TGI / vLLM prefix-offset scheme), so the cost per token is O(1)
  (text that keeps ending in U+FFFD, no UTF-8 or U+FFFD itself, is released but for its last
  4 tokens once 8 are held: a character is at most 4 bytes);
- text that could still turn out to be the beginning of a stop string is held back;
- on a stop string the text is cut just before it and `stopped` is True (OpenAI semantics: the
  stop sequence is not part of the output); the stop string that is completed first wins (with
  stops "b" and "aba", "ab..." stops at "a" — generation never reaches the longer one); a token
  in `stop_token_ids` stops without text.

`flush()` returns what is held back once the sequence ends for another reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from wse_inference.engine import Tokenizer

__all__ = ["TextStream"]

_MOST_HELD = 8  # tokens held back while their text ends in U+FFFD (see _decode_tail)


class TextStream:
    """Generated tokens in, final text out; see the module docstring."""

    def __init__(
        self, tokenizer: Tokenizer, *, stop: Sequence[str] = (), stop_token_ids: Iterable[int] = ()
    ) -> None:
        self._tok = tokenizer
        self._stop = tuple(s for s in stop if s)
        self._stop_ids = frozenset(stop_token_ids)
        self._hold_chars = max((len(s) for s in self._stop), default=1) - 1
        self._ids: list[int] = []
        self._prefix = 0  # start of the decode window
        self._read = 0  # ids up to here are in `text`
        self.text = ""  # all decoded text so far (cut at a stop string)
        self._sent = 0  # characters of `text` already returned
        self.stopped = False

    def push(self, ids: Sequence[int]) -> tuple[str, bool]:
        """Add generated ids; return (text that is now final, whether a stop was hit)."""
        for i in ids:
            if self.stopped:
                break
            if int(i) in self._stop_ids:
                self.stopped = True
                break
            self._ids.append(int(i))
            self._decode_tail()
            self._check_stop()
        return self._take(final=self.stopped), self.stopped

    def flush(self) -> str:
        """The held-back text, once no more tokens will come."""
        if self._read < len(self._ids):  # an unfinished character: emit it as it decodes
            self.text += self._tok.decode(self._ids[self._prefix :])[
                len(self._tok.decode(self._ids[self._prefix : self._read])) :
            ]
            self._read = len(self._ids)
            self._check_stop()
        return self._take(final=True)

    def _decode_tail(self) -> None:
        before = self._tok.decode(self._ids[self._prefix : self._read])
        after = self._tok.decode(self._ids[self._prefix :])
        if len(after) > len(before) and not after.endswith("\ufffd"):
            self.text += after[len(before) :]
            self._prefix, self._read = self._read, len(self._ids)
        elif len(self._ids) - self._read >= _MOST_HELD:
            # hunt 62: a run of U+FFFD or of bytes that are no UTF-8 was held whole, decoded
            # again each token (8,000 tokens: 30 s): a character still arriving spans at most
            # 4 bytes, so at most the last 4 tokens; what comes before them is final
            cut = len(self._ids) - 4
            self.text += self._tok.decode(self._ids[self._prefix : cut])[len(before) :]
            self._prefix, self._read = self._read, cut

    def _check_stop(self) -> None:
        if not self._stop:
            return
        start = max(0, self._sent - self._hold_chars)
        hits = [(i + len(s), i) for s in self._stop if (i := self.text.find(s, start)) >= 0]
        if hits:  # the stop string completed first wins, as generation would have stopped there
            self.text = self.text[: min(hits)[1]]
            self.stopped = True

    def _take(self, *, final: bool) -> str:
        end = len(self.text) if final else max(self._sent, len(self.text) - self._hold_chars)
        out = self.text[self._sent : end]
        self._sent = end
        return out
