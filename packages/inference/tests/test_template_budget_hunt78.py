"""Hunt 78: a split's pieces were counted with one `str.count` pass a whitespace character
(10 passes, 0.55 s over a 63 MB string, before the refusal). `_count_marks` counts them in
one pass a chunk; these check it against Python's own `str.isspace` / `str.splitlines`, a
per-character count and the counting it replaced."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from wse_inference.serve import template_budget
from wse_inference.serve.template_budget import _count_marks, _split_pieces

# ASCII, one-byte (Latin-1) and wider characters, marks and not, for random strings
ALPHABET = list("ab \t\n\r\x0b\x0c\x1c\x1f,x\x85\xa0\xe9\u1680\u2028\u3000\u20ac\U0001f600")


def _strings(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        size = int(rng.integers(0, 40))
        pool = ALPHABET[: int(rng.choice([3, 12, 15, len(ALPHABET)]))]  # ASCII to mixed
        yield "".join(rng.choice(pool, size))


def _counted_before(s: str, marks: str) -> int:
    """The counting `_count_marks` replaced: a `str.count` pass a mark."""
    return sum(map(s.count, marks))


def test_the_marks_are_what_split_and_splitlines_split_on():
    chars = [chr(i) for i in range(sys.maxunicode + 1)]
    assert set(template_budget._SPACES) == {c for c in chars if c.isspace()}
    breaks = {c for c in chars if len(f"a{c}b".splitlines()) == 2}
    assert set(template_budget._LINE_BREAKS) == breaks


@pytest.mark.parametrize("chunk", [1, 3, 7, 1 << 20])  # chunks of mixed widths, and whole
def test_marks_are_counted_as_character_by_character(monkeypatch, chunk):
    monkeypatch.setattr(template_budget, "_COUNT_CHUNK", chunk)
    for marks in (template_budget._SPACES, template_budget._LINE_BREAKS):
        for s in _strings(300, seed=chunk):
            n = _count_marks(s, marks)
            assert n == sum(c in marks for c in s) == _counted_before(s, marks), repr(s)


def test_split_pieces_bound_what_split_makes():
    for s in _strings(300, seed=1):
        for method, args in ((s.split, ()), (s.rsplit, (None, 2)), (s.splitlines, ()),
                             (s.splitlines, (True,)), (s.split, (",",))):  # fmt: skip
            n = _split_pieces(method, args, {})
            assert n >= len(method(*args)), (repr(s), method.__name__, args)
        marks = template_budget._SPACES
        assert _split_pieces(s.split, (), {}) == _counted_before(s, marks) + 1
        assert _split_pieces(s.split, (None, 2), {}) == min(_counted_before(s, marks), 2) + 1
