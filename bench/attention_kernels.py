"""The attention core's forward + backward on one core, three ways: `layer._sdpa`'s XLA
formula, torch's SDPA, and `_sdpa` on its numba kernels (`wse_models.sdpa_cpu`, through
XLA's FFI), at GPT-2 d128's heads ([b, 4, 128, 32], causal) for batch 16 and 8.

    python bench/attention_kernels.py [--rounds 15]

Pinned to core 0, one thread each (torch.set_num_threads(1); XLA's own pool shares the
core), with `wse train`'s XLA flags and allocator setting (`configure`,
`keep_freed_memory`). Each contender is a jit of jax.vjp of `_sdpa` and its backward
(torch: SDPA with is_causal and .backward), timed in interleaved rounds: one call of each
per round, the order the same; prints the median and the spread (min-max) in ms, and the largest
difference of the kernels' out, dq, dk, dv from the XLA path's. Also the kernels' first
use in a fresh process (numba's compile or cache load) in `first_ms`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    os.sched_setaffinity(0, {0})
    from wse_core.host.runtime import configure, keep_freed_memory

    keep_freed_memory()  # as `wse train` and bench_train run (no page faults per call)
    configure(1)
    import jax
    import jax.numpy as jnp
    import numpy as np
    import torch
    from jax import lax
    from wse_models import layer, sdpa_cpu

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    sdpa_cpu._target("sdpa_fwd"), sdpa_cpu._target("sdpa_bwd")
    first_ms = 1e3 * (time.perf_counter() - t0)

    def step(kernels: bool):
        def f(q, k, v, mask, do):
            fn = lambda a, b, c: layer._sdpa(a, b, c, mask, lax.Precision.HIGHEST, jnp.float32)  # noqa: E731
            out, vjp = jax.vjp(fn, q, k, v)
            return out, *vjp(do)

        usable = sdpa_cpu.usable
        if not kernels:
            sdpa_cpu.usable = lambda *a: False
        try:
            return jax.jit(f).lower(*args_j).compile()
        finally:
            sdpa_cpu.usable = usable

    print(f"kernels' first use (compile or cache load): {first_ms:.0f} ms")
    print(f"{'shape':>18} {'XLA ms':>16} {'torch ms':>16} {'numba ms':>16}  max |diff|")
    for b in (16, 8):
        rng = np.random.default_rng(0)
        q, k, v, do = (rng.standard_normal((b, 4, 128, 32), dtype=np.float32) for _ in range(4))
        mask = np.broadcast_to(np.tril(np.ones((128, 128), bool)), (b, 128, 128))
        args_j = tuple(map(jnp.asarray, (q[:, :, None], k, v, mask, do[:, :, None])))
        xla, ours = step(False), step(True)
        got, want = ours(*args_j), xla(*args_j)
        diff = max(float(jnp.max(jnp.abs(a - w))) for a, w in zip(got, want, strict=True))
        tq, tk, tv = (torch.from_numpy(x).requires_grad_() for x in (q, k, v))
        tdo = torch.from_numpy(do)

        def run_torch(tq=tq, tk=tk, tv=tv, tdo=tdo):
            torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=True).backward(
                tdo
            )

        fns = {
            "xla": lambda f=xla, a=args_j: jax.block_until_ready(f(*a)),
            "torch": run_torch,
            "numba": lambda f=ours, a=args_j: jax.block_until_ready(f(*a)),
        }
        for fn in fns.values():
            fn()
        times = {n: [] for n in fns}
        for _ in range(args.rounds):
            for n, fn in fns.items():
                t = time.perf_counter()
                fn()
                times[n].append(1e3 * (time.perf_counter() - t))
        cells = [f"{statistics.median(x):6.2f} ({min(x):.1f}-{max(x):.1f})" for x in times.values()]
        print(
            f"{str([b, 4, 128, 32]):>18} " + " ".join(f"{c:>16}" for c in cells) + f"  {diff:.1e}"
        )


if __name__ == "__main__":
    main()
