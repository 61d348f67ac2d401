"""A split's data: what a data_dir may name and which documents of a corpus form its eval
split (no JAX, no data read; what an eval split shares with the train split is counted in
`wse_trainer.overlap`, which reads the data).

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
- `default_splits(sections, data)`: the splits a params file leaves unset, train and eval
  of the same data (`same_data`) or both read whole (other data that shares documents is
  `overlap.overlap_note`'s line, hunt 71, said at the start of the run).
- `data_dir_problem(where, value)`: the line for a data_dir entry that can name no data.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import sysconfig
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from wse_core.errors import shown

__all__ = ["EVAL_EVERY", "held_out", "stdlib_files", "stdlib_eval", "same_data",
           "default_splits", "data_dir_problem"]  # fmt: skip

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


def same_data(a: str | list[str], b: str | list[str]) -> bool:
    """Whether two data_dir values name the same entries, in any order or repeated, local
    paths resolved (`dir/` is `dir`, a link its target)."""
    return _data_key(a) == _data_key(b)


def _data_key(data_dir: str | list[str]) -> frozenset[str]:
    entries = [data_dir] if isinstance(data_dir, str) else data_dir
    return frozenset(os.path.realpath(e) if os.path.exists(e) else e for e in entries)


def default_splits(sections: dict[str, Any], data: Mapping[str, Any]) -> dict[str, Any]:
    """`sections` (the `InputConfig`s by name) with the splits `data` (the params mapping)
    does not give: train and eval of the same data, a twentieth held out; else both read
    whole, as ModelZoo reads eval_input (hunt 69: a validation set was cut to a twentieth)."""
    same = same_data(sections["train_input"].data_dir, sections["eval_input"].data_dir)
    for name, held in (("train_input", "train"), ("eval_input", "eval")):
        if "split" not in (data.get(name) or {}):
            sections[name] = dataclasses.replace(sections[name], split=held if same else "all")
    return sections


def data_dir_problem(where: str, value: Any) -> str | None:
    """The line for a data_dir (`where`: its setting) naming no file, folder or dataset, or
    None. hunt 71: a list's null was read as 'None', a nested list as its repr, '' (alone or
    listed) as the current folder, and 'd1,d2' as a dataset (HF's HFValidationError)."""
    if isinstance(value, str):
        if not value.strip():
            return f"{where} is empty; give a file, a folder, a list of them, stdlib or a dataset"
        if "," in value and not os.path.lexists(value):
            listed = [e.strip() for e in value.split(",") if e.strip()]
            return (
                f"{where} {shown(value)} is no file or folder, and no dataset's name holds a "
                f"','; to read several, give a list: {where}={_flow(listed)}"
            )
    bad = [i for i, e in enumerate(value) if not _entry(e)] if isinstance(value, list) else []
    if not bad:
        return None  # other types: the reader says what data_dir must be
    kept = [str(e) for e in _flat(value) if _entry(e)]
    return (
        f"{where} lists {_what(value[bad[0]])} (entry {bad[0] + 1} of {len(value)}); each "
        f"entry names a file or folder: give {where}="
        f"{_flow(kept) if kept else '[folder, file.txt]'}"
    )


def _entry(entry: Any) -> bool:
    """A file or folder name: text, or a number (a folder named 2024)."""
    if isinstance(entry, str):
        return bool(entry.strip())
    return isinstance(entry, int | float) and not isinstance(entry, bool)


def _what(entry: Any) -> str:
    """A listed value that names no file, as a refusal says it."""
    if entry is None or isinstance(entry, bool):
        return {None: "null", True: "true", False: "false"}[entry]
    if isinstance(entry, str):
        return "an empty name"
    kind = {list: "a list", dict: "a mapping"}.get(type(entry), type(entry).__name__)
    return f"{kind}, {shown(_flow(entry), quote=False)}"


def _flat(value: Any) -> list[Any]:
    return [e for v in value for e in _flat(v)] if isinstance(value, list) else [value]


def _flow(value: Any) -> str:
    """`value` as YAML's flow style writes it (`[d1, d2]`), as an override gives it."""
    return yaml.safe_dump(value, default_flow_style=True, width=1 << 20).strip()
