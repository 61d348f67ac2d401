"""Log probabilities in the OpenAI wire format, as vLLM returns them (`logprobs_and_end`,
`logprobs_body`; `token_text`, a token's text in them). `openai_response` builds the bodies
they sit in.

The raw model's logprobs, before temperature and cuts; at most MAX_LOGPROBS = 20
alternatives: `/v1/completions` takes `logprobs: k` and answers {tokens, token_logprobs,
top_logprobs (per token a {token: logprob} dict of the k most likely and the chosen token:
with k = 0 the chosen token alone, as vLLM's `_create_completion_logprobs` keeps it; hunt 73:
it was null), text_offset}; with `echo: true` the text starts with the prompt and the
logprobs with the prompt's tokens (the first one's null; the special tokens the echoed text
spells written out, "<|im_start|>", as vLLM decodes a prompt's tokens, those the tokenizer
added to a text prompt, its BOS, ""), which is how lm-evaluation-harness' local-completions
scores loglikelihoods; `/v1/chat/completions` takes `logprobs: true` and
`top_logprobs: k` and answers {content: [{token, logprob, bytes, top_logprobs: [{token,
logprob, bytes}] x k}]}. Streamed chunks carry their tokens'.
A token's text is `tokenizer.decode([id])` with the leading spaces of its own bytes that the
decode stripped put back (`token_text`: Llama-2's "▁héllo" is " héllo", as vLLM restores a
SentencePiece piece's; hunt 70: the tokens lacked spaces the text has, and `text_offset`
disagreed with it; hunt 71: a lone "▁", a double space's second, was ""); the first token
with text where none precedes it (an echo's first word, after a BOS) is what it adds to the
decode, as the text has it ("hello", no space), so the texts join to the text. The tokens
that split one UTF-8 character (Llama-2's "<0xF0><0x9F><0x98><0x8A>") are "", "", "", "😊"
as in vLLM, the last decoded after the sampled tokens before it (from a character's first
byte: hunt 72), in a stream those of earlier chunks too (`_TokenTexts`; hunt 71: four
U+FFFD), an alternative after those before its position; one cut at "length", "" (vLLM's).
A token's `bytes` are its own (`serve.token_bytes`: 0x80 is [128], not U+FFFD's [239, 191,
189]); logprobs are clamped at -9999.0 as vLLM's are, and a NaN one (weights that overflow at
run time) is null, never a number. Tokens whose texts are the same (bytes 0x80..0xBF after a
whole character all decode to U+FFFD; the alternatives that leave a character unfinished are
all "") collide as keys of a completions' top_logprobs dict, as in vLLM, and the k entries
shrink; `return_tokens_as_token_ids: true` names every token "token_id:N" instead (vLLM's
field), in both routes, so the k alternatives all arrive.
"""

from __future__ import annotations

import functools
import itertools
import math
import os
from collections.abc import Sequence
from typing import Any, NamedTuple

from wse_inference.engine import Tokenizer, TokenLogprob
from wse_inference.hf_tokenizer import ids_text
from wse_inference.serve.openai_request import ParsedRequest
from wse_inference.serve.token_bytes import (
    character_start,
    held_tail,
    token_bytes,
    unfinished_tail,
)

__all__ = ["logprobs_and_end", "logprobs_body", "token_text"]


_PROMPT_WINDOW = 5  # the prompt's last tokens: text among them is text before the answer's
_CHAR_TOKENS = 4  # a UTF-8 character's most bytes, so tokens: vLLM's context for one


def _clamp(lp: float) -> float | None:
    """vLLM's floor for -inf; NaN (a model that overflows past the warm-up) is null, no
    number: JSON has no NaN (hunt 62: a 500 from json.dumps, NaN in a stream's chunks), and
    -9999.0 read as a real, very unlikely token (hunt 69)."""
    if math.isnan(lp):
        return None
    return lp if lp >= -9999.0 else -9999.0


def logprobs_body(*args: Any, **kw: Any) -> dict | None:
    """`logprobs_and_end`'s body alone: the `logprobs` of a whole answer's choice."""
    return logprobs_and_end(*args, **kw)[0]


def logprobs_and_end(
    p: ParsedRequest,
    logprobs: Sequence[TokenLogprob] | None,
    tokenizer: Tokenizer,
    *,
    text_offset: int = 0,
    prompt: Sequence[TokenLogprob | None] | None = None,
    previous: Sequence[int] = (),
) -> tuple[dict | None, int]:
    """(the `logprobs` of a choice, or a streamed chunk's choice, for these tokens: None when
    the request did not ask; where the next chunk's tokens start: `text_offset` plus the
    lengths of these tokens' texts). `text_offset`: where the first token's text starts in the
    completion (the length of the text already sent, for a stream). `prompt` (echo): the
    prompt's own logprobs come first, the first token's null as in vLLM and OpenAI.
    `previous`: the ids generated before these (a stream's earlier chunks): a character they
    left unfinished is these tokens' text. A character the answer ends in unfinished (cut at
    "length") is in neither its text nor its tokens' (vLLM's; hunt 82: both ended in its
    U+FFFD). A stream advances by the texts, not by the
    `tokens` it shows (hunt 71: with `return_tokens_as_token_ids` it advanced 12 a token, by
    "token_id:N")."""
    if p.sampling.logprobs is None or logprobs is None:
        return None, text_offset
    k = p.sampling.logprobs
    texts = _TokenTexts(tokenizer)
    scored = _scored([(x.token, x) for x in logprobs], previous, False)  # what ends unfinished: ""
    if prompt is not None:  # the echoed prompt's text is whole: its last character too
        echoed = [(p.prompt_ids[0], None), *((x.token, x) for x in prompt[1:] if x)]
        lead, trail = p.echo_added  # special tokens the text does not spell (a BOS added)
        scored[:0] = [s._replace(spelled=lead <= i < len(echoed) - trail, prompt=True)
                      for i, s in enumerate(_scored(echoed, (), True))]  # fmt: skip

    def name(s: _Scored, t: int) -> str:
        return f"token_id:{t}" if p.tokens_as_ids else texts.text(s, t)

    if p.kind == "chat":

        def entry(s: _Scored, t: int, lp: float) -> dict:
            return {"token": name(s, t), "logprob": _clamp(lp), "bytes": list(texts.own(t))}

        return {
            "content": [
                {**entry(s, s.token, x.logprob), "top_logprobs": [entry(s, *a) for a in x.top[:k]]}
                for s in scored
                if (x := s.logprob) is not None
            ]
        }, text_offset
    words = [texts.text(s, s.token) for s in scored]
    first = next((s for s, w in zip(scored, words, strict=True) if w), None)
    if text_offset == 0 and not (first and texts.written(first)):  # no text before these
        # tokens in the answer (a special token the echo writes out is text): the decoder's strip
        before = () if prompt is not None else [*p.prompt_ids, *previous]  # echo: its text
        ids = [s.token for s in scored if not texts.held_end(s)]  # U+FFFD: no space to strip
        _first_text_in_context(tokenizer, before, ids, words)
    tokens = [f"token_id:{s.token}" for s in scored] if p.tokens_as_ids else words

    def top(s: _Scored, x: TokenLogprob, key: str) -> dict:  # the chosen token keyed as in `tokens`
        return {**{key if a == s.token else name(s, a): _clamp(lp) for a, lp in x.top[:k]},
                key: _clamp(x.logprob)}  # fmt: skip

    offsets = list(itertools.accumulate(map(len, words), initial=text_offset))
    return (
        {
            "tokens": tokens,
            "token_logprobs": [
                None if s.logprob is None else _clamp(s.logprob.logprob) for s in scored
            ],
            "top_logprobs": [  # k = 0: the chosen token alone (vLLM's; hunt 73: null)
                None if s.logprob is None else top(s, s.logprob, key)
                for s, key in zip(scored, tokens, strict=True)
            ],
            "text_offset": offsets[:-1],
        },
        offsets[-1],
    )


class _Scored(NamedTuple):
    """A token of the answer's logprobs and what its text, and its alternatives', follow."""

    token: int
    logprob: TokenLogprob | None  # None: an echoed prompt's first token
    prior: tuple[int, ...]  # the answer's tokens before it (the last 3 x _CHAR_TOKENS)
    last: bool  # it ends an echoed prompt's text, which holds a character left unfinished
    spelled: bool = False  # an echoed prompt's token its text spells: a special one written out
    # an echoed prompt's token: its text is decoded whole (nothing held back, nothing dropped),
    # so only a character still arriving is held, for the token that ends it
    prompt: bool = False


def _scored(
    ids: Sequence[tuple[int, TokenLogprob | None]], previous: Sequence[int], last: bool
) -> list[_Scored]:
    """`ids` after `previous` (the answer's tokens before them); `last`: the last ends it."""
    window = 3 * _CHAR_TOKENS  # a character arriving, a window, where a character begins
    seq = [*previous[-window:], *(t for t, _ in ids)]
    at, end = len(seq) - len(ids), len(ids) - 1
    return [
        _Scored(t, x, tuple(seq[max(0, at + i - window) : at + i]), last and i == end)
        for i, (t, x) in enumerate(ids)
    ]


class _TokenTexts:
    """Texts (and own bytes) of tokens in logprobs, for one answer of one tokenizer.

    A token's text is the text it makes final, after the tokens sampled before it (never the
    alternatives at its position): vLLM's rule (PRs #28874 and #34875,
    `LogprobsProcessor._correct_decoded_token`) for the tokens that split one UTF-8 character
    (Llama-2's "<0xF0><0x9F><0x98><0x8A>"): each alone decodes to U+FFFD (hunt 71: four
    "\ufffd" for one "😊"), so those ahead of the last are "" and the last is the character,
    decoded with them and with what stands before them stripped. Bytes no later byte makes
    UTF-8 are U+FFFD for good, as in the answer's text, and the token whose text lets them go
    carries them, as the detokenizer holds them (`token_bytes.Hold`, `TextStream`'s; vLLM's ""
    there: its tokens no longer join to its text): a lone 0x80 is "" and the next token with
    a character "\ufffd" before its own text; a token after "<0xE4><0xBD>" that is no
    0x80..0xBF shows the two U+FFFD before its own text once that ends in a character;
    what the answer ends with still held (cut at "length" inside a character, or after bytes
    that are no UTF-8) is "", as its text ends before it (`TextStream.flush`, vLLM's; hunt
    82); an echoed token-id prompt ending so shows those bytes, decoded alone, in its last
    token, as the echoed text decodes them (hunt 72: '안녕' + "<0xEC>" was '안녕���').
    A character's last token is decoded after the tokens before it from one that begins a
    character: HF's ByteFallback reads a byte run that is no UTF-8 as one U+FFFD per byte,
    head and all (hunt 72: '中国😊' ended "", "", "", "����")."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        cache = functools.lru_cache(maxsize=None)
        self.word = cache(lambda t: token_text(tokenizer, t))
        self.own = cache(lambda t: token_bytes(tokenizer, t, self.word(t)))
        # how many of the last ids the detokenizer holds (`TextStream`'s `Hold`: their text
        # ends in U+FFFD or a character still arriving), per position (k alternatives); in an
        # echoed prompt, those of a character still arriving
        self._hold = cache(lambda ids: held_tail([*map(self.own, ids)]))
        self._held = lambda ids: self._hold(ids).held
        self._arriving = cache(lambda ids: unfinished_tail([*map(self.own, ids[-_CHAR_TOKENS:])]))
        self._head = cache(lambda ids: tokenizer.decode(ids))  # the same for them too
        self._window = cache(self._from_character)
        self.held_end = lambda s: s.last and self._arriving((*s.prior, s.token)) > 0
        # a special token (no bytes) written out, as the echo's text spells it (vLLM's decode
        # of a prompt's tokens keeps them: "<|im_start|>"); "" for any other
        self._special = cache(lambda t: "" if self.own(t) else ids_text(tokenizer, [t]))
        self.written = lambda s: self._special(s.token) if s.spelled else ""

    def text(self, s: _Scored, token: int) -> str:
        """`token`'s text at `s`'s position (`s.token` or one of its alternatives)."""
        if s.spelled and (special := self._special(token)):
            return special
        return self._text(s, token)

    def _text(self, s: _Scored, token: int) -> str:
        prior, n = s.prior, len(s.prior)
        held = self._arriving if s.prompt else self._held
        start = n - held(prior)  # the text so far ends before token `start`
        # ... and after `token`, before token `end`; after text that ended in a character,
        # its own bytes tell (cached per token: the k alternatives of a long answer stay quick)
        settled = s.prompt or self._hold(prior).settled
        ahead = (token,) if start == n and settled else (*prior, token)
        left = held(ahead)  # ... or at an echoed prompt's end, its held bytes' U+FFFD
        end, ids = n + 1 - left, (*prior, token)
        cut = self._head(ids[end:]) if s.last else ""  # the held bytes alone, as echoed
        if start == n and end == n + 1:
            return self.word(token)  # no character split on either side: its own text
        if end <= start:
            return cut  # it only adds to text still held (a character still arriving...)
        window = self._window(prior[:start])
        full = self.tokenizer.decode([*window, *ids[start:end]])
        return full[len(os.path.commonprefix([self._head(window), full])) :] + cut

    def _from_character(self, ids: tuple[int, ...]) -> tuple[int, ...]:
        """The last `_CHAR_TOKENS` of `ids` from the first to begin a character
        (`token_bytes.character_start`, the ones before read as its lead-in)."""
        lead = max(0, len(ids) - _CHAR_TOKENS)
        return ids[character_start([*map(self.own, ids)], lead) :]


def _first_text_in_context(
    tokenizer: Tokenizer, before: Sequence[int], ids: Sequence[int], texts: list[str]
) -> None:
    """Set the text of the first of `ids` with text (`texts`, theirs alone) to what it adds
    to the decode of `before` (the ids the answer's text is decoded after) and the ids ahead of
    it, all of which decode to "" (special tokens). With no text before it, a Llama-2 decoder's
    `Strip(" ", 1, 0)` strips its space from the answer's text: after a BOS, "▁hello" is
    "hello" there (hunt 71: " hello", one character past the echoed prompt's). Later tokens
    follow text, so their own texts are the answer's; so does a first text that ends a
    character the ids ahead of it began (their bytes decode to text), already in context."""
    first = next((i for i, x in enumerate(texts[: len(ids)]) if x), None)
    if first is None or tokenizer.decode(before[-_PROMPT_WINDOW:]):
        return  # no text here, or it follows the prompt's text: nothing strips it
    if any(tokenizer.decode([t]) for t in ids[:first]):
        return  # bytes of a character: `_TokenTexts.text` decoded it with them
    head = [*before, *ids[:first]]  # no text: special tokens (and a prompt's lone "▁"s)
    texts[first] = tokenizer.decode([*head, ids[first]])[len(tokenizer.decode(head)) :]


def token_text(tokenizer: Tokenizer, token: int) -> str:
    """`token`'s text in logprobs: decoded alone, with the leading spaces of its own bytes
    (`token_bytes`: a "▁" piece's) that the decoder stripped put back, as vLLM restores a
    SentencePiece piece's (a Llama-2 decoder's `Strip(" ", 1, 0)` strips the first space)."""
    text = tokenizer.decode([token])
    own = token_bytes(tokenizer, token, text)
    missing = (len(own) - len(own.lstrip(b" "))) - (len(text) - len(text.lstrip(" ")))
    return " " * missing + text  # missing <= 0: the decode kept them, nothing to add
