"""The pipelined engine's schedule: pure device functions over `PipeState` (see `pipeline`).

Schedule (Hot Chips 2024, REFERENCES.md): there are S slots (users in flight). At tick k of a
`generate` call, stage j works on slot (k - j) mod S. Stage 0 first turns the activation that
just came back from the last stage into slot k's next token (head, `sampling.token_probs`,
draw with `token_key(seed_key, i)`), embeds it and runs its layers; every stage runs its
layers on the activation it holds; then `wse_core.fabric.shift(..., "S", periodic)` moves
each stage's output to the next stage and the last stage's output back to stage 0. One
`generate` is S ticks: every occupied slot gets exactly one new token, so tokens and draws
equal the plain decoder's (`wse_inference.decoding`) token for token for the same seed.
The head also applies each slot's penalties (`sampling.penalize`: the slot's token counts and
prompt tokens ride in the state, the drawn token counted every tick) and, for a slot whose
request asked, computes the token's logprobs (`sampling.raw_logprobs`).
With S users in flight every stage works on every tick; the state counts, per stage row,
the ticks it worked on an occupied slot (`PipeState.stage_tokens` over `ticks`: the stage
occupancy the serving model `wse_systems.serving.wafer` assumes, U / S for U users).

Two executions of that schedule, equal token for token: stage rows spread over several
devices run vmapped over the rows (every row computes each tick, idle slots discarded, as
parallel hardware would); with all rows on one device (the default, `mesh_rows=1`) each
stage runs its own layers (separate weight arrays, unrolled) only when its slot is occupied
(`lax.cond`), so a lone user on S stages costs one pass through the model per token.

`tick_sharded` / `tick_local` are one tick in each execution, `cycle` is S ticks (one token
per slot), `cycles` n of them in one loop, `prime` inserts a prefilled slot. Split from
`pipeline` (the engine: planning, placement, the Engine protocol on the host) so each module
holds one concept.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from wse_inference.engine import MAX_LOGPROBS
from wse_inference.sampling import SlotSampling, penalize, raw_logprobs, sample, token_key

__all__ = [
    "PipeState",
    "SlotInsert",
    "stage_layout",
    "tick_sharded",
    "tick_local",
    "cycle",
    "cycles",
    "prime",
]


class PipeState(NamedTuple):
    """Device state: stage fields (rows = stages) and per-slot arrays [S]."""

    h: jax.Array  # (S, 1, d): the activation entering each stage
    k: jax.Array  # (S, 1, layers_per_stage, S slots, max_len, kv_heads, head_dim)
    v: jax.Array
    tokens: jax.Array  # int32 [S]: each slot's token in flight
    pos: jax.Array  # int32 [S]: its position
    count: jax.Array  # int32 [S]: tokens drawn so far (the next draw's index)
    keys: jax.Array  # uint32 [S, 2]
    active: jax.Array  # bool [S]
    # [S] settings and logprobs wanted; penalties: [S, V] counts / prompt tokens, [S] settings
    # (neutral for a slot without: `SlotSampling.penalized` skips those)
    sampling: SlotSampling
    # ReLU-like models only (else they stay 0): exact zeros of the MLP hidden activation
    # counted in decode, int32 [rows, layers_per_stage]
    mlp_zeros: jax.Array
    # the schedule as run: the ticks each stage row worked on an occupied slot, int32 [rows],
    # and the ticks run, int32 [] (stage occupancy = stage_tokens / ticks)
    stage_tokens: jax.Array
    ticks: jax.Array


class SlotInsert(NamedTuple):
    """What `prime` puts into a slot: the prompt's KV cache (n_layers, 1, max_len, kv_heads,
    head_dim) each, the first token at `pos`, the slot, the layer bound (layers < bound
    have already seen the first token in the schedule), its key and its sampling."""

    k: jax.Array
    v: jax.Array
    token: jax.Array  # int32
    pos: jax.Array  # int32
    slot: jax.Array  # int32
    bound: jax.Array  # int32
    key: jax.Array  # uint32 [2]
    sampling: SlotSampling  # scalars; penalties [V] counts / prompt tokens


def stage_layout(groups: Sequence[tuple[int, int]], rows: int) -> tuple[np.ndarray, np.ndarray]:
    """(layer index, valid) arrays [rows, layers_per_stage] for stages holding the layers
    [start, stop) of `groups` (the plan's); rows beyond the stages (padding) and padding
    layers point at layer 0 and are invalid."""
    per = max(b - a for a, b in groups)
    index = np.zeros((rows, per), np.int32)
    valid = np.zeros((rows, per), bool)
    for j, (a, b) in enumerate(groups):
        index[j, : b - a] = np.arange(a, b)
        valid[j, : b - a] = True
    return index, valid


def _layer(config, lp, x, pos, cache):
    """One layer on one token -> (x, cache, MLP zeros: int32, 0 unless ReLU-like)."""
    from wse_models import apply_layer

    if config.relu_like:
        return apply_layer(config, lp, x, pos[None, None], cache, count_zeros=True)
    return (*apply_layer(config, lp, x, pos[None, None], cache), jnp.int32(0))


def _stage_apply(config, sp, valid, h, pos, ck, cv, slot):
    """One stage on one slot's token: h [d] through the stage's layers; cache rows updated;
    also the MLP zeros of each of its layers [layers_per_stage] (0 on padding layers)."""
    from wse_models import LayerCache

    def body(carry, xs):
        # The stage's cache rides in the carry and is updated in place, one layer at a time.
        x, ck, cv = carry
        lp, ok, i = xs
        at = (i, slot, 0, 0, 0)
        size = (1, 1, *ck.shape[2:])
        k = lax.dynamic_slice(ck, at, size)[0]
        v = lax.dynamic_slice(cv, at, size)[0]
        y, lc, z = _layer(config, lp, x, pos, LayerCache(k, v))
        ck = lax.dynamic_update_slice(ck, lc.k[None].astype(ck.dtype), at)
        cv = lax.dynamic_update_slice(cv, lc.v[None].astype(cv.dtype), at)
        return (jnp.where(ok, y, x), ck, cv), jnp.where(ok, z, 0)

    layers = jnp.arange(valid.shape[0])
    (out, ck, cv), zeros = lax.scan(body, (h[None, None], ck, cv), (sp, valid, layers))
    return out[0, 0], ck, cv, zeros


def _row_apply(config, layers, h, pos, ck, cv, row, slot):
    """Row `row`'s own layers (a tuple of per-layer parameters, no padding) on one slot's
    token; all rows' caches (rows, 1, layers_per_stage, slots, ...) ride along and are
    updated in place. Layers are unrolled over separate weight arrays: slicing one stacked
    array per layer inside a loop makes XLA copy every layer's weights per token."""
    from wse_models import LayerCache

    x, zeros = h[None, None], []
    size = (1, 1, 1, 1, *ck.shape[4:])
    for i, lp in enumerate(layers):
        at = (row, 0, i, slot, 0, 0, 0)
        k = lax.dynamic_slice(ck, at, size)[0, 0, 0]
        v = lax.dynamic_slice(cv, at, size)[0, 0, 0]
        x, lc, z = _layer(config, lp, x, pos, LayerCache(k, v))
        zeros.append(z)
        ck = lax.dynamic_update_slice(ck, lc.k[None, None, None].astype(ck.dtype), at)
        cv = lax.dynamic_update_slice(cv, lc.v[None, None, None].astype(cv.dtype), at)
    return x[0, 0], ck, cv, jnp.stack(zeros).astype(jnp.int32)


def _no_logprobs(vocab_size: int):
    """The zeros `raw_logprobs` gives way to when a slot asked for none."""
    k = min(MAX_LOGPROBS, vocab_size)
    return jnp.float32(0), jnp.zeros((k,), jnp.int32), jnp.zeros((k,), jnp.float32)


def _head(config, head, k, st: PipeState, skip_idle: bool):
    """Stage 0 at tick k: slot k's next token from the activation back from the last stage,
    embedded at its new position -> (state, (token, logprobs), activation); the logprobs
    (`sampling.raw_logprobs`) are computed only for a slot that asked for them. `skip_idle`:
    an idle slot costs nothing (a `lax.cond`); otherwise it is computed and discarded."""
    from wse_models import embed, unembed

    act = st.active[k]
    step = act.astype(jnp.int32)
    st = st._replace(pos=st.pos.at[k].add(step), count=st.count.at[k].add(step))
    none = _no_logprobs(config.vocab_size)

    def make(h0):
        logits = unembed(config, head, h0[None, None])[0, 0]
        key = token_key(st.keys[k], st.count[k] - 1)
        sk = jax.tree.map(lambda x: x[k], st.sampling)
        z = logits.astype(jnp.float32)
        z = lax.cond(sk.penalized(), penalize, lambda z, _: z, z, sk.penalties)
        tok = sample(z, sk.temperature, sk.top_k, sk.top_p, key)
        lp = lax.cond(sk.logprobs, raw_logprobs, lambda *_: none, logits, tok)
        x = embed(config, head, tok[None, None], st.pos[k][None, None])[0, 0]
        return (tok, lp), x.astype(h0.dtype)

    h0 = st.h[0, 0]
    if skip_idle:
        out, x = lax.cond(act, make, lambda h: ((st.tokens[k], none), h), h0)
    else:
        out, x = make(h0)
        out = (jnp.where(act, out[0], st.tokens[k]), out[1])
        x = jnp.where(act, x, h0)
    pen = st.sampling.penalties
    pen = pen._replace(counts=pen.counts.at[k, out[0]].add(step))  # the drawn token counted
    sampling = st.sampling._replace(penalties=pen)
    st = st._replace(tokens=st.tokens.at[k].set(out[0]), sampling=sampling)
    return st, out, x


def tick_sharded(config, wafer, stages, weights, k, st: PipeState):
    """One tick, stage rows spread over devices: stage 0 draws slot k's next token; every
    stage runs its layers (vmapped over the rows, idle slots computed and discarded);
    activations shift one stage along the ring."""
    from wse_core import fabric

    head, sparams, valid = weights
    st, new, x = _head(config, head, k, st, skip_idle=False)
    h = st.h.at[0, 0].set(x)
    rows = st.h.shape[0]
    slots = (k - jnp.arange(rows)) % stages
    run = jax.vmap(functools.partial(_stage_apply, config))
    h2, k2, v2, z = run(sparams, valid[:, 0], h[:, 0], st.pos[slots], st.k[:, 0], st.v[:, 0], slots)
    h2 = h2[:, None]
    if stages > 1:  # one stage feeds itself: nothing crosses the fabric
        h2 = fabric.shift(wafer, h2, "S", boundary="periodic")
    st = _count_work(config, st, z, st.active[slots])
    return st._replace(h=h2, k=k2[:, None], v=v2[:, None]), new


def _count_work(config, st: PipeState, zeros, active) -> PipeState:
    """One tick run: a token for each busy row, and its MLP zeros [rows, per] (ReLU-like)."""
    busy = active.astype(jnp.int32)
    st = st._replace(stage_tokens=st.stage_tokens + busy, ticks=st.ticks + 1)
    if not config.relu_like:
        return st
    return st._replace(mlp_zeros=st.mlp_zeros + zeros * busy[:, None])


def tick_local(config, wafer, stages, weights, k, st: PipeState):
    """One tick, all stage rows on one device: the same schedule as `tick_sharded`, but each stage
    runs only its own layers and only when its slot is occupied (`lax.cond`), so one user on
    S stages costs one pass through the model per token, not S."""
    from wse_core import fabric

    head, row_params = weights
    st, new, x = _head(config, head, k, st, skip_idle=True)
    ck, cv, outs, zeros = st.k, st.v, [], []
    per = st.mlp_zeros.shape[1]
    for j, lp in enumerate(row_params):
        s = (k - j) % stages

        def run(args, lp=lp, j=j, s=s):
            y, ck, cv, z = _row_apply(config, lp, args[0], st.pos[s], args[1], args[2], j, s)
            return y, ck, cv, jnp.pad(z, (0, per - z.shape[0]))

        def idle(args):
            return (*args, jnp.zeros((per,), jnp.int32))

        args = (x if j == 0 else st.h[j, 0], ck, cv)
        y, ck, cv, z = lax.cond(st.active[s], run, idle, args)
        outs.append(y)
        zeros.append(z)
    h2 = lax.with_sharding_constraint(jnp.stack(outs)[:, None], wafer.sharding(1))
    if stages > 1:
        h2 = fabric.shift(wafer, h2, "S", boundary="periodic")
    rows = st.mlp_zeros.shape[0]
    z = jnp.pad(jnp.stack(zeros), ((0, rows - len(zeros)), (0, 0)))
    active = jnp.pad(st.active[(k - jnp.arange(len(zeros))) % stages], (0, rows - len(zeros)))
    st = _count_work(config, st, z, active)
    return st._replace(h=h2, k=ck, v=cv), new


def cycle(vocab_size, tick, stages, weights, st: PipeState):
    """S ticks: one new token per slot -> (state, (tokens [S], logprobs: chosen [S], top
    ids and log probabilities [S, K]))."""
    lead = (stages,)
    out = jax.tree.map(
        lambda x: jnp.zeros(lead + x.shape, x.dtype), (jnp.int32(0), _no_logprobs(vocab_size))
    )

    def body(k, carry):
        s, o = carry
        s, new = tick(weights, k, s)
        return s, jax.tree.map(lambda a, b: a.at[k].set(b), o, new)

    return lax.fori_loop(0, stages, body, (st, out))


def cycles(vocab_size, tick, stages, n, weights, st: PipeState):
    """`n` generate steps in one loop -> (state, `cycle`'s outputs with a leading [n])."""
    one = (jnp.int32(0), _no_logprobs(vocab_size))
    out = jax.tree.map(lambda x: jnp.zeros((n, stages) + x.shape, x.dtype), one)

    def body(i, carry):
        s, o = carry
        s, new = cycle(vocab_size, tick, stages, weights, s)
        return s, jax.tree.map(lambda a, b: a.at[i].set(b), o, new)

    return lax.fori_loop(0, n, body, (st, out))


def prime(config, stages, weights, st: PipeState, new: SlotInsert) -> PipeState:
    """Insert: prompt cache into the slot's rows; the first token through layers < bound.
    `weights`: (head, stacked layers, the stage layout's layer index [rows, per stage])."""
    from wse_models import LayerCache, apply_layer, embed

    head, layers, index = weights
    pos, slot = new.pos, new.slot
    x = embed(config, head, new.token[None, None], pos[None, None])

    def body(h, xs):
        i, lp, k, v = xs
        y, lc = apply_layer(config, lp, h, pos[None, None], LayerCache(k, v))
        # Layers >= bound write provisional K/V at `pos`; their stage rewrites it later.
        return jnp.where(i < new.bound, y, h), (lc.k, lc.v)

    n = new.k.shape[0]
    x, (k, v) = lax.scan(body, x, (jnp.arange(n), layers, new.k, new.v))
    ks = k[:, 0][index]  # (rows, layers_per_stage, max_len, kv, hd)
    vs = v[:, 0][index]
    row = jnp.where(slot == 0, 0, stages - slot)  # where the slot's activation waits
    return st._replace(
        h=st.h.at[row, 0].set(x[0, 0].astype(st.h.dtype)),
        k=st.k.at[:, 0, :, slot].set(ks.astype(st.k.dtype)),
        v=st.v.at[:, 0, :, slot].set(vs.astype(st.v.dtype)),
        tokens=st.tokens.at[slot].set(new.token),
        pos=st.pos.at[slot].set(pos),
        count=st.count.at[slot].set(1),
        active=st.active.at[slot].set(True),
        keys=st.keys.at[slot].set(new.key),
        sampling=jax.tree.map(lambda a, b: a.at[slot].set(b), st.sampling, new.sampling),
    )
