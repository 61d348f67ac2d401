"""The no-stall condition of a weight-streaming step, unit by unit, priced from its placement.

Contract. `stream_budget(model, spec, plan, num_csx=, micro_batch=, seq_len=)` returns one
`StreamRow` per streamed unit of the step that `predict_step` prices on the same plan: the
embedding, a layer (whole-layer streaming; every layer is alike) or each matrix's column
chunk (streaming below the layer), and the head. For each: the weight bytes streamed in per
use, the time to stream them (bytes at min(MemoryX, SwarmX) plus the SwarmX tree's latency,
`wse_systems.training.stream_cost`), the forward and backward compute they overlap with, and the
time to write the unit's gradient back to MemoryX. A unit stalls the wafer when its stream (in,
or in the backward the slower of in and out) takes longer than the compute it hides under.
The head's forward (logits, loss) and backward (their gradients) run back to back while its
weights stream in once and its gradient out (`performance.predict_step` overlaps both with
the whole head): its row shows each part in its column (hunt 68: the whole head was printed
under both, and the table's rows summed past the step) and stalls when either stream is
longer than the two together (`StreamRow.together`).
Nothing here is fitted: the rows are `PerfModel` prices of the step's own phases.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from wse_core import PerfModel, Phase, WaferSpec

from wse_systems.training.layer_cost import chunk_phases, embed_work, head_phases, layer_phases
from wse_systems.training.placement import StepPlacement, StepWorkload, place_step
from wse_systems.training.plan import MemoryPlan
from wse_systems.training.stream_cost import Streams

__all__ = ["StreamRow", "stream_budget"]


@dataclasses.dataclass(frozen=True)
class StreamRow:
    unit: str
    per_step: int  # in a step's forward: the layer (or chunk) count
    weight_bytes: float  # streamed in per use
    stream_in_s: float
    forward_s: float  # the compute its stream hides under in the forward
    backward_s: float  # ... in the backward
    write_back_s: float  # its gradient to MemoryX
    together: bool = False  # both streams hide under forward + backward (the head)

    @property
    def no_stall(self) -> bool:
        back = max(self.stream_in_s, self.write_back_s)
        if self.together:
            return back <= self.forward_s + self.backward_s
        return self.stream_in_s <= self.forward_s and back <= self.backward_s

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "no_stall": self.no_stall}


def _row(
    pm: PerfModel, unit: str, n: int, nbytes: float, st_in, compute, out, together=False
) -> StreamRow:
    """`compute`: (the forward, the backward) the unit's streams hide under."""
    s, (fwd, bwd) = pm.seconds, compute
    return StreamRow(unit, n, nbytes, s(st_in), s(fwd), s(bwd), s(out), together)


def stream_budget(
    model: Any, spec: WaferSpec, plan: MemoryPlan, *, num_csx: int, micro_batch: int,
    seq_len: int,
) -> list[StreamRow]:  # fmt: skip
    """The step's streamed units and their no-stall condition (module contract)."""
    work = StepWorkload(micro_batch=micro_batch, seq_len=seq_len)
    pl = place_step(model, spec, plan, work, num_csx=num_csx)
    pm, st = PerfModel(spec), Streams(pl)
    size = pl.num.operand_bytes
    embed, head = int(model.embed_params()), int(model.num_params()) - int(model.embed_params())
    head -= int(model.n_layers) * int(model.layer_params())
    head_in = head + (embed if model.tie_embeddings else 0)
    rows = [
        _row(pm, "embedding", 1, embed * size, st.weights_in(embed),
             (Phase("e", embed_work(model, pl, backward=False)),
              Phase("e", embed_work(model, pl, backward=True))), st.gradients_out(embed)),
    ]  # fmt: skip
    rows += _layer_rows(model, pl, pm, st)
    fwd, bwd = head_phases(model, pl, "forward"), head_phases(model, pl, "backward")
    # tied: the head's gradient out carries the embedding group's too, as the trainer's SwarmX
    # reduces it (`performance._groups`; hunt 74)
    rows.append(_row(pm, "head", 1, head_in * size, st.weights_in(head_in), (fwd, bwd),
                     st.gradients_out(head_in), together=True))  # fmt: skip
    return rows


def _layer_rows(model: Any, pl: StepPlacement, pm: PerfModel, st: Streams) -> list[StreamRow]:
    L, size = int(model.n_layers), pl.num.operand_bytes
    if pl.chunks is None:
        n = int(model.layer_params())
        fwd, bwd = layer_phases(model, pl), layer_phases(model, pl, backward=True)
        return [_row(pm, "layer", L, n * size, st.weights_in(n), (fwd, bwd), st.gradients_out(n))]
    ck, rows = pl.chunks, []
    for i, m in enumerate(ck.matrices):
        cols = ck.cols(i)
        _, fwd = chunk_phases(pl, st, i, cols, False)
        _, grad, out, _ = chunk_phases(pl, st, i, cols, True)
        unit = f"{m.name} {m.n_in}x{cols}"
        n = m.n_in * cols
        rows.append(_row(pm, unit, L * ck.counts[i], n * size, st.weights_in(n), (fwd, grad), out))
    return rows
