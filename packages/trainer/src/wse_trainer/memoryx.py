"""MemoryX: the host store of fp32 master weights and optax state.

Weights live as groups: "embed", "layer_0" ... "layer_{L-1}", "final" (the model's params
pytree with its stacked layers cut apart, so a layer is updated without touching the
others). Each group has its own state of the same per-element optax transform, so applying
an update group by group as each gradient arrives is the whole-model arithmetic. With
global-norm clipping MemoryX holds the gradients until the last group has arrived (the norm
needs all of them), then applies every update with optax's clipping rule: that is
`max_gradient_norm=`, never a clip inside `tx`. A `tx` whose update couples the groups
(`optax.chain(optax.clip_by_global_norm(c), ...)`: each group would be clipped by its own
norm; hunt 79: parameters 6e-3 off a plain optax step after 3 steps, unsaid) is refused when
MemoryX is made (`groupwise_problem`): two updates of a small stand-in of the params tree
(two stacked layers) as one tree and group by group must agree; this refuses a reduction
over a stacked leaf too (`optax.clip_by_block_rms`: each layer's RMS here, all layers'
in a plain optax step; LAMB's and LARS's trust ratio, the norm of a stacked leaf).

`weights(name, dtype)` is what SwarmX broadcasts: the group in the compute dtype (bf16
compute on fp32 masters when the model's dtype says so). The update itself is one jitted
pure function per group shape (every layer shares one compilation); without clipping the same
call also adds the group's squared gradient norm to the step's sum (one dispatch a group, not
two: the host cost is what a 1-core step loses to PyTorch, issue 44).

Streaming below the layer (`wse_systems.training.chunks`): `chunk(name, (group, matrix), start, n,
dtype)` serves n columns of one matrix of a layer, `vectors(name, dtype)` the layer without
its matrices; `receive_part(name, key, start, grads, parts=)` takes one chunk's summed
gradient (or, key None, the vectors') as soon as it is complete and, once all `parts` of the
layer have arrived, applies that layer's update (the same arithmetic as a whole layer's:
MemoryX, off the wafer, assembles the layer's gradient).

Gradient accumulation (`begin_micro(index, count)`, ModelZoo's `micro_batch_size`): a step
of `count` micro-batches streams every group's summed gradient once per micro-batch; MemoryX
adds them up in fp32 (micro-batch 0 first) and applies the group's update when the last
micro-batch's gradient arrives, so the update sees the whole step's gradient: the sum of
per-micro-batch gradients of the (globally normalised) loss is the full-batch gradient.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import optax
from wse_core.errors import WseError
from wse_models import layer_slice

from wse_trainer.swarmx import to_device

__all__ = ["MemoryX", "elementwise", "group_names", "groupwise_problem", "split_groups",
           "join_groups", "without"]  # fmt: skip


def without(layer: Mapping[str, Any], keys: Any) -> dict[str, Any]:
    """A layer's params tree without the matrices `keys` ((group, name) pairs)."""
    drop = set(keys)
    return {g: {k: v for k, v in sub.items() if (g, k) not in drop} for g, sub in layer.items()}


def group_names(n_layers: int) -> list[str]:
    return ["embed", *(f"layer_{i}" for i in range(n_layers)), "final"]


def split_groups(params: Mapping[str, Any], n_layers: int) -> dict[str, Any]:
    """The model's params pytree as {group name: weights}, layers cut from the stack."""
    groups = {"embed": params["embed"], "final": params["final"]}
    for i in range(n_layers):
        groups[f"layer_{i}"] = layer_slice(params["layers"], i)
    return groups


def join_groups(groups: Mapping[str, Any], n_layers: int) -> dict[str, Any]:
    """The inverse of `split_groups`: layers stacked again on a leading axis."""
    layers = [groups[f"layer_{i}"] for i in range(n_layers)]
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *layers)
    return {"embed": groups["embed"], "layers": stacked, "final": groups["final"]}


def _updated(tx: optax.GradientTransformation, grads, params, state):
    """`params` and `state` after `tx`'s update with `grads` (traced inside the jits below)."""
    updates, state = tx.update(grads, state, params)
    return optax.apply_updates(params, updates), state


def _square_norm(total, grads):
    """`total` plus the squared L2 norm of the gradient pytree `grads` (a device scalar)."""
    return total + optax.tree.norm(grads, squared=True)


_ELEMENTWISE: dict[int, optax.GradientTransformation] = {}


def elementwise(tx: optax.GradientTransformation) -> optax.GradientTransformation:
    """`tx`, known to act on each element (the trainer's own adamw, adam and sgd, built by
    `optimizer.base_transform`): `groupwise_problem` takes it without its probe, whose first
    run cost `wse train` 1-5 s before its first step. Held here, so its id stays its own."""
    _ELEMENTWISE[id(tx)] = tx
    return tx


def groupwise_problem(tx: optax.GradientTransformation, params: Mapping[str, Any]) -> str | None:
    """The line why `tx` cannot be applied group by group, or None (module doc): its updates
    of a stand-in for the model's `params` (its structure, each leaf's rank, two stacked
    layers, one element a layer) as one tree and as MemoryX applies them, group by group,
    must agree within 1e-5 relative over `PROBE_STEPS` steps (`_groupwise`). A transform
    of each element (adam, sgd, lion, decay, optax.clip) agrees; one that reduces over a
    leaf (its stacked layers: clip_by_block_rms, LAMB's and LARS's trust ratio) or over the
    tree (clip_by_global_norm) does not. Cached by `tx` and the tree's structure and
    ranks; a `tx` marked `elementwise` is not probed."""
    if _ELEMENTWISE.get(id(tx)) is tx:
        return None
    ranks = jax.tree.map(jnp.ndim, dict(params))
    return _groupwise(tx, jax.tree.structure(ranks), tuple(jax.tree.leaves(ranks)))


# Gradient magnitudes 1e-12 .. 1e12 in steps of 1e3, each step's proportions between the
# leaves reversed from the last: any clip threshold acts on some steps and not on those just
# before (adam after a clip is scale-free within one step, not across a mix of steps), and
# one that acts on all of them sees other proportions each step.
PROBE_STEPS = 9
# The probe's stand-in weights: `_groupwise`'s ids (leaf i: i + 1, times 1, 2 along its
# layers) times this.
STAND_SCALE = 1e-15


@functools.lru_cache(maxsize=32)
def _groupwise(tx: optax.GradientTransformation, treedef: Any, ranks: tuple) -> str | None:
    ranked = jax.tree.unflatten(treedef, range(len(ranks)))

    def ids(path: Any, i: int) -> Any:  # leaf i's values: i + 1, times 1, 2 along its layers
        if path[0].key != "layers":
            return jnp.full((1,) * ranks[i], i + 1.0, jnp.float32)
        return (i + 1.0) * jnp.arange(1.0, 3.0).reshape((2,) + (1,) * (ranks[i] - 1))

    ids = jax.tree_util.tree_map_with_path(ids, ranked)
    n = 2 * len(ranks) + 3
    # Nonzero weights: LAMB's and LARS's trust ratio is 1 on a zero leaf, so with zeros their
    # norm over the stacked layers never showed (review 79). Tiny, so that a decay, acting
    # alike on both sides, cannot drown a difference: wd * p <= wd * 2n * 1e-15 hides (below
    # 1e-5 relative) only a clip's difference under 1e-5 of that, 2e-20 * n * wd, far below
    # the probe's tiniest gradient (1e-12; an Adam update after a clip is near 1).
    stand = jax.tree.map(lambda i: STAND_SCALE * i, ids)
    update = tx.update  # unjitted: a compile a group shape costs more than the tiny steps
    whole_state, parts = tx.init(stand), split_groups(stand, 2)
    states = {k: tx.init(v) for k, v in parts.items()}
    worst = 0.0
    for t in range(PROBE_STEPS):
        scale, odd = 10.0 ** (3 * t - 12), t % 2
        grads = jax.tree.map(lambda i, s=scale, o=odd: s * (i if o else n - i), ids)
        whole, whole_state = update(grads, whole_state, stand)
        apart = {}
        for k, g in split_groups(grads, 2).items():
            apart[k], states[k] = update(g, states[k], parts[k])
        rel = lambda a, b: jnp.max(jnp.abs(a - b) / (jnp.abs(a) + 1e-30))
        diff = jax.tree.map(rel, whole, join_groups(apart, 2))
        worst = max([worst, *map(float, jax.tree.leaves(diff))])
    if worst <= 1e-5:
        return None
    return (
        "tx couples the weights it updates (its update of the whole model differs from "
        f"MemoryX's, one layer at a time, by {worst:.2g} relative), e.g. "
        "optax.clip_by_global_norm, clip_by_block_rms or the trust ratio of optax.lamb or "
        "lars: leave such a clip out of tx and give max_gradient_norm= (MemoryX clips by the "
        "global norm)"
    )


@functools.lru_cache(maxsize=8)
def _update_fn(tx: optax.GradientTransformation):
    """The jitted per-group update of `tx` (one per transform: runs share compilations)."""
    return jax.jit(functools.partial(_updated, tx), donate_argnums=(1, 2))


@functools.lru_cache(maxsize=8)
def _update_norm_fn(tx: optax.GradientTransformation):
    """`_update_fn(tx)` that also returns `total` plus the squared L2 norm of `grads`: the
    same arithmetic as `_update_fn` then `_add_square_norm`, in one call."""

    def update(grads, params, state, total):
        return (*_updated(tx, grads, params, state), _square_norm(total, grads))

    return jax.jit(update, donate_argnums=(1, 2))


@jax.jit
def _add(a, b):
    return jax.tree.map(jnp.add, a, b)


_add_square_norm = jax.jit(_square_norm)


@functools.partial(jax.jit, static_argnums=1)
def _cast(weights, dtype):
    return jax.tree.map(lambda x: x.astype(dtype), weights)


@functools.partial(jax.jit, static_argnums=(2, 3))
def _columns(w, start, n, dtype):
    return jax.lax.dynamic_slice_in_dim(w, start, n, axis=-1).astype(dtype)


class MemoryX:
    """Master weights and optimizer state by group; applies updates as gradients arrive."""

    def __init__(
        self,
        params: Mapping[str, Any],
        n_layers: int,
        tx: optax.GradientTransformation,
        *,
        max_gradient_norm: float | None = None,
        device: jax.Device | None = None,
    ):
        self.n_layers, self.tx, self.max_norm = n_layers, tx, max_gradient_norm
        self.device = device or jax.devices()[0]
        if why := groupwise_problem(tx, params):  # hunt 79: a global clip ran per group
            raise WseError(why)
        groups = split_groups(params, n_layers)
        f32 = lambda x: jnp.array(x, jnp.float32, copy=True)  # own copy: updates donate it
        self.params = {
            k: jax.device_put(jax.tree.map(f32, v), self.device) for k, v in groups.items()
        }
        # committed to the device as the updates' outputs are (hunt 70: optax's uncommitted
        # count made step 2 compile every group's update again, 1.4 s of a 0.01 s step)
        self.opt_state = {
            k: jax.device_put(tx.init(v), self.device) for k, v in self.params.items()
        }
        self._pending: dict[str, Any] = {}
        self._parts: dict[str, list[tuple[Any, int, Any]]] = {}
        self._accum: dict[str, Any] = {}  # gradients summed over the step's micro-batches
        self._micro = (0, 1)  # (this micro-batch, micro-batches in the step)
        self._square_norm = jnp.zeros((), jnp.float32)  # the step's gradient so far, squared
        self._update = _update_fn(tx)
        self._update_norm = _update_norm_fn(tx)
        self.updates_applied = 0

    def weights(self, name: str, dtype: Any = jnp.float32):
        """The group's weights in `dtype` (dispatched asynchronously)."""
        w = self.params[name]
        return w if jnp.dtype(dtype) == jnp.float32 else _cast(w, jnp.dtype(dtype))

    def chunk(self, name: str, key: tuple[str, str], start: int, n: int, dtype: Any):
        """Columns start .. start + n of matrix params[name][group][matrix] in `dtype`."""
        g, m = key
        return _columns(self.params[name][g][m], start, n, jnp.dtype(dtype))

    def vectors(self, name: str, matrices: Any, dtype: Any = jnp.float32):
        """The layer `name` without its `matrices` ((group, name) pairs), in `dtype`."""
        return _cast(without(self.params[name], matrices), jnp.dtype(dtype))

    def receive_part(self, name: str, key: Any, start: int, grads, *, parts: int) -> None:
        """One chunk of layer `name`'s summed gradient (columns from `start` of matrix `key`,
        or key None: the vectors'); with all `parts` in, the layer's update is applied."""
        got = self._parts.setdefault(name, [])
        got.append((key, start, jax.device_put(grads, self.device)))
        if len(got) < parts:
            return
        del self._parts[name]
        tree = next(g for k, _, g in got if k is None)
        for key in {k for k, _, _ in got if k is not None}:
            cols = sorted((s, g) for k, s, g in got if k == key)
            tree[key[0]][key[1]] = jnp.concatenate([g for _, g in cols], axis=-1)
        self.receive(name, tree)

    def begin_micro(self, index: int, count: int) -> None:
        """Micro-batch `index` of `count` in this step starts (count 1: no accumulation)."""
        if not 0 <= index < count:
            raise ValueError(f"micro-batch {index} of {count}")
        self._micro = (index, count)

    def receive(self, name: str, grads) -> None:
        """A group's summed gradient arrives: added to the step's sum until the last
        micro-batch, then the update is applied now, or held when clipping."""
        grads = to_device(grads, self.device)
        if any(g.dtype != jnp.float32 for g in jax.tree.leaves(grads)):
            grads = _cast(grads, jnp.dtype(jnp.float32))  # one async call, not one a leaf
        index, count = self._micro
        if count > 1:
            held = self._accum.pop(name, None)
            grads = grads if held is None else _add(held, grads)
            if index < count - 1:
                self._accum[name] = grads
                return
        if self.max_norm is not None:
            self._square_norm = _add_square_norm(self._square_norm, grads)
            self._pending[name] = grads
            return
        self.params[name], self.opt_state[name], self._square_norm = self._update_norm(
            grads, self.params[name], self.opt_state[name], self._square_norm
        )
        self.updates_applied += 1

    def _apply(self, name: str, grads) -> None:
        self.params[name], self.opt_state[name] = self._update(
            grads, self.params[name], self.opt_state[name]
        )
        self.updates_applied += 1

    def finish_step(self) -> None:
        """End of the backward pass: apply held (clipped) updates."""
        if not self._pending:
            return
        missing = set(self.params) - set(self._pending)
        if missing:
            raise RuntimeError(f"gradients missing for {sorted(missing)}")
        # One optax update over every group at once: the norm is the whole model's.
        clipped, _ = optax.clip_by_global_norm(self.max_norm).update(
            self._pending, optax.EmptyState()
        )
        self._pending = {}
        for name in self.params:
            self._apply(name, clipped[name])

    def take_gradient_norm(self) -> jax.Array:
        """The global L2 norm of the step's whole gradient (every group, summed over its
        micro-batches, before clipping) as a device scalar, not fetched; the sum restarts."""
        norm, self._square_norm = jnp.sqrt(self._square_norm), jnp.zeros((), jnp.float32)
        return norm

    def params_tree(self) -> dict[str, Any]:
        """The functional params pytree (stacked layers), fp32: a copy of the masters, which
        outlives the steps after it (hunt 80: the embedding and final norm were the live
        masters, which the next step's update donates: "Buffer has been deleted or donated"
        on a tree taken before it)."""
        tree = join_groups(self.params, self.n_layers)  # the layers stacked: new arrays
        own = lambda group: jax.tree.map(functools.partial(jnp.array, copy=True), group)  # noqa: E731
        return {**tree, "embed": own(tree["embed"]), "final": own(tree["final"])}

    def state_tree(self) -> dict[str, Any]:
        """Everything to checkpoint: master weights and optimizer state by group, the live
        arrays (no copy: a checkpoint's save reads them before the next step), which the
        next step's update donates; copy a leaf to keep it past that step."""
        return {"params": self.params, "opt_state": self.opt_state}

    def load_state_tree(self, tree: Mapping[str, Any]) -> None:
        self.params = {k: jax.device_put(v, self.device) for k, v in tree["params"].items()}
        self.opt_state = {k: jax.device_put(v, self.device) for k, v in tree["opt_state"].items()}

    def load_params(self, params: Mapping[str, Any]) -> None:
        """Master weights by group (`state_tree()["params"]`) under a fresh optimizer state,
        `tx.init` of them, as a new optimizer built on loaded weights: a fine-tune start."""
        self.params = {k: jax.device_put(v, self.device) for k, v in params.items()}
        self.opt_state = {
            k: jax.device_put(self.tx.init(v), self.device) for k, v in self.params.items()
        }

    @property
    def master_bytes(self) -> int:
        return sum(x.nbytes for x in jax.tree.leaves(self.params))
