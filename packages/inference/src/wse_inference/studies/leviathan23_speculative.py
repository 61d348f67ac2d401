"""Experiment `leviathan23-speculative`: measured speculative speedup against gamma and draft
size, next to Leviathan et al.'s (1 - a^(g+1)) / ((1 - a)(g c + 1)).

Setup: a 12-layer random Llama-arch target (d_model 256, vocab 1024) whose head is scaled so
its next-token distributions are peaked like a trained model's, and drafts made of its first
1 or 2 layers (`loading.truncated_model`), temperature 1, 120 new tokens from a fixed prompt,
caches sized for the request (prompt + new tokens) in both decoders.
Measured per (gamma, draft):
- a = mean over evaluated draft positions of sum_x min(p(x), q(x)) (Leviathan's beta);
- the speedup = speculative tokens/s / plain target tokens/s: the median over interleaved
  pairs (one speculative run, one plain run) of their ratio;
- c = draft step / target step, both timed as the code that runs in decoding
  (`round_costs`): the draft step is the rounds' own proposal (`spec_decode._propose`, gamma
  draft tokens with sampling, in a jitted loop) / gamma; the target step is the plain
  decoder's step (`decoding.decode_step`) in a jitted loop; interleaved trials, medians;
- the formula's value from the measured a and c (target: agreement within 10%).
The formula assumes the (gamma + 1)-token verification costs one target step (a wafer or a
GPU reads the weights once either way). `verify_cost_ratio` v measures that ratio here (the
rounds' own verification, `spec_decode._verify_pass`, in a jitted loop), and
`formula_with_verify_cost` = (1 - a^(g+1)) / ((1 - a)(g c + v)) is shown beside the
published formula, so the gap between measurement and formula is accounted for, and
`round_vs_gamma_c_plus_1` = round time / (gamma draft steps + one target step) shows the
whole gap (v plus what a round costs beyond its parts).
On one CPU core (measured 2026-11: v = 1.2-1.3) the gamma extra tokens' matmul flops are not
hidden behind the weight reads as on a wafer or a GPU, and alternating the draft and the
target evicts each other's weights from the caches (round / (g c + 1) = 1.25-1.4): the
measured speedup is then 0.65-0.8 of the published formula and 0.8-1.0 of the v-corrected one.
Timings are most repeatable with one XLA thread (XLA_FLAGS=--xla_cpu_multi_thread_eigen=false):
the speculative and the plain decoder then get the same single core.
Predictions (the same in --quick): the formula on a fixed grid of (a, gamma, c).
"""

from __future__ import annotations

import dataclasses
import statistics
import time

from wse_core.experiment import ExperimentResult, PredictionRow

from wse_inference.speculative import expected_speedup, expected_tokens_per_pass

__all__ = ["run", "round_costs"]

SOURCE = None  # the formula is in REFERENCES.md; no measured speedup is published there
GRID = [(a, g, c) for a in (0.6, 0.8, 0.9) for g in (2, 4, 8) for c in (0.05, 0.1)]
HEAD_SCALE = 1.5  # sets the operating point near a = 0.8 for the 1-layer draft


def _target(seed: int):
    from wse_inference.testing import tiny_model

    m = tiny_model(
        "llama",
        n_layers=12,
        d_model=256,
        n_heads=4,
        n_kv_heads=2,
        d_ff=768,
        max_seq_len=512,
        vocab_size=1024,
        seed=seed,
    )
    params = dict(m.params)
    params["final"] = {**m.params["final"], "head": m.params["final"]["head"] * HEAD_SCALE}
    return dataclasses.replace(m, params=params)


def round_costs(target, draft, gamma: int, cache_len: int, *, reps: int = 16):
    """A timer of the code speculative decoding runs: each call times, once each and one
    after the other, `reps` calls inside one jitted loop (no dispatch per call) at positions
    64.., temperature 1, and returns milliseconds per step: `target_step_ms` (the plain
    decoder's step), `draft_step_ms` (one proposal of gamma drafts / gamma, as the rounds
    propose), `verify_ms` (the target's gamma + 1-token verification with rejection
    sampling) and `round_ms` (a whole speculative round). Compiles on creation."""
    import jax
    import jax.numpy as jnp
    import wse_models

    from wse_inference.decoding import decode_step
    from wse_inference.spec_decode import _propose, _verify_pass, speculative_round

    tc, dc = target.config, draft.config
    one, t1, k1, p1 = jnp.ones((1,), jnp.int32), jnp.float32(1.0), jnp.int32(0), jnp.float32(1.0)
    last2 = jnp.array([5, 6], jnp.int32)
    drafts = jnp.arange(7, 7 + gamma, dtype=jnp.int32)
    q = jnp.full((gamma, tc.vocab_size), 1.0 / tc.vocab_size, jnp.float32)

    def looped(step):
        @jax.jit
        def run(tp, dp, tcache, dcache, key):
            def body(i, carry):
                tcache, dcache, acc = carry
                out, tcache, dcache = step(tp, dp, tcache, dcache, jax.random.fold_in(key, i), i)
                return tcache, dcache, acc + out

            return jax.lax.fori_loop(0, reps, body, (tcache, dcache, jnp.int32(0)))

        return run

    def target_step(tp, dp, tc_, dc_, key, i):
        nxt, tc_ = decode_step(tc, tp, tc_, one, 64 + i + one - 1, one, key[None], t1, k1, p1)
        return nxt[0], tc_, dc_

    def draft_steps(tp, dp, tc_, dc_, key, i):
        pos2 = (62 + i + jnp.arange(2)).astype(jnp.int32)
        d, _, dc_ = _propose(dc, gamma, dp, dc_, last2, pos2, key, t1, k1, p1)
        return d.sum(), tc_, dc_

    def verify_pass(tp, dp, tc_, dc_, key, i):
        v, tc_ = _verify_pass(tc, gamma, tp, tc_, last2[1], drafts, q, 64 + i, key, t1, k1, p1)
        return v.num_accepted + v.next_token, tc_, dc_

    def whole_round(tp, dp, tc_, dc_, key, i):
        out = speculative_round(tc, dc, gamma, tp, dp, tc_, dc_, last2, 64 + i, key, t1, k1, p1)
        return out[1] + out[2], out[4], out[5]

    loops = {
        "target_step_ms": (looped(target_step), 1),
        "draft_step_ms": (looped(draft_steps), gamma),
        "verify_ms": (looped(verify_pass), 1),
        "round_ms": (looped(whole_round), 1),
    }
    key = jax.random.PRNGKey(0)

    def call(fn):
        tcache = wse_models.init_cache(tc, 1, cache_len)
        dcache = wse_models.init_cache(dc, 1, cache_len)
        jax.block_until_ready((tcache, dcache))
        t0 = time.perf_counter()
        jax.block_until_ready(fn(target.params, draft.params, tcache, dcache, key))
        return time.perf_counter() - t0

    for fn, _ in loops.values():
        call(fn)  # compile

    def timer() -> dict[str, float]:
        return {name: call(fn) / reps / per * 1e3 for name, (fn, per) in loops.items()}

    return timer


def _measure(target, draft_layers, gammas, sampling, prompt, repeats):
    from wse_inference.decoding import PlainDecoder
    from wse_inference.loading import truncated_model
    from wse_inference.spec_decode import SpeculativeDecoder

    draft = truncated_model(target, draft_layers)
    ctx = len(prompt) + sampling.max_tokens
    plain = PlainDecoder(target.config, target.params, max_context=ctx)
    plain.generate(prompt, sampling)  # compile
    rows = []
    for gamma in gammas:
        spec = SpeculativeDecoder(target, draft, gamma=gamma, max_context=ctx)
        spec.generate(prompt, sampling)  # compile
        timer = round_costs(target, draft, gamma, spec._cache_len(target.config))
        runs, ratios, costs = [], [], []
        for s in range(repeats):  # interleaved: the machine is shared
            runs.append(spec.generate(prompt, dataclasses.replace(sampling, seed=s)))
            base = plain.generate(prompt, dataclasses.replace(sampling, seed=s))
            ratios.append(runs[-1].tokens_per_s / base.tokens_per_s)
            costs.append(timer())
        stats = [r.metrics["speculative"] for r in runs]
        alpha = statistics.fmean(m["alpha"] for m in stats)
        rounds = sum(m["rounds"] for m in stats)
        tpp = sum(m["accepted"] + m["rounds"] for m in stats) / rounds
        cost = {k: statistics.median(c[k] for c in costs) for k in costs[0]}
        c = statistics.median(x["draft_step_ms"] / x["target_step_ms"] for x in costs)
        v = statistics.median(x["verify_ms"] / x["target_step_ms"] for x in costs)
        speed = statistics.median(ratios)
        pred = expected_speedup(alpha, gamma, c)
        corrected = expected_tokens_per_pass(alpha, gamma) / (gamma * c + v)
        rows.append(
            {
                "gamma": gamma,
                "draft_layers": draft_layers,
                "alpha": alpha,
                "acceptance_rate": sum(m["accepted"] for m in stats) / (rounds * gamma),
                "tokens_per_pass": tpp,
                "formula_tokens_per_pass": expected_tokens_per_pass(alpha, gamma),
                "cost_ratio_c": c,
                "verify_cost_ratio": v,
                "round_vs_gamma_c_plus_1": statistics.median(
                    x["round_ms"] / (gamma * x["draft_step_ms"] + x["target_step_ms"])
                    for x in costs
                ),
                "target_step_ms": cost["target_step_ms"],
                "measured_speedup": speed,
                "formula_speedup": pred,
                "ratio": speed / pred,
                "within_10pct": abs(speed / pred - 1) <= 0.10,
                "formula_with_verify_cost": corrected,
                "ratio_with_verify_cost": speed / corrected,
            }
        )
    return rows


def _figure(rows: list[dict]):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for layers in sorted({r["draft_layers"] for r in rows}):
        sel = [r for r in rows if r["draft_layers"] == layers]
        g = [r["gamma"] for r in sel]
        ax.plot(
            g, [r["measured_speedup"] for r in sel], "o-", label=f"measured, {layers}-layer draft"
        )
        ax.plot(
            g, [r["formula_speedup"] for r in sel], "x--", label=f"formula, {layers}-layer draft"
        )
        ax.plot(
            g,
            [r["formula_with_verify_cost"] for r in sel],
            "+:",
            label=f"formula with measured v, {layers}-layer draft",
        )
    ax.set_xlabel("gamma (draft tokens per round)")
    ax.set_ylabel("speedup over the target alone")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def run(*, quick: bool = False, seed: int = 0) -> ExperimentResult:
    from wse_inference.engine import SamplingParams

    target = _target(seed)
    prompt = list(range(1, 17))
    sampling = SamplingParams(max_tokens=60 if quick else 120, temperature=1.0, seed=seed)
    repeats = 3 if quick else 5
    gammas = (2, 4) if quick else (1, 2, 4, 6)
    rows = []
    for layers in (1,) if quick else (1, 2):
        rows += _measure(target, layers, gammas, sampling, prompt, repeats)
    predictions = [
        PredictionRow("speedup", expected_speedup(a, g, c), "x", {"alpha": a, "gamma": g, "c": c})
        for a, g, c in GRID
    ]
    return ExperimentResult(
        experiment="leviathan23-speculative",
        seed=seed,
        config={
            "target": "llama 12 x 256, vocab 1024, head x1.5",
            "temperature": 1.0,
            "new_tokens": sampling.max_tokens,
            "gammas": list(gammas),
        },
        measurements=rows,
        predictions=predictions,
        figure=_figure(rows),
    )
