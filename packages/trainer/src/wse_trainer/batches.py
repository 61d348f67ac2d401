"""The batches a run trains on: packed rows in a seeded order, checkpointable.

`BatchIterator` yields `(batch, seq_len + 1)` int32 batches in a seeded order (a fresh
permutation per epoch); its position is `{"seed", "epoch", "index"}`, so a run restored from
a checkpoint continues with exactly the batches it would have seen. Its state holds the
rows' count and sha256 too (`rows_sha256`), and a restore over other rows says so (hunt 80:
a resume over a grown corpus reused the saved position in another order, unsaid), keeping
the position as HF's Trainer keeps the count of batches a resumed run has seen.
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
    index: int = 0  # batches already taken in this epoch

    def __post_init__(self) -> None:
        if len(self.rows) < self.batch_size:
            raise ConfigError(
                f"the split has {len(self.rows)} sequences, fewer than batch_size="
                f"{self.batch_size}; lower batch_size or max_sequence_length, or add data"
            )

    @property
    def batches_per_epoch(self) -> int:
        return len(self.rows) // self.batch_size

    def _order(self) -> np.ndarray:
        return np.random.default_rng([self.seed, self.epoch]).permutation(len(self.rows))

    def __iter__(self) -> Iterator[np.ndarray]:
        return self

    def __next__(self) -> np.ndarray:
        if self.index >= self.batches_per_epoch:
            self.epoch, self.index = self.epoch + 1, 0
        take = self._order()[self.index * self.batch_size : (self.index + 1) * self.batch_size]
        self.index += 1
        return self.rows[take]

    @functools.cached_property
    def rows_sha256(self) -> str:
        """The sha256 of the packed rows (their shape and int32 tokens): the data a position
        indexes, saved with it (hunt 80)."""
        rows = np.ascontiguousarray(self.rows, np.int32)
        return hashlib.sha256(repr(rows.shape).encode() + rows.tobytes()).hexdigest()

    def state(self) -> dict[str, Any]:
        """The position (seed, epoch, batches taken in it) and the rows it indexes (count and
        `rows_sha256`)."""
        return {"seed": self.seed, "epoch": self.epoch, "index": self.index,
                "rows": len(self.rows), "rows_sha256": self.rows_sha256}  # fmt: skip

    def restore(self, state: dict[str, Any]) -> str | None:
        """The position of `state` taken; the note of rows other than those it indexed (a
        grown or changed corpus: the position is kept over the new rows' order, as HF's
        Trainer skips the batches a resumed run has seen), or None (the same rows, or a
        state saved before it held them)."""
        if int(state["seed"]) != self.seed:
            raise ConfigError(
                f"checkpoint data seed {state['seed']} differs from the "
                f"configured shuffle_seed {self.seed}"
            )
        self.epoch, self.index = int(state["epoch"]), int(state["index"])
        theirs = state.get("rows_sha256")
        if not isinstance(theirs, str) or theirs == self.rows_sha256:
            return None
        count = state.get("rows")
        then = f"{count:,} rows" if isinstance(count, int) else "other rows"
        if count == len(self.rows):
            then += " of other tokens"
        return (
            f"note: the training data is not the data the checkpoint was trained on ({then} "
            f"there, {len(self.rows):,} here: train_input.data_dir, max_corpus_bytes or the "
            f"files changed); its position (epoch {self.epoch}, batch {self.index}) is kept "
            f"over the new rows' shuffled order, so rows it trained on may come again and "
            "others be skipped before the epoch ends; resume over the same data to continue "
            "its order"
        )
