"""Review 82, hole 5: the note of a data position taken at another batch size said "no row of
the epoch is skipped" where the epoch's drop_last tail grows (50 rows: batch 8, then 16 from
row 24, trains 40 and leaves out 10; batch 8 throughout leaves out 2). The oracle: the rows
each run consumes, enumerated batch by batch until the epoch turns."""

from __future__ import annotations

import numpy as np
import pytest
from wse_trainer.batches import BatchIterator


def _epoch_rows(it: BatchIterator) -> list[int]:
    """The first token (the row's id) of every row `it` takes until its epoch turns."""
    epoch, got = it.epoch, []
    while True:
        batch = next(it)
        if it.epoch != epoch:
            return got
        got += batch[:, 0].tolist()


@pytest.mark.parametrize(("n", "first", "steps", "later"),
                         [(50, 8, 3, 16), (50, 8, 3, 4), (40, 8, 3, 6), (41, 6, 2, 5),
                          (50, 16, 1, 8), (33, 4, 8, 32)])  # fmt: skip
def test_the_note_counts_the_rows_the_epoch_leaves_out(n, first, steps, later):
    rows = np.arange(n, dtype=np.int32)[:, None] * np.ones((1, 3), np.int32)
    a = BatchIterator(rows, first, 1)
    before = np.concatenate([next(a) for _ in range(steps)])[:, 0].tolist()
    b = BatchIterator(rows, later, 1)
    said = b.restore(a.state())
    trained = before + _epoch_rows(b)
    assert len(set(trained)) == len(trained)  # none twice
    skipped = n - len(trained)
    constant = n - len(_epoch_rows(BatchIterator(rows, first, 1)))
    assert said is not None and "trained twice" in said
    if skipped == 0:
        assert said.endswith("trained twice or skipped")
    else:
        plural = lambda k: f"{k} row" + ("" if k == 1 else "s")  # noqa: E731
        assert said.endswith(
            f"its last {plural(skipped)} make no whole batch of {later} and are left out of it "
            f"(drop_last; {plural(constant)} at batches of {first} throughout)"
        )


def test_the_reviews_case_leaves_out_10_rows_not_none():
    rows = np.arange(150, dtype=np.int32).reshape(50, 3)
    a = BatchIterator(rows, 8, 1)
    [next(a) for _ in range(3)]
    b = BatchIterator(rows, 16, 1)
    said = b.restore(a.state())
    assert "its last 10 rows" in said and "2 rows at batches of 8" in said
    assert "skipped" not in said
