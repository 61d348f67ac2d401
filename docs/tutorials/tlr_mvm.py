# %% [markdown]
# # TLR-MVM: a compressed seismic operator on the wafer
#
# A jupytext script (`# %%` cells); the site build executes it (`docs/hooks.py`) at the small
# size below, `WSE_TUTORIAL_SIZE=full` uses the `wse demo` size. Tile low-rank matrix-vector
# multiplication (Ltaief et al., 2023): a synthetic frequency slice of a seismic Green's
# function is compressed tile by tile, the bases are spread over PEs, and `A x` and `A^H y`
# run on the emulated wafer, checked against the dense product.

# %%
import os

import matplotlib.pyplot as plt
import numpy as np
from wse_core import preset
from wse_hpc.tlrmvm.compress import compress
from wse_hpc.tlrmvm.engine import TlrEngine
from wse_hpc.tlrmvm.seismic import green_operator

FULL = os.environ.get("WSE_TUTORIAL_SIZE") == "full"
n, nb, eps = (2500, 128, 1e-3) if FULL else (512, 64, 1e-3)
a = green_operator(n=n)
op = compress(a, nb=nb, threshold=eps)
print(
    f"{n} x {n} complex64 in tiles of {nb}: ranks mean {op.ranks.mean():.1f}, max "
    f"{op.ranks.max()}; compression {op.compression_ratio:.2f}x; relative Frobenius error "
    f"{op.error_fro:.1e} (threshold {eps:g})"
)
assert op.error_fro < 10 * eps

# %%
fig, ax = plt.subplots(figsize=(4.5, 3.6), constrained_layout=True)
im = ax.imshow(op.ranks, cmap="viridis")
fig.colorbar(im, ax=ax, label="rank")
ax.set(title="tile ranks", xlabel="tile column", ylabel="tile row")

# %% [markdown]
# The engine places the bases on WSE-2 PEs. The product is checked against NumPy's dense
# `A @ x`, and the adjoint against the identity `<A x, y> = <x, A^H y>`.

# %%
eng = TlrEngine.build(op, preset("wse2"))
rng = np.random.default_rng(0)
x = (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(np.complex64)
y = (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(np.complex64)
ax_dense = a @ x
err = np.linalg.norm(eng.matvec(x) - ax_dense) / np.linalg.norm(ax_dense)
lhs, rhs = np.vdot(eng.matvec(x), y), np.vdot(x, eng.rmatvec(y))
rows, cols = eng.plan.grid
print(f"on {rows} x {cols} PEs: ||y - A x|| / ||A x|| = {err:.1e}")
print(f"adjoint identity: {abs(lhs - rhs) / abs(lhs):.1e}")
assert err < 10 * eps and abs(lhs - rhs) / abs(lhs) < 1e-4

# %% [markdown]
# The predicted time per product on a WSE-2, with the measured emulator time beside it. Every
# basis is read once per product, yet the model prices the product compute-bound: a PE's
# column AXPY is one fp32 `@fmacs` per column, which runs one element a cycle (the SDK's table
# has no wider fp32 FMAC), while the PE's two 32-bit SRAM read ports could deliver its bases
# twice as fast. The instruction stream (those elements plus each column's DSD issue) is the
# longer one: in phase 1 (`V^H x`), the slowest phase at both sizes of this page, the busiest
# PE's FMAC elements alone take about twice the cycles its SRAM reads do.

# %%
report = eng.report(measured_wall_s=eng.time_matvec(x))
print(
    f"predicted {report.predicted_s * 1e6:.2f} us per MVM ({report.bound}-bound), "
    f"{report.extra['model_bytes_per_s'] / 1e12:.2f} TB/s of bases"
)
report
