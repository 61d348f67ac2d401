"""How a layer's matrices are cut for weight streaming below the layer (host-side, static).

Contract. A layer's matrices are `wse_systems.transformer.layer_matrices(model)` (group, name, each
[n_in, n_out]). `WeightChunks` says how many column chunks each one streams in: chunk j of a
matrix holds its columns [j * cols, min((j + 1) * cols, n_out)), `cols = ceil(n_out /
count)`, so a chunk's product x @ W[:, cols] is complete on its own (its output columns, its
share of the input gradient, its whole weight gradient). One chunk per matrix is whole-layer
streaming. The layer's vectors (norm scales, biases) stream whole, as one small group.

- `whole(model)`: one chunk per matrix;
- `forced(model, k)`: every matrix in k chunks (at most one column each);
- `within(model, params)`: each matrix in the fewest chunks of at most `params` parameters;
- `floor_params(model, pe_rows)`: the smallest chunk budget a planner considers (a chunk of
  each matrix has at least one output column per PE row);
- `choices(model, pe_rows)`: the ways a layer may stream that the run's search prices
  (`wse_systems.training.stride`): whole layers, then every distinct `within(model, P)` for
  P from the largest matrix down to `floor_params` (each matrix's chunk count changes only
  at P = n_in * ceil(n_out / j), so those budgets reach them all), or, past
  `CHOICES_EXHAUSTIVE` of them, those at budgets `CHOICE_LADDER` apart. The set depends on
  the model's shapes and the PE rows only, never on the SRAM, so a wafer with less SRAM
  for data places a subset of the same choices and its fastest is never faster.

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

__all__ = [
    "Matrix",
    "WeightChunks",
    "layer_shapes",
    "whole",
    "forced",
    "within",
    "floor_params",
    "choices",
    "CHOICES_EXHAUSTIVE",
    "CHOICE_LADDER",
]

# The chunkings the run's search prices (`choices`; each is one predicted step a stride a
# micro-batch). CHOICES_EXHAUSTIVE (chunkings; a bound on the search's work, chosen so that
# Llama 3 8B's 9, a model whose layer fits whole, are all priced): up to this many distinct
# chunkings between the floor and a whole matrix are all priced, so the search is exact;
# past it, CHOICE_LADDER (dimensionless ratio between budgets, from the largest matrix down
# to the floor chunk). Hunt 82 (jobs18 H1), measured against pricing every distinct
# chunking at every frontier stride (one micro-batch on one system, wse3 at its 2 KiB
# program reserve): llama_1t (53 chunkings) 4 x 4,096 and 8 x 4,096, Llama 3.1 405B (42)
# 2 x 8,192 and 4 x 8,192: a ladder of ratio 2 matched the exhaustive best on three and
# was 0.84% slower on 1T's 8 x 4,096; ratio sqrt 2 (11 and 9 rungs) matched all four;
# 2 ** 0.25 (17 and 14) was 0.72% slower on 1T's 8 x 4,096 (other budgets, not a
# refinement of sqrt 2's): a ladder may miss the best by about 1%, never the monotony.
CHOICES_EXHAUSTIVE = 16
CHOICE_LADDER = 2**0.5


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


def floor_params(model: Any, pe_rows: int) -> int:
    """The smallest chunk budget a planner considers: a chunk of each matrix has at least
    one output column per PE row (the widest-input matrix sets the size), so that every row
    of the wafer works on every chunk."""
    mats, _ = layer_shapes(model)
    return max(m.n_in * min(m.n_out, pe_rows) for m in mats)


def _distinct(model: Any, budgets: Any) -> list[WeightChunks]:
    """`within(model, P)` for each budget, one per distinct cut, the largest budgets first."""
    cuts: dict[tuple[int, ...], WeightChunks] = {}
    for p in sorted(set(budgets), reverse=True):
        ck = within(model, p)
        cuts.setdefault(ck.counts, ck)
    return list(cuts.values())


def choices(model: Any, pe_rows: int) -> tuple[WeightChunks, ...]:
    """Whole layers, then the column chunkings the search prices (module contract), the
    largest chunks first."""
    mats, _ = layer_shapes(model)
    least, top = floor_params(model, pe_rows), max(m.params for m in mats)
    budgets = {least, top}
    for m, most in zip(mats, within(model, least).counts, strict=True):
        budgets |= {m.n_in * math.ceil(m.n_out / j) for j in range(1, most + 1)}
    cuts = _distinct(model, (p for p in budgets if least <= p <= top))
    if len(cuts) > CHOICES_EXHAUSTIVE:
        rungs = math.floor(math.log(top / least, CHOICE_LADDER)) + 1
        cuts = _distinct(model, [least, *(int(top / CHOICE_LADDER**j) for j in range(rungs))])
    return (whole(model), *cuts)
