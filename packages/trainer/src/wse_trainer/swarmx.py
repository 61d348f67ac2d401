"""SwarmX: broadcast of each weight group to the `num_csx` wafer replicas, and sum-reduction
of their gradients on the way back, with the bytes counted.

Replicas are split over the processes of a run in contiguous blocks: with P processes,
process p computes replicas `p * k ... (p + 1) * k - 1` (k = num_csx / P). The emulator may
compute each replica as `shards` workers (`wse_trainer.layout`: the replica's batch split
evenly over CPU devices, their gradients summed here before MemoryX sees them): worker w is
shard `w % shards` of replica `w // shards`, on local device `w % len(local devices)` (on a
CPU host, the virtual devices; with fewer devices than workers, workers share a device).
`first` / `local` count workers (with one shard, the replicas). One process holds every
replica. `broadcast` is one `jax.device_put` per local replica, issued asynchronously, so a
broadcast started before a layer's compute overlaps with it. `reduce` sums every replica's
gradient on the MemoryX device in replica order, 0 first: across processes the per-replica
gradients are first gathered (`process_allgather`), so P processes x k replicas add exactly
the numbers one process adds, in the same order — bit-identical results. The sum of
per-replica gradients of the (globally normalised) loss is the full-batch gradient. Byte
counters are global (every replica of the run), the same in every process.

Host cost (the emulator's, not the wafer's): the sum is one jitted call per pair of trees
(`_add`), dispatched asynchronously like the layers. The per-leaf eager `a + b` it replaces
ran small arrays inline on the calling thread, which first waited for the gradients: the
host blocked on every layer's backward before it could dispatch the next (measured: 72 adds a
step of bench_train's d128 model on 2 cores held the host 1.2 s of a 1.8 s step, load 17).
A tree already on its target device (MemoryX's weights for the home device's worker, worker
0's gradient) is used as it is, without `device_put`'s per-leaf bookkeeping; one that is not
is copied by XLA's batched array copy in one call (`_copied`: jax's own device_put path
without its per-leaf Python, 225 -> 75 us of host a d128 layer; bit-identical steps). In
interleaved rounds of the bench_train quick step at 2 cores, 4 runs of 11 rounds at load
1.1-1.5 (2026-12-03), the step ran 1.02, 1.02, 1.01 and 1.03x as fast (medians; rounds
0.92-1.08x) as with `jax.device_put`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from wse_core import WseError

__all__ = ["SwarmX", "check_split", "to_device", "tree_bytes"]


@jax.jit
def _add(a: Any, b: Any) -> Any:
    """Leafwise a + b of two gradient trees: the same float adds as eager `a + b`."""
    return jax.tree.map(jnp.add, a, b)


def _on(tree: Any, device: jax.Device) -> bool:
    """Whether every leaf of `tree` is a jax.Array committed to `device` alone, or traced
    (`StreamedTrainer`'s device loop: one program on the one device it runs on)."""
    want = {device}
    return all(
        isinstance(x, jax.core.Tracer)
        or (isinstance(x, jax.Array) and x.committed and x.sharding.device_set == want)
        for x in jax.tree.leaves(tree)
    )


def to_device(tree: Any, device: jax.Device) -> Any:
    """`tree` on `device`: as it is when it is there already, else a copy (`_copied`)."""
    return tree if _on(tree, device) else _copied(tree, device)


def _copied(tree: Any, device: jax.Device) -> Any:
    """A copy of `tree` on `device`: every leaf in one call of XLA's batched array copy when
    each is a single-device jax.Array (jax.device_put's per-leaf Python bookkeeping took
    225 us a layer of bench_train's d128 model, this 75), else `jax.device_put`."""
    leaves, treedef = jax.tree.flatten(tree)
    if _batched_copy is None or not all(_single(x) for x in leaves):
        return jax.device_put(tree, device)
    to = jax.sharding.make_single_device_sharding(device)  # the class is deprecated in JAX 0.12
    n = len(leaves)
    on = to._internal_device_list.addressable_device_list
    out = _batched_copy(leaves, [on] * n, [to] * n, [_REUSE_INPUT] * n)
    return jax.tree.unflatten(treedef, out)


def _single(x: Any) -> bool:
    return isinstance(x, jax.Array) and len(x.sharding.device_set) == 1 and x.is_fully_addressable


try:  # jax's own batched device_put; private, so checked once and skipped where it moved
    from jax._src.dispatch import ArrayCopySemantics as _Semantics
    from jax._src.lib import xla_client as _xc

    _batched_copy = _xc.batched_copy_array_to_devices_with_sharding
    _REUSE_INPUT = _Semantics.REUSE_INPUT  # device_put's default (no donation)
except (ImportError, AttributeError):  # pragma: no cover - another jax
    _batched_copy = None


def tree_bytes(tree: Any) -> int:
    return int(sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(tree)))


def check_split(num_csx: int) -> None:
    """Refuse `num_csx` replicas that do not split evenly over the run's processes."""
    procs = jax.process_count()
    if num_csx % procs:
        raise WseError(
            f"num_csx={num_csx} replicas cannot be split over {procs} processes; "
            f"use a multiple of {procs}"
        )


@dataclasses.dataclass
class SwarmX:
    """The broadcast/reduce interconnect between MemoryX and `num_csx` replicas."""

    num_csx: int
    devices: Sequence[jax.Device]  # this process's devices
    home: jax.Device  # the MemoryX device (this process's copy of MemoryX)
    first: int = 0  # the first replica this process computes
    local: int = 0  # how many replicas this process computes
    processes: int = 1
    broadcast_bytes: int = 0  # bytes delivered to replicas (counted once per replica)
    reduce_bytes: int = 0  # bytes sent by replicas toward MemoryX
    shards: int = 1  # workers per replica (the emulator's layout, not the wafer's)

    @classmethod
    def create(
        cls,
        num_csx: int,
        devices: Sequence[jax.Device] | None = None,
        home: jax.Device | None = None,
        shards: int = 1,
    ) -> SwarmX:
        check_split(num_csx)
        procs, me = jax.process_count(), jax.process_index()
        devs = list(devices if devices is not None else jax.local_devices())
        local = num_csx * shards // procs
        return cls(num_csx, devs, home or devs[0], me * local, local, procs, shards=shards)

    @property
    def workers(self) -> int:
        """Workers of the whole run: num_csx replicas x shards."""
        return self.num_csx * self.shards

    @property
    def replicas(self) -> range:
        """The global indices of the workers (replicas, with one shard) this process computes."""
        return range(self.first, self.first + self.local)

    def replica_device(self, r: int) -> jax.Device:
        """The device of local worker `r` (0 .. local - 1)."""
        return self.devices[(self.first + r) % len(self.devices)]

    def broadcast(self, weights: Any) -> list[Any]:
        """The same weights on every local replica's device (asynchronous)."""
        self.broadcast_bytes += tree_bytes(weights) * self.num_csx
        return [to_device(weights, self.replica_device(r)) for r in range(self.local)]

    def scatter(self, batch: Any) -> list[Any]:
        """This process's shards of a global batch (leading axis split into the workers)."""
        shards = jax.tree.map(lambda x: x.reshape(self.workers, -1, *x.shape[1:]), batch)
        return [
            jax.device_put(
                jax.tree.map(lambda x, r=r: x[self.first + r], shards), self.replica_device(r)
            )
            for r in range(self.local)
        ]

    def gather(self, values: Sequence[Any]) -> list[Any]:
        """Every worker's value (pytrees), in worker order, from the local workers' ones."""
        if self.processes == 1:
            return list(values)
        from jax.experimental import multihost_utils

        stacked = jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *values)
        every = multihost_utils.process_allgather(stacked, tiled=True)
        return [jax.tree.map(lambda x, r=r: x[r], every) for r in range(self.workers)]

    def count_broadcast(self, nbytes: int) -> None:
        """Count a broadcast of `nbytes` per replica that need not be copied here (the
        replicas hold those weights already: `StreamedTrainer`'s kept layer residuals)."""
        self.broadcast_bytes += nbytes * self.num_csx

    def reduce(self, grads: Sequence[Any]) -> Any:
        """Sum of every worker's gradient pytree, in worker order, on the MemoryX device."""
        self.reduce_bytes += tree_bytes(grads[0]) * self.num_csx
        moved = [to_device(g, self.home) for g in self.gather(grads)]
        total = moved[0]
        for g in moved[1:]:
            total = _add(total, g)
        return total

    def counters(self) -> dict[str, int]:
        return {"broadcast_bytes": self.broadcast_bytes, "reduce_bytes": self.reduce_bytes}
