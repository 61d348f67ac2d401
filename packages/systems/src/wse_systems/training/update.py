"""MemoryX's update in a predicted step: per group as its gradient arrives, or held for
global-norm clipping, as `wse_trainer.memoryx.MemoryX` runs it.

Contract. A step clips the global gradient norm where its layout says so
(`StepLayout.clip_gradients`: a run's `optimizer.max_gradient_norm` set).
`update_streams(pl, on, accumulate, clipped)` are the step's `Streams`:

- **per group** (no clipping): `stream_cost.Streams` itself; each group's update keeps pace
  with its gradient's stream, overlapped with the backward (the last group's exposed);
- **held** (clipping, `HeldStreams`): the norm needs every gradient, so MemoryX sums each
  group's squared norm as it arrives (at the stream's pace, hidden under it: no phase) and
  applies no update then (`update` is an empty phase); after the step's last gradient (the
  embedding's) it applies every group's clipped update, one group after another
  (`MemoryX.finish_step`), serial at the end of the step (`held_update`), each at the
  update's pace (`stream_cost.stream_work` of the group: the same rate, and the same SwarmX
  levels per item, as a group's update in the per-group case). Micro-batches before the
  step's last only sum their gradients (`memoryx_accumulate`), clipping or not.

`update_assumption(clipped)` is the assumption line a report lists for its case.
"""

from __future__ import annotations

import dataclasses

from wse_core import Phase, Phases, Work, serial

from wse_systems.training.placement import StepPlacement
from wse_systems.training.stream_cost import Streams

__all__ = ["HeldStreams", "update_streams", "held_update", "update_assumption"]


@dataclasses.dataclass(frozen=True)
class HeldStreams(Streams):
    """A clipped step's streams: no update while the gradients arrive (held, `held_update`
    prices them after the last); a micro-batch before the step's last still sums its own."""

    def update(self, n: int) -> Phase:
        if self.accumulate:
            return super().update(n)
        return Phase("memoryx_update", Work())

    def applied(self, n: int) -> Phase:
        """n parameters' held update, at the update's pace (`Streams.update`)."""
        return super().update(n)


def update_streams(pl: StepPlacement, on: bool, accumulate: bool, clipped: bool) -> Streams:
    """The step's streams: per-group updates, or `HeldStreams` when `clipped`."""
    return (HeldStreams if clipped else Streams)(pl, on, accumulate)


def held_update(st: Streams, groups: dict[str, int], n_layers: int) -> list[Phases]:
    """The held updates after the step's last gradient: every group's, in MemoryX's order
    (the embedding, each layer, the final norm and head), one after another; [] when nothing
    is held (per-group updates, a micro-batch before the last, a resident placement)."""
    if not isinstance(st, HeldStreams) or st.accumulate or st.pl.resident or not st.on:
        return []
    parts = [st.applied(groups["embed"])]
    if n_layers:
        parts.append(dataclasses.replace(st.applied(groups["layer"]), repeat=n_layers))
    parts.append(st.applied(groups["head_update"]))
    return [serial(*parts, name="held_update")]


PER_GROUP = (
    "applied per group as its gradient arrives, keeping pace with the stream: a step without "
    "global-norm clipping (optimizer.max_gradient_norm unset)"
)
HELD = (
    "global-norm clipping (optimizer.max_gradient_norm set): MemoryX holds every gradient, "
    "summing its square as it arrives (at the stream's pace), and applies no update until "
    "the step's last gradient; then every group's update, one after another, serial at the "
    "end of the step at the update's pace (weights in the compute dtype at min(memoryx, "
    "swarmx) bytes/s); micro-batches before the last only sum their gradients"
)


def update_assumption(clipped: bool) -> str:
    """The "MemoryX update" assumption line of a step that clips (or not)."""
    return HELD if clipped else PER_GROUP
