"""What a `StreamedTrainer` is built with and what its step is given, checked on the host
before anything runs or is updated (hunt 78).

`micro_size(num_csx, global_batch, seq_len, micro_batch)` is the sequences a replica runs a
micro-batch: each a positive integer, `num_csx` dividing `global_batch` (each replica its
equal share), and a given `micro_batch` a divisor of that share; None means the whole share.
`check_batch(model, batch, segments, (global_batch, seq_len))` refuses a batch that is not
(global_batch, seq_len + 1) integer rows (the loss is scaled by 1 / (global_batch x
seq_len) when the trainer is built, so another shape would train on a wrong loss or fail in a
reshape), then `check_ids`: the token ids of the inputs *and* of the targets within the
vocabulary, as `wse_models.decoder.check_inputs` refuses them (`ModelError`, the same line
the fused reference raises). The per-layer functions run jitted, where ids cannot be seen: an
id outside the vocabulary gathers NaN, and MemoryX would write the NaN update into every
weight. Every error is one line (a `WseError`, a `ValueError`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from wse_core.divisors import divisors
from wse_core.errors import WseError
from wse_models.decoder import check_inputs

__all__ = ["micro_size", "check_batch", "check_ids", "check_targets"]


def micro_size(num_csx: int, global_batch: int, seq_len: int, micro_batch: int | None) -> int:
    """Sequences per replica per micro-batch; `WseError` for a split that cannot be made."""
    for name, value in (("num_csx", num_csx), ("global_batch", global_batch),
                        ("seq_len", seq_len)):  # fmt: skip
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
            raise WseError(f"{name} must be a positive integer, got {value!r}")
    if global_batch % num_csx:
        raise WseError(
            f"num_csx {num_csx} must divide global_batch {global_batch} (each system trains "
            f"an equal share); use a global_batch that is a multiple of {num_csx}"
        )
    share = global_batch // num_csx
    if micro_batch is None:
        return share
    whose = f"the per-system batch {share} (global_batch {global_batch} / num_csx {num_csx})"
    if isinstance(micro_batch, bool) or not isinstance(micro_batch, int | np.integer):
        raise WseError(f"micro_batch must be an integer dividing {whose}, got {micro_batch!r}")
    if micro_batch < 1 or share % micro_batch:
        raise WseError(
            f"micro_batch {micro_batch} must be a positive divisor of {whose}; "
            f"give one of {_divisors(share)}, or None for the whole share"
        )
    return int(micro_batch)


def _divisors(n: int, most: int = 12) -> str:
    """n's divisors ascending (`wse_core.divisors`), the middle ones elided past `most`."""
    every = divisors(n)
    if len(every) <= most:
        return str(every)
    half = most // 2
    return f"[{', '.join(map(str, every[:half]))}, ..., {', '.join(map(str, every[-half:]))}]"


def check_batch(model: Any, batch: Any, segments: Any, shape: tuple[int, int]) -> None:
    """Refuse `batch` (B, S + 1) unless (B, S) is `shape` (global_batch, seq_len) and every
    id is in the vocabulary; `segments` (segment ids, positions), each (B, S), when packed."""
    global_batch, seq_len = shape
    want = (global_batch, seq_len + 1)
    shape = tuple(np.shape(batch))
    if shape != want:
        raise WseError(
            f"batch shape {shape} is not the trainer's (global_batch, seq_len + 1) = {want}"
        )
    if segments is not None:
        for name, x in zip(("segment ids", "positions"), segments, strict=True):
            if tuple(np.shape(x)) != want[:1] + (seq_len,):
                raise WseError(
                    f"segments' {name} shape {tuple(np.shape(x))} is not the batch's inputs' "
                    f"(global_batch, seq_len) = {(global_batch, seq_len)}"
                )
    check_ids(model, batch, segments)


def check_ids(model: Any, batch: Any, segments: Any = None) -> None:
    """`ModelError` where `batch`'s inputs (its rows but the last id, with `segments`'
    positions) or its targets (but the first) hold an id outside 0..vocab_size - 1; nothing
    is checked of values that are not known (under `jit`), as `check_inputs` does."""
    rows = np.asarray(batch) if isinstance(batch, list | tuple) else batch
    check_inputs(model, rows[:, :-1], None if segments is None else segments[1])
    check_targets(model, rows)


def check_targets(model: Any, batch: Any) -> None:
    """`ModelError` where the targets' one id the inputs do not hold (each row's last) is
    outside the vocabulary: the rest are inputs, which `wse_models.forward` checks itself."""
    rows = np.asarray(batch) if isinstance(batch, list | tuple) else batch
    check_inputs(model, rows[:, -1:])
