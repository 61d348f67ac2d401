"""bench_infer's speculative section: speculative decoding against its target model alone.

A 24-layer target (d_model 256; --quick: 8 x 192) and its first layer as the draft (c ~
0.04), gamma = 4, temperature 1, caches sized for the request; the target's head is scaled
to set the operating point (acceptance nearest 0.8, chosen from one run at seed 0 per
scale). Each round both decoders generate the same `SEQS_PER_ROUND` sequences (seeds
k r .. k r + k - 1), back to back, in alternating order, the garbage collector off while
each side runs (`infer_common.interleaved_calls`); the round's ratio is the speculative
tokens/s over the target's (tokens after the first over the decode seconds, summed over the
round's sequences). Then `leviathan23_speculative.round_costs` times the draft step (c),
the verification (v) and the target step as the rounds run them, for Leviathan's
(1 - a^(g+1)) / ((1 - a)(g c + 1)) and its variant with v in place of 1.
"""

from __future__ import annotations

import dataclasses
import statistics
import time

from infer_common import interleaved_calls, tiny_llama
from rounds import ratio

__all__ = ["SPECULATIVE_TARGET", "SEQS_PER_ROUND", "bench_speculative"]

SPECULATIVE_TARGET = 2.0  # speculative decode vs the target model alone, tokens/s (issue 44)
# Sequences per decoder per round. Speculative tokens/s moves with each sequence's
# acceptance luck (tokens per pass 3.13-3.53 between seeds at 120 tokens, measured here),
# and a round's two timings sit in whatever load the machine has then: two sequences per
# side average both (bench time grows with it).
SEQS_PER_ROUND = 2
HEAD_SCALES = (1.25, 1.5, 1.75, 2.0)  # candidate operating points
ACCEPTANCE_AIM = 0.8  # the alpha the operating point is chosen nearest to


def _side(dec, prompt, sampling, seqs: int, calls: list):
    """A zero-argument contender: its k-th call generates seeds k seqs .. (k + 1) seqs - 1
    -> (decode seconds summed, [GenerationResult])."""

    def run():
        k = len(calls)
        calls.append(k)
        seeds = range(k * seqs, (k + 1) * seqs)
        outs = [dec.generate(prompt, dataclasses.replace(sampling, seed=s)) for s in seeds]
        return sum(o.decode_s for o in outs), outs

    return run


def _rate(outs) -> float:
    """Tokens after the first, over decode seconds, summed over sequences."""
    return sum(len(o.tokens) - 1 for o in outs) / sum(o.decode_s for o in outs)


def spec_rounds(target, draft, gamma, prompt, sampling, rounds, seqs=SEQS_PER_ROUND):
    """`rounds` x (speculative results, target-alone results, round costs)."""
    from wse_inference.decoding import PlainDecoder
    from wse_inference.speculative.decoder import SpeculativeDecoder
    from wse_inference.studies.leviathan23_speculative import round_costs

    ctx = len(prompt) + sampling.max_tokens  # caches sized for the request, both decoders
    spec = SpeculativeDecoder(target, draft, gamma=gamma, max_context=ctx)
    plain = PlainDecoder(target.config, target.params, max_context=ctx)
    for dec in (spec, plain):  # compile, and warm both alike
        dec.generate(prompt, dataclasses.replace(sampling, seed=0))
    timer = round_costs(target, draft, gamma, spec.cache_len(target.config))
    sides = {
        "speculative": _side(spec, prompt, sampling, seqs, []),
        "target alone": _side(plain, prompt, sampling, seqs, []),
    }
    out = []
    for r in range(rounds):
        order = list(sides) if r % 2 == 0 else list(sides)[::-1]
        got = interleaved_calls({n: sides[n] for n in order}, 1)
        out.append((got["speculative"][0][2][1], got["target alone"][0][2][1], timer()))
    return out


def _operating_point(layers, d, gamma, prompt, sampling) -> tuple[float, float]:
    """(head scale, alpha) nearest ACCEPTANCE_AIM, one speculative run at seed 0 each."""
    from wse_inference.model_dir import truncated_model
    from wse_inference.speculative.decoder import SpeculativeDecoder

    best = None
    for scale in HEAD_SCALES:
        t = tiny_llama(layers, d, 1024, scale)
        ctx = len(prompt) + sampling.max_tokens
        spec = SpeculativeDecoder(t, truncated_model(t, 1), gamma=gamma, max_context=ctx)
        run = spec.generate(prompt, dataclasses.replace(sampling, seed=0))
        alpha = run.metrics["speculative"]["alpha"]
        if best is None or abs(alpha - ACCEPTANCE_AIM) < abs(best[1] - ACCEPTANCE_AIM):
            best = (scale, alpha)
    return best


def bench_speculative(quick: bool, rounds: int, gamma: int = 4) -> dict:
    from wse_inference.engine import SamplingParams
    from wse_inference.model_dir import truncated_model
    from wse_inference.speculative.verify import expected_speedup, expected_tokens_per_pass

    prompt = list(range(1, 17))
    sampling = SamplingParams(max_tokens=60 if quick else 120, temperature=1.0)
    layers, d = (8, 192) if quick else (24, 256)
    scale, _ = _operating_point(layers, d, gamma, prompt, sampling)
    t = tiny_llama(layers, d, 1024, scale)
    t0 = time.perf_counter()
    pairs = spec_rounds(t, truncated_model(t, 1), gamma, prompt, sampling, rounds)
    stats = [o.metrics["speculative"] for runs, _, _ in pairs for o in runs]
    alpha = statistics.fmean(s["alpha"] for s in stats)
    n_rounds = sum(s["rounds"] for s in stats)
    accepted = sum(s["accepted"] for s in stats)
    spec_rates = [_rate(r) for r, _, _ in pairs]
    plain_rates = [_rate(b) for _, b, _ in pairs]
    ratios = [r / b for r, b in zip(spec_rates, plain_rates, strict=True)]
    costs = [c for _, _, c in pairs]
    c = statistics.median(x["draft_step_ms"] / x["target_step_ms"] for x in costs)
    v = statistics.median(x["verify_ms"] / x["target_step_ms"] for x in costs)
    speedup = statistics.median(ratios)
    formula = expected_speedup(alpha, gamma, c)
    return {
        "target_layers": layers,
        "draft_layers": 1,
        "d_model": d,
        "gamma": gamma,
        "head_scale": scale,
        "sequences_per_round": SEQS_PER_ROUND,
        "tokens_per_round_per_side": SEQS_PER_ROUND * (sampling.max_tokens - 1),
        "alpha": alpha,
        "acceptance_rate": accepted / (n_rounds * gamma),
        "tokens_per_pass": (accepted + n_rounds) / n_rounds,
        "cost_ratio_c": c,
        "verify_cost_ratio": v,
        "round_ms": statistics.median(x["round_ms"] for x in costs),
        "target_step_ms": statistics.median(x["target_step_ms"] for x in costs),
        "target_tokens_per_s": statistics.median(plain_rates),
        "speculative_tokens_per_s": statistics.median(spec_rates),
        "speedup": speedup,
        "speedup_min": min(ratios),
        "ratio_vs_target_model": ratio(
            [1 / r for r in spec_rates], [1 / b for b in plain_rates], SPECULATIVE_TARGET
        ),
        "leviathan_speedup": formula,
        "measured_vs_formula": speedup / formula,
        "formula_with_verify_cost": expected_tokens_per_pass(alpha, gamma) / (gamma * c + v),
        "section_s": time.perf_counter() - t0,
    }
