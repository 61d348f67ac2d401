# %% [markdown]
# # BiCGSTAB and the 25-point stencil
#
# A jupytext script (`# %%` cells); the site build executes it (`docs/hooks.py`) at the small
# size below, `WSE_TUTORIAL_SIZE=full` uses the `wse demo` size. Two of the SC20/SC22 kernels
# on emulated PEs, one column of the grid per PE: BiCGSTAB for a Poisson problem with a known
# solution (fp32, and mixed: fp16 products and updates with fp32 dot products, as on the
# CS-1), and the 25-point wave stencil with its 4-PE localized broadcasts.

# %%
import os

import matplotlib.pyplot as plt
from wse_core.cost.assumptions import assumed_spec
from wse_hpc.stencil.runs import StencilConfig, run_stencil

FULL = os.environ.get("WSE_TUTORIAL_SIZE") == "full"
n = 48 if FULL else 12
spec = assumed_spec("wse2")
runs = {}
for dtype in ("fp32", "mixed"):
    cfg = StencilConfig(kind="bicgstab", grid=(n, n, 2 * n), dtype=dtype, spec=spec)
    runs[dtype] = run_stencil(cfg).report
    final = runs[dtype].extra["final"]
    print(
        f"{dtype:>5}: {runs[dtype].extra['steps']} iterations, true residual "
        f"{final['true_residual']:.1e}, max error vs the discrete system's exact solution "
        f"{final['max_error_vs_discrete_solution']:.1e}"
    )

# %% [markdown]
# The exact solution is manufactured (the right-hand side is `A` applied to it), so the error
# is measured against the answer itself. Mixed precision stops where fp16 rounding lets it;
# the `BiCGSTAB: what each precision reaches` page has the whole story.

# %%
assert runs["fp32"].extra["final"]["max_error_vs_discrete_solution"] < 1e-3
assert runs["mixed"].extra["final"]["max_error_vs_discrete_solution"] < 5e-2
fig, ax = plt.subplots(figsize=(6, 3.2), constrained_layout=True)
for dtype, rep in runs.items():
    hist = rep.extra["history"]
    ax.semilogy([h[0] for h in hist], [h[1] for h in hist], label=dtype)
ax.set(xlabel="iteration", ylabel="residual", title=f"BiCGSTAB on {n} x {n} x {2 * n}")
ax.legend()

# %% [markdown]
# The predicted time per iteration on a WSE-2: allreduce latency for the dot products
# against the SpMV and AXPY work, by mechanism.

# %%
rep = runs["mixed"]
print(f"predicted {rep.extra['predicted_s_per_step'] * 1e6:.2f} us/iteration ({rep.bound}-bound)")
rep

# %% [markdown]
# The 25-point wave stencil (8th order in space): a Ricker source, Z blocks in SRAM, and the
# predicted cell rate of the same run on as many PEs of a WSE-2.

# %%
m, steps = (48, 160) if FULL else (16, 24)
wave = run_stencil(
    StencilConfig(kind="wave25", grid=(m, m, m), steps=steps, chunks=4, spec=spec)
).report
print(
    f"{m}^3 cells, {wave.extra['steps']} steps: {wave.extra['measured_cells_per_s'] / 1e6:.1f} "
    f"Mcell/s emulated; predicted {wave.extra['predicted_gcells_per_s']:.1f} Gcell/s on "
    f"{m} x {m} PEs of WSE-2"
)
wave
