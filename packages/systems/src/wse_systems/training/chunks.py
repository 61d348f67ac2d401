"""How a layer's matrices are cut for weight streaming below the layer (host-side, static).

Contract. A layer's matrices are `wse_systems.transformer.layer_matrices(model)` (group, name, each
[n_in, n_out]). `WeightChunks` says how many column chunks each one streams in: chunk j of a
matrix holds its columns [j * cols, min((j + 1) * cols, n_out)), `cols = ceil(n_out /
count)`, so a chunk's product x @ W[:, cols] is complete on its own (its output columns, its
share of the input gradient, its whole weight gradient). One chunk per matrix is whole-layer
streaming. The layer's vectors (norm scales, biases) stream whole, as one small group.

- `whole(model)`: one chunk per matrix;
- `forced(model, k)`: every matrix in k chunks (at most one column each);
- `within(model, params)`: each matrix in the fewest chunks of at most `params` parameters.

`wse_systems.training.plan.plan_activations` chooses among them from the SRAM ledger and records why
(`reason`); the `StreamedTrainer` runs what it chose, and `wse_systems.training.performance` prices
it.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from wse_core import WseError

from wse_systems.transformer import layer_matrices

__all__ = ["Matrix", "WeightChunks", "layer_shapes", "whole", "forced", "within"]


@dataclasses.dataclass(frozen=True)
class Matrix:
    """One matrix of a layer: params[group][name] is [n_in, n_out]."""

    group: str
    name: str
    n_in: int
    n_out: int

    @property
    def params(self) -> int:
        return self.n_in * self.n_out


def layer_shapes(model: Any) -> tuple[tuple[Matrix, ...], int]:
    """(the layer's matrices in forward order, the layer's vector parameters); `model` is a
    `DecoderShape` with `layer_params()` (a `wse_models.ModelConfig`)."""
    mats = tuple(Matrix(*m) for m in layer_matrices(model))
    return mats, int(model.layer_params()) - sum(m.params for m in mats)


@dataclasses.dataclass(frozen=True, kw_only=True)
class WeightChunks:
    """Column chunks per matrix of one layer (every layer is cut alike)."""

    matrices: tuple[Matrix, ...]
    counts: tuple[int, ...]  # chunks per matrix, in `matrices` order
    vector_params: int  # the layer's norm scales and biases (streamed whole)
    reason: str = ""
    whole: bool = False  # the layer streams as one group (else matrix by matrix, by chunks)

    def cols(self, i: int) -> int:
        """Columns per chunk of matrix i (the last chunk may have fewer)."""
        return math.ceil(self.matrices[i].n_out / self.counts[i])

    def bounds(self, i: int) -> list[tuple[int, int]]:
        """[(first column, end column)] of matrix i's chunks."""
        n, c = self.matrices[i].n_out, self.cols(i)
        return [(j, min(j + c, n)) for j in range(0, n, c)]

    def chunk_params(self, i: int) -> int:
        return self.matrices[i].n_in * self.cols(i)

    @property
    def largest_params(self) -> int:
        """Parameters of the largest chunk (what the SRAM buffers are sized for)."""
        return max(self.chunk_params(i) for i in range(len(self.matrices)))

    def describe(self) -> str:
        """'wq 4 x 8 cols, ...': each matrix's chunk count and columns per chunk."""
        if self.whole:
            return "whole layers (one chunk per matrix)"
        return ", ".join(
            f"{m.name} {n} x {self.cols(i)} cols" for i, (m, n) in enumerate(self._pairs())
        )

    def summary(self) -> str:
        """'41 column chunks a layer, at most 254M parameters each' (or whole layers)."""
        if self.whole:
            return "whole layers"
        return (
            f"{sum(self.counts)} column chunks a layer, at most "
            f"{self.largest_params / 1e6:,.4g}M parameters each"
        )

    def _pairs(self):
        return zip(self.matrices, self.counts, strict=True)


def whole(model: Any, reason: str = "") -> WeightChunks:
    mats, vectors = layer_shapes(model)
    return WeightChunks(
        matrices=mats, counts=(1,) * len(mats), vector_params=vectors, reason=reason, whole=True
    )


def forced(model: Any, k: int, reason: str = "") -> WeightChunks:
    """Every matrix in `k` column chunks (a matrix of fewer columns: one per column)."""
    if k < 1:
        raise WseError(f"weight chunks per matrix must be >= 1, got {k}")
    mats, vectors = layer_shapes(model)
    widest = max(m.n_out for m in mats)
    if k > widest:  # hunt 58: 10**6 was planned as one column a chunk, and reported as 10**6
        raise WseError(
            f"weight chunks per matrix (runconfig.weight_chunks) must be at most {widest:,}, "
            f"the widest matrix's columns, got {k:,}; 0 chunks them as SRAM allows"
        )
    counts = tuple(min(k, m.n_out) for m in mats)
    return WeightChunks(matrices=mats, counts=counts, vector_params=vectors, reason=reason)


def within(model: Any, params: int, reason: str = "") -> WeightChunks:
    """Each matrix in the fewest column chunks of at most `params` parameters (a chunk holds
    at least one column, so a budget under n_in still gives one-column chunks)."""
    mats, vectors = layer_shapes(model)
    counts = tuple(math.ceil(m.n_out / max(1, min(m.n_out, params // m.n_in))) for m in mats)
    return WeightChunks(matrices=mats, counts=counts, vector_params=vectors, reason=reason)
