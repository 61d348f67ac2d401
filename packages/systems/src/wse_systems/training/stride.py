"""Which activation stride and weight streaming a replica runs when the params file sets
none: the fastest that fits.

Contract. `run_plan(model, spec, micro_batch, seq_len, stride=0, chunks=0,
optimizer_slots=2)` is the `MemoryPlan` (`wse_systems.training.plan.memory_plan`) a run of
one micro-batch runs and every planner prices (`micro_batch.plan_step`: `wse plan train`,
`trillion-scaling`): the plan of `fastest_stride(model, spec, micro_batch, seq_len, chunks,
optimizer_slots, stride)`: of every (stride, weight streaming) that places (each planned
as `plan.place` plans it), the one whose predicted step
(`wse_systems.training.performance.predict_step` on its own memory plan: one micro-batch on
one system) is the fastest; a tie to the smaller weight buffers, then the smaller stride.
The strides: `runconfig.activation_stride` k > 0 alone, or 0, those of `_frontier` (a
stride outside it holds at least as many layer inputs as a smaller one, which recomputes
fewer layers, so it is never faster: about sqrt(L) + 1 of them at most). The weight
streaming: `runconfig.weight_chunks` k > 0, every matrix in k chunks; 0, each of
`chunks.choices` (whole layers, then column chunks from a whole matrix down to the floor
chunk; a set fixed by the model's shapes and the PE rows, so a PE with less SRAM for data
places a subset of the same choices and its fastest is never faster). Both given, the plan
`memory_plan` makes. `stride_reason`, and the chunks' `reason` that `wse train
--validate-only` prints after "why:", list each stride's fastest predicted step, the
streamings tried at the stride chosen, and, where the smallest strides place nothing, the
bytes the largest of them needs against the PE's data budget. `plan.memory_plan(stride=0)`
itself keeps the smallest stride that fits beside the largest chunk that fits (what
`fits` and "auto" ask): the predictor imports `plan`, so `plan` cannot ask it.

Hunt 82 (jobs18 H1): below the layer the chunk was the largest the SRAM left after the
activations held (`plan._auto_chunks`) and only strides were searched, so the token passes
starved and `trillion-scaling`'s one-system step got faster as SRAM was taken away (1,223.8,
1,107.9 and 1,090.8 s at 0, 2 and 4 KiB of program reserve); the search of every streaming
makes it 1,086.8, 1,094.5 and 1,100.6 s (the 2 KiB reserve now off the token passes too:
`placement`). L2: where one stride placed, `stride_reason` was "" and the reader could not
learn that the smaller strides do not fit.

Hunt 74: the plan kept the smallest stride that fits. Llama 3 8B with 48 x 8,192 tokens at
once held 13 layer inputs at stride 3 and left the products so little SRAM that the step took
33.5 s (`dsd_issue`-bound); stride 4 holds 11 and takes 7.60 s (9.76 s until hunt 85's
CS-3 DSD issue; the shipped llama3_8b.yaml: 4 x wse3, AdamW clipping the global norm, `wse
plan train -m llama3_8b --batch 48 --micro-batch none`; the llama3-8b preset, one system and
no clipping, before hunt 85: 33.4 s and 9.66 s; 9.02 and 8.92 s at stride 4 until hunt 82
took the program's 2 KiB off the token passes, at which stride 3 no longer fits).
The times listed after "why:" are each stride's step of one micro-batch on one system with
MemoryX updating each group as its gradient arrives, which ranks them; the run's own step
(its systems, micro-batches and a clipped update held to the step's end) is priced apart.

Answers are kept (`wse_systems.serving.memo.Memo`: by value of the model, the spec and the
arguments, and the assumptions and calibration in force): a planner asks the same
micro-batch's plan for every step it prices.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from wse_core import SramBudgetError, WaferSpec, WseError

from wse_systems.serving.memo import Memo, frozen
from wse_systems.training.chunks import WeightChunks, choices
from wse_systems.training.plan import (
    ActivationPlan,
    MemoryPlan,
    bytes_needed,
    inputs_held,
    memory_plan,
    place,
    plan_activations,
)

__all__ = ["run_plan", "fastest_stride"]

# a planner asks the same micro-batch's plan for every step it prices (hunt 74's wall time)
_PLANS = Memo(4096)  # hunt 79: 256 held 178 of a search's 370 micro-batches


def run_plan(
    model: Any, spec: WaferSpec, micro_batch: int, seq_len: int, stride: int = 0,
    chunks: int = 0, optimizer_slots: int = 2,
) -> MemoryPlan:  # fmt: skip
    """The memory plan a run of one micro-batch runs (module contract); a plan that does not
    place carries the ledger's error, as `memory_plan`'s does."""
    streaming = None
    if stride == 0 or chunks == 0:  # something to choose
        try:
            streaming = fastest_stride(model, spec, micro_batch, seq_len, chunks, optimizer_slots,
                                       stride)  # fmt: skip
        except SramBudgetError:  # memory_plan plans it again and keeps the ledger's line
            pass
    return memory_plan(model, spec, micro_batch, seq_len, optimizer_slots, stride=stride,
                       streaming=streaming, chunks=chunks)  # fmt: skip


def _frontier(n_layers: int) -> list[int]:
    """The strides that hold fewer layer inputs than every smaller stride: any other holds at
    least as many as a smaller one, which recomputes fewer layers, so it is never faster."""
    out, least = [], math.inf
    for k in range(1, n_layers + 1):
        if inputs_held(n_layers, k) < least:
            out.append(k)
            least = inputs_held(n_layers, k)
    return out


def fastest_stride(
    model: Any, spec: WaferSpec, micro_batch: int, seq_len: int, chunks: int = 0,
    optimizer_slots: int = 2, stride: int = 0,
) -> ActivationPlan:  # fmt: skip
    """The plan of the module contract: `stride` 0, the fastest stride and weight streaming
    (`chunks` 0: of `chunks.choices`; k > 0: forced k chunks); a stride given, the fastest
    weight streaming at it. A step the predictor refuses (MemoryX's capacity, the
    sequence) keeps `plan_activations`' plan: the refusal is raised where that step is
    priced."""
    key = (frozen(model), frozen(spec), micro_batch, seq_len, chunks, optimizer_slots, stride)
    return _PLANS.get(key, lambda: _fastest(model, spec, micro_batch, seq_len, chunks,
                                            optimizer_slots, stride))  # fmt: skip


def _buffer_params(model: Any, ck: WeightChunks | None) -> int:
    """Parameters a choice's weight buffers hold (whole: the layer; chunks: the largest and
    the layer's vectors): the smaller wins a tie."""
    if ck is None:
        return 0
    return int(model.layer_params()) if ck.whole else ck.largest_params + ck.vector_params


def _fastest(model, spec, micro_batch, seq_len, chunks, optimizer_slots, stride):
    from wse_systems.training.performance import StepLayout  # it imports plan
    from wse_systems.training.step_parts import step_seconds

    least = plan_activations(model, spec, micro_batch, seq_len, stride, chunks)  # none: raised
    strides = [stride] if stride else _frontier(int(model.n_layers))
    ways = (None,) if chunks else choices(model, spec.pe_rows)  # None: the forced chunks
    placed: dict[tuple[int, int], ActivationPlan] = {}
    for k in strides:
        for i, ck in enumerate(ways):
            try:
                placed[k, i] = (
                    plan_activations(model, spec, micro_batch, seq_len, k, chunks)
                    if ck is None else place(model, spec, micro_batch, seq_len, k, ck)
                )  # fmt: skip
            except SramBudgetError:
                continue

    def step_s(p: ActivationPlan) -> float:
        mp = memory_plan(model, spec, micro_batch, seq_len, optimizer_slots, streaming=p)
        return step_seconds(model, spec, num_csx=1, batch_per_system=micro_batch,
                            micro_batch=micro_batch, seq_len=seq_len,
                            layout=StepLayout(mp))  # fmt: skip

    try:
        timed = {key: step_s(p) for key, p in placed.items()}
    except WseError:
        return least
    best = min(timed, key=lambda x: (timed[x], _buffer_params(model, ways[x[1]]), x[0]))
    p = placed[best]
    why_chunks = p.chunks.reason
    if not chunks:
        why_chunks += "; " + _ways_why(model, ways, best[0], timed)
    if stride:
        return dataclasses.replace(p, chunks=dataclasses.replace(p.chunks, reason=why_chunks))
    why = _strides_why(model, spec, (micro_batch, seq_len), timed, least.chunks if chunks
                       else ways[-1])  # fmt: skip
    ck = dataclasses.replace(p.chunks, reason=f"{why_chunks}; {why}")
    return dataclasses.replace(p, chunks=ck, stride_reason=why)


def _way(ck: WeightChunks) -> str:
    return "whole layers" if ck.whole else f"chunks of <= {ck.largest_params / 1e6:,.4g}M"


def _ways_why(model, ways, k: int, timed: dict) -> str:
    """The weight streamings tried at stride `k`, each with its predicted step."""
    tried = [f"{_way(ways[i])}: {s:.4g} s" for (j, i), s in timed.items() if j == k]
    left = [_way(ck) for i, ck in enumerate(ways) if (k, i) not in timed]
    out = (f"weights streamed the fastest of the ways that fit at stride {k} (whole layers, "
           f"then each matrix in column chunks from a whole matrix down to "
           f"{ways[-1].largest_params:,} parameters, one output column per PE row; "
           f"{', '.join(tried)}")  # fmt: skip
    return out + (f"; {', '.join(left)}: do not fit)" if left else ")")


def _strides_why(model, spec, shape: tuple[int, int], timed: dict, smallest) -> str:
    """Each stride's fastest predicted step, and why the strides below them do not fit."""
    micro_batch, seq_len = shape
    by: dict[int, float] = {}
    for (k, _), s in sorted(timed.items()):
        by[k] = min(by.get(k, math.inf), s)
    best = min(by, key=lambda k: (by[k], k))
    tried = ", ".join(f"{k}: {s:.4g} s" for k, s in by.items())
    why = (f"stride {best}: the fastest predicted step of the strides that fit ({tried}; each "
           "stride with its fastest weight streaming, each a step of one micro-batch of "
           f"{micro_batch} on one system with MemoryX updating each group as its gradient "
           "arrives, not the run's step, which adds its other micro-batches and systems and, "
           "where it clips, the update held to the step's end; a stride not tried holds at "
           "least as many layer inputs as a smaller one and recomputes more layers)")  # fmt: skip
    below = [k for k in _frontier(int(model.n_layers)) if k < min(by)]
    if below:  # hunt 82 (jobs18 L2): one stride placed and the reader was told nothing
        k = below[-1]
        need = bytes_needed(model, spec, micro_batch, seq_len, k, smallest)
        held = inputs_held(int(model.n_layers), k)
        names = f"stride {k}" if len(below) == 1 else f"strides {below[0]} to {k}"
        why += (
            f"; {names} do{'es' if len(below) == 1 else ''} not fit: stride {k} holds "
            f"{held} layer inputs and needs {need:,} B per PE with the least weight "
            f"buffers ({_way(smallest)}) against {spec.data_bytes_per_pe:,} B for data"
        )
    return why + "; runconfig.activation_stride sets one"
