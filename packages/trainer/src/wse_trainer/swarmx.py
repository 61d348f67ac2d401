"""SwarmX: broadcast of each weight group to the `num_csx` wafer replicas, and sum-reduction
of their gradients on the way back, with the bytes counted.

Replica r lives on jax device `r % len(devices)` (on a CPU host, the virtual devices; with
fewer devices than replicas, replicas share a device). `broadcast` is one `jax.device_put`
per replica, issued asynchronously, so a broadcast started before a layer's compute
overlaps with it. `reduce` sums the replicas' gradients on the MemoryX device: the sum of
per-replica gradients of the (globally normalised) loss is the full-batch gradient.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax

__all__ = ["SwarmX", "tree_bytes"]


def tree_bytes(tree: Any) -> int:
    return int(sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(tree)))


@dataclasses.dataclass
class SwarmX:
    """The broadcast/reduce interconnect between MemoryX and `num_csx` replicas."""

    num_csx: int
    devices: Sequence[jax.Device]
    home: jax.Device  # the MemoryX device
    broadcast_bytes: int = 0  # bytes delivered to replicas (counted once per replica)
    reduce_bytes: int = 0  # bytes sent by replicas toward MemoryX

    @classmethod
    def create(
        cls,
        num_csx: int,
        devices: Sequence[jax.Device] | None = None,
        home: jax.Device | None = None,
    ) -> SwarmX:
        devs = list(devices if devices is not None else jax.devices())
        return cls(num_csx=num_csx, devices=devs, home=home or devs[0])

    def replica_device(self, r: int) -> jax.Device:
        return self.devices[r % len(self.devices)]

    def broadcast(self, weights: Any) -> list[Any]:
        """The same weights on every replica's device (asynchronous)."""
        self.broadcast_bytes += tree_bytes(weights) * self.num_csx
        return [jax.device_put(weights, self.replica_device(r)) for r in range(self.num_csx)]

    def scatter(self, batch: Any) -> list[Any]:
        """Split a global batch (leading axis) into one shard per replica, placed there."""
        shards = jax.tree.map(lambda x: x.reshape(self.num_csx, -1, *x.shape[1:]), batch)
        return [
            jax.device_put(jax.tree.map(lambda x, r=r: x[r], shards), self.replica_device(r))
            for r in range(self.num_csx)
        ]

    def reduce(self, grads: Sequence[Any]) -> Any:
        """Sum of the replicas' gradient pytrees, on the MemoryX device."""
        self.reduce_bytes += tree_bytes(grads[0]) * len(grads)
        moved = [jax.device_put(g, self.home) for g in grads]
        total = moved[0]
        for g in moved[1:]:
            total = jax.tree.map(lambda a, b: a + b, total, g)
        return total

    def counters(self) -> dict[str, int]:
        return {"broadcast_bytes": self.broadcast_bytes, "reduce_bytes": self.reduce_bytes}
