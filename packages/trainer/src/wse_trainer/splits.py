"""Which documents of a corpus form its eval split (no JAX, no tokenizers).

Contract: a train and an eval split of the same data never share a document, whatever
each split's `max_corpus_bytes` and whatever the order its `data_dir` list names folders in
(hunt 70: both happened, and eval losses were measured on trained text, unsaid).

- `held_out(sizes)`: the marks of a corpus read in order, a twentieth of its bytes
  (`EVAL_EVERY`). A document's mark depends only on the documents before it, so a split
  that stops at its first document past its cap (local files, JSON, `datasets`: a prefix
  of the same list) marks what it reads as a larger cap does; `data_files` reads the
  entries of a `data_dir` list in real-path order, so the same folders in another order
  are the same list.
- `stdlib_files(max_bytes)`: the standard library's source files within a cap, a file past
  what is left skipped (so a smaller cap is no prefix of a larger one); `stdlib_eval()`
  are its eval files, marked once over the whole library, so each file is in one split at
  every cap.
"""

from __future__ import annotations

import functools
import sysconfig
from collections.abc import Sequence
from pathlib import Path

__all__ = ["EVAL_EVERY", "held_out", "stdlib_files", "stdlib_eval"]

EVAL_EVERY = 20  # the eval split holds 1/EVAL_EVERY of the corpus's bytes


def held_out(sizes: Sequence[int]) -> list[bool]:
    """Which documents (by size in bytes, in corpus order) form the eval split.

    A document is held out when that brings the held-out bytes nearer to 1/EVAL_EVERY of
    the bytes read so far (itself included): documents of equal size give every 20th one;
    a corpus of a few large files and many small ones (the standard library's first
    megabyte) still holds out about a twentieth of its text, not of its files."""
    out, seen, held = [], 0, 0
    for size in sizes:
        seen += size
        take = EVAL_EVERY * (2 * held + size) < 2 * seen  # held + size/2 < seen/EVAL_EVERY
        held += size if take else 0
        out.append(take)
    return out


@functools.lru_cache(maxsize=1)
def _stdlib_sizes() -> tuple[tuple[str, int], ...]:
    """(path, bytes) of the standard library's non-empty .py files (tests left out), sorted."""
    root = Path(sysconfig.get_paths()["stdlib"])
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).parts
        if any(p in ("test", "tests", "site-packages", "idle_test") for p in rel):
            continue
        if size := path.stat().st_size:
            out.append((str(path), size))
    return tuple(out)


@functools.lru_cache(maxsize=4)
def stdlib_files(max_bytes: int) -> list[str]:
    """Sorted .py files of the standard library (tests left out) up to `max_bytes` in all: a
    file past what is left is skipped, the smaller ones after it taken."""
    files, total = [], 0
    for path, size in _stdlib_sizes():
        if total + size <= max_bytes:
            files.append(path)
            total += size
    return files


@functools.lru_cache(maxsize=1)
def stdlib_eval() -> frozenset[str]:
    """The standard library's eval files: `held_out` over the whole library, not over each
    split's capped list (hunt 70: a train cap of 1 MB and an eval cap of 3 MB marked 5
    files differently, 7,826 B of the eval split trained on)."""
    every = _stdlib_sizes()
    marks = held_out([size for _, size in every])
    return frozenset(path for (path, _), m in zip(every, marks, strict=True) if m)
