"""The weight-streaming train step: MemoryX -> SwarmX -> replicas, layer by layer.

`StreamedTrainer.step(batch, segments=None)` runs one global step of `batch` ((B, S + 1)
int32 rows; `segments`: the packed documents of its inputs, `data.Segments`, or None):

1. forward: the embedding, then each layer in turn. Layer i+1's weights are broadcast
   (`device_put`) *before* layer i is dispatched, so the transfer overlaps the compute; the
   host never waits for them: JAX orders each copy before the layer that reads it, and the
   host dispatches every layer of the step ahead of the devices. The stall is the host time
   spent streaming weights (a copy to another CPU device runs when it is dispatched, on the
   host thread). Layer inputs are kept or dropped as the replica's `ActivationPlan` (SRAM
   ledger) says.
2. the head (final norm, logits, loss) and its gradient (into MemoryX later: `_land_head`).
3. backward: each layer from the last, its weights streamed again (prefetched one layer
   ahead), dropped inputs recomputed from the nearest kept one, `jax.vjp` of the layer; the
   replicas' weight gradients are sum-reduced by SwarmX and MemoryX applies that layer's
   update at once.
4. the embedding's gradient (plus the head's share when tied) and its update.

Below the layer (`plan.chunks` not whole: `wse_systems.training.chunks`, `wse_trainer.chunked`): a
layer's matrices stream in column chunks; each chunk is used in the forward, again to
recompute the layer's inner activations in the backward, then for its share of the input
gradient and its own weight gradient, which goes through SwarmX to MemoryX at once; the
layer's update is applied when its last chunk has arrived. Every weight item of a step
(groups, or a layer's vectors and chunks, the recompute schedule included) is listed in use
order before the step (`_step_items`) and streamed one item ahead of its use.

How this machine computes it (`layout`, a `wse_trainer.layout.Layout`): each replica as
`shards` SwarmX workers on as many CPU devices, and with `keep_residuals` each layer's
forward keeps its VJP residuals for the backward (`replica.layer_fwd_vjp`), which then does
not run the layer's forward again: those residuals hold the layer's weights, so its backward
stream item is counted (`broadcast_bytes`: the wafer streams it again) but not copied to
the workers again (issue 44). With `device_loop` (an accelerator, one process, MemoryX and
every worker on one device) the same host loop runs traced into one XLA program on the
device (`wse_trainer.device_loop`). None of these changes what the wafer does.

Gradient accumulation (`micro_batch`, per replica: ModelZoo's `micro_batch_size`; default
the whole per-replica batch): each replica's `global_batch / num_csx` rows run as
`micro_batches` micro-batches in turn, each the whole stream above (every weight item in,
every gradient out); MemoryX sums each group's gradient over them and applies the update
after the last one (`MemoryX.begin_micro`). Micro-batch j takes rows j*m .. j*m + m - 1 of
every replica's rows; the loss keeps its global normalisation, so the summed micro-batch
losses and gradients are the whole batch's.

A step reports its `StepStats` (`wse_trainer.metrics`); its batch is checked first (`step_inputs`).
"""

from __future__ import annotations

import functools
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from wse_systems.training.plan import ActivationPlan

from wse_trainer.chunked import ChunkedLayer
from wse_trainer.device_loop import DeviceLoop
from wse_trainer.layout import Layout
from wse_trainer.memoryx import MemoryX
from wse_trainer.metrics import StepStats
from wse_trainer.replica import layer_fns, stage_fns
from wse_trainer.step_inputs import check_batch, micro_size
from wse_trainer.swarmx import SwarmX

__all__ = ["StepStats", "StreamedTrainer"]


class _Held(str):
    """A backward stream item of a layer whose kept VJP holds its weights: the bytes are
    counted as streamed (the wafer streams them again) but nothing is copied (issue 44)."""


@jax.jit
def _add_f32(a, b):
    """Leafwise a + b in fp32 (the embedding's gradient and the tied head's share of it)."""
    return jax.tree.map(lambda x, y: x.astype(jnp.float32) + y.astype(jnp.float32), a, b)


@functools.lru_cache(maxsize=16)
def _jitted_stages(model: Any):
    """One set of jitted stage functions per config (weight streaming below the layer)."""
    fns = stage_fns(model)
    return fns._replace(**{k: jax.jit(f) for k, f in fns._asdict().items()})


@functools.lru_cache(maxsize=16)
def _jitted_fns(model: Any, loss_scale: float):
    """One set of jitted replica functions per (config, scale): trainers share compilations."""
    fns = layer_fns(model, loss_scale)
    return fns._replace(**{k: jax.jit(f) for k, f in fns._asdict().items()})


class StreamedTrainer:
    """Weight-streaming data-parallel training of a `wse_models` config.

    `tx` is applied by MemoryX one weight group (embedding, each layer, final) at a time, so
    it must act on each element: a transform that reduces over the tree or a stacked leaf
    (`optax.clip_by_global_norm`, `clip_by_block_rms`, LAMB's trust ratio) is refused with a
    WseError (`memoryx.groupwise_problem`; hunt 79: it clipped each layer by its own norm,
    unsaid). Clip by the global norm with `max_gradient_norm=` instead."""

    def __init__(
        self,
        model: Any,
        params: Any,
        tx: optax.GradientTransformation,
        *,
        num_csx: int,
        global_batch: int,
        seq_len: int,
        plan: ActivationPlan,
        max_gradient_norm: float | None = None,
        devices=None,
        layout: Layout | None = None,
        micro_batch: int | None = None,
    ):
        self.model, self.plan, self.num_csx = model, plan, num_csx
        self._shape = (global_batch, seq_len)  # the step's batch: seq_len + 1 ids a row
        self.micro_batch = micro_size(num_csx, global_batch, seq_len, micro_batch)  # a replica's
        self.micro_batches = global_batch // num_csx // self.micro_batch
        self.layout = layout or Layout()
        self.L = int(model.n_layers)
        self.dtype = jnp.dtype(model.dtype)
        self.memx = MemoryX(
            params,
            self.L,
            tx,
            max_gradient_norm=max_gradient_norm,
            device=(devices or jax.local_devices())[0],
        )
        self.swarm = SwarmX.create(
            num_csx, devices, home=self.memx.device, shards=self.layout.shards
        )
        self.local = self.swarm.local  # workers (replicas, or their shards) this process computes
        self.fns = _jitted_fns(model, 1.0 / (global_batch * seq_len))
        pos = np.broadcast_to(
            np.arange(seq_len, dtype=np.int32),
            (num_csx * self.micro_batch // self.swarm.workers, seq_len),
        )
        self._vjps: dict[int, list[Any]] = {}  # layer -> each worker's kept VJP
        self.positions = [
            jax.device_put(pos, self.swarm.replica_device(r)) for r in range(self.local)
        ]
        self._stall = 0.0
        self._pos_seg: list[tuple[Any, Any]] = [(p, None) for p in self.positions]
        self._items: Any = iter(())
        self._next: Any = None
        self._head_grads, self._head_embed = None, None  # until / from `_land_head`
        if plan.chunked:  # a layer's matrices stream in column chunks
            stages = _jitted_stages(model)
            self.chunked = ChunkedLayer(stages, plan.chunks, self._take, self._send)
        one_device = all(
            self.swarm.replica_device(r) == self.memx.device for r in range(self.local)
        )
        on_device = self.layout.device_loop and self.swarm.processes == 1 and one_device
        self._device_loop = DeviceLoop(self) if on_device else None

    # Streaming -------------------------------------------------------------------------
    def _fetch(self, item: Any) -> list[Any]:
        """Broadcast one stream item: a group name, or a layer's vectors / column chunk;
        the host seconds it takes count as stall."""
        t0 = time.perf_counter()
        try:
            return self._broadcast(item)
        finally:
            self._stall += time.perf_counter() - t0

    def _broadcast(self, item: Any) -> list[Any] | None:
        if isinstance(item, _Held):  # counted as streamed; the kept VJP holds the weights
            leaves = jax.tree.leaves(self.memx.params[item])
            self.swarm.count_broadcast(sum(x.size for x in leaves) * self.dtype.itemsize)
            return None
        if isinstance(item, tuple):
            name, key, *cols = item
            if key is None:
                w = self.memx.vectors(name, self.chunked.keys, self.dtype)
            else:
                w = self.memx.chunk(name, key, *cols, self.dtype)
        elif item == "head":  # the final norm and head; tied heads read the embedding
            w = {"final": self.memx.weights("final", self.dtype)}
            if self.model.tie_embeddings:
                w["embed"] = self.memx.weights("embed", self.dtype)
        else:
            w = self.memx.weights(item, self.dtype)
        return self.swarm.broadcast(w)

    def _take(self) -> list[Any]:
        """The next item's weights; the one after it starts streaming now. Not waited for:
        blocking here held the host until the devices had run everything queued before the
        copy (on a CPU device the copy and the previous layer share the worker threads), so
        the devices then idled while the host dispatched the next layer (issue 44: a 0.30
        stall fraction at 2 cores)."""
        cur = self._next
        item = next(self._items, None)
        self._next = None if item is None else self._fetch(item)
        return cur

    def _send(self, name: str, key: Any, start: int, grads: list[Any], parts: int) -> None:
        self.memx.receive_part(name, key, start, self.swarm.reduce(grads), parts=parts)

    def _layer_items(self, i: int, backward: bool = False) -> list[Any]:
        name = f"layer_{i}"
        if not self.plan.chunked:
            return [_Held(name) if backward and self.layout.keep_residuals else name]
        c = self.chunked
        return c.backward_items(name) if backward else c.forward_items(name)

    def _step_items(self) -> list[Any]:
        """Every stream item of one step, in use order (the recompute schedule included)."""
        items: list[Any] = ["embed"]
        for i in range(self.L):
            items += self._layer_items(i)
        items.append("head")
        present = {i for i in range(self.L) if self.plan.keeps(i)}
        for i in reversed(range(self.L)):
            if i not in present:
                start = i - i % self.plan.stride
                for j in range(start, i):
                    items += self._layer_items(j)
                present.update(range(start + 1, i + 1))
            items += self._layer_items(i, backward=True)
        return [*items, "embed"]

    def _layer(self, i: int, h, zeros: bool = False, keep: bool = False):
        """Layer i's forward on every local replica -> (h, MLP zero counts or None); with
        `keep` (whole layers only) each replica's VJP is kept for the backward."""
        if self.plan.chunked:
            return self.chunked.forward(h, self._pos_seg, zeros)
        w = self._take()
        if keep:
            return self._run_layer_kept(i, w, h, zeros)
        if zeros:
            out = [
                self.fns.layer_fwd_zeros(w[r], h[r], *self._pos_seg[r]) for r in range(self.local)
            ]
            return [o[0] for o in out], [o[1] for o in out]
        return [self.fns.layer_fwd(w[r], h[r], *self._pos_seg[r]) for r in range(self.local)], None

    def _layer_backward(self, i: int, h_in, g_h):
        """Layer i's input gradient; its weight gradient goes to MemoryX through SwarmX."""
        name = f"layer_{i}"
        if self.plan.chunked:
            self._land_head()
            return self.chunked.backward(name, h_in, self._pos_seg, g_h)
        w = self._take()  # streamed for the backward either way: the wafer's stream order
        kept = self._vjps.pop(i, None)
        out = [
            self.fns.layer_bwd_saved(kept[r], g_h[r])
            if kept is not None
            else self.fns.layer_bwd(w[r], h_in[r], *self._pos_seg[r], g_h[r])
            for r in range(self.local)
        ]
        self._land_head()
        self.memx.receive(name, self.swarm.reduce([o[0] for o in out]))
        return [o[1] for o in out]

    def _run_layer_kept(self, i: int, w, h, zeros: bool):
        """Layer i's forward keeping each worker's VJP for the backward (`keep_residuals`)."""
        f = self.fns.layer_fwd_vjp_zeros if zeros else self.fns.layer_fwd_vjp
        out = [f(w[r], h[r], *self._pos_seg[r]) for r in range(self.local)]
        self._vjps[i] = [o[1] for o in out]
        return [o[0] for o in out], ([o[2] for o in out] if zeros else None)

    # The step --------------------------------------------------------------------------
    def step(self, batch: np.ndarray, segments: Any = None) -> StepStats:
        check_batch(self.model, batch, segments, self._shape)  # before anything is updated
        if self._device_loop is not None:
            return self._device_loop.step(batch, segments)
        t0, self._stall = time.perf_counter(), 0.0
        b0, r0 = self.swarm.broadcast_bytes, self.swarm.reduce_bytes
        losses, zeros, recomputed = self._run_micro(*self._micro_batches(batch, segments))
        # one fetch for the losses and the gradient norm (no extra host sync per step)
        fetched = jax.device_get((self.swarm.gather(losses), self.memx.take_gradient_norm()))
        counts = (self.swarm.broadcast_bytes - b0, self.swarm.reduce_bytes - r0, recomputed)
        return self._stats(t0, batch, fetched, zeros, self._stall, counts)

    def _micro_batches(self, batch: np.ndarray, segments: Any) -> tuple[list, list | None]:
        """The step's micro-batches: each one's rows, and its segments (or None)."""
        rows = [self._micro_rows(batch, j) for j in range(self.micro_batches)]
        if segments is None:
            return rows, None
        return rows, [tuple(self._micro_rows(x, j) for x in segments) for j in range(len(rows))]

    def _run_micro(self, micro: list, segs: list | None) -> tuple[list[Any], list, int]:
        """Every micro-batch through the stream, then MemoryX's held updates: (each local
        worker's loss per micro-batch, the MLP zero counts per micro-batch, layers recomputed)."""
        losses, zeros, recomputed = [], [], 0
        for j, rows in enumerate(micro):
            self.memx.begin_micro(j, len(micro))
            loss, z, again = self._micro_step(rows, None if segs is None else segs[j])
            losses += loss
            zeros.append(z)
            recomputed += again
        self.memx.finish_step()
        return losses, zeros, recomputed

    def _stats(self, t0: float, batch, fetched, zeros, stall: float, counts) -> StepStats:
        """The step's stats once every update has landed: `fetched` (the workers' losses, the
        gradient norm), `counts` (bytes broadcast, bytes reduced, layers recomputed)."""
        losses, norm = fetched
        jax.block_until_ready(self.memx.params)  # the step ends when every update has landed
        wall = time.perf_counter() - t0
        tokens = int(np.asarray(batch)[:, 1:].size)
        broadcast, reduced, recomputed = counts
        zero_fraction = self._zero_fraction(zeros, tokens)
        return StepStats(sum(float(x) for x in losses), wall, stall, broadcast, reduced,
                         recomputed, tokens, zero_fraction, float(norm))  # fmt: skip

    def _forget_trace(self) -> None:
        """Drop what a step leaves in the trainer (`DeviceLoop`: none of it may be a tracer)."""
        self.memx.begin_micro(0, 1)
        self._vjps, self._head_grads, self._head_embed = {}, None, None
        self._items, self._next = iter(()), None
        self._pos_seg = [(p, None) for p in self.positions]

    def _micro_rows(self, x: Any, j: int) -> np.ndarray:
        """Micro-batch j of every replica's rows (replica-major, as `SwarmX.scatter` splits)."""
        x = np.asarray(x)
        k, m = self.micro_batches, self.micro_batch
        return x.reshape(self.num_csx, k, m, *x.shape[1:])[:, j].reshape(-1, *x.shape[1:])

    def _micro_step(self, batch: np.ndarray, segments: Any) -> tuple[list[Any], Any, int]:
        """One micro-batch through every layer and back: (each local worker's loss, the MLP
        zero counts per layer and worker, layers recomputed)."""
        shards = self.swarm.scatter((batch[:, :-1], batch[:, 1:]))
        if segments is None:
            self._pos_seg = [(p, None) for p in self.positions]
        else:  # packed documents: this batch's own positions and segment ids
            seg = self.swarm.scatter((segments[1], segments[0]))
            self._pos_seg = [tuple(x) for x in seg]
        self._items = iter(self._step_items())
        self._next = self._fetch(next(self._items))
        acts, h, zeros = self._forward(shards)
        losses, g_h = self._head(h, shards)
        return losses, zeros, self._backward(acts, g_h, shards)

    def _zero_fraction(self, zeros, tokens: int) -> tuple[float, ...] | None:
        """Every replica's per-layer zero counts summed over the micro-batches, over the
        step's hidden activations (`zeros`: per micro-batch, per layer, per worker)."""
        if not any(zeros):
            return None
        per_replica = [
            sum(np.asarray(jnp.stack([z[r] for z in micro]), np.int64) for micro in zeros)
            for r in range(self.local)
        ]
        total = np.sum([np.asarray(x, np.int64) for x in self.swarm.gather(per_replica)], 0)
        return tuple(float(x) for x in total / (tokens * self.model.d_ff))

    def _forward(self, shards):
        w = self._take()
        h = [self.fns.embed_fwd(w[r], shards[r][0], self._pos_seg[r][0]) for r in range(self.local)]
        acts: dict[int, list[Any]] = {}
        zeros: list[list[Any]] = []  # per layer, per replica (ReLU-like models only)
        for i in range(self.L):
            if self.plan.keeps(i):
                acts[i] = h
            h, z = self._layer(i, h, zeros=self.model.relu_like, keep=self.layout.keep_residuals)
            if z is not None:
                zeros.append(z)
        return acts, h, zeros

    def _head(self, h, shards):
        w_head = self._take()
        out = [self.fns.head(w_head[r], h[r], shards[r][1]) for r in range(self.local)]
        self._head_grads = [o[1] for o in out]
        return [o[0] for o in out], [o[2] for o in out]

    def _land_head(self) -> None:
        """The head's gradient into MemoryX ("final"; the tied share kept), once: MemoryX's
        device starts the last layer's backward without waiting for every head (issue 44)."""
        if self._head_grads is not None:
            g, self._head_grads = self.swarm.reduce(self._head_grads), None
            self.memx.receive("final", g["final"])
            self._head_embed = g.get("embed")

    def _recompute(self, acts, i: int) -> int:
        """Refill layer inputs start+1 .. i from the kept input of layer `start`."""
        start = i - i % self.plan.stride
        h = acts[start]
        for j in range(start, i):
            h, _ = self._layer(j, h)
            acts[j + 1] = h
        return i - start

    def _backward(self, acts, g_h, shards) -> int:
        recomputed = 0
        for i in reversed(range(self.L)):
            if i not in acts:
                recomputed += self._recompute(acts, i)
            g_h = self._layer_backward(i, acts.pop(i), g_h)
        self._land_head()
        w = self._take()
        g_e = self.swarm.reduce(
            [
                self.fns.embed_bwd(w[r], shards[r][0], self._pos_seg[r][0], g_h[r])
                for r in range(self.local)
            ]
        )
        if self._head_embed is not None:
            g_e = _add_f32(g_e, self._head_embed)
        self.memx.receive("embed", g_e)
        return recomputed
