"""The TLR-MVM part of `wse demo`: compress a seismic slice, run it on the wafer, predict.

`part(console, *, out_dir, quick)` compresses a synthetic Green's-function slice, places it
on WSE-2 PEs, checks A x against the dense product and the adjoint identity, times the
emulator against dense NumPy GEMV, prints the wafer model's figures and writes a picture of
the tile ranks to `out_dir/tlrmvm_ranks.png`. About 10 s on 2 cores.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = ["part"]


def _plot_ranks(path: Path, ranks: np.ndarray, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 4))
    im = ax.imshow(ranks, cmap="viridis")
    fig.colorbar(im, ax=ax, label="rank")
    ax.set(title=title, xlabel="tile column", ylabel="tile row")
    from wse_core.host.atomic import atomic_path

    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=100, bbox_inches="tight")
    plt.close(fig)


def part(console, *, out_dir: Path, quick: bool) -> None:
    from wse_core import preset

    from wse_hpc.tlrmvm.baseline import best_median_s
    from wse_hpc.tlrmvm.compress import compress
    from wse_hpc.tlrmvm.engine import TlrEngine
    from wse_hpc.tlrmvm.seismic import green_operator

    n, nb, eps = (1024, 64, 1e-3) if quick else (2500, 128, 1e-3)
    a = green_operator(n=n)
    op = compress(a, nb=nb, threshold=eps)
    console.print(
        f"seismic slice {n} x {n} complex64, tiles {nb}: ranks mean {op.ranks.mean():.1f} "
        f"max {op.ranks.max()}, compression {op.compression_ratio:.2f}x, "
        f"||A - A_tlr||_F/||A||_F = {op.error_fro:.1e} (each tile within {eps:g} x ||A||_F, "
        "ecrc/tlrmvm's acc)"
    )
    spec = preset("wse2")
    eng = TlrEngine.build(op, spec)
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(np.complex64)
    y = (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(np.complex64)
    ax = a @ x
    err = np.linalg.norm(eng.matvec(x) - ax) / np.linalg.norm(ax)
    lhs, rhs = np.vdot(eng.matvec(x), y), np.vdot(x, eng.rmatvec(y))
    rows, cols = eng.plan.grid
    console.print(
        f"on {rows} x {cols} PEs ({sum(eng.plan.bytes_per_pe().values())} B SRAM each): "
        f"||y - Ax||/||Ax|| = {err:.1e}; adjoint <Ax,y> vs <x,A^H y>: "
        f"{abs(lhs - rhs) / abs(lhs):.1e}"
    )
    dense_s, _ = best_median_s(lambda: a @ x)
    emu_s = eng.time_matvec(x)
    rep = eng.report(measured_wall_s=emu_s)
    c48 = eng.report(systems=48, fill=True)
    cb = c48.extra["cerebras"]
    console.print(
        f"emulated {emu_s * 1e3:.2f} ms vs dense NumPy GEMV {dense_s * 1e3:.2f} ms; predicted "
        f"on WSE-2 {rep.predicted_s * 1e6:.2f} µs per MVM ({rep.bound}-bound, "
        f"{rep.extra['model_bytes_per_s'] / 1e12:.2f} TB/s of bases); 48 CS-2 filled with "
        f"{c48.extra['copies_per_system']} copies each: Cerebras accounting ({cb['bytes']} "
        f"bytes) relative "
        f"{cb['relative_bytes_per_s'] / 1e15:.1f}, absolute {cb['absolute_bytes_per_s'] / 1e15:.1f}"
        f" PB/s"
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    _plot_ranks(out_dir / "tlrmvm_ranks.png", op.ranks, f"tile ranks, n={n}, nb={nb}")
    console.print(f"tile ranks: {out_dir / 'tlrmvm_ranks.png'}")
