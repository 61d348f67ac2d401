"""Eval documents the train split also reads (hunt 71), said at the start of a run: apart
from `splits` (which `config` imports) because it reads the data (`data.corpus_texts`),
which imports `config`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from wse_trainer.data import corpus_texts
from wse_trainer.splits import same_data

__all__ = ["overlap_note"]


def overlap_note(
    train: Any,
    evals: Any,
    trained: Sequence[str] | None = None,
    docs: Sequence[str] | None = None,
) -> str | None:
    """The line for an eval split holding documents the train split reads (`InputConfig`s;
    hunt 71: eval `d2` of train `[d1, d2]`, or eval files inside the train folder, were
    evaluated on trained text, unsaid), or None. Counted by text over what each split reads
    within its caps (`trained` and `docs`: the splits' documents as the run read them; read
    here when not given), whatever files hold them (hunt 80: a train.jsonl's documents as
    the eval's .txt were counted only once both named one file). A note, not a change: the
    user named both sets, and a loss on training text is sometimes meant; holding the shared
    documents out of training would train on other data than asked (ModelZoo and HF's
    Trainer take both sets as given). The same data split in two (`default_splits`) shares
    no document (the module docstring) and is not counted: a text that comes twice in it is
    the corpus's own repeat."""
    halves = (train.split, evals.split) == ("train", "eval")
    if halves and same_data(train.data_dir, evals.data_dir):
        return None
    seen = set(corpus_texts(train) if trained is None else trained)
    docs = corpus_texts(evals) if docs is None else docs
    shared = sum(d in seen for d in docs)
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
