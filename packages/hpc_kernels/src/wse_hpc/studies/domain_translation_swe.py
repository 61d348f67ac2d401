"""Experiment `domain-translation-swe`: shallow water under Domain Translation on CS-3s.

Published inputs (shared/REFERENCES.md, "Field equations"): Oppelstrup et al.,
arXiv:2511.11542 — finite-difference shallow water on up to 64 CS-3, Domain Translation
shifting the processor-grid association each step to hide the latency between systems.
REFERENCES.md gives no grid, step rate or FLOP figure, so `published` stays None and:

- ASSUMED layout: one cell per PE over the WSE-3's 762 x 1176 PEs per system (the field
  layer's 2D placement), systems side by side along Y; 1, 4, 16 and 64 systems.
- ASSUMED scheme: this stack's (`wse_hpc.fields.swe`: C grid, SSP-RK3) with the
  translation shift each step; its program traced on a 4 x 4 PE grid and priced per PE
  (`perf.program_phases`). Domain Translation's claim is that the link between systems
  adds no time per step once the pipeline is full, so the rows price the on-wafer step
  only and scale the cells with the systems (weak scaling); that claim is the paper's, not
  checked here.

Measured: the bit-identity of a translated run with the plain one on the emulator (16 x 16, on
the devices at hand) and both runs' mass drift. Rows: `steps_per_s` and `gcell_steps_per_s` per
system count; `s_per_step` with its cycles by mechanism.
"""

from __future__ import annotations

import numpy as np
from wse_core import ExperimentResult, PredictionRow, RunReport, preset

from wse_hpc.fields.grid import field_grid
from wse_hpc.fields.perf import program_phases
from wse_hpc.fields.swe import SweConfig, run_swe, shallow_water, swe_state, translate

__all__ = ["NAME", "run"]

NAME = "domain-translation-swe"
SOURCE = "Oppelstrup et al., arXiv:2511.11542 (inputs only)"


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


def _step_report() -> RunReport:
    spec = preset("wse3")
    grid = field_grid(spec, (4, 4, 1), periodic=(True, True, True), mesh_shape=(1, 1))
    z = np.zeros((4, 4, 1))
    s = swe_state(grid, z + 1.0, z, z)
    step = shallow_water(grid, g=9.81, dt=1e-3)
    phases = program_phases(grid, lambda x: translate(step(x)), s,
                            pe_rect=(spec.pe_rows, spec.pe_cols))  # fmt: skip
    return RunReport.build(NAME, spec, phases, units="timesteps")


def run(*, quick: bool, seed: int) -> ExperimentResult:
    measured = _measured(quick)
    rep = _step_report()
    spec = preset("wse3")
    rows = [PredictionRow("s_per_step", rep.predicted_s, "s", {"wafer": spec.name},
                          source=SOURCE, mechanisms=rep.cycles_by_mechanism())]  # fmt: skip
    for systems in (1, 4, 16, 64):
        cells = spec.pe_rows * spec.pe_cols * systems
        params = {"wafer": spec.name, "systems": systems, "cells": cells}
        rows += [
            PredictionRow("steps_per_s", 1 / rep.predicted_s, "1/s", params, source=SOURCE),
            PredictionRow("gcell_steps_per_s", cells / rep.predicted_s / 1e9, "Gcell/s",
                          params, source=SOURCE),
        ]  # fmt: skip
    return ExperimentResult(NAME, seed, {"quick": quick}, [measured], rows)
