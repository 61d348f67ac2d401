"""Speculative decoding of real models: a draft proposes, the target verifies in one pass.

Contract. `SpeculativeDecoder(target, draft, gamma)` (both `LoadedModel`s with the same
vocabulary, checked by `model_dir.check_draft` at construction, the draft at most the
target's parameters, by `speculative.config.check_draft_size`) generates one sequence:
prefill both models, draw the first token from the target, then per round (one jitted call)
the draft proposes `gamma` tokens with its KV cache, the target scores the last committed
token and the `gamma` drafts in ONE forward pass of gamma + 1 tokens, and
`speculative.verify.verify` keeps an accepted prefix and draws one more token; all rounds run in one
jitted `lax.while_loop` (stop token ids checked on device, stop strings on the host after).
Both caches roll back by position (stale slots are masked, then overwritten). Sampling
settings apply to both distributions (`sampling.token_probs`), so greedy output equals the
target's greedy output, and sampled output is distributed exactly as the target's.
`AcceptanceStats` is reported. `max_context` is at most both models' `max_seq_len` (above
either: a `SamplingError`, as `PlainDecoder`'s); None: the smaller of the two. `gamma` is
vLLM's num_speculative_tokens, an integer in [1, 64] (`speculative.config.check_gamma`, the
limit `gamma` of `wse_core.host.limits`); anything else is refused when the decoder is built.

`--speculative-config` is read by `speculative.config.parse_speculative_config`.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
from wse_core.cost.report import RunReport
from wse_core.hw.spec import WaferSpec
from wse_models import dtype_bytes

from wse_inference.decoding import (
    GenerationResult,
    check_decoder_settings,
    first_token,
    prefill,
    sequence_key,
)
from wse_inference.engine import SamplingParams, SequenceTracker
from wse_inference.model_dir import LoadedModel, check_draft
from wse_inference.sampling import (
    SamplingError,
    SlotSampling,
    count_tokens,
    draw,
    penalize,
    penalties_for,
    raw_logprobs,
    slot_sampling,
    token_probs,
    validate_sampling,
    with_eos,
)
from wse_inference.speculative.config import check_draft_size, check_gamma
from wse_inference.speculative.verify import AcceptanceStats, verify

__all__ = [
    "SpeculativeDecoder",
    "Pair",
    "Proposal",
    "Round",
    "SpecLoopState",
    "propose",
    "verify_forward",
    "verify_pass",
    "speculative_round",
    "spec_loop_start",
    "speculative_loop",
]


class Pair(NamedTuple):
    """The target's and the draft's of one thing: configs, parameters or KV caches."""

    target: Any
    draft: Any


class Proposal(NamedTuple):
    """The draft's `gamma` tokens [gamma] and the distributions they were drawn from q
    [gamma, V]."""

    drafts: jax.Array
    q: jax.Array


def propose(dconfig, gamma: int, dparams, dcache, last2, pos2, key, sampling: SlotSampling):
    """Draft: feed the last two committed tokens, then its own drafts -> (Proposal, cache).
    `sampling.penalties`: the sequence's (committed tokens counted), each draft counted as it
    is drawn, so q_i is penalised as the target's p_i will be."""
    from wse_models import forward

    s = sampling
    logits, dcache = forward(dconfig, dparams, last2[None], pos2[None], dcache)
    keys = jax.random.split(key, gamma)
    q0 = token_probs(penalize(logits[0, 1], s.penalties), s.temperature, s.top_k, s.top_p)
    d0 = draw(q0, keys[0])

    def step(carry, k):
        tok, pos, cache, pen = carry
        lg, cache = forward(dconfig, dparams, tok[None, None], pos[None, None], cache)
        q = token_probs(penalize(lg[0, 0], pen), s.temperature, s.top_k, s.top_p)
        d = draw(q, k)
        return (d, pos + 1, cache, count_tokens(pen, d)), (d, q)

    init = (d0, pos2[1] + 1, dcache, count_tokens(s.penalties, d0))
    (_, _, dcache, _), (ds, qs) = lax.scan(step, init, keys[1:])
    drafts = jnp.concatenate([d0[None], ds])
    return Proposal(drafts, jnp.concatenate([q0[None], qs])), dcache


def verify_forward(tconfig, tparams, tcache, last, drafts, n, *, count_zeros: bool = False):
    """Target: the last committed token (at n - 1) and the gamma drafts in ONE forward of
    gamma + 1 tokens -> (logits [1, gamma + 1, vocab], cache), and with `count_zeros` the
    MLP zeros of each layer over those tokens (int32 [n_layers])."""
    from wse_models import forward

    tokens = jnp.concatenate([last[None], drafts])[None]
    positions = (n - 1 + jnp.arange(drafts.shape[0] + 1, dtype=jnp.int32))[None]
    return forward(tconfig, tparams, tokens, positions, tcache, count_zeros=count_zeros)


def verify_pass(tconfig, tparams, tcache, last, proposal: Proposal, n, key, sampling):
    """`verify_forward`, then rejection sampling -> (Verdict, cache, the target's logits
    [gamma + 1, vocab], the verification's MLP zeros per layer int32 [n_layers]: counted for
    a ReLU-like target, zeros otherwise). With penalties, row i is penalised with the drafts
    before it counted."""
    drafts, s = proposal.drafts, sampling
    relu = bool(tconfig.relu_like)
    out = verify_forward(tconfig, tparams, tcache, last, drafts, n, count_zeros=relu)
    logits, tcache = out[0], out[1]
    zeros = out[2] if relu else jnp.zeros((tconfig.n_layers,), jnp.int32)
    pen = s.penalties
    if pen is not None:
        hot = jax.nn.one_hot(drafts, pen.counts.shape[-1], dtype=jnp.int32)
        before = jnp.concatenate([jnp.zeros_like(hot[:1]), jnp.cumsum(hot, axis=0)])
        pen = pen._replace(counts=pen.counts + before)  # [gamma + 1, V]
    p = token_probs(penalize(logits[0], pen), s.temperature, s.top_k, s.top_p)
    return verify(drafts, proposal.q, p, key), tcache, logits[0], zeros


class Round(NamedTuple):
    """One round's outcome: the drafts [gamma], how many were accepted, the drawn token,
    the acceptance probabilities [gamma], the caches, and `sampling.raw_logprobs` of the
    gamma + 1 tokens it may emit (zeros unless the slot asked for logprobs)."""

    drafts: jax.Array
    num_accepted: jax.Array
    next_token: jax.Array
    beta: jax.Array
    caches: Pair
    logprobs: tuple[jax.Array, jax.Array, jax.Array]
    # the verification's MLP zeros per target layer over its gamma + 1 tokens (int32
    # [n_layers]; zeros unless the target's MLP is ReLU-like)
    mlp_zeros: jax.Array


def speculative_round(configs: Pair, gamma: int, params: Pair, caches: Pair, last2, n, key, s):
    """One round at committed length n (last2 = tokens n-2, n-1) with `SlotSampling` `s`
    (its penalties: the sequence's, committed tokens counted) -> `Round`."""
    k_draft, k_verify = jax.random.split(key)
    pos2 = jnp.stack([n - 2, n - 1]).astype(jnp.int32)
    prop, dcache = propose(
        configs.draft, gamma, params.draft, caches.draft, last2, pos2, k_draft, s
    )
    verdict, tcache, logits, zeros = verify_pass(
        configs.target, params.target, caches.target, last2[1], prop, n, k_verify, s
    )
    idx = jnp.arange(gamma + 1)
    padded = jnp.concatenate([prop.drafts, verdict.next_token[None]])
    emitted = jnp.where(idx < verdict.num_accepted, padded, verdict.next_token)
    shape = jax.eval_shape(raw_logprobs, logits, emitted)
    none = lambda *_: jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), shape)  # noqa: E731
    lps = lax.cond(s.logprobs, raw_logprobs, none, logits, emitted)
    out = Pair(tcache, dcache)
    return Round(
        prop.drafts, verdict.num_accepted, verdict.next_token, verdict.beta, out, lps, zeros
    )


class SpecLoopState(NamedTuple):
    """`speculative_loop`'s carry (`spec_loop_start` builds it)."""

    made: jax.Array  # int32: tokens emitted so far
    rounds: jax.Array  # int32
    last2: jax.Array  # int32 [2]: the last two committed tokens
    caches: Pair
    buf: jax.Array  # int32 [size + gamma + 1]: the emitted tokens
    accepted: jax.Array  # int32 [size]: per round
    betas: jax.Array  # float32 [size, gamma]: per round
    done: jax.Array  # bool: a stop token was emitted
    sampling: SlotSampling  # its penalty counts grow with every round


def spec_loop_start(caches: Pair, last2, size: int, gamma: int, s: SlotSampling) -> SpecLoopState:
    """The carry before the first round: room for `size` tokens (and rounds)."""
    zeros = functools.partial(jnp.zeros, dtype=jnp.int32)
    betas = jnp.zeros((size, gamma), jnp.float32)
    buf = zeros((size + gamma + 1,))
    return SpecLoopState(
        jnp.int32(0), jnp.int32(0), last2, caches, buf, zeros((size,)), betas, jnp.bool_(False), s
    )


def speculative_loop(configs: Pair, gamma: int, params: Pair, state, n0, key, max_new, stop):
    """Rounds in one `lax.while_loop` from `state` (committed length n0) until `max_new`
    tokens or a token in `stop` [m] -> the final `SpecLoopState` (tokens `buf[:made]`).
    Round r (1-based) uses key fold_in(key, r)."""
    idx = jnp.arange(gamma + 1)

    def cond(c: SpecLoopState):
        return (c.made < max_new) & ~c.done

    def body(c: SpecLoopState):
        key_r = jax.random.fold_in(key, c.rounds + 1)
        r = speculative_round(
            configs, gamma, params, c.caches, c.last2, n0 + c.made, key_r, c.sampling
        )
        n_acc, nxt = r.num_accepted, r.next_token
        padded = jnp.concatenate([r.drafts, jnp.zeros((1,), jnp.int32)])
        emit = jnp.where(idx < n_acc, padded, jnp.where(idx == n_acc, nxt, -1))
        s = c.sampling
        if s.penalties is not None:  # the round's emitted tokens counted
            pen = s.penalties
            hot = jax.nn.one_hot(emit, pen.counts.shape[-1], dtype=jnp.int32)  # -1: a zero row
            s = s._replace(penalties=pen._replace(counts=pen.counts + hot.sum(0)))
        prev = jnp.where(n_acc > 0, padded[jnp.maximum(n_acc - 1, 0)], c.last2[1])
        return SpecLoopState(
            c.made + n_acc + 1,
            c.rounds + 1,
            jnp.stack([prev, nxt]),
            r.caches,
            lax.dynamic_update_slice(c.buf, emit, (c.made,)),
            c.accepted.at[c.rounds].set(n_acc),
            c.betas.at[c.rounds].set(r.beta),
            jnp.any((idx <= n_acc) & jnp.isin(emit, stop)),
            s,
        )

    return lax.while_loop(cond, body, state)


class SpeculativeDecoder:
    """Target + draft, `gamma` drafts per round, one sequence at a time."""

    def __init__(
        self,
        target: LoadedModel,
        draft: LoadedModel,
        *,
        gamma: int = 4,
        max_context: int | None = None,
        prefill_chunk: int = 32,
    ):
        check_draft(target, draft)
        check_draft_size(target.config, draft.config, target.name, draft.name)  # hunt 77
        # above either model's context: refused, as PlainDecoder refuses it (hunt 67: cut)
        check_decoder_settings(max_context, prefill_chunk, model_context=target.config.max_seq_len)
        if max_context is not None and max_context > (top := draft.config.max_seq_len):
            raise SamplingError(
                f"max_context {max_context:,} is greater than the draft's context of {top:,} "
                f"tokens (its config's max_seq_len); give at most {top:,}, or leave it unset"
            )
        # hunt 67: 2.5, True and "4" failed inside JAX at the first generate, 10**9 tried to
        # allocate 256 GB; refused here in the config's words, the argument named as both
        check_gamma(gamma, "gamma (num_speculative_tokens)")
        gamma = int(gamma)  # a NumPy integer too: the loop's shapes are Python ints
        self.target, self.draft, self.gamma = target, draft, gamma
        limit = min(target.config.max_seq_len, draft.config.max_seq_len)
        self.max_context = limit if max_context is None else int(max_context)  # as Plain's
        self.prefill_chunk = prefill_chunk
        self.stats = AcceptanceStats(gamma)
        configs = Pair(target.config, draft.config)
        # the start state is built fresh per call: donated, the loop runs in its buffers
        # (no entry copy of either KV cache)
        self._loop = jax.jit(
            functools.partial(speculative_loop, configs, gamma), donate_argnums=(1,)
        )

    def cache_len(self, config: Any) -> int:
        """KV-cache slots this decoder allocates for `config`'s model (the target's or the
        draft's): max_context + gamma + 1, as drafts may run past the last kept token (gpt2:
        at most its position table)."""
        room = self.max_context + self.gamma + 1
        return min(room, config.max_seq_len) if config.arch == "gpt2" else room

    def generate(self, prompt_ids: Sequence[int], sampling: SamplingParams) -> GenerationResult:
        t, d = self.target, self.draft
        validate_sampling(
            sampling,
            vocab_size=t.config.vocab_size,
            max_context=self.max_context,
            prompt_len=len(prompt_ids),
        )
        sampling = with_eos(sampling, t.eos_token_ids)
        t0 = time.perf_counter()
        key = sequence_key(sampling.seed)
        logits, tcache = prefill(
            t.config, t.params, prompt_ids, self.cache_len(t.config), self.prefill_chunk
        )
        _, dcache = prefill(
            d.config, d.params, prompt_ids, self.cache_len(d.config), self.prefill_chunk
        )
        seq = [int(x) for x in prompt_ids]
        tracker = SequenceTracker(sampling, t.tokenizer, prompt_ids=prompt_ids)
        seq.append(first_token(logits, sampling, key, prompt_ids))
        tracker.add(seq[-1])
        pen = penalties_for(sampling, prompt_ids, t.config.vocab_size, seq[len(prompt_ids) :])
        ttft = time.perf_counter() - t0
        stats = AcceptanceStats(self.gamma)
        if tracker.finish_reason is None:
            start = spec_loop_start(
                Pair(tcache, dcache),
                jnp.asarray(seq[-2:], jnp.int32),
                self.max_context,
                self.gamma,
                slot_sampling(sampling, pen),
            )
            end = self._loop(
                Pair(t.params, d.params),
                start,
                jnp.int32(len(seq)),
                key,
                jnp.int32(sampling.max_tokens - 1),
                jnp.asarray([*sampling.stop_token_ids, -2], jnp.int32),
            )
            # one transfer to the host per sequence
            buf, made, r, acc, betas = jax.device_get(
                (end.buf, end.made, end.rounds, end.accepted, end.betas)
            )
            for tok in buf[:made].tolist():
                if tracker.add(tok) is not None:
                    break
            # the tokens kept: the loop's last round may run past max_tokens or a stop string
            stats.record_rounds(acc[:r], betas[:r], emitted=len(tracker.tokens) - 1)
        decode = time.perf_counter() - t0 - ttft
        self.stats = _merge(self.stats, stats)
        return GenerationResult(
            tracker.tokens,
            tracker.visible_text(),
            tracker.finish_reason,
            ttft,
            decode,
            {"speculative": stats.to_dict()},
        )

    def report(
        self,
        *,
        measured_wall_s: float | None = None,
        tokens: int | None = None,
        kv_tokens: int | None = None,
        stats: AcceptanceStats | None = None,
        spec: WaferSpec,
        workload: Any | None = None,
    ) -> RunReport:
        """Predicted wafer time of one emitted token (units "token", `pipeline.perf.
        predict_speculative`) at the rounds run per token kept of `stats` (default: this
        decoder's; one round per token before any round ran): a round cut at max_tokens or a
        stop costs a whole round (hunt 70); `measured_wall_s` over `tokens` is the measured
        time per token. The placement: with `workload` (a `wse_systems.serving.Workload`, the
        job's prompt and max_tokens), the one `wse plan infer --draft` serves it on at
        `stats`' acceptance (`plan_speculative_job`; 0 before a draft was weighed, as one round
        a token), each model at its own config's bytes a value (the target's weights and KV,
        and the draft's: `Speculation.draft_bytes_per_param`, as `wse plan infer
        --wafer-dtype auto` reads each folder); without one (no job: a round priced alone),
        the placement of the shortest round at `kv_tokens` in context `max_context`
        (`plan_speculative`). Session 84: `plan_speculative` took the shortest round's layout
        where the planner weighs the request's output and first token, and the same job had
        two prices (24.39 against 24.81 us a token on an 8 x 8 PE wafer); session 85: a draft
        whose bytes differ from the target's (a float32 draft of a bfloat16 target) still
        took the round's, the planner then pricing a draft at the target's bytes."""
        from wse_inference.pipeline import perf as decode_perf

        stats = stats or self.stats
        bpp = dtype_bytes(self.target.config.param_dtype)
        draft_bpp = dtype_bytes(self.draft.config.param_dtype)
        if workload is not None:
            alpha = stats.alpha if stats.beta_count else 0.0
            plans = decode_perf.plan_speculative_job(
                self.target.config, self.draft.config, spec=spec, workload=workload,
                gamma=self.gamma, alpha=alpha, bytes_per_param=bpp,
                draft_bytes_per_param=draft_bpp,
            )  # fmt: skip
        else:
            plans = decode_perf.plan_speculative(
                self.target.config,
                self.draft.config,
                spec=spec,
                gamma=self.gamma,
                context_len=self.max_context,
                kv_tokens=kv_tokens,
                bytes_per_param=bpp,
                draft_bytes_per_param=draft_bpp,
            )
        per_token = None
        if measured_wall_s is not None:
            per_token = measured_wall_s / tokens if tokens else measured_wall_s
        return decode_perf.predict_speculative(
            self.target.config,
            self.draft.config,
            plans,
            gamma=self.gamma,
            rounds_per_token=stats.rounds_per_token,
            kv_tokens=kv_tokens,
            measured_wall_s=per_token,
            name=f"speculative decode {self.target.name} / draft {self.draft.name}",
        )


def _merge(a: AcceptanceStats, b: AcceptanceStats) -> AcceptanceStats:
    """Both counts together: every field after `gamma` is a count (or counts) that adds."""
    sums = (getattr(a, f.name) + getattr(b, f.name) for f in dataclasses.fields(a)[1:])
    return AcceptanceStats(a.gamma, *sums)
