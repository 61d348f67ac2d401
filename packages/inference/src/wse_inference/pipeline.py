"""The pipelined wafer engine: layers on stages, tokens flowing stage to stage on the fabric.

Contract (implements `wse_inference.engine.Engine`). The model's layers are split into S
contiguous stages (`planner._split`). The emulation wafer is an S x 1 PE grid, one PE row per
stage standing for that stage's region: each row holds its layers' weights and the KV cache
of every slot for those layers (fields `(S, 1, layers_per_stage, ...)`; stages with fewer
layers carry masked padding layers). The embedding and head sit with stage 0.

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
With S users in flight every stage works on every tick.

Two executions of that schedule, equal token for token: stage rows spread over several
devices run vmapped over the rows (every row computes each tick, idle slots discarded, as
parallel hardware would); with all rows on one device (the default, `mesh_rows=1`) each
stage runs its own layers (separate weight arrays, unrolled) only when its slot is occupied
(`lax.cond`), so a lone user on S stages costs one pass through the model per token.

`prefill` runs the prompt in parallel chunks (plain forward into a batch-1 cache) and draws
the first token; `insert` copies that cache into the slot's rows of every stage and runs the
first token through the stages the slot's in-flight activation has already passed in the
schedule, so the slot joins the pipeline in step.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from wse_inference.decoding import (
    SequenceTracker,
    first_logprob,
    first_token,
    prefill_scored,
    sequence_key,
)
from wse_inference.engine import MAX_LOGPROBS, Prefix, SamplingParams, SlotOutput
from wse_inference.loading import LoadedModel
from wse_inference.planner import _split
from wse_inference.sampling import (
    Penalties,
    penalize,
    penalties_for,
    raw_logprobs,
    sample,
    token_key,
    token_logprobs,
    validate_sampling,
    with_eos,
)

__all__ = ["PipeState", "PipelineDecodeState", "PipelineEngine", "stage_layout"]


class PipeState(NamedTuple):
    """Device state: stage fields (rows = stages) and per-slot arrays [S]."""

    h: jax.Array  # (S, 1, d): the activation entering each stage
    k: jax.Array  # (S, 1, layers_per_stage, S slots, max_len, kv_heads, head_dim)
    v: jax.Array
    tokens: jax.Array  # int32 [S]: each slot's token in flight
    pos: jax.Array  # int32 [S]: its position
    count: jax.Array  # int32 [S]: tokens drawn so far (the next draw's index)
    keys: jax.Array  # uint32 [S, 2]
    temperature: jax.Array
    top_k: jax.Array
    top_p: jax.Array
    active: jax.Array  # bool [S]
    want_lp: jax.Array  # bool [S]: the slot's request asked for logprobs
    pen: Penalties  # [S, V] counts / prompt tokens and [S] settings (`sampling.penalize`)
    penalized: jax.Array  # bool [S]: the slot's request has penalties


@dataclasses.dataclass
class PipelineDecodeState:
    device: PipeState
    seqs: dict[int, SequenceTracker] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class _Payload:
    cache: Any  # batch-1 KVCache of the prompt
    key: jax.Array
    prompt_ids: tuple[int, ...]  # for the repetition penalty


def stage_layout(n_layers: int, stages: int, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """(layer index, valid) arrays [rows, layers_per_stage]; rows beyond `stages` (padding)
    and padding layers point at layer 0 and are invalid."""
    groups = _split(n_layers, stages)
    per = max(b - a for a, b in groups)
    index = np.zeros((rows, per), np.int32)
    valid = np.zeros((rows, per), bool)
    for j, (a, b) in enumerate(groups):
        index[j, : b - a] = np.arange(a, b)
        valid[j, : b - a] = True
    return index, valid


def _stage_apply(config, sp, valid, h, pos, ck, cv, slot):
    """One stage on one slot's token: h [d] through the stage's layers; cache rows updated."""
    from wse_models import LayerCache, apply_layer

    def body(carry, xs):
        # The stage's cache rides in the carry and is updated in place, one layer at a time.
        x, ck, cv = carry
        lp, ok, i = xs
        at = (i, slot, 0, 0, 0)
        size = (1, 1, *ck.shape[2:])
        k = lax.dynamic_slice(ck, at, size)[0]
        v = lax.dynamic_slice(cv, at, size)[0]
        y, lc = apply_layer(config, lp, x, pos[None, None], LayerCache(k, v))
        ck = lax.dynamic_update_slice(ck, lc.k[None].astype(ck.dtype), at)
        cv = lax.dynamic_update_slice(cv, lc.v[None].astype(cv.dtype), at)
        return (jnp.where(ok, y, x), ck, cv), None

    layers = jnp.arange(valid.shape[0])
    (out, ck, cv), _ = lax.scan(body, (h[None, None], ck, cv), (sp, valid, layers))
    return out[0, 0], ck, cv


def _row_apply(config, layers, h, pos, ck, cv, row, slot):
    """Row `row`'s own layers (a tuple of per-layer parameters, no padding) on one slot's
    token; all rows' caches (rows, 1, layers_per_stage, slots, ...) ride along and are
    updated in place. Layers are unrolled over separate weight arrays: slicing one stacked
    array per layer inside a loop makes XLA copy every layer's weights per token."""
    from wse_models import LayerCache, apply_layer

    x = h[None, None]
    size = (1, 1, 1, 1, *ck.shape[4:])
    for i, lp in enumerate(layers):
        at = (row, 0, i, slot, 0, 0, 0)
        k = lax.dynamic_slice(ck, at, size)[0, 0, 0]
        v = lax.dynamic_slice(cv, at, size)[0, 0, 0]
        x, lc = apply_layer(config, lp, x, pos[None, None], LayerCache(k, v))
        ck = lax.dynamic_update_slice(ck, lc.k[None, None, None].astype(ck.dtype), at)
        cv = lax.dynamic_update_slice(cv, lc.v[None, None, None].astype(cv.dtype), at)
    return x[0, 0], ck, cv


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
        pen = jax.tree.map(lambda x: x[k], st.pen)
        z = logits.astype(jnp.float32)
        z = lax.cond(st.penalized[k], penalize, lambda z, _: z, z, pen)
        tok = sample(z, st.temperature[k], st.top_k[k], st.top_p[k], key)
        lp = lax.cond(st.want_lp[k], raw_logprobs, lambda *_: none, logits, tok)
        x = embed(config, head, tok[None, None], st.pos[k][None, None])[0, 0]
        return (tok, lp), x.astype(h0.dtype)

    h0 = st.h[0, 0]
    if skip_idle:
        out, x = lax.cond(act, make, lambda h: ((st.tokens[k], none), h), h0)
    else:
        out, x = make(h0)
        out = (jnp.where(act, out[0], st.tokens[k]), out[1])
        x = jnp.where(act, x, h0)
    counts = st.pen.counts.at[k, out[0]].add(step)  # the drawn token, for the penalties
    st = st._replace(tokens=st.tokens.at[k].set(out[0]), pen=st.pen._replace(counts=counts))
    return st, out, x


def _tick(config, wafer, stages, weights, k, st: PipeState):
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
    h2, k2, v2 = run(sparams, valid[:, 0], h[:, 0], st.pos[slots], st.k[:, 0], st.v[:, 0], slots)
    h2 = h2[:, None]
    if stages > 1:  # one stage feeds itself: nothing crosses the fabric
        h2 = fabric.shift(wafer, h2, "S", boundary="periodic")
    return st._replace(h=h2, k=k2[:, None], v=v2[:, None]), new


def _tick_local(config, wafer, stages, weights, k, st: PipeState):
    """One tick, all stage rows on one device: the same schedule as `_tick`, but each stage
    runs only its own layers and only when its slot is occupied (`lax.cond`), so one user on
    S stages costs one pass through the model per token, not S."""
    from wse_core import fabric

    head, row_params = weights
    st, new, x = _head(config, head, k, st, skip_idle=True)
    ck, cv, outs = st.k, st.v, []
    for j, lp in enumerate(row_params):
        s = (k - j) % stages

        def run(args, lp=lp, j=j, s=s):
            return _row_apply(config, lp, args[0], st.pos[s], args[1], args[2], j, s)

        y, ck, cv = lax.cond(st.active[s], run, lambda a: a, (x if j == 0 else st.h[j, 0], ck, cv))
        outs.append(y)
    h2 = lax.with_sharding_constraint(jnp.stack(outs)[:, None], wafer.sharding(1))
    if stages > 1:
        h2 = fabric.shift(wafer, h2, "S", boundary="periodic")
    return st._replace(h=h2, k=ck, v=cv), new


def _cycle(vocab_size, tick, stages, weights, st: PipeState):
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


def _cycles(vocab_size, tick, stages, n, weights, st: PipeState):
    """`n` generate steps in one loop -> (state, `_cycle`'s outputs with a leading [n])."""
    one = (jnp.int32(0), _no_logprobs(vocab_size))
    out = jax.tree.map(lambda x: jnp.zeros((n, stages) + x.shape, x.dtype), one)

    def body(i, carry):
        s, o = carry
        s, new = _cycle(vocab_size, tick, stages, weights, s)
        return s, jax.tree.map(lambda a, b: a.at[i].set(b), o, new)

    return lax.fori_loop(0, n, body, (st, out))


def _prime(
    config,
    stages,
    head,
    layers,
    index,
    st: PipeState,
    pk,
    pv,
    tok,
    pos,
    slot,
    bound,
    key,
    temperature,
    top_k,
    top_p,
    want_lp,
    pen,
    penalized,
):
    """Insert: prompt cache into the slot's rows; the first token through layers < bound."""
    from wse_models import LayerCache, apply_layer, embed

    x = embed(config, head, tok[None, None], pos[None, None])

    def body(h, xs):
        i, lp, k, v = xs
        y, lc = apply_layer(config, lp, h, pos[None, None], LayerCache(k, v))
        # Layers >= bound write provisional K/V at `pos`; their stage rewrites it later.
        return jnp.where(i < bound, y, h), (lc.k, lc.v)

    n = pk.shape[0]
    x, (k, v) = lax.scan(body, x, (jnp.arange(n), layers, pk, pv))
    ks = k[:, 0][index]  # (rows, layers_per_stage, max_len, kv, hd)
    vs = v[:, 0][index]
    row = jnp.where(slot == 0, 0, stages - slot)  # where the slot's activation waits
    return st._replace(
        h=st.h.at[row, 0].set(x[0, 0].astype(st.h.dtype)),
        k=st.k.at[:, 0, :, slot].set(ks.astype(st.k.dtype)),
        v=st.v.at[:, 0, :, slot].set(vs.astype(st.v.dtype)),
        tokens=st.tokens.at[slot].set(tok),
        pos=st.pos.at[slot].set(pos),
        count=st.count.at[slot].set(1),
        active=st.active.at[slot].set(True),
        keys=st.keys.at[slot].set(key),
        temperature=st.temperature.at[slot].set(temperature),
        top_k=st.top_k.at[slot].set(top_k),
        top_p=st.top_p.at[slot].set(top_p),
        want_lp=st.want_lp.at[slot].set(want_lp),
        pen=jax.tree.map(lambda a, b: a.at[slot].set(b), st.pen, pen),
        penalized=st.penalized.at[slot].set(penalized),
    )


class PipelineEngine:
    """The `Engine` of S pipeline stages on an S x 1 emulation wafer (S slots in flight).

    `mesh_rows` devices hold the stage rows (default 1: on a CPU, collectives between
    virtual devices cost more than the tiny stages compute; None spreads the rows over all
    devices; tests use 2 and a row count the mesh does not divide)."""

    def __init__(
        self,
        model: LoadedModel,
        *,
        stages: int = 2,
        max_context: int | None = None,
        prefill_chunk: int = 32,
        mesh_rows: int | None = 1,
    ):
        from wse_core.spec import spec_from
        from wse_core.wafer import build_wafer

        config = model.config
        if not 1 <= stages <= config.n_layers:
            from wse_inference.planner import PipelinePlanError

            raise PipelinePlanError(
                f"stages must be in 1..{config.n_layers} (the model's layers), got {stages}"
            )
        self.model, self.config = model, config
        self.model_name, self.tokenizer = model.name, model.tokenizer
        self.vocab_size = config.vocab_size
        self.stages = self.max_slots = stages
        self.max_context = min(max_context or config.max_seq_len, config.max_seq_len)
        self.prefill_chunk = prefill_chunk
        self._region_bytes = self._stage_bytes()
        # One emulated PE stands for one stage's region: its SRAM is the region's bytes.
        spec = spec_from(
            "tiny",
            name="pipeline",
            pe_rows=max(stages, 8),
            spare_rows=0,
            spare_cols=0,
            defect_rate=0.0,
            sram_bytes_per_pe=sum(self._region_bytes.values()),
        )
        self.wafer = build_wafer(
            spec, grid=(stages, 1), mesh_shape=None if mesh_rows is None else (mesh_rows, 1)
        )
        for name, nbytes in self._region_bytes.items():
            self.wafer.sram.allocate(name, nbytes)
        self._place_weights(model.params)
        self._counters = {"steps": 0, "prefills": 0, "tokens": 0}
        self._compile()

    def _stage_bytes(self) -> dict[str, int]:
        c = self.config
        per = -(-c.n_layers // self.stages)
        item = jnp.dtype(c.dtype).itemsize
        return {
            "stage_weights": per * c.layer_params() * jnp.dtype(c.param_dtype).itemsize,
            "stage_kv_cache": 2 * per * self.stages * self.max_context * c.n_kv_heads * c.hd * item,
            "stage_activation": 4 * c.d_model * item,
        }

    def _place_weights(self, params: Any) -> None:
        rows = self.wafer.padded_shape[0]
        index, valid = stage_layout(self.config.n_layers, self.stages, rows)
        self._index = jnp.asarray(index)
        self._layers = params["layers"]
        self._head = {"embed": params["embed"], "final": params["final"]}
        # All rows on one device: each stage keeps exactly its own layers (no padding), one
        # array per layer. Otherwise the stage rows are wafer fields (padding layers masked).
        self._local = self.wafer.mesh_shape[0] == 1
        if self._local:
            groups = _split(self.config.n_layers, self.stages)
            self._row_params = tuple(
                tuple(
                    jax.tree.map(lambda x, i=i: jnp.asarray(x)[i], params["layers"])
                    for i in range(a, b)
                )
                for a, b in groups
            )
        else:
            gather = lambda x: np.asarray(x)[index][: self.stages, None]  # noqa: E731
            place = lambda x: self.wafer.place(gather(x))[:, 0]  # noqa: E731
            self._sparams = jax.tree.map(place, params["layers"])
            self._valid = self.wafer.place(valid[: self.stages, None])

    def _compile(self) -> None:
        c, w, s = self.config, self.wafer, self.stages
        tick = functools.partial(_tick_local if self._local else _tick, c, w, s)
        if self._local:
            self._weights: tuple = (self._head, self._row_params)
        else:
            self._weights = (self._head, self._sparams, self._valid)
        v = c.vocab_size
        self._cycle_fn = jax.jit(functools.partial(_cycle, v, tick, s), donate_argnums=1)
        self._prime_fn = jax.jit(functools.partial(_prime, c, s), donate_argnums=3)
        self._cycles_fn = jax.jit(
            functools.partial(_cycles, v, tick, s), static_argnums=0, donate_argnums=2
        )

    # -- Engine protocol ------------------------------------------------------------------
    def init_decode_state(self) -> PipelineDecodeState:
        c, s, rows = self.config, self.stages, self.wafer.padded_shape[0]
        per = int(self._index.shape[1])
        cache_shape = (s, 1, per, s, self.max_context, c.n_kv_heads, c.hd)
        zeros_i = lambda: jnp.zeros((s,), jnp.int32)  # noqa: E731 (separate buffers)
        st = PipeState(
            h=self.wafer.place(np.zeros((s, 1, c.d_model), c.dtype)),
            k=self.wafer.place(np.zeros(cache_shape, c.dtype)),
            v=self.wafer.place(np.zeros(cache_shape, c.dtype)),
            tokens=zeros_i(),
            pos=zeros_i(),
            count=zeros_i(),
            keys=jnp.zeros((s, 2), jnp.uint32),
            temperature=jnp.ones((s,), jnp.float32),
            top_k=zeros_i(),
            top_p=jnp.ones((s,), jnp.float32),
            active=jnp.zeros((s,), bool),
            want_lp=jnp.zeros((s,), bool),
            pen=Penalties(
                jnp.zeros((s, c.vocab_size), jnp.int32),
                jnp.zeros((s, c.vocab_size), bool),
                jnp.zeros((s,), jnp.float32),
                jnp.zeros((s,), jnp.float32),
                jnp.ones((s,), jnp.float32),
            ),
            penalized=jnp.zeros((s,), bool),
        )
        assert st.h.shape[0] == rows
        return PipelineDecodeState(st)

    def prefill(self, *, prompt_ids: Sequence[int], sampling: SamplingParams) -> Prefix:
        validate_sampling(
            sampling,
            vocab_size=self.vocab_size,
            max_context=self.max_context,
            prompt_len=len(prompt_ids),
        )
        sampling = with_eos(sampling, self.model.eos_token_ids)
        key = sequence_key(sampling.seed)
        logits, cache, scored = prefill_scored(
            self.config,
            self.model.params,
            prompt_ids,
            self.max_context,
            self.prefill_chunk,
            sampling.prompt_logprobs,
        )
        self._counters["prefills"] += 1
        first = first_token(logits, sampling, key, prompt_ids)
        return Prefix(
            prompt_len=len(prompt_ids),
            first_token=first,
            sampling=sampling,
            payload=_Payload(cache, key, tuple(map(int, prompt_ids))),
            first_logprob=first_logprob(logits, first, sampling),
            prompt_logprobs=scored,
        )

    def insert(self, *, prefix: Prefix, state: PipelineDecodeState, slot: int):
        if not 0 <= slot < self.max_slots or slot in state.seqs:
            raise ValueError(f"slot {slot} is occupied or outside 0..{self.max_slots - 1}")
        groups = _split(self.config.n_layers, self.stages)
        bound = groups[(self.stages - slot if slot else self.stages) - 1][1]
        s = prefix.sampling
        i32 = lambda x: jnp.asarray(x, jnp.int32)  # noqa: E731
        state.device = self._prime_fn(
            self._head,
            self._layers,
            self._index,
            state.device,
            prefix.payload.cache.k,
            prefix.payload.cache.v,
            i32(prefix.first_token),
            i32(prefix.prompt_len),
            i32(slot),
            i32(bound),
            prefix.payload.key,
            jnp.float32(s.temperature),
            i32(s.top_k),
            jnp.float32(s.top_p),
            jnp.bool_(s.logprobs is not None),
            self._slot_penalties(prefix),
            jnp.bool_(s.penalized),
        )
        tracker = SequenceTracker(s, self.tokenizer)
        tracker.add(prefix.first_token)
        state.seqs[slot] = tracker
        return state

    def _slot_penalties(self, prefix: Prefix) -> Penalties:
        """The slot's penalty row (the first token counted); neutral for a request without."""
        v, s = self.vocab_size, prefix.sampling
        pen = penalties_for(s, prefix.payload.prompt_ids, v, [prefix.first_token])
        if pen is None:
            pen = Penalties(np.zeros(v, np.int32), np.zeros(v, bool), 0.0, 0.0, 1.0)
        return jax.tree.map(jnp.asarray, pen)

    def generate(self, *, state: PipelineDecodeState):
        state.device, out = self._cycle_fn(self._weights, state.device)
        return state, self._collect(state, jax.tree.map(lambda x: np.asarray(x)[None], out))

    def generate_steps(self, *, state: PipelineDecodeState, steps: int):
        """`steps` generate steps in one dispatch (tokens after a finish are dropped)."""
        state.device, out = self._cycles_fn(steps, self._weights, state.device)
        return state, self._collect(state, jax.tree.map(np.asarray, out))

    def _collect(self, state: PipelineDecodeState, out) -> list[SlotOutput]:
        tokens, (chosen, top_ids, top_lps) = out
        self._counters["steps"] += tokens.shape[0]
        outputs = []
        for slot, tracker in sorted(state.seqs.items()):
            new: list[int] = []
            for tok in tokens[:, slot].tolist():
                if tracker.finish_reason is not None:
                    break
                tracker.add(tok)
                new.append(tok)
            self._counters["tokens"] += len(new)
            reason = tracker.finish_reason
            k = tracker.sampling.logprobs
            lps = None
            if k is not None:
                at = (slice(len(new)), slot)
                lps = token_logprobs(new, chosen[at], top_ids[at], top_lps[at], k)
            outputs.append(SlotOutput(slot, tuple(new), reason is not None, reason, lps))
        return outputs

    def release(self, *, state: PipelineDecodeState, slot: int):
        if slot not in state.seqs:
            raise ValueError(f"release of empty slot {slot}")
        del state.seqs[slot]
        st = state.device
        state.device = st._replace(active=st.active.at[slot].set(False))
        return state

    def metrics(self) -> dict[str, float]:
        return {k: float(v) for k, v in self._counters.items()}

    # -- convenience --------------------------------------------------------------------
    def generate_all(
        self,
        prompts: Sequence[Sequence[int]],
        samplings: Sequence[SamplingParams],
        steps_per_call: int = 1,
    ) -> list[list[int]]:
        """Run up to S prompts together to completion (`steps_per_call` generate steps per
        dispatch); the generated ids of each."""
        state = self.init_decode_state()
        for slot, (ids, s) in enumerate(zip(prompts, samplings, strict=True)):
            state = self.insert(
                prefix=self.prefill(prompt_ids=ids, sampling=s), state=state, slot=slot
            )
        while any(t.finish_reason is None for t in state.seqs.values()):
            if steps_per_call > 1:
                state, _ = self.generate_steps(state=state, steps=steps_per_call)
            else:
                state, _ = self.generate(state=state)
        return [state.seqs[i].tokens for i in range(len(prompts))]
