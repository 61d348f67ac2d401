"""Experiment `domain-translation-swe`: shallow water on 1-64 CS-3, with and without Domain
Translation, the exchange between systems priced by mechanism so that scale-out can lose.

Published inputs (docs/fields.md, "Experiments"): Oppelstrup et al.,
arXiv:2511.11542 — finite-difference shallow water on up to 64 CS-3, Domain Translation
shifting the processor-grid association each step to hide the latency between systems.
REFERENCES.md gives no grid, step rate or FLOP figure this model predicts, so `published`
stays None and nothing here is tuned to the paper's figures. Assumptions, each named:

- ASSUMED layout: one cell per PE over the WSE-3's 762 x 1176 PEs per system (X x Y, the
  field layer's 2D placement), systems side by side along Y, Y periodic over the ring of
  systems (1, 4, 16, 64; `SYSTEMS`). A system's two Y boundaries are its 762-PE edge
  columns, on the wafer's edge: the trip to the edge is 0 hops (`EDGE_HOPS`, as
  `wse_systems.pipeline.to_edge` counts a region on the edge).
- ASSUMED scheme: this stack's (`wse_hpc.fields.swe`: C grid, SSP-RK3), with the
  translation's one-PE shift each step when translated; its program traced on a 4 x 4 PE
  grid and priced per PE (`perf.program_phases`). The words that cross a Y boundary per
  step are the traced program's E and W shifts (`cluster.y_boundary_words`): 27 words per
  PE plain, 30 translated (the shift moves h, u, v).
- The exchange: RK3's three stages each read the previous stage's Y halo, so a step's
  boundary words cross in `swe.RK3_STAGES` = 3 dependent messages per boundary, three
  network latencies a step (both boundaries' messages of a stage leave at once).
- The crossing (`cluster.crossing_work`): bytes out of each system at `host_io_bytes_per_s`
  = 1.2 Tb/s per system (REFERENCES.md, system rows: "host I/O per system", vendor), taken
  as each way (Ethernet is full duplex); one `system_latency_s` per message (ASSUMED: no
  public figure; 2 us, swept 0.5 .. 10 us in `wse_core.cost.mechanisms`:
  `--sweep system_latency_s`).
- Without translation a step waits for its crossing; with it the crossing overlaps the next
  `cluster.TRANSLATION_SLACK_STEPS` = k steps (ASSUMED 1: the text read gives no number;
  the stress rows run k over `cluster.slack_sweep`, 1 .. the 1176 PE columns), the I/O
  serialisation a floor no overlap hides (`cluster.cluster_step`).
- `STRESS_LATENCY_S` (ASSUMED 1 ms, 100x the top of the latency sweep, not a figure of any
  network): rows at 64 systems where plain scale-out loses to one system, and which slack
  recovers it. Each says so in `params["system_latency_note"]`, as any row priced at a
  latency outside the sweep does (hunt 73: the assumed column lists system_latency_s with
  its sweep, 5e-07..1e-05 s, which 1 ms is outside, and nothing said so).
- Cycles by mechanism: the crossing's network latency (messages x `system_latency_s`) under
  "fixed", a latency mechanism, its bytes under "host_io" (`cluster.cluster_mechanisms`;
  hunt 73: the stress rows, ~3 latencies a step, showed 100% "host_io"); rows with a
  crossing say so in `params["fixed_cycles_are"]`.

Measured: the bit-identity of a translated run with the plain one on the emulator (16 x 16, on
the devices at hand) and both runs' mass drift. Rows: `s_per_step` (on-wafer) and `crossing_s`
by mechanism per program; per system count and case (plain, translated): `steps_per_s` (with
the cluster step's cycles by mechanism), `gcell_steps_per_s` and `exposed_crossing_s` (what
the crossing adds to the on-wafer step); the stress rows at 64 systems; one system's cells on
one H100 (`wse plan`'s GPU, `fields.alternative`: the program unfused and its fused bound):
`gpu_s_per_step`, `speedup_vs_gpu`, `energy_ratio_vs_gpu` beside `wafer_j_per_step`.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import numpy as np
from wse_core import ExperimentResult, PredictionRow, WaferSpec, preset
from wse_core.cost.assumptions import assumed_spec
from wse_core.cost.mechanisms import CONSTANTS
from wse_core.cost.perf import PerfModel, Phases
from wse_core.cost.reads import merged, recording
from wse_core.studies.experiment import read_by
from wse_systems.gpu import H100

from wse_hpc.fields.alternative import gpu_step, wafer_energy_j
from wse_hpc.fields.cluster import (
    LATENCY_MECHANISM,
    TRANSLATION_SLACK_STEPS,
    cluster_mechanisms,
    cluster_step,
    crossing_phases,
    crossing_work,
    slack_sweep,
    y_boundary_words,
)
from wse_hpc.fields.grid import FieldGrid, Program, field_grid, traced_program
from wse_hpc.fields.perf import recorded_phases
from wse_hpc.fields.swe import RK3_STAGES, SweConfig, run_swe, shallow_water, swe_state, translate

__all__ = ["NAME", "STRESS_LATENCY_S", "SYSTEMS", "run", "run_predictions", "traced_step"]

NAME = "domain-translation-swe"
SOURCE = "Oppelstrup et al., arXiv:2511.11542 (inputs only)"
SYSTEMS = (1, 4, 16, 64)
EDGE_HOPS = 0.0  # the boundary columns are the wafer's edge columns (layout above)
STRESS_LATENCY_S = 1e-3  # ASSUMED stress value (docstring), s per pass between systems
# What a row's "fixed" cycles are (`cluster.cluster_mechanisms`)
FIXED_NOTE = f"the crossing's network latency: {RK3_STAGES} messages x system_latency_s"


def _measured(quick: bool) -> dict:
    steps = 20 if quick else 100
    kw = {"steps": steps, "g": 1.0}  # the mesh the devices give (8 in the tests)
    plain = run_swe(preset("small"), SweConfig(n=16, **kw))
    moved = run_swe(preset("small"), SweConfig(n=16, translate_domain=True, **kw))
    same = bool(np.array_equal(plain.h, moved.h))
    return {
        "grid": [16, 16],
        "steps": steps,
        "bit_identical": same,
        "mass_drift_plain": plain.mass_drift,
        "mass_drift_translated": moved.mass_drift,
    }


class _Traced(NamedTuple):
    phases: Phases  # the on-wafer step over the spec's PE rectangle
    words: float  # per PE across a Y boundary (E + W shifts)
    grid: FieldGrid  # the 4 x 4 PE grid it was traced on
    prog: Program
    fields: int  # fp32 arrays a GPU holds: the state and each RK3 stage's k


def _traced(spec: WaferSpec, translated: bool) -> _Traced:
    """The step's program, recorded once: priced on the wafer, across systems and on a GPU."""
    grid = field_grid(spec, (4, 4, 1), periodic=(True, True, True), mesh_shape=(1, 1))
    z = np.zeros((4, 4, 1))
    s = swe_state(grid, z + 1.0, z, z)
    step = shallow_water(grid, g=9.81, dt=1e-3)
    prog = traced_program((lambda x: translate(step(x))) if translated else step, s)
    phases = recorded_phases(grid, prog, pe_rect=(spec.pe_rows, spec.pe_cols))
    words = sum(y_boundary_words(prog).values())
    return _Traced(phases, words, grid, prog, len(jax.tree.leaves(s)) * (1 + RK3_STAGES))


def traced_step(spec: WaferSpec, translated: bool) -> tuple[Phases, float]:
    """The on-wafer step's phases over `spec`'s PE rectangle and the words per PE its
    program moves across a Y boundary (E + W shifts), plain or translated."""
    t = _traced(spec, translated)
    return t.phases, t.words


def _case_rows(spec: WaferSpec, step: Phases, words: float, systems: int,
               slack: float | None, case: str) -> list[PredictionRow]:  # fmt: skip
    """steps_per_s, gcell_steps_per_s and exposed_crossing_s of one cluster case."""
    model = PerfModel(spec)
    crossing = crossing_work(words, spec.pe_rows, systems, EDGE_HOPS, RK3_STAGES)
    with recording() as got:  # what these rows' pricing reads, listed beside them
        timing = model.evaluate(cluster_step(step, crossing, slack))
        t_step = model.evaluate(step).seconds
    cells = spec.pe_rows * spec.pe_cols * systems
    params = {"wafer": spec.name, "systems": systems, "cells": cells, "case": case,
              "slack_steps": slack, "system_latency_s": spec.system_latency_s,
              "crossing_bytes": crossing.host_io_bytes}  # fmt: skip
    note = _latency_note(spec.system_latency_s)
    params |= {"system_latency_note": note} if note else {}
    mech = cluster_mechanisms(timing, spec.clock_hz)
    fixed = {"fixed_cycles_are": FIXED_NOTE} if LATENCY_MECHANISM in mech else {}
    kw = {"source": SOURCE}
    return read_by(
        got,
        PredictionRow("steps_per_s", 1 / timing.seconds, "1/s", params | fixed, mechanisms=mech,
                      **kw),
        PredictionRow("gcell_steps_per_s", cells / timing.seconds / 1e9, "Gcell/s", params, **kw),
        PredictionRow("exposed_crossing_s", timing.seconds - t_step, "s", params, **kw),
    )  # fmt: skip


def _latency_note(latency_s: float) -> str | None:
    """What a row priced at `latency_s` outside system_latency_s's sweep says (the stress
    rows' 1 ms: 100x its top); None inside it."""
    sweep = CONSTANTS["system_latency_s"].sweep
    lo, hi = min(sweep), max(sweep)
    if lo <= latency_s <= hi:
        return None
    what = "a stress value" if latency_s == STRESS_LATENCY_S else "assumed"
    return (f"system_latency_s {latency_s:g} s is {what} outside its sweep ({lo:g}..{hi:g} s; "
            f"{latency_s / hi:g}x its top), no network's figure")  # fmt: skip


def run_predictions(*, seed: int = 0) -> list[PredictionRow]:
    """The prediction rows alone (for `wse experiments run --sweep`)."""
    del seed  # the predictions draw nothing
    spec = assumed_spec("wse3")  # under `--assume` / `--sweep`
    full = {case: _traced(spec, case == "translated") for case in ("plain", "translated")}
    traced = {case: (t.phases, t.words) for case, t in full.items()}
    rows = []
    for case, (step, words) in traced.items():
        crossing = crossing_work(words, spec.pe_rows, 2, EDGE_HOPS, RK3_STAGES)
        model = PerfModel(spec)
        with recording() as on_wafer:
            t = model.evaluate(step)
        with recording() as crossed:
            cross = model.evaluate(crossing_phases(crossing))
        params = {"wafer": spec.name, "case": case, "words_per_pe": words,
                  "crossing_bytes": crossing.host_io_bytes}  # fmt: skip
        cross_params = {**params, "fixed_cycles_are": FIXED_NOTE}
        rows += read_by(
            on_wafer,
            PredictionRow(
                "s_per_step", t.seconds, "s", params, source=SOURCE, mechanisms=t.by_mechanism()
            ),
        )
        rows += read_by(
            crossed,
            PredictionRow(
                "crossing_s",
                cross.seconds,
                "s",
                cross_params,
                source=SOURCE,
                mechanisms=cluster_mechanisms(cross, spec.clock_hz),
            ),
        )
    slack = TRANSLATION_SLACK_STEPS
    for systems in SYSTEMS:
        rows += _case_rows(spec, *traced["plain"], systems, None, "plain")
        rows += _case_rows(spec, *traced["translated"], systems, slack, f"translated k={slack:g}")
    stress = spec.replace(system_latency_s=STRESS_LATENCY_S)
    tag = f"latency {STRESS_LATENCY_S * 1e3:g} ms"
    rows += _case_rows(stress, *traced["plain"], SYSTEMS[-1], None, f"plain, {tag}")
    for k in slack_sweep(spec):
        rows += _case_rows(stress, *traced["translated"], SYSTEMS[-1], k,
                           f"translated k={k:g}, {tag}")  # fmt: skip
    return rows + _gpu_rows(spec, full["plain"])


def _gpu_rows(spec: WaferSpec, plain: _Traced) -> list[PredictionRow]:
    """One system's cells on one H100 (`wse plan`'s GPU, `fields.alternative`): the plain
    step's program unfused and its fused bound, time and energy beside the wafer's."""
    cells = spec.pe_rows * spec.pe_cols
    with recording() as on_gpu:  # hunt 69: its kernel cost moved these rows, unlisted
        gpu = gpu_step(plain.grid, plain.prog, cells=cells, gpu=H100, fields=plain.fields)
    with recording() as on_wafer:
        wafer_s = PerfModel(spec).evaluate(plain.phases).seconds
    wafer_j = wafer_energy_j(spec, wafer_s)
    both = merged(on_gpu, on_wafer)
    params = {"wafer": spec.name, "systems": 1, "cells": cells, "gpu": H100.name}
    rows = read_by(on_wafer, PredictionRow("wafer_j_per_step", wafer_j, "J",
                                           {**params, "case": "plain"}, source=SOURCE))  # fmt: skip
    for code, s_gpu, j_gpu in (("unfused", gpu.seconds, gpu.joules),
                               ("fused", gpu.fused_seconds, gpu.fused_joules)):  # fmt: skip
        vs = {**params, "case": f"one H100, {code}"}
        rows += read_by(on_gpu, PredictionRow("gpu_s_per_step", s_gpu, "s", vs, source=SOURCE))
        rows += read_by(
            both,
            PredictionRow("speedup_vs_gpu", s_gpu / wafer_s, "x", vs, source=SOURCE),
            PredictionRow("energy_ratio_vs_gpu", j_gpu / wafer_j, "x", vs, source=SOURCE),
        )
    return rows


def run(*, quick: bool, seed: int) -> ExperimentResult:
    measured = _measured(quick)
    config = {"quick": quick, "slack_steps": TRANSLATION_SLACK_STEPS,
              "stress_latency_s": STRESS_LATENCY_S, "edge_hops": EDGE_HOPS}  # fmt: skip
    return ExperimentResult(NAME, seed, config, [measured], run_predictions(seed=seed))
