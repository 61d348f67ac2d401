"""One evaluation of a `wse train` run: the eval split's rows, its loss and accuracy, and its
record.

Contract. `packed_rows(tok, texts, seq_len)` is a split's documents tokenized and packed
(`data.pack`: no padding); `eval_rows(tok, cfg, docs)` the eval split's, fewer than one
batch a ConfigError. `evaluate(s)` is the mean eval loss and the next-token top-1 accuracy
(`EvalMetrics`; ModelZoo's eval loss and `eval/accuracy`, hunt 80) over the first
`eval_steps` batches of a `session.Session`'s eval split (all the split holds when it holds
fewer: the run says so, `eval_note`); eval_steps left out is every whole batch of the split,
as ModelZoo's `run_cstorch_eval` (hunt 72: 4 batches were): the Session's config holds it
resolved once the split is read. A last partial batch is dropped, as ModelZoo's `drop_last`,
and `eval_note` says how many of the split's sequences are evaluated (hunt 81: it called 30 of
53 "the whole eval split"). `log_eval` writes one to metrics.jsonl, TensorBoard's eval/ and
the run log;
`replaced` and `held_accuracy` read the eval of a step on record (a rerun's, a `mode: eval`
of a step evaluated before: its record replaced, never a second one, hunt 80).
"""

from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

from wse_trainer.config import ConfigError

__all__ = ["EvalMetrics", "evaluate", "eval_rows", "packed_rows", "log_eval", "eval_note",
           "replaced", "held_accuracy"]  # fmt: skip


class EvalMetrics(NamedTuple):
    """One evaluation: the mean next-token cross-entropy and top-1 accuracy over its
    targets (ModelZoo's eval loss and `eval/accuracy`; every target of a packed row counts)."""

    loss: float
    accuracy: float


def packed_rows(tok: Any, texts: list[str], seq_len: int) -> Any:
    """A split's documents `texts` (`data.corpus_texts`) tokenized and packed (`data.pack`)."""
    from wse_trainer.data import EOS, pack

    ids = [e.ids for e in tok.encode_batch(texts)]
    return pack(ids, seq_len, tok.token_to_id(EOS))


def eval_rows(tok: Any, cfg: Any, docs: list[str] | None = None) -> Any:
    """The eval split's packed rows (of its documents `docs`, read when not given); fewer
    than one batch is a ConfigError (the run checks this when its session is built, before
    the first training step)."""
    from wse_trainer.data import corpus_texts

    rows = packed_rows(tok, corpus_texts(cfg) if docs is None else docs, cfg.max_sequence_length)
    if len(rows) < cfg.batch_size:
        raise ConfigError(
            f"the eval split has {len(rows)} sequences, fewer than eval_input."
            f"batch_size={cfg.batch_size}; lower it or eval_input.max_sequence_length, "
            "or add data"
        )
    return rows


@functools.lru_cache(maxsize=8)
def _eval_fn(model: Any):
    import jax

    from wse_trainer.reference import eval_sums

    return jax.jit(lambda p, b, seg: eval_sums(model, p, b, seg))


def evaluate(s: Any, steps: int | None = None) -> EvalMetrics:
    """Loss and accuracy over the first `steps` (else `eval_steps`, else all) batches of the
    eval split of Session `s` (fixed order): equal batches of equal rows, so the mean of the
    batches' mean losses is the mean over every target, and the accuracy is the hits over
    the targets."""
    import numpy as np

    cfg = s.config.eval_input
    if s.eval_rows is None:
        s.eval_rows = eval_rows(s.tok, cfg)
    rows = s.eval_rows
    whole = len(rows) // cfg.batch_size
    n = min(steps or cfg.eval_steps or whole, whole)
    params = s.trainer.memx.params_tree()
    f = _eval_fn(s.model)
    batches = [rows[i * cfg.batch_size : (i + 1) * cfg.batch_size] for i in range(n)]
    sums = [f(params, b, s.segments(b, cfg.packing)) for b in batches]
    losses = [float(loss) for loss, _ in sums]
    hits = sum(int(h) for _, h in sums)
    targets = n * cfg.batch_size * (rows.shape[1] - 1)
    return EvalMetrics(float(np.mean(losses)), hits / targets)


def log_eval(log: Any, step: int, metrics: EvalMetrics) -> None:
    """One evaluation in metrics.jsonl, TensorBoard's eval/ and the run log: its loss,
    perplexity and next-token accuracy (hunt 80: ModelZoo's `eval/accuracy`, missing)."""
    from wse_trainer.metrics import eval_line

    loss, accuracy = metrics
    values = {"loss": loss, "perplexity": math.exp(min(loss, 700.0)), "accuracy": accuracy}
    log.record(step, "eval", values)
    log.line(eval_line(step, loss, accuracy))


def replaced(log: Any, step: int) -> str:
    """What an eval's line adds where metrics.jsonl holds an eval of its step: the record
    it replaces (hunt 80: a second record of the step was appended, TensorBoard showing two
    points), or nothing."""
    held = log.recorded(step, "eval") or {}
    loss = held.get("loss")
    if not isinstance(loss, int | float) or isinstance(loss, bool):
        return ""
    return f"; its eval on record in metrics.jsonl (loss {loss:.5f}) is replaced"


def held_accuracy(log: Any, step: int) -> float | None:
    """The accuracy of the eval of `step` on record, or None (recorded before hunt 80)."""
    accuracy = (log.recorded(step, "eval") or {}).get("accuracy")
    ok = isinstance(accuracy, int | float) and not isinstance(accuracy, bool)
    return float(accuracy) if ok else None


def eval_note(s: Any) -> str | None:
    """The line saying how many batches, and of the split's sequences how many, each
    evaluation covers (hunt 72: 4 of 81 batches, unsaid; hunt 81: the rows a last partial
    batch drops were unsaid), or None where it evaluates nothing. eval_steps past the
    split's batches is a note, not a refusal (hunt 70: 100 asked, 4 evaluated, unsaid): the
    batches are known only once the split is tokenized, and every whole batch of the split
    is a sound evaluation (ModelZoo's default)."""
    if s.eval_rows is None:
        return None
    asked, bsz, rows = s.eval_steps_given, s.config.eval_input.batch_size, len(s.eval_rows)
    held = rows // bsz
    some = f"batch{'es' * (held != 1)} of {bsz:,}"
    if asked is None:
        covered = _covered(held, bsz, rows)
        return f"evaluating {held:,} {some}: {covered} (eval_input.eval_steps unset)"
    if asked <= held:
        return (
            f"evaluating {asked:,} of {held:,} {some}: {_covered(asked, bsz, rows)} "
            f"(eval_input.eval_steps={asked:,})"
        )
    return (
        f"note: eval_input.eval_steps={asked:,} but the eval split holds {held:,} {some}; "
        f"evaluating {held:,}: {_covered(held, bsz, rows)}"
    )


def _covered(batches: int, bsz: int, rows: int) -> str:
    """What `batches` batches of `bsz` are of an eval split of `rows` sequences, in words:
    the whole split, or how many of its sequences, and the last partial batch dropped."""
    evaluated, tail = batches * bsz, rows % bsz
    if evaluated == rows:
        return f"the whole eval split, {rows:,} sequence{'s' * (rows != 1)}"
    said = f"{evaluated:,} of the eval split's {rows:,} sequences"
    if evaluated + tail == rows:  # every whole batch: the rest is the partial one
        said += (
            f"; the last {tail:,} make no whole batch and are not evaluated (ModelZoo's drop_last)"
        )
    return said
