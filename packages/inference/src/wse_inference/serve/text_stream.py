"""Incremental detokenization with stop strings, for streaming responses.

`TextStream(tokenizer, stop=..., stop_token_ids=..., prompt_ids=...)` takes generated token
ids as they come (`push(ids) -> (new_text, stopped)`) and returns only text that is final;
all of it together is `decode(prompt_ids + ids)[len(decode(prompt_ids)):]`, cut at a stop:

- vLLM's `detokenize_incrementally`: a prefix offset and a read offset; each token decodes a
  short window that starts a few tokens before it, at first in the prompt's last 5 tokens
  (from one that begins a character: hunt 72), and the text beyond the window's old text is
  new. The window always holds a token with visible text (hunt 70): a decoder that strips
  the text's leading space (Llama-2's and Mistral's `Strip(" ", 1, 0)`) strips it from the
  window's first word, never from a new one (" hello" after the prompt; after a token that
  decodes to "", a special token);
- text that ends in U+FFFD (bytes of an unfinished UTF-8 character, bytes that are no UTF-8,
  or U+FFFD itself) is held until a token's text follows it, as vLLM's detokenizer holds it
  (`DecodeStream.step` and `detokenize_incrementally` return nothing while the text ends in
  U+FFFD), read off the tokens' own bytes (`token_bytes.Hold`, which the logprobs' texts
  share); the window is short, so the cost per token is O(1) (a run that keeps ending in
  U+FFFD is released, once more than 4 tokens are held, but for a character still arriving;
  vLLM holds it all); what is held at the end is dropped (`flush`), as vLLM flushes nothing
  at the finish (hunt 82: a "length" answer ended in U+FFFD);
- text that could still turn out to be the beginning of a stop string is held back;
- stop strings are matched on final text only, as vLLM's after its U+FFFD hold-back: a
  U+FFFD held matches nothing, nor does one held at the end; a U+FFFD that stays (bytes
  that are no UTF-8, or the character itself) is text and matches once it is final (a later
  token's text follows it, or more than 4 tokens are held);
- on a stop string the text is cut just before it and `stopped` is True (OpenAI semantics: the
  stop sequence is not part of the output); the stop string that is completed first wins (with
  stops "b" and "aba", "ab..." stops at "a" — generation never reaches the longer one); a token
  in `stop_token_ids` stops without text. `stop_reason` is the stop string or token id that
  stopped it (vLLM's);
- `include_stop` (vLLM's include_stop_str_in_output): the text is cut just after the stop
  string instead, a stop token's own text is kept (decoded as any token: "" for a special
  one), and nothing is held back for stop strings (vLLM's stop_buffer_length 0);
- `min_tokens` (vLLM's, its detokenizer's `update`): a stop token id stops only from the
  min_tokens-th generated token on (vLLM's `check_stop`; the decoders hold those ids back
  before it), and a stop string only when it ends in text that came after the first
  min_tokens tokens' (it may begin before: the window vLLM searches).

`flush()` returns what is held back once the sequence ends for another reason. The engines'
`SequenceTracker` and `wse infer generate` use this same stream (one detokenizer).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from wse_inference.serve.token_bytes import Hold, character_start, token_bytes

if TYPE_CHECKING:  # engine.py's SequenceTracker imports this module
    from wse_inference.engine import Tokenizer

__all__ = ["TextStream"]

_PROMPT_WINDOW = 5  # vLLM's INITIAL_INCREMENTAL_DETOKENIZATION_OFFSET
_CHAR_BYTES = 4  # a UTF-8 character's most bytes (RFC 3629): at most 4 tokens hold one


class TextStream:
    """Generated tokens in, final text out; see the module docstring."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        *,
        stop: Sequence[str] = (),
        stop_token_ids: Iterable[int] = (),
        prompt_ids: Sequence[int] = (),
        min_tokens: int = 0,
        include_stop: bool = False,
    ) -> None:
        self._tok = tokenizer
        self._stop = tuple(s for s in stop if s)
        self._stop_ids = frozenset(stop_token_ids)
        # characters before the new text a stop string may begin in
        self._search_back = max((len(s) for s in self._stop), default=1) - 1
        self._include = include_stop  # nothing held back: the stop string is kept
        self._hold_chars = 0 if include_stop else self._search_back
        self._min_tokens = min_tokens
        self._made = 0  # generated tokens pushed, stop tokens too
        self._floor = 0  # the first min_tokens tokens' text: no stop string ends in it
        self._ids, self._before = self._prompt_window(prompt_ids)  # _before: window's text
        self._hold = Hold()  # the generated tokens' bytes: what is held back
        self._prefix = 0  # start of the decode window
        self._read = len(self._ids)  # ids up to here are in `text`
        self.text = ""  # all decoded text so far (cut at a stop string)
        self._sent = 0  # characters of `text` already returned
        self.stopped = False
        self.stop_reason: int | str | None = None  # the stop token id or string that ended it

    def _prompt_window(self, prompt_ids: Sequence[int]) -> tuple[list[int], str]:
        """The window the first generated token is decoded in, and its text: the prompt's
        last 5 tokens, or more (doubling) while they decode to "" (special tokens), from the
        first that begins a character (hunt 72: HF's ByteFallback decodes a run of "<0xXX>"
        tokens that is no UTF-8 as one U+FFFD per byte, so a window that began inside a
        Korean prompt's character turned a Chinese answer's bytes into U+FFFDs)."""
        n = len(prompt_ids)
        k = min(_PROMPT_WINDOW, n)
        while True:
            lead = min(n - k, _CHAR_BYTES)  # tokens before the window: where characters begin
            window = [int(i) for i in prompt_ids[n - k - lead :]]
            at = character_start([*map(self._own, window)], lead)
            ids = window[at:] if at < len(window) else window[lead:]
            text = self._tok.decode(ids)
            if text or k == n:
                return ids, text
            k = min(2 * k, n)  # a prompt ending in special tokens (a chat template's)

    def _own(self, token: int) -> bytes:
        return token_bytes(self._tok, token, self._tok.decode([token]))

    def push(self, ids: Sequence[int]) -> tuple[str, bool]:
        """Add generated ids; return (text that is now final, whether a stop was hit)."""
        for i in ids:
            if self.stopped:
                break
            self._made += 1
            if int(i) in self._stop_ids and self._made >= self._min_tokens:
                if self._include:  # its text kept (vLLM's; a character it leaves unfinished
                    self._append(int(i))  # is not, as on any stop: vLLM's decode_next)
                if not self.stopped:  # else a stop string in its own text ended it first
                    self.stopped, self.stop_reason = True, int(i)
                break
            self._append(int(i))
        return self._take(final=self.stopped), self.stopped

    def _append(self, token: int) -> None:
        """One generated token decoded, then the stop strings checked (past min_tokens)."""
        self._ids.append(token)
        self._decode_tail()
        if self._made <= self._min_tokens:
            self._floor = len(self.text)
        else:
            self._check_stop()

    def flush(self) -> str:
        """The held-back text, once no more tokens will come (`_release`)."""
        if not self.stopped:
            self._release()
        return self._take(final=True)

    def _release(self) -> None:
        """The held tokens' text when it ends in neither U+FFFD nor a character still
        arriving (tokens with no text of their own: special ones); else none of it, as vLLM's
        detokenizer drops it (module docstring; hunt 82: a "length" answer ended in U+FFFD;
        the logprobs' texts of those tokens are "" too, their `bytes` theirs)."""
        if self._read < len(self._ids):
            if not self._hold.bad:
                after = self._tok.decode(self._ids[self._prefix :])
                self.text += after[len(self._before) :]
                self._check_stop()
            self._read = len(self._ids)

    def _decode_tail(self) -> None:
        """The text up to the tokens `Hold` holds (those whose text still ends in U+FFFD, or
        of a character still arriving past a run of 4: hunt 62, a run of U+FFFD or of bytes
        that are no UTF-8 was held whole and decoded again each token, 8,000 tokens 30 s) is
        final; the logprobs' texts follow the same `Hold`."""
        self._hold.push(self._own(self._ids[-1]))
        cut = len(self._ids) - self._hold.held
        if cut > self._read:
            upto = self._tok.decode(self._ids[self._prefix : cut])
            self.text += upto[len(self._before) :]
            self._advance(cut, upto)

    def _advance(self, read: int, upto: str) -> None:
        """Ids up to `read` are in `text` (`upto`: the window's text up to there); the next
        window starts at the old read offset, unless its ids alone decode to "" (hunt 70)."""
        own = self._tok.decode(self._ids[self._read : read])
        if own:
            self._prefix, self._before = self._read, own
        else:  # e.g. special tokens: a window of them has no text to strip a space from
            self._before = upto
        self._read = read

    def _check_stop(self) -> None:
        if not self._stop or self._made <= self._min_tokens:
            return
        start = max(0, self._sent - self._search_back)
        floor = self._floor + 1  # a stop string ends past the first min_tokens tokens' text
        hits = [(i + len(s), i, s) for s in self._stop
                if (i := self.text.find(s, max(start, floor - len(s)))) >= 0]  # fmt: skip
        if hits:  # the stop string completed first wins, as generation would have stopped there
            end, at, self.stop_reason = min(hits)
            self.text = self.text[: end if self._include else at]
            self.stopped = True

    def _take(self, *, final: bool) -> str:
        end = len(self.text) if final else max(self._sent, len(self.text) - self._hold_chars)
        out = self.text[self._sent : end]
        self._sent = end
        return out
