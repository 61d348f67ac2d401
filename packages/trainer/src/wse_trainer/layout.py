"""How the emulator lays a training step over this machine's CPU cores (not what the wafer runs).

Contract. A `Layout` says how `StreamedTrainer` computes each wafer replica's step here:

- `shards`: the replica's batch split evenly over this many CPU devices (`SwarmX` workers),
  which run at once, one per core; the shards' gradients are summed before MemoryX sees
  them, so the wafer still sees `num_csx` replicas of the same per-replica batch (the plan,
  the prediction and the streamed bytes do not change; the numbers change only by the
  order of the sums). Why: XLA:CPU's dots use a second core poorly at these shapes
  (shared/PLATFORM.md), and the fused, data-parallel shards keep both busy. One device on
  both cores instead (the whole batch, XLA's intra-op threads) ran bench_train's d128 step
  at 0.89-0.95x the two shards' speed, and at 1.00x even with the attention kernels split
  over both cores (numba prange; three interleaved runs, 2-core VM, 2026-12-03): the
  YNNPACK dots and most fusions still run on one thread.
- `keep_residuals`: each layer's forward keeps its VJP residuals in host memory, so the
  backward does not run the layer's forward again (a 2-layer-forward saving per layer:
  0.88 -> 0.73 s a step of the bench's d128 model on one loaded core). The wafer's backward
  as priced (`wse_systems.training.performance`) does not recompute inside a layer either. Only when
  the plan keeps every layer's input (stride 1: no recompute schedule to follow) and the
  residuals of every layer and worker fit `RESIDUAL_SHARE` of the available host memory.
- `device_loop`: on an accelerator (a GPU), the whole step is one XLA program: the host
  loop below (every stream item, layer, chunk, recompute, reduce and MemoryX update, in
  the same order) is traced once under `jax.jit` and runs on the device, so the device
  never waits for the host to dispatch the next layer (issue 44: the host loop ran bench_
  device's chunked d512 step at 0.11x PyTorch on an H200, the fused step at 1.04x). MemoryX
  and every worker must share the one device (one process); the wafer's stream, its bytes
  and the numbers (float round-off apart: XLA fuses across the old call boundaries) do
  not change. On a CPU the host loop stays (its dispatch overlaps the devices' work, and
  runs repeat bit for bit across processes).

`choose_layout(model, plan, ...)` is what `wse train` runs unless the config fixes
`runconfig.cpu_shards` (0: choose): as many shards as the cores allow (one per core, at most
the devices one replica gets, and a divisor of its batch), residuals when they fit, the
device loop when JAX's default backend is not the CPU and the run has one process.
`describe(layout, cores)` is the run log's line.
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["RESIDUAL_SHARE", "Layout", "choose_layout", "describe", "residual_bytes"]

RESIDUAL_SHARE = 0.25  # of the available host memory, at most, for kept layer residuals


@dataclasses.dataclass(frozen=True, kw_only=True)
class Layout:
    shards: int = 1
    keep_residuals: bool = False
    device_loop: bool = False


def residual_bytes(model: Any, batch: int, seq_len: int) -> int:
    """Host bytes of one layer's VJP residuals for `batch` sequences (traced, not run)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import wse_models

    from wse_trainer.replica import layer_fns

    fns = layer_fns(model, 1.0)
    params = jax.eval_shape(lambda: wse_models.init_params(model, jax.random.key(0)))
    layer = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), params["layers"])
    h = jax.ShapeDtypeStruct((batch, seq_len, model.d_model), jnp.dtype(model.dtype))
    pos = jax.ShapeDtypeStruct((batch, seq_len), jnp.int32)
    _, vjp = jax.eval_shape(fns.layer_fwd_vjp, layer, h, pos, None)
    return int(sum(np.prod(x.shape) * x.dtype.itemsize for x in jax.tree.leaves(vjp)))


def choose_layout(
    model: Any,
    plan: Any,
    *,
    micro_batch: int,
    seq_len: int,
    local_replicas: int,
    shards: int = 0,
    cores: int = 0,
    devices: int = 0,
) -> Layout:
    """The layout for this machine: `shards` as given (0: one per usable core, within the
    devices each local replica gets and a divisor of `micro_batch`), residuals kept when
    the plan has stride 1 and every layer's residuals fit (module docstring). `cores` and
    `devices` (0: this process's usable cores and local JAX devices) are what `shards` 0
    divides."""
    import jax
    from wse_core.host.memory import available_bytes
    from wse_core.host.runtime import usable_cores

    if shards <= 0:
        cores, devices = cores or usable_cores(), devices or len(jax.local_devices())
        per_replica = max(1, min(cores, devices) // local_replicas)
        shards = max(k for k in range(1, per_replica + 1) if micro_batch % k == 0)
    keep = plan.stride == 1 and not plan.chunked  # chunked layers keep no whole-layer VJP
    if keep:
        need = model.n_layers * local_replicas * residual_bytes(model, micro_batch, seq_len)
        keep = need <= RESIDUAL_SHARE * available_bytes()
    loop = jax.default_backend() != "cpu" and jax.process_count() == 1
    return Layout(shards=shards, keep_residuals=keep, device_loop=loop)


def describe(layout: Layout, micro_batch: int) -> str:
    """One line for the run log: what the emulator does on this machine's cores."""
    split = (
        f"each replica's micro-batch of {micro_batch} split over {layout.shards} CPU devices"
        if layout.shards > 1
        else "each replica on one CPU device"
    )
    kept = (
        "layer residuals kept from the forward (no recompute inside a layer)"
        if layout.keep_residuals
        else "each layer's forward recomputed in its backward"
    )
    if layout.device_loop:
        kept += "; the whole step traced into one program on the device"
    return f"emulator layout: {split}; {kept} (runconfig.cpu_shards, 0 = choose)"
