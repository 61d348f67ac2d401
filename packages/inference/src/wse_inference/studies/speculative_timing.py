"""The timer of the code speculative decoding runs, for the `leviathan23-speculative`
experiment (`wse_inference.studies.leviathan23_speculative`, which re-exports `round_costs`)
and `bench/infer_speculative.py` (bench_infer's speculative section).

Contract. `round_costs(target, draft, gamma, cache_len)` compiles five jitted loops (the plain
decoder's step, a proposal of gamma drafts, the verification with and without its rejection
sampling, a whole speculative round) and returns a timer: each call runs them interleaved and
returns milliseconds per step. The loops are kept in `_LOOPS` and reused across calls (XLA
compiles per cache shape).
"""

from __future__ import annotations

import time

__all__ = ["round_costs"]

_LOOPS: dict = {}  # jitted timing loops, reused across calls (XLA compiles per cache shape)


def _looped(step, reps: int):  # the caches are donated and carried over, as in decoding
    import jax
    import jax.numpy as jnp

    def run(tp, dp, tcache, dcache, key):
        def body(i, carry):
            tcache, dcache, acc = carry
            out, tcache, dcache = step(tp, dp, tcache, dcache, jax.random.fold_in(key, i), i)
            return tcache, dcache, acc + out

        return jax.lax.fori_loop(0, reps, body, (tcache, dcache, jnp.int32(0)))

    return jax.jit(run, donate_argnums=(2, 3))


def _step_fns(tc, dc, gamma: int) -> dict:
    """The five steps timed, by name; each (target params, draft params, target cache, draft
    cache, key, i) -> (an int32 to sum, target cache, draft cache), at position 64 + i."""
    import jax
    import jax.numpy as jnp

    from wse_inference.decoding import decode_step
    from wse_inference.sampling import SlotSampling
    from wse_inference.speculative.decoder import (
        Pair,
        Proposal,
        propose,
        speculative_round,
        verify_forward,
        verify_pass,
    )

    one = jnp.ones((1,), jnp.int32)
    # temperature 1, no cuts, no penalties, no logprobs: scalars, and rows of one for decode_step
    t1 = SlotSampling(jnp.float32(1.0), jnp.int32(0), jnp.float32(1.0), None, jnp.bool_(False))
    rows = jax.tree.map(lambda x: x[None], t1)
    last2 = jnp.array([5, 6], jnp.int32)
    drafts = jnp.arange(7, 7 + gamma, dtype=jnp.int32)
    q = jnp.full((gamma, tc.vocab_size), 1.0 / tc.vocab_size, jnp.float32)

    def target_step(tp, dp, tc_, dc_, key, i):
        nxt, tc_ = decode_step(tc, tp, tc_, one, 64 + i + one - 1, one, key[None], rows)
        return nxt[0], tc_, dc_

    def draft_steps(tp, dp, tc_, dc_, key, i):
        pos2 = (62 + i + jnp.arange(2)).astype(jnp.int32)
        prop, dc_ = propose(dc, gamma, dp, dc_, last2, pos2, key, t1)
        return prop.drafts.sum(), tc_, dc_

    def verify_step(tp, dp, tc_, dc_, key, i):
        v, tc_, _, _ = verify_pass(tc, tp, tc_, last2[1], Proposal(drafts, q), 64 + i, key, t1)
        return v.num_accepted + v.next_token, tc_, dc_

    def verify_forward_step(tp, dp, tc_, dc_, key, i):  # verify_pass less the rejection sampling
        logits, tc_ = verify_forward(tc, tp, tc_, last2[1], drafts, 64 + i)
        return (logits.sum() > 0).astype(jnp.int32), tc_, dc_

    def whole_round(tp, dp, tc_, dc_, key, i):
        r = speculative_round(
            Pair(tc, dc), gamma, Pair(tp, dp), Pair(tc_, dc_), last2, 64 + i, key, t1
        )
        return r.num_accepted + r.next_token, r.caches.target, r.caches.draft

    return {
        "target": target_step,
        "draft": draft_steps,
        "verify": verify_step,
        "verify_forward": verify_forward_step,
        "round": whole_round,
    }


def round_costs(target, draft, gamma: int, cache_len: int, *, reps: int = 32):
    """A timer of the code speculative decoding runs: each call times, in the order
    A B C D E E D C B A (drift in the machine's load then cancels in the ratios), `reps`
    calls inside one jitted loop (no dispatch per call; caches of `cache_len` slots donated
    and carried from call to call) at positions 64.., temperature 1, and returns
    milliseconds per step: `target_step_ms` (the plain decoder's step), `draft_step_ms` (one
    proposal of gamma drafts / gamma, as the rounds propose), `verify_ms` (the target's
    gamma + 1-token verification with rejection sampling), `verify_forward_ms` (its forward
    pass alone) and `round_ms` (a whole speculative round). Compiles on creation.
    `reps` = 32: each call's first steps run after the other loops, with colder caches; at
    8 they raised the target step ~10% above the plain decoder's own step in its runs
    (measured, gamma 6: 12.0 ms at 8, 11.0 at 32, 10.8 in the plain decoder's runs; the
    round 17.9, 16.8 and 16.4 in the speculative runs), which biased c low."""
    import jax
    import wse_models

    tc, dc = target.config, draft.config
    steps = _step_fns(tc, dc, gamma)

    def cached(name, *key):  # the target step does not depend on gamma or the draft
        return _LOOPS.setdefault((name, tc, reps, *key), _looped(steps[name], reps))

    loops = {
        "target_step_ms": (cached("target"), 1),
        "draft_step_ms": (cached("draft", dc, gamma), gamma),
        "verify_ms": (cached("verify", gamma), 1),
        "verify_forward_ms": (cached("verify_forward", gamma), 1),
        "round_ms": (cached("round", dc, gamma), 1),
    }
    key = jax.random.PRNGKey(0)
    caches = [wse_models.init_cache(tc, 1, cache_len), wse_models.init_cache(dc, 1, cache_len)]

    def call(fn):
        t0 = time.perf_counter()
        out = jax.block_until_ready(fn(target.params, draft.params, *caches, key))
        caches[:] = out[:2]  # the loops write the same slots again: no copy, no fresh pages
        return time.perf_counter() - t0

    for fn, _ in loops.values():
        call(fn)  # compile

    def timer() -> dict[str, float]:
        order = list(loops.items())
        total = dict.fromkeys(loops, 0.0)
        for name, (fn, per) in order + order[::-1]:
            total[name] += call(fn) / (2 * reps * per) * 1e3
        return total

    return timer
