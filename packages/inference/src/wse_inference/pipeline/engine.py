"""The pipelined wafer engine: layers on stages, tokens flowing stage to stage on the fabric.

Contract (implements `wse_inference.engine.Engine`). The layout is a
`wse_systems.pipeline.PipelinePlan` (`engine.plan`: `plan_pipeline` of the model on the
predicted wafer(s), S stages, context `max_context` (None: the model's `max_seq_len`; above it
a `SamplingError`, as `PlainDecoder`'s), S slots, the weights' bytes), the same
object `engine.report()` prices with `wse_inference.pipeline.perf`: each stage's layers are the
plan's, and the emulation wafer is an S x 1 PE grid, one PE row per stage standing for that
stage's region, whose SRAM ledger holds the plan's bytes of that region (weights, KV cache,
activations; the head region's with stage 0). Each row holds its layers' weights and the KV
cache of every slot for those layers (fields `(S, 1, layers_per_stage, ...)`; stages with
fewer layers carry masked padding layers). The embedding and head sit with stage 0.

The schedule (which stage works on which slot at each tick, the head, the two executions)
is `wse_inference.pipeline.schedule`'s: pure functions over `PipeState` that this engine jits;
the weights on the stage rows and the empty decode state are `wse_inference.pipeline.placement`'s.

`prefill` runs the prompt in parallel chunks (plain forward into a batch-1 cache) and draws
the first token; `insert` copies that cache into the slot's rows of every stage and runs the
first token through the stages the slot's in-flight activation has already passed in the
schedule, so the slot joins the pipeline in step.

One trace each: the decode state `init_decode_state` makes holds every field on the wafer's
mesh, as `cycle` returns it, a slot's neutral penalties are float32 as a penalized request's
are, and `release` is jitted, so `prime`, `cycle` and `release` compile once, on the first
request, whatever state they are given (hunt 77: `prime` traced again on the state `cycle`
returned, and a penalized request's, stalling the first requests after a warm-up).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from wse_core.cost.report import Measured, RunReport
from wse_core.hw.spec import WaferSpec
from wse_models.sparsity import ZeroTally
from wse_systems.pipeline import PipelinePlan, PipelinePlanError

from wse_inference.decoding import (
    check_decoder_settings,
    first_logprob,
    first_token,
    prefill_scored,
    sequence_key,
)
from wse_inference.engine import Prefix, SamplingParams, SequenceTracker, SlotOutput
from wse_inference.model_dir import LoadedModel
from wse_inference.pipeline import perf as decode_perf
from wse_inference.pipeline.placement import empty_state, place_weights
from wse_inference.pipeline.plan import declare_regions, emulation_spec, engine_plan
from wse_inference.pipeline.schedule import (
    PipeState,
    SlotInsert,
    cycle,
    cycles,
    prime,
    stage_layout,
    tick_local,
    tick_sharded,
)
from wse_inference.sampling import (
    Penalties,
    neutral_penalties,
    penalties_for,
    slot_sampling,
    token_logprobs,
    validate_sampling,
    with_eos,
)

__all__ = ["PipeState", "PipelineDecodeState", "PipelineEngine", "stage_layout"]


def _deactivate(active: jax.Array, slot: jax.Array) -> jax.Array:
    """`active` [S] with `slot` cleared (jitted: eager, it compiled 4 small programs)."""
    return active.at[slot].set(False)


@dataclasses.dataclass
class PipelineDecodeState:
    """The engine's mutable decode state (`wse_inference.engine`): `device` is replaced by
    each jitted step (its old arrays are donated), `seqs` grows and shrinks in place;
    `counted` is (stage ticks worked, ticks) already added to the engine's metrics."""

    device: PipeState
    seqs: dict[int, SequenceTracker] = dataclasses.field(default_factory=dict)
    counted: tuple[int, int] = (0, 0)


@dataclasses.dataclass(frozen=True)
class _Payload:
    cache: Any  # batch-1 KVCache of the prompt
    key: jax.Array
    prompt_ids: tuple[int, ...]  # for the repetition penalty


class PipelineEngine:
    """The `Engine` of S pipeline stages on an S x 1 emulation wafer (S slots in flight).

    The layout is `plan` when given (its stages and context), else `engine_plan(config,
    stages=, max_context=, spec=, num_wafers=)`. `mesh_rows` devices hold the stage rows
    (default 1: on a CPU, collectives between virtual devices cost more than the tiny stages
    compute; None spreads the rows over all devices; tests use 2 and a row count the mesh
    does not divide)."""

    def __init__(
        self,
        model: LoadedModel,
        *,
        stages: int = 2,
        max_context: int | None = None,
        prefill_chunk: int = 32,
        mesh_rows: int | None = 1,
        spec: WaferSpec,
        num_wafers: int | None = None,
        plan: PipelinePlan | None = None,
    ):
        from wse_core.hw.wafer import build_wafer

        config = model.config
        # above the model's context: refused, as PlainDecoder refuses it (hunt 67: cut quietly)
        check_decoder_settings(max_context, prefill_chunk, model_context=config.max_seq_len)
        if plan is None:
            if not 1 <= stages <= config.n_layers:
                raise PipelinePlanError(
                    f"stages must be in 1..{config.n_layers} (the model's layers), got {stages}"
                )
            context = config.max_seq_len if max_context is None else max_context
            plan = engine_plan(
                config, stages=stages, max_context=context, spec=spec, num_wafers=num_wafers
            )
        elif not plan.placed_on(spec):  # the wafer, or a footprint of its rows
            raise PipelinePlanError(
                f"the plan is laid out on wafer {plan.spec.name!r}, the engine asked for "
                f"{spec.name!r}: give the plan's spec"
            )
        elif plan.slots != plan.num_stages:
            raise PipelinePlanError(
                f"the engine keeps one slot per stage: a plan of {plan.num_stages} stages "
                f"needs {plan.num_stages} slots, got {plan.slots}"
            )
        self.model, self.config, self.plan = model, config, plan
        self.model_name, self.tokenizer = model.name, model.tokenizer
        self.vocab_size = config.vocab_size
        self.stages = self.max_slots = plan.num_stages
        self.max_context = plan.context_len
        self.prefill_chunk = prefill_chunk
        self.wafer = build_wafer(
            emulation_spec(plan),
            grid=(self.stages, 1),
            mesh_shape=None if mesh_rows is None else (mesh_rows, 1),
        )
        declare_regions(self.wafer.sram, plan)
        self._place_weights(model.params)
        # stage_busy_ticks / stage_ticks: the pipeline's occupancy over every decode so far
        self._counters = dict.fromkeys(("steps", "prefills", "tokens", "stage_busy_ticks",
                                        "stage_ticks"), 0)  # fmt: skip
        # MLP zeros of prompts and decode steps (ReLU-like models only)
        self._zeros = ZeroTally(config) if config.relu_like else None
        self._zeros_seen: tuple[np.ndarray, int] | None = None
        self._compile()

    def report(
        self,
        *,
        measured_wall_s: float | None = None,
        tokens: int | None = None,
        kv_tokens: int | None = None,
    ) -> RunReport:
        """The predicted wafer time of one decode token on `self.plan` (units "token"), with
        the measured wall time per token (`measured_wall_s` over `tokens` decode tokens)."""
        per_token = None
        if measured_wall_s is not None:
            per_token = measured_wall_s / tokens if tokens else measured_wall_s
        return decode_perf.predict_decode(
            self.config,
            self.plan,
            kv_tokens=kv_tokens,
            name=f"pipelined decode {self.model_name}",
            measured=Measured(per_token, self.wafer.sram.summary()),
            tokens=tokens,
        )

    def _place_weights(self, params: Any) -> None:
        w = place_weights(self.wafer, self._groups(), params)
        self._index, self._layout, self._local = w.index, w.layout, w.local
        self._head, self._layers, self._weights = w.head, w.layers, w.step

    def _groups(self) -> list[tuple[int, int]]:
        """[start, stop) of each stage's layers: the plan's."""
        return [s.layers for s in self.plan.stages]

    def _compile(self) -> None:
        c, w, s = self.config, self.wafer, self.stages
        tick = functools.partial(tick_local if self._local else tick_sharded, c, w, s)
        v = c.vocab_size
        self._cycle_fn = jax.jit(functools.partial(cycle, v, tick, s), donate_argnums=1)
        self._prime_fn = jax.jit(functools.partial(prime, c, s), donate_argnums=1)
        self._cycles_fn = jax.jit(
            functools.partial(cycles, v, tick, s), static_argnums=0, donate_argnums=2
        )
        self._release_fn = jax.jit(_deactivate, donate_argnums=0)

    # -- Engine protocol ------------------------------------------------------------------
    def init_decode_state(self) -> PipelineDecodeState:
        per = int(self._index.shape[1])
        st = empty_state(self.config, self.wafer, self.stages, self.max_context, per)
        # on the mesh as `cycle` returns them: a field of another sharding is another trace
        mesh = NamedSharding(self.wafer.mesh, P())

        def on_mesh(x: jax.Array) -> jax.Array:
            return x if isinstance(x.sharding, NamedSharding) else jax.device_put(x, mesh)

        return PipelineDecodeState(jax.tree.map(on_mesh, st))

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
            self._zeros,
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
        groups = self._groups()
        bound = groups[(self.stages - slot if slot else self.stages) - 1][1]
        s = prefix.sampling
        i32 = lambda x: jnp.asarray(x, jnp.int32)  # noqa: E731
        new = SlotInsert(
            prefix.payload.cache.k,
            prefix.payload.cache.v,
            token=i32(prefix.first_token),
            pos=i32(prefix.prompt_len),
            slot=i32(slot),
            bound=i32(bound),
            key=prefix.payload.key,
            sampling=slot_sampling(s, self._slot_penalties(prefix)),
        )
        weights = (self._head, self._layers, self._index)
        state.device = self._prime_fn(weights, state.device, new)
        tracker = SequenceTracker(s, self.tokenizer, prompt_ids=prefix.payload.prompt_ids)
        tracker.add(prefix.first_token)
        state.seqs[slot] = tracker
        return state

    def _slot_penalties(self, prefix: Prefix) -> Penalties:
        """The slot's penalty row (the first token counted); neutral for a request without."""
        v, s = self.vocab_size, prefix.sampling
        pen = penalties_for(s, prefix.payload.prompt_ids, v, [prefix.first_token])
        if pen is None:  # the dtypes of `penalties_for`'s (a weak-typed 0.0 is another trace)
            pen = neutral_penalties(v)
        return jax.tree.map(jnp.asarray, pen)

    def generate(self, *, state: PipelineDecodeState):
        state.device, out = self._cycle_fn(self._weights, state.device)
        return state, self._collect(state, jax.tree.map(lambda x: np.asarray(x)[None], out))

    def generate_steps(self, *, state: PipelineDecodeState, steps: int):
        """`steps` generate steps in one dispatch (tokens after a finish are dropped)."""
        state.device, out = self._cycles_fn(steps, self._weights, state.device)
        return state, self._collect(state, jax.tree.map(np.asarray, out))

    def _tally_decode_zeros(self, state: PipelineDecodeState) -> None:
        """Add the decode steps' MLP zeros since the last look to the tally (per model
        layer, through the stage layout; every decode token passes every layer)."""
        if self._zeros is None:
            return
        st = state.device
        zeros, rows_tokens = np.asarray(st.mlp_zeros), np.asarray(st.stage_tokens)
        per_layer = np.zeros(self.config.n_layers, np.int64)
        index, valid = self._layout
        np.add.at(per_layer, index[valid], zeros[valid])
        tokens = int(rows_tokens[0])
        if self._zeros_seen is not None and self._zeros_seen[1] <= tokens:
            seen, seen_tokens = self._zeros_seen
            self._zeros.add(per_layer - seen, tokens - seen_tokens)
        else:  # a new decode state
            self._zeros.add(per_layer, tokens)
        self._zeros_seen = (per_layer, tokens)

    def stage_occupancy(self, state: PipelineDecodeState) -> np.ndarray:
        """Per stage, the fraction of the ticks run on `state` that it worked on an occupied
        slot (the schedule as the device ran it; zeros before the first step)."""
        st = state.device
        busy, ticks = np.asarray(st.stage_tokens)[: self.stages], int(st.ticks)
        return busy / ticks if ticks else np.zeros(self.stages)

    def _tally_occupancy(self, state: PipelineDecodeState) -> None:
        st = state.device
        busy, ticks = int(np.asarray(st.stage_tokens)[: self.stages].sum()), int(st.ticks)
        self._counters["stage_busy_ticks"] += busy - state.counted[0]
        self._counters["stage_ticks"] += (ticks - state.counted[1]) * self.stages
        state.counted = (busy, ticks)

    def _collect(self, state: PipelineDecodeState, out) -> list[SlotOutput]:
        tokens, (chosen, top_ids, top_lps) = out
        self._counters["steps"] += tokens.shape[0]
        self._tally_decode_zeros(state)
        self._tally_occupancy(state)
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
        state.device = st._replace(active=self._release_fn(st.active, np.int32(slot)))
        return state

    def metrics(self) -> dict[str, float]:
        out = {k: float(v) for k, v in self._counters.items()}
        return out if self._zeros is None else {**out, **self._zeros.metrics()}

    def reset_metrics(self) -> None:
        """Start `metrics()` from zero (the server's warm-up calls it on the engine thread
        once its requests are done; hunt 77: its steps and prefills were on /metrics). A
        decode state's ticks and zeros already counted stay counted (`state.counted`,
        `_zeros_seen`), so only what runs after the reset is added."""
        self._counters = dict.fromkeys(self._counters, 0)
        if self._zeros is not None:
            self._zeros = ZeroTally(self.config)

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
