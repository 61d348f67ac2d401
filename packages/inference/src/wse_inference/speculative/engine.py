"""The speculative `Engine` the server runs with a draft model (`load.load_engine`).

Contract. `SpeculativeEngine(target, draft, gamma=g, spec=wafer, max_slots=n)` holds `n` independent
slots, each `generate` running one speculative round per occupied slot (1..g + 1 tokens),
whose tokens equal `speculative.decoder.SpeculativeDecoder.generate` for the same seed (same
round keys). Its `metrics()` reports spec_draft_tokens, spec_accepted_tokens,
spec_acceptance_rate, spec_mean_tokens_per_pass and spec_alpha (Leviathan's alpha, the
mean of sum_x min(p, q) over the positions evaluated: what `wse plan infer --alpha` and
`wse_systems.serving.Speculation` take), spec_drafts (rounds run: vLLM's num_drafts) and
spec_accepted_tokens_pos_<i> (rounds whose draft position i, 0-based, was accepted: vLLM's
num_accepted_tokens_per_pos), all since the start or the last `reset_metrics()` (the
server's warm-up calls it: hunt 77, its rounds were on /metrics before any request).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from wse_core.cost.report import RunReport
from wse_core.hw.spec import WaferSpec
from wse_models.sparsity import ZeroTally

from wse_inference.decoding import first_logprob, first_token, prefill, prefill_scored, sequence_key
from wse_inference.engine import Prefix, SamplingParams, SequenceTracker, SlotOutput
from wse_inference.sampling import (
    penalties_for,
    slot_sampling,
    token_logprobs,
    validate_sampling,
    with_eos,
)
from wse_inference.speculative.decoder import Pair, SpeculativeDecoder, speculative_round
from wse_inference.speculative.verify import AcceptanceStats

__all__ = ["SpeculativeEngine"]


@dataclasses.dataclass
class _Slot:
    tracker: SequenceTracker
    seq: list[int]
    tcache: Any
    dcache: Any
    key: jax.Array
    prompt: tuple[int, ...] = ()  # for the repetition penalty
    rounds: int = 0


@dataclasses.dataclass
class SpecDecodeState:
    """The engine's mutable decode state (`wse_inference.engine`): slot -> its sequence, its
    two KV caches (donated to each round and replaced) and its round count."""

    slots: dict[int, _Slot] = dataclasses.field(default_factory=dict)


class SpeculativeEngine:
    """`Engine` over `max_slots` sequences, each advanced by one speculative round per step."""

    def __init__(
        self,
        target,
        draft,
        *,
        gamma: int,
        spec: WaferSpec,
        max_slots: int = 4,
        max_context: int | None = None,
        prefill_chunk: int = 32,
    ):
        self.spec = spec  # the wafer its report prices on
        self._dec = SpeculativeDecoder(
            target, draft, gamma=gamma, max_context=max_context, prefill_chunk=prefill_chunk
        )
        self.target, self.draft, self.gamma = target, draft, gamma
        self.model_name, self.tokenizer = target.name, target.tokenizer
        self.vocab_size, self.max_slots = target.config.vocab_size, max_slots
        self.max_context = self._dec.max_context
        self.stats = AcceptanceStats(gamma)
        # MLP zeros of the target's prompts (ReLU-like targets; decode rounds not counted)
        self._zeros = ZeroTally(target.config) if target.config.relu_like else None
        rnd = functools.partial(speculative_round, Pair(target.config, draft.config), gamma)
        self._round = jax.jit(rnd, donate_argnums=(1,))  # the caches
        self._params = Pair(target.params, draft.params)

    def init_decode_state(self) -> SpecDecodeState:
        return SpecDecodeState()

    def prefill(self, *, prompt_ids: Sequence[int], sampling: SamplingParams) -> Prefix:
        t, d = self.target, self.draft
        validate_sampling(
            sampling,
            vocab_size=self.vocab_size,
            max_context=self.max_context,
            prompt_len=len(prompt_ids),
        )
        sampling = with_eos(sampling, t.eos_token_ids)
        key = sequence_key(sampling.seed)
        logits, tcache, scored = prefill_scored(
            t.config,
            t.params,
            prompt_ids,
            self._dec.cache_len(t.config),
            self._dec.prefill_chunk,
            sampling.prompt_logprobs,
            self._zeros,
        )
        _, dcache = prefill(
            d.config, d.params, prompt_ids, self._dec.cache_len(d.config), self._dec.prefill_chunk
        )
        first = first_token(logits, sampling, key, prompt_ids)
        return Prefix(
            prompt_len=len(prompt_ids),
            first_token=first,
            sampling=sampling,
            payload=(list(map(int, prompt_ids)), tcache, dcache, key),
            first_logprob=first_logprob(logits, first, sampling),
            prompt_logprobs=scored,
        )

    def insert(self, *, prefix: Prefix, state: SpecDecodeState, slot: int) -> SpecDecodeState:
        if not 0 <= slot < self.max_slots or slot in state.slots:
            raise ValueError(f"slot {slot} is occupied or outside 0..{self.max_slots - 1}")
        ids, tcache, dcache, key = prefix.payload
        tracker = SequenceTracker(prefix.sampling, self.tokenizer, prompt_ids=ids)
        tracker.add(prefix.first_token)
        seq = [*ids, prefix.first_token]
        state.slots[slot] = _Slot(tracker, seq, tcache, dcache, key, tuple(ids))
        return state

    def _advance(self, slot: int, s: _Slot) -> SlotOutput:
        if s.tracker.finish_reason is not None:
            return SlotOutput(slot, (), True, s.tracker.finish_reason)
        sp = s.tracker.sampling
        s.rounds += 1
        pen = penalties_for(sp, s.prompt, self.vocab_size, s.tracker.tokens)
        r = self._round(
            self._params,
            Pair(s.tcache, s.dcache),
            jnp.asarray(s.seq[-2:], jnp.int32),
            jnp.int32(len(s.seq)),
            jax.random.fold_in(s.key, s.rounds),
            slot_sampling(sp, pen),
        )
        s.tcache, s.dcache = r.caches
        if self._zeros is not None:  # the verification ran gamma + 1 tokens through the target
            self._zeros.add(np.asarray(r.mlp_zeros), len(r.drafts) + 1)
        drafts, n_acc, nxt = r.drafts, int(r.num_accepted), r.next_token
        new = []
        for tok in [*np.asarray(drafts)[:n_acc].tolist(), int(nxt)]:
            s.seq.append(int(tok))
            new.append(int(tok))
            if s.tracker.add(tok) is not None:
                break
        # the tokens kept: a round cut at max_tokens or a stop still ran whole (hunt 70)
        self.stats.record(n_acc, np.asarray(r.beta), emitted=len(new))
        reason = s.tracker.finish_reason
        lps = None
        if sp.logprobs is not None:
            # sliced on the host: a device slice per accepted length compiled a program each
            lps = token_logprobs(new, *(np.asarray(x)[: len(new)] for x in r.logprobs), sp.logprobs)
        return SlotOutput(slot, tuple(new), reason is not None, reason, lps)

    def generate(self, *, state: SpecDecodeState):
        return state, [self._advance(i, s) for i, s in sorted(state.slots.items())]

    def release(self, *, state: SpecDecodeState, slot: int) -> SpecDecodeState:
        if slot not in state.slots:
            raise ValueError(f"release of empty slot {slot}")
        del state.slots[slot]
        return state

    def metrics(self) -> dict[str, float]:
        s = self.stats
        out = {
            "spec_draft_tokens": float(s.proposed),
            "spec_accepted_tokens": float(s.accepted),
            "spec_acceptance_rate": s.acceptance_rate,
            "spec_mean_tokens_per_pass": s.mean_tokens_per_pass,
            "spec_drafts": float(s.rounds),
            **{f"spec_accepted_tokens_pos_{i}": float(n) for i, n in enumerate(s.per_position)},
        }
        if s.beta_count:  # Leviathan's alpha, E[beta]: `wse plan infer --alpha`'s input
            out["spec_alpha"] = s.alpha
        return out if self._zeros is None else {**out, **self._zeros.metrics()}

    def reset_metrics(self) -> None:
        """Start `metrics()` (and `report()`'s acceptance statistics) from zero: the
        server's warm-up calls it on the engine thread once its requests are done."""
        self.stats = AcceptanceStats(self.gamma)
        if self._zeros is not None:
            self._zeros = ZeroTally(self.target.config)

    def report(self, **measured: Any) -> RunReport:
        """`SpeculativeDecoder.report` (a `wse_core.RunReport` per emitted token) at this
        engine's acceptance statistics; `measured`: its keywords but `stats`, those of
        `PipelineEngine.report` (`measured_wall_s` over `tokens` is the measured time per
        token; `kv_tokens`)."""
        return self._dec.report(stats=self.stats, spec=self.spec, **measured)
