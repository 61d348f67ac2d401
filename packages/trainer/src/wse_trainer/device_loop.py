"""A `StreamedTrainer` step as one XLA program on the device (`Layout.device_loop`).

Contract. `DeviceLoop(trainer).step(batch, segments)` is `StreamedTrainer.step`'s result,
computed by the trainer's own host loop (`_run_micro`: every stream item, layer, column
chunk, recompute, SwarmX reduce and MemoryX update, in the same order) traced once per batch
shape under `jax.jit`, with MemoryX's weights and optimizer state as the program's donated
inputs and outputs. The trace runs on tracers the trainer holds only while it lasts; what it
counts (bytes broadcast and reduced, updates applied, layers recomputed) is kept and added
to the trainer's counters at each step, so they read as the host loop's. The stall is 0:
the host streams nothing while the device runs. Only where MemoryX and every worker share
one device of one process (`StreamedTrainer` decides).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np

if TYPE_CHECKING:
    from wse_trainer.metrics import StepStats
    from wse_trainer.stream import StreamedTrainer

__all__ = ["DeviceLoop"]


class DeviceLoop:
    """The trainer's step as one jitted program (module contract)."""

    def __init__(self, trainer: StreamedTrainer):
        self.trainer = trainer
        self.programs: dict[bool, Any] = {}  # segments given? -> the jitted step
        self.counted: tuple[int, int, int, int] = (0, 0, 0, 0)  # what one traced step counts

    def step(self, batch: np.ndarray, segments: Any) -> StepStats:
        tr = self.trainer
        t0 = time.perf_counter()
        micro, segs = tr._micro_batches(batch, segments)
        program = self.programs.get(segs is not None)
        if program is None:
            program = jax.jit(self._traced, donate_argnums=(0, 1))
            self.programs[segs is not None] = program
        params, state, losses, norm, zeros = program(tr.memx.params, tr.memx.opt_state, micro, segs)
        tr.memx.params, tr.memx.opt_state = dict(params), dict(state)
        broadcast, reduced, updates, recomputed = self.counted
        tr.swarm.broadcast_bytes += broadcast
        tr.swarm.reduce_bytes += reduced
        tr.memx.updates_applied += updates
        fetched = jax.device_get((losses, norm))
        return tr._stats(t0, batch, fetched, zeros, 0.0, (broadcast, reduced, recomputed))

    def _traced(self, params, opt_state, micro, segs):
        """The host loop on traced weights (run by jax.jit's trace only): MemoryX holds the
        tracers while it runs; what it counts is kept in `counted` and every counter is put
        back (`step` adds the counts each step)."""
        tr = self.trainer
        memx, swarm = tr.memx, tr.swarm
        kept = (memx.params, memx.opt_state, memx._square_norm)
        b0, r0, u0 = swarm.broadcast_bytes, swarm.reduce_bytes, memx.updates_applied
        memx.params, memx.opt_state = dict(params), dict(opt_state)
        memx._square_norm = jnp.zeros((), jnp.float32)
        try:
            losses, zeros, recomputed = tr._run_micro(micro, segs)
            out = (memx.params, memx.opt_state, losses, memx.take_gradient_norm(), zeros)
            self.counted = (
                swarm.broadcast_bytes - b0,
                swarm.reduce_bytes - r0,
                memx.updates_applied - u0,
                recomputed,
            )
            return out
        finally:  # no tracer stays behind in the trainer
            memx.params, memx.opt_state, memx._square_norm = kept
            swarm.broadcast_bytes, swarm.reduce_bytes, memx.updates_applied = b0, r0, u0
            tr._forget_trace()
