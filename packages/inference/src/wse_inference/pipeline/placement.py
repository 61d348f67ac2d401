"""The pipelined engine's setup on its S x 1 emulation wafer: the model's weights on the
stage rows (`place_weights` -> `StageWeights`) and the empty decode state (`empty_state`).

With every row on one device each stage keeps exactly its own layers (no padding), one array
per layer; otherwise the stage rows are wafer fields `(S, ...)` over `stage_layout`'s row
slots, padding layers masked by `valid`. The decode state's KV cache is
`(S, 1, layers_per_stage, S slots, max_context, n_kv_heads, head_dim)` per row.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from wse_inference.pipeline.schedule import PipeState, stage_layout
from wse_inference.sampling import SlotSampling, neutral_penalties

__all__ = ["StageWeights", "place_weights", "empty_state"]


class StageWeights(NamedTuple):
    index: jax.Array  # (rows, layers_per_stage): the model layer each row slot holds
    layout: tuple[np.ndarray, np.ndarray]  # host copies of (index, valid)
    local: bool  # every stage row on one device
    head: dict[str, Any]  # embedding and final norm (with stage 0)
    layers: Any  # the model's stacked layers (the insert's catch-up runs them)
    step: tuple  # what a tick takes: (head, per-stage layers) or (head, fields, valid)


def place_weights(wafer: Any, groups: list[tuple[int, int]], params: Any) -> StageWeights:
    """`params` on the stage rows of `wafer`; `groups`: [start, stop) of each stage's layers."""
    stages = len(groups)
    index, valid = stage_layout(groups, wafer.padded_shape[0])
    head = {"embed": params["embed"], "final": params["final"]}
    local = wafer.mesh_shape[0] == 1
    if local:
        rows = tuple(
            tuple(
                jax.tree.map(lambda x, i=i: jnp.asarray(x)[i], params["layers"])
                for i in range(a, b)
            )
            for a, b in groups
        )
        step: tuple = (head, rows)
    else:
        gather = lambda x: np.asarray(x)[index][:stages, None]  # noqa: E731
        place = lambda x: wafer.place(gather(x))[:, 0]  # noqa: E731
        step = (head, jax.tree.map(place, params["layers"]), wafer.place(valid[:stages, None]))
    return StageWeights(jnp.asarray(index), (index, valid), local, head, params["layers"], step)


def empty_state(config: Any, wafer: Any, stages: int, max_context: int, per: int) -> PipeState:
    """No slot active: zero activations and KV cache on the stage rows, neutral sampling;
    `per` layers per stage row."""
    c, s, rows = config, stages, wafer.padded_shape[0]
    cache_shape = (s, 1, per, s, max_context, c.n_kv_heads, c.hd)
    zeros_i = lambda: jnp.zeros((s,), jnp.int32)  # noqa: E731 (separate buffers)
    st = PipeState(
        h=wafer.place(np.zeros((s, 1, c.d_model), c.dtype)),
        k=wafer.place(np.zeros(cache_shape, c.dtype)),
        v=wafer.place(np.zeros(cache_shape, c.dtype)),
        tokens=zeros_i(),
        pos=zeros_i(),
        count=zeros_i(),
        keys=jnp.zeros((s, 2), jnp.uint32),
        active=jnp.zeros((s,), bool),
        sampling=SlotSampling(
            temperature=jnp.ones((s,), jnp.float32),
            top_k=zeros_i(),
            top_p=jnp.ones((s,), jnp.float32),
            # every slot neutral (no penalty, no min_tokens), as `sampling` defines it
            penalties=jax.tree.map(
                lambda x: jnp.broadcast_to(jnp.asarray(x), (s, *np.shape(x))),
                neutral_penalties(c.vocab_size),
            ),
            logprobs=jnp.zeros((s,), bool),
        ),
        mlp_zeros=jnp.zeros((rows, per), jnp.int32),
        stage_tokens=jnp.zeros((rows,), jnp.int32),
        ticks=jnp.int32(0),
    )
    assert st.h.shape[0] == rows
    return st
