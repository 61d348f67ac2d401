"""Experiment `fabric-collectives`: what shift, broadcast and allreduce cost, emulated and on
the wafer, across grid sizes up to the full WSE-3.

Measured: trace-plus-compile time and run time per op of the emulator on this machine's
devices. Predicted: wafer cycles and microseconds on WSE-3, by mechanism, every op priced
from the traffic it records (`fabric.count`, no allocation needed), as a kernel prices it
(`Work.from_traffic`): shift, multicast and broadcast with the one relay stage of their
exchange (the sending core's ramp to the receiving core's); the allreduce's entry is
Luczynski et al.'s model with the dead PEs' detours on its slowest path
(`wse_core.cost.collectives.reduction`, which the fabric's ledger records; hunt 81: this row
priced `allreduce_2d` itself while the traced op, which kernels pay, had a chain's
contention under the tree's depth, 2,592 cycles against 2,274 on the full WSE-3).
Predictions do not depend on `quick`, which only skips the largest measured grids. Nothing
here is published.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp

from wse_core import fabric
from wse_core.cost.assumptions import assumed_spec
from wse_core.cost.perf import PerfModel, Work
from wse_core.hw.wafer import build_wafer
from wse_core.studies.experiment import ExperimentResult, PredictionRow

__all__ = ["run", "OPS", "GRIDS"]

GRIDS = ((8, 8), (64, 64), (256, 256), (762, 1176))
WORDS_PER_PE = 16

OPS = {
    "shift": lambda w, x: fabric.shift(w, x, "E"),
    "multicast4": lambda w, x: fabric.multicast(w, x, "S", 4),
    "broadcast_row": lambda w, x: fabric.broadcast(w, x, "row", 0),
    "allreduce": lambda w, x: fabric.allreduce(w, x, "sum"),
}


def _measure(wafer, op, repeats: int) -> dict[str, float]:
    x = wafer.full((WORDS_PER_PE,), 1.0)
    t0 = time.perf_counter()
    compiled = jax.jit(lambda a: op(wafer, a)).lower(x).compile()
    compile_s = time.perf_counter() - t0
    jax.block_until_ready(compiled(x))
    t0 = time.perf_counter()
    for _ in range(repeats):
        out = compiled(x)
    jax.block_until_ready(out)
    return {"compile_s": compile_s, "run_ms": (time.perf_counter() - t0) / repeats * 1e3}


def run(*, quick: bool = False, seed: int = 0) -> ExperimentResult:
    spec = assumed_spec("wse3")
    model = PerfModel(spec)
    measurements, predictions = [], []
    for grid in GRIDS:
        wafer = build_wafer(spec, grid=grid, defect_seed=seed)
        measure = not quick or grid[0] * grid[1] <= 256 * 256
        for name, op in OPS.items():
            shape = jax.ShapeDtypeStruct(
                wafer.padded_shape + (WORDS_PER_PE,), jnp.float32, sharding=wafer.sharding(1)
            )
            traffic = fabric.count(wafer, lambda a, op=op, w=wafer: op(w, a), shape)
            exchanges = 0.0 if name == "allreduce" else 1.0  # a reduction carries its relays
            pred = model.cost(Work.from_traffic(traffic, exchanges=exchanges))
            mech = pred.timed_mechanisms()
            params = {
                "preset": "wse3",
                "grid": f"{grid[0]}x{grid[1]}",
                "op": name,
                "words_per_pe": WORDS_PER_PE,
            }
            params["per"] = "op"
            rows = (("wafer_cycles", pred.cycles, "cycles"), ("wafer_us", pred.seconds * 1e6, "us"))
            predictions += [PredictionRow(n, v, u, params, mechanisms=mech) for n, v, u in rows]
            row = {
                **params,
                "mesh": "x".join(map(str, wafer.mesh_shape)),
                "devices": int(wafer.mesh.devices.size),
                "word_hops": traffic.word_hops,
            }
            if measure:
                row.update(_measure(wafer, op, repeats=3 if quick else 10))
            measurements.append(row)
    return ExperimentResult(
        experiment="fabric-collectives",
        seed=seed,
        config={
            "preset": "wse3",
            "grids": [list(g) for g in GRIDS],
            "words_per_pe": WORDS_PER_PE,
            "devices": len(jax.devices()),
            "platform": jax.default_backend(),
        },
        measurements=measurements,
        predictions=predictions,
        figure=_figure(measurements, predictions),
    )


def _figure(measurements, predictions):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    pes = {f"{g[0]}x{g[1]}": g[0] * g[1] for g in GRIDS}
    for name in OPS:
        ms = [m for m in measurements if m["op"] == name and "run_ms" in m]
        ax1.loglog([pes[m["grid"]] for m in ms], [m["run_ms"] for m in ms], "o-", label=name)
        ps = [p for p in predictions if p.params["op"] == name and p.name == "wafer_us"]
        ax2.loglog([pes[p.params["grid"]] for p in ps], [p.value for p in ps], "o-", label=name)
    ax1.set(xlabel="PEs", ylabel="ms per op", title="emulated on this machine")
    ax2.set(xlabel="PEs", ylabel="µs per op", title=f"predicted on WSE-3 ({WORDS_PER_PE} words/PE)")
    ax1.legend()
    fig.tight_layout()
    return fig
