# %% [markdown]
# # Your own kernel on `wse_core.fabric`
#
# A jupytext script (`# %%` cells; the site build executes it, `docs/hooks.py`). The shape
# every kernel of the stack has: build a wafer, declare and place a field, move data only with
# `wse_core.fabric` inside `jit`, check the result against NumPy, and price the same program
# as a `RunReport` from its counted work. The kernel here is a smoothing step: each PE
# averages its value with its east and west neighbours, then the whole wafer sums.

# %%
import jax
import numpy as np
from wse_core import Op, Phase, RunReport, Work, fabric, preset, serial
from wse_core.hw.wafer import build_wafer

spec = preset("tiny")
wafer = build_wafer(spec, defect_seed=3)  # dead PEs are routed around: results never change
x = np.random.default_rng(0).normal(size=(wafer.rows, wafer.cols, 8)).astype(np.float32)
# the kernel declares its field's bytes per PE (`place` records nothing): past the PEs' SRAM
# this is a SramBudgetError naming the field, before anything runs
wafer.sram.allocate("x", x[0, 0].nbytes)
field = wafer.place(x)


def smooth(a):
    east, west = fabric.shift(wafer, a, "E"), fabric.shift(wafer, a, "W")
    return (a + east + west) / 3.0


step = jax.jit(lambda a: fabric.allreduce(wafer, smooth(a), "sum"))
got = wafer.gather(step(field))

# %% [markdown]
# The oracle: the same step in NumPy. A shift moves each PE's value one PE over and brings in
# zeros at the wafer's edge.

# %%
east = np.zeros_like(x)
east[:, 1:] = x[:, :-1]
west = np.zeros_like(x)
west[:, :-1] = x[:, 1:]
want = ((x + east + west) / 3.0).sum(axis=(0, 1))
error = float(np.abs(got[0, 0] - want).max())
print(f"max |error| against NumPy: {error:.2e}")
assert error < 1e-4

# %% [markdown]
# The price: the fabric's traffic is counted when the step is traced (`fabric.count`), the
# PE's own instructions are `Op`s, and `RunReport.build` evaluates them on the wafer's spec.
# At the end of a notebook cell the report shows its mechanisms and phases.

# %%
traffic = fabric.count(wafer, lambda a: fabric.allreduce(wafer, smooth(a), "sum"), field)
phases = serial(
    Phase("smooth", Work(ops=(Op("add", "fp32", 8, count=2), Op("mul", "fp32", 8)))),
    Phase("allreduce", Work.from_traffic(traffic, exchanges=1)),  # + the shifts' exchange
    name="step",
)
report = RunReport.build(
    "smooth+allreduce", spec, phases, traffic=traffic, sram=wafer.sram.summary(), units="step"
)
print(f"predicted {report.predicted_s * 1e6:.3g} µs per step, {report.bound}-bound")
print(f"SRAM: {wafer.sram.used_bytes()} of {spec.sram_bytes_per_pe} B per PE")
assert report.predicted_s > 0 and traffic.words > 0
report
