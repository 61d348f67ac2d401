"""What a field step costs on systems side by side: the crossing between them each step, and
what Domain Translation hides of it.

Contract. Systems sit side by side along the grid's Y axis (axis 1, which runs along the PE
columns: its halo moves on the E and W links, `wse_hpc.fields.operators`), each holding a
full wafer of cells, Y periodic over the ring of systems. A step's exchange between systems
is priced by its mechanisms, as `wse_systems.decoder` prices a crossing between wafers:

- `y_boundary_words(prog)`: the 32-bit words per PE the traced program moves across a
  Y boundary per step: the words of its E and W shifts (`wse_hpc.fields.grid.Program`),
  never a hand number. Each boundary PE sends its E words to the next system and its W
  words to the one before.
- `crossing_work(words_per_pe, edge_pes, systems, edge_hops=0, messages=1)`: the busiest system's
  crossing per step: the trip between the boundary PEs and the wafers' edges
  (`latency_hops`; 0 when the domain's boundary column is the wafer's edge, as
  `wse_systems.pipeline.to_edge` counts it), its boundaries' bytes (`edge_pes x
  words_per_pe x 4` out of each system) serialised at the system's I/O rate
  (`Work.host_io_bytes` at `host_io_bytes_per_s`), and one network latency
  (`Work.system_hops` at `system_latency_s`, assumed, swept in `wse_core.cost.mechanisms`)
  per dependent message: a scheme whose stages each read the previous stage's halo (SSP-RK3:
  `swe.RK3_STAGES` = 3) sends `messages` in a chain, each waiting for the one before; both
  boundaries' messages of a stage leave at once. One system: nothing crosses (`Work()`).
- `cluster_step(step, crossing, slack_steps=None)`: one step on the cluster.
  Without Domain Translation (`slack_steps=None`) a step waits for its crossing:
  `serial(step, crossing)`. With it the association moves one PE a step along Y
  (`wse_hpc.fields.swe.translate`), so the values that cross at step n are first read
  `slack_steps` = k steps later: the crossing overlaps the next k steps and one is launched
  every step, so k are in flight and the period is at least crossing / k; the bytes of one
  step's crossing are serialised at the I/O rate, which no overlap hides:
  `overlap(step, crossing repeated 1/k, serialisation)`, the slowest sets the step.
- `crossing_phases(crossing)`: the crossing as two leaves one after the other, the same
  time as one: its messages' network latency (`LATENCY_LEAF`, `system_hops` alone) and its
  bytes with the trip to the edge. `cluster_mechanisms(timing, clock_hz)`: a timing's
  cycles by mechanism with that latency under `LATENCY_MECHANISM` ("fixed", a latency
  mechanism: `Work.fixed_cycles`' "name it where used"), not "host_io", where
  `wse_core.cost.pricing` counts `system_hops x system_latency_s` beside the bytes (hunt 73:
  at a 1 ms latency a step of ~3 latencies showed 100% "host_io"); they still sum to the
  timing's seconds times the clock.

`TRANSLATION_SLACK_STEPS` (k) is ASSUMED: Oppelstrup et al. (arXiv:2511.11542) say the
translation hides the latency between systems, but the text read here (its abstract and
summaries; the body was not at hand) gives no number of steps. k = 1 is the least the
one-PE shift guarantees (a value that crosses now is read in the next step); the skew a
system can absorb is at most its PE columns along the shift (each column can run one step
ahead of the one upstream of it), so `slack_sweep(spec)` runs 1 .. spec.pe_cols.
"""

from __future__ import annotations

import dataclasses

from wse_core import WaferSpec
from wse_core.cost.perf import Phase, Phases, Timing, Work, overlap, serial

from wse_hpc.fields.grid import Program
from wse_hpc.fields.perf import WORD_BYTES

__all__ = [
    "LATENCY_LEAF",
    "LATENCY_MECHANISM",
    "TRANSLATION_SLACK_STEPS",
    "Y_DIRECTIONS",
    "cluster_mechanisms",
    "cluster_step",
    "crossing_phases",
    "crossing_work",
    "slack_sweep",
    "y_boundary_words",
]

Y_DIRECTIONS = ("E", "W")  # the links grid axis 1 (Y) moves on (operators._SHIFT)
# ASSUMED (no figure in the text read): steps of slack the translation gives a crossing.
TRANSLATION_SLACK_STEPS = 1.0
LATENCY_LEAF = "crossing_latency"  # the leaf of a crossing's network latency alone
LATENCY_MECHANISM = "fixed"  # where `cluster_mechanisms` puts it (a latency mechanism)


def slack_sweep(spec: WaferSpec) -> tuple[float, ...]:
    """The plausible range of k: 1 (the shift's guarantee) .. the PE columns of one system
    (the most skew a system can absorb along the shift)."""
    return (1.0, 8.0, 64.0, float(spec.pe_cols))


def y_boundary_words(prog: Program) -> dict[str, float]:
    """Words per PE of each Y direction ("E", "W") that a recorded program shifts (every
    scope: a step's whole program; `wse_hpc.fields.grid.traced_program`)."""
    out = dict.fromkeys(Y_DIRECTIONS, 0.0)
    for _, direction, words in prog.shifts:
        if direction in out:
            out[direction] += words
    return out


def crossing_work(
    words_per_pe: float, edge_pes: int, systems: int, edge_hops: float = 0.0, messages: int = 1
) -> Work:
    """The busiest system's exchange per step (module contract): `messages` dependent
    messages (one per stage that reads the Y halo) carrying `words_per_pe` in all; `Work()`
    for one system. The spec's constants price it (`PerfModel`), so it counts only."""
    if systems < 1 or edge_pes < 1 or words_per_pe < 0 or messages < 1:
        raise ValueError(
            f"bad crossing: {systems} systems, {edge_pes} edge PEs, {words_per_pe} words, "
            f"{messages} messages"
        )
    if systems == 1:
        return Work()
    return Work(
        latency_hops=float(edge_hops * messages),
        host_io_bytes=float(edge_pes * words_per_pe * WORD_BYTES),
        system_hops=float(messages),
    )


def cluster_step(step: Phases, crossing: Work, slack_steps: float | None = None) -> Phases:
    """One step on the cluster (module contract): `slack_steps=None` without Domain
    Translation, else the translation's k steps of slack."""
    if crossing == Work():
        return serial(step, name="cluster_step")
    if slack_steps is None:
        return serial(step, crossing_phases(crossing), name="cluster_step")
    if not slack_steps >= 1:
        raise ValueError(f"slack_steps must be >= 1, got {slack_steps}")
    io = Work(host_io_bytes=crossing.host_io_bytes)
    return overlap(
        step,
        crossing_phases(crossing, "crossing_in_flight", repeat=1.0 / slack_steps),
        Phase("crossing_serialisation", io),
        name="cluster_step",
    )


def crossing_phases(crossing: Work, name: str = "crossing", repeat: float = 1.0) -> Phases:
    """`crossing` as its network latency (`LATENCY_LEAF`: its `system_hops` alone) then the
    rest (its bytes and the trip to the edge), `repeat` times: one Phase's time, the
    latency a leaf of its own for `cluster_mechanisms`."""
    latency = Work(system_hops=crossing.system_hops)
    rest = dataclasses.replace(crossing, system_hops=0.0)
    return serial(Phase(LATENCY_LEAF, latency), Phase("crossing_io", rest), name=name,
                  repeat=repeat)  # fmt: skip


def cluster_mechanisms(timing: Timing, clock_hz: float) -> dict[str, float]:
    """`timing`'s cycles by mechanism (`Timing.by_mechanism`) with the network latency of
    its crossings (the `LATENCY_LEAF` leaves that set its time) moved from "host_io" to
    `LATENCY_MECHANISM`; the sum is unchanged."""
    mech = dict(timing.by_mechanism())
    latency = timing.by_leaf().get(LATENCY_LEAF, 0.0) * clock_hz
    if latency <= 0:
        return mech
    io = mech.pop("host_io", 0.0) - latency  # the bytes' share, what is left
    if io > 1e-9 * latency:  # more than the rounding of the subtraction
        mech["host_io"] = io
    mech[LATENCY_MECHANISM] = mech.get(LATENCY_MECHANISM, 0.0) + latency
    return mech
