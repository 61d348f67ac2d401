"""Eval documents the train split also reads (hunt 71), said at the start of a run: apart
from `splits` (which `config` imports) because it reads the data (`data.corpus_texts`,
`data_files`), which import `config`."""

from __future__ import annotations

import os
from typing import Any

from wse_trainer.data import corpus_texts
from wse_trainer.data_files import data_files
from wse_trainer.splits import same_data, stdlib_files

__all__ = ["overlap_note"]


def overlap_note(train: Any, evals: Any) -> str | None:
    """The line for an eval split holding documents the train split reads (`InputConfig`s;
    hunt 71: eval `d2` of train `[d1, d2]`, or eval files inside the train folder, were
    evaluated on trained text, unsaid), or None. Counted by text over what each split reads
    within its caps, once the two are known to share a file (so disjoint data costs a folder
    walk). A note, not a change: the user named both sets, and a loss on training text is
    sometimes meant; holding the shared files out of training would train on other data than
    asked (ModelZoo and HF's Trainer take both sets as given). The same data split in two
    (`default_splits`) shares no document (the module docstring) and is not counted."""
    halves = (train.split, evals.split) == ("train", "eval")
    if halves and same_data(train.data_dir, evals.data_dir):
        return None
    files = [_files(cfg) for cfg in (train, evals)]
    if None in files or not set.intersection(*files):  # type: ignore[arg-type]
        return None
    trained = set(corpus_texts(train))
    docs = corpus_texts(evals)
    shared = sum(d in trained for d in docs)
    if not shared:
        return None
    every = shared == len(docs)
    said = f"all {shared:,}" if every else f"{shared:,} of the {len(docs):,}"
    return (
        f"note: {said} eval documents of eval_input.data_dir {evals.data_dir!r} are also "
        f"training documents (train_input.data_dir {train.data_dir!r}): the eval loss is "
        f"{'' if every else 'partly '}on trained text; give eval data apart from the "
        "training data for a held-out loss"
    )


def _files(cfg: Any) -> set[str] | None:
    """The real paths of the files a split reads from, or None for a dataset's name."""
    if cfg.data_dir == "stdlib":
        return set(stdlib_files(cfg.max_corpus_bytes))
    found = data_files(cfg.data_dir)
    return None if found is None else {os.path.realpath(f) for f in found[1]}
