# %% [markdown]
# # Heat on the wafer: a run, its prediction and its per-PE view
#
# A jupytext script (`# %%` cells): open it as a notebook with jupytext, or run it as it is
# (`python docs/tutorials/heat_on_the_wafer.py`); the site build executes it at this size
# (`docs/hooks.py`). It runs the 7-point heat equation on a small grid of
# emulated PEs, checks the field against the exact discrete decay, and shows the three
# things every run returns: the measured result, the predicted wafer time (a `RunReport`,
# which draws itself in a notebook) and the per-PE view `wse view` draws (a `PeTrace`).

# %%
import numpy as np
from wse_core import preset
from wse_hpc.stencil.perf import pe_trace
from wse_hpc.stencil.runs import StencilConfig, run_stencil

spec = preset("small")
run = run_stencil(StencilConfig(kind="heat", grid=(9, 11, 8), spec=spec, steps=20))
report = run.report

# %% [markdown]
# The heat kernel starts from an eigenmode of the discrete Laplacian, so after `n` steps the
# exact answer is the start scaled by `(1 - dt * lambda)^n`: the history is the largest
# deviation from it, which stays at float32 rounding.

# %%
deviation = report.extra["history"][-1][1]
print(f"max deviation from the exact discrete decay after 20 steps: {deviation:.2e}")
assert deviation < 1e-5

# %% [markdown]
# The report: the predicted wafer time of the same run, split by mechanism. At the end of a
# notebook cell it shows itself as a table (`RunReport._repr_html_`); `report.plot()` is the
# same breakdown as a matplotlib figure.

# %%
print(f"predicted {report.predicted_s:.3g} s per run on {report.wafer}, {report.bound}-bound")
shares = report.cycles_by_mechanism()
assert np.isclose(sum(shares.values()) / spec.clock_hz, report.predicted_s, rtol=0.05)
report

# %% [markdown]
# The per-PE view: the report spread over the PEs that hold the grid, the page `wse view`
# writes, shown inline (`PeTrace._repr_html_`); `trace.plot()` is its four-panel PNG.

# %%
trace = pe_trace(spec, report, grid_xy=(9, 11), defect_seed=None)
fig = trace.plot()
trace
