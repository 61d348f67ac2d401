# %% [markdown]
# # The wafer view: a pipelined decode, PE by PE
#
# A jupytext script (`# %%` cells) that the site build executes (`docs/hooks.py`); a few
# seconds. It draws what `wse view` draws: GPT-2 124M decoding on two small demo wafers with
# defects, as a `PeTrace` (SRAM, busy cycles, link traffic, defects and regions per PE).
# In a notebook the trace shows the interactive page inline; `.plot()` is its four-panel
# figure, and `.save()` the `.npz` that `wse view` reads.

# %%
import numpy as np
from wse_core import preset
from wse_core.hw.wafer import build_wafer
from wse_models.config import PRESETS
from wse_systems.pipeline import Regions, plan_pipeline
from wse_systems.trace import pipeline_traces

spec, cfg = preset("demo"), PRESETS["gpt2-124m"]
plan = plan_pipeline(cfg, spec, num_wafers=2, context_len=256, regions=Regions(stages=12))
wafers = [build_wafer(spec, defect_seed=7 + w) for w in range(plan.num_wafers)]
trace = pipeline_traces(cfg, plan, wafers=wafers)[0]
print(f"wafer 0 holds {', '.join(r['name'] for r in trace.regions)}")
print(f"{len(trace.dead)} dead PEs; predicted {trace.meta['predicted_s'] * 1e6:.1f} us per token")
print(f"layers: {', '.join(trace.layers)}")

# %% [markdown]
# No PE holds more SRAM than it has (the layer is stored in `block` x `block` cells, each
# the sum over its PEs).

# %%
sram = trace.layers["sram_bytes"]
assert np.all(sram <= spec.sram_bytes_per_pe * trace.block**2)
print(f"SRAM in use on wafer 0: {sram.sum() / 2**20:.1f} MiB in {trace.block}-PE cells")
trace.plot()

# %% [markdown]
# The page `wse view` writes, inline (hover a PE, switch layers, zoom with the wheel).

# %%
trace
