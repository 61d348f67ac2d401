"""The batches a run trains on: packed rows in a seeded order, checkpointable.

`BatchIterator` yields `(batch, seq_len + 1)` int32 batches in a seeded order (a fresh
permutation per epoch); its position is `{"seed", "epoch", "samples"}`, the rows of the
epoch's permutation already taken (ModelZoo's dataloader state counts samples, its
`samples_streamed`), so a run restored from a checkpoint continues with exactly the rows it
would have seen, at any batch size (hunt 81: the position counted batches, so a
`--checkpoint-path` start at batch 16 from a step trained at batch 8 skipped rows 24-47 of
the epoch, and one at batch 4 trained rows 12-15 again). A state saved before it counted
rows (`{"epoch", "index"}`) is read at `index` x its `batch_size` (the saved config's, which
`resume` adds), else this iterator's. Its state holds the rows' count and sha256 too
(`rows_sha256`), and a restore over other rows says so (hunt 80: a resume over a grown corpus
reused the saved position in another order, unsaid), keeping the position as HF's Trainer
keeps the count of batches a resumed run has seen.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from wse_trainer.config import ConfigError

__all__ = ["BatchIterator"]


@dataclasses.dataclass
class BatchIterator:
    """Seeded batches of packed rows; `state()` / `restore()` make it checkpointable."""

    rows: np.ndarray  # (n, seq_len + 1) int32
    batch_size: int
    seed: int
    epoch: int = 0
    taken: int = 0  # rows of this epoch's permutation already taken (ModelZoo's samples)

    def __post_init__(self) -> None:
        if len(self.rows) < self.batch_size:
            raise ConfigError(
                f"the split has {len(self.rows)} sequences, fewer than batch_size="
                f"{self.batch_size}; lower batch_size or max_sequence_length, or add data"
            )

    @property
    def batches_per_epoch(self) -> int:
        return len(self.rows) // self.batch_size

    @property
    def index(self) -> int:
        """Whole batches of this iterator's size taken in this epoch."""
        return self.taken // self.batch_size

    def _order(self) -> np.ndarray:
        return np.random.default_rng([self.seed, self.epoch]).permutation(len(self.rows))

    def __iter__(self) -> Iterator[np.ndarray]:
        return self

    def __next__(self) -> np.ndarray:
        if self.taken + self.batch_size > len(self.rows):  # no whole batch left: drop_last
            self.epoch, self.taken = self.epoch + 1, 0
        take = self._order()[self.taken : self.taken + self.batch_size]
        self.taken += self.batch_size
        return self.rows[take]

    @functools.cached_property
    def rows_sha256(self) -> str:
        """The sha256 of the packed rows (their shape and int32 tokens): the data a position
        indexes, saved with it (hunt 80)."""
        rows = np.ascontiguousarray(self.rows, np.int32)
        return hashlib.sha256(repr(rows.shape).encode() + rows.tobytes()).hexdigest()

    def state(self) -> dict[str, Any]:
        """The position (seed, epoch, rows taken in it: `samples`; `index` and `batch_size`
        say it in batches, for people) and the rows it indexes (count and `rows_sha256`)."""
        return {"seed": self.seed, "epoch": self.epoch, "samples": self.taken,
                "index": self.index, "batch_size": self.batch_size,
                "rows": len(self.rows), "rows_sha256": self.rows_sha256}  # fmt: skip

    def restore(self, state: dict[str, Any]) -> str | None:
        """The position of `state` taken, in rows; the note of rows other than those it
        indexed (a grown or changed corpus: the position is kept over the new rows' order,
        as HF's Trainer skips the batches a resumed run has seen), or of a position taken at
        another batch size, or None (the same rows at the same batch size, or a state saved
        before it held them)."""
        if int(state["seed"]) != self.seed:
            raise ConfigError(
                f"checkpoint data seed {state['seed']} differs from the "
                f"configured shuffle_seed {self.seed}"
            )
        self.epoch, self.taken = int(state["epoch"]), _samples(state, self.batch_size)
        theirs = state.get("rows_sha256")
        if not isinstance(theirs, str) or theirs == self.rows_sha256:
            return self._batch_note(state)
        count = state.get("rows")
        then = f"{count:,} rows" if isinstance(count, int) else "other rows"
        if count == len(self.rows):
            then += " of other tokens"
        return (
            f"note: the training data is not the data the checkpoint was trained on ({then} "
            f"there, {len(self.rows):,} here: train_input.data_dir, max_corpus_bytes or the "
            f"files changed); its position (epoch {self.epoch}, row {self.taken:,}) is kept "
            f"over the new rows' shuffled order, so rows it trained on may come again and "
            "others be skipped before the epoch ends; resume over the same data to continue "
            "its order"
        )

    def _batch_note(self, state: dict[str, Any]) -> str | None:
        """The line of a position taken at another batch size than this iterator's, or None:
        no row of the epoch comes twice, and the rows its last whole batch of this size does
        not reach are counted (review 82: it said none was skipped, where 50 rows at batch 8
        then 16 from row 24 leave out 10, and 2 at batch 8 throughout)."""
        saved = state.get("batch_size")
        if not isinstance(saved, int) or saved == self.batch_size:
            return None
        left = len(self.rows) - min(self.taken, len(self.rows))
        skipped, constant = left % self.batch_size, len(self.rows) % saved
        said = (
            f"note: the checkpoint's data position is row {self.taken:,} of epoch {self.epoch}'s "
            f"shuffled order (batches of {saved:,} there); this run's batches of "
            f"{self.batch_size:,} continue from that row, so no row of the epoch is trained twice"
        )
        if skipped == 0:
            return said + " or skipped"
        return (
            f"{said}; its last {_rows(skipped)} make no whole batch of {self.batch_size:,} and "
            f"are left out of it (drop_last; {_rows(constant)} at batches of {saved:,} "
            "throughout)"
        )


def _rows(count: int) -> str:
    return f"{count:,} row" + ("" if count == 1 else "s")


def _samples(state: dict[str, Any], batch_size: int) -> int:
    """The rows of its epoch a saved position has taken: its `samples`, or (saved before it
    counted rows) its `index` batches of its `batch_size`, else of `batch_size`."""
    if "samples" in state:
        return int(state["samples"])
    saved = state.get("batch_size")
    return int(state["index"]) * (saved if isinstance(saved, int) else batch_size)
