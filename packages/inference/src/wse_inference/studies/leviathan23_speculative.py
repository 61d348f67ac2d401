"""Experiment `leviathan23-speculative`: measured speculative speedup against gamma and draft
size, next to Leviathan et al.'s (1 - a^(g+1)) / ((1 - a)(g c + 1)).

The formula is about hardware where a decode step is memory-bandwidth-bound: verifying
gamma + 1 tokens reads the weights and the KV cache once, so it costs about one step. The
experiment is put in that regime on a CPU: a 12-layer random Llama-arch target (d_model 512,
d_ff 1408, 8 heads, 4 KV heads, vocab 1024; 139 MiB of fp32 weights, > 4x the 32 MiB L3, so
every step streams them from DRAM) whose head is scaled so its next-token distributions are
peaked like a trained model's, drafts made of its first 1 or 2 layers
(`model_dir.truncated_model`; 15 and 27 MiB), temperature 1, and a long context: a 904-token
prompt plus 120 new tokens (CONTEXT = 1024; --quick: 964 + 60), caches sized for the request
in both decoders, so each step also reads a 24 MiB KV cache (the verification reads it once
for all gamma + 1 positions).
Why the long context (measured 2026-11, one XLA thread, target alone, gamma + 1 = t rows):
with a 16-token prompt a step was ~8.5 ms: 5.4 ms copying each layer's weights out of the
stacked parameters (wse_models' layer scan; this is the DRAM read, the same at any t), 1.9 ms
of matmuls on the cache-resident copies, the rest attention, norms and sampling. XLA:CPU runs
a 1-row matmul as its own GEMV and 2-7 rows as a (YNNPACK) GEMM whose extra flops are not
hidden behind the copy: +0.9 ms at t = 5, +1.3 ms at t = 7, so v = verify / step came out
1.1-1.3. Nothing else grows with t: the rejection sampling and the t-row softmax add 0-4%;
there is no host sync, re-trace or cache copy per round (all rounds run in one jitted
while_loop; rollback is by position). Removing the weight copy (per-layer arrays read in
place) makes it worse on this CPU: 4.2 ms for t = 1 (GEMV streams at ~34 GB/s) but 6-7 ms for
t >= 2 (the GEMM packs the weights before multiplying): v 1.4-1.7; XNNPACK off, oneDNN,
weight-transposed dots and bf16 did no better. A 1024-token cache adds per-step memory
traffic that the verification shares; what is left of v > 1 is the same GEMM effect and the
t-row attention (scores and softmax over the whole cache for each of the t rows).
Results (2026-11-23, full runs at CONTEXT 1024 on the shared 2-core machine; the figures of
each run are in the session notes, not here): v ~ 1.0-1.1 at gamma <= 4 and 1.15-1.23 at
gamma 6; measured / published formula within 10% in 5-7 of 8 rows per run, gamma 6 at
0.76-0.97 (the 2-layer draft short in every run); in the quietest run the formula with the
measured v (`formula_with_verify_cost`) agreed within 7% in every row.
On a GPU it is no nearer (one NVIDIA H100, 2026-11-23, jax 0.11.2, this code unchanged, full
run): a target step takes 0.83-0.90 ms, bound by kernel launches rather than memory (139 MiB
at ~3 TB/s is ~0.05 ms); the verification adds 0.2-0.4 ms of its own ops at any gamma, so v is
1.22-1.44 (largest at gamma 1) and measured / formula 0.68-0.80 in all 8 rows (0.85-0.97
with the measured v); alpha and the tokens per pass match the CPU run's.
Why no code makes v ~ 1 at gamma 6 on this CPU (measured 2026-11-23, one thread, A/B in one
process): a verification of t = gamma + 1 rows does 2t flops per fp32 weight, t/2 flop/B;
one core does ~180-220 GFLOP/s (a 7-row GEMM: 2.7 ms per 139 MiB of weights in L2) and
streams ~35-45 GB/s from DRAM (a 139 MiB reduction 3.6 ms; a 1-row GEMV reading the weights
in place 3.0-4.1 ms), a balance of ~5-6 flop/B, so at t = 7 the arithmetic alone is 70-90%
of the weight-streaming time and v ~ 1 would need loads and FMAs almost fully overlapped.
XLA:CPU overlaps nothing across ops: that reduction and an independent GEMM in one jit take
the sum of their times, with one XLA thread or two. Per-shape, the 84 projections of one
step (139 MiB, 1/5/7 rows): weights copied out of the stacked params as the layer scan does
4.6-4.9/5.5-5.8/6.1-6.8 ms; per-layer arrays read in place 4.0-4.5/4.8-4.9/4.9-5.3; W^T
(rows as N) 3.0-4.0/7.3/8.2; t separate GEMVs 5.2/15.6/19.8; a multiply-and-reduce fusion
70-240 ms at any t; with two XLA threads no form did 7 rows in under 7.9 ms. A hand-written
AVX-512 kernel that reads each weight once for all rows (panel-packed weights, prefetch)
took 3.8 ms at 1 row and 5.3-5.8 at 7. The attention over 1031 slots (2 query heads per KV
head: 7 flop/B at t = 7) adds 1.5 ms (12 layers) at 7 rows over 1. Whole target step, 1031
slots, interleaved: this code 12.1/13.2/13.9 ms at 1/5/7 rows (v 1.09, 1.18); with each
layer's weights and cache as separate arrays read and written in place 6.0/7.6/8.5 ms (v
1.33, 1.49). So about half of today's step is t-independent copying (each layer's weights
out of the stacked parameters and, in the optimized HLO, the layer scan's stacked K and V
outputs filled and copied back into the loop carry: 3 whole-cache copies per step), and that
is what keeps v near 1.2: a decoder without it is twice as fast and further from the
formula's regime, not nearer.
What a kernel decoder would give (measured 2026-11-23, probes outside this package; the cores
are Zen 5-class: full-width AVX-512, 1 MiB L2 each): a register-blocked kernel written in LLVM
IR through numba (`@intrinsic`; 7 x 3 accumulators of 16 lanes, weights packed in 48-column
panels so each weight is read once for all t rows, two threads) does one 139 MiB matrix in
2.6-2.8 ms at 1 row (53-57 GB/s) and 2.75-3.3 at 7 (154-185 GFLOP/s), v 1.06-1.19; plain
numba loops reached 83 GFLOP/s. A whole target step built from such kernels (per-layer
projections, a lane-parallel attention kernel that costs the same for 1-8 rows, numba glue,
no JAX) took 4.0-5.3 ms at 1 row and 6.7-7.5 at 7: v 1.4-1.7. Its per-layer projections alone:
1.85-1.93 ms at 1 row, 2.73-2.81 at 7 (v 1.46); one row reads faster than the single matrix
(part of the weights stays in the 32 MiB L3 from step to step) while 7 rows are bound by the
FMAs at ~185 GFLOP/s. So a kernel decoder would be 2-3x faster and, like the lean XLA decoder
above, further from the formula's regime; it was not pursued. An MHA target (8 KV heads, same
context) measured v 1.05-1.10 at gamma 6 with today's code, but only because its step doubles
to 22 ms in t-independent cache copies; it was not adopted.
Measured per (gamma, draft):
- a = mean over evaluated draft positions of sum_x min(p(x), q(x)) (Leviathan's beta);
- the speedup = speculative tokens/s / plain target tokens/s: the median over interleaved
  pairs (one speculative run, one plain run) of their ratio;
- c = the draft's cost per draft token as the rounds run it, over one target step:
  (round - verification) / (gamma x target step), each timed as the code that runs in
  decoding (`round_costs`: `speculative.decoder.speculative_round` and `verify_pass`, the
  plain decoder's `decoding.decode_step`, each in a jitted loop that carries its donated
  caches from call to call as the decoders do; interleaved trials, the median of the
  per-trial ratios). It includes the draft re-reading its weights after the target's pass
  evicted them; `draft_alone_c` (the proposal alone in a loop, draft weights hot in cache) is
  shown beside it;
- the formula's value from the measured a and c (target: agreement within 10%).
`verify_cost_ratio` v = the (gamma + 1)-token verification / one target step, the formula's
implicit assumption v = 1; `verify_forward_ratio` = the verification's forward pass alone /
one step (v less the rejection sampling). `formula_with_verify_cost` =
(1 - a^(g+1)) / ((1 - a)(g c + v)) is shown beside the published formula (a diagnostic; the
published one is the target). `round_in_run_ms` (decode time / rounds) is shown beside
`round_ms`, and `plain_step_in_run_ms` (the plain decoder's decode time / tokens) beside
`target_step_ms`: the timer's fidelity to the runs.
`noisy` flags a row whose figures say something impossible: a measured speedup over its
tokens per pass (hunt 73: 2.654 over 2.629, printed as a result; the speedup is tokens per
pass x plain step / round), or a round timed faster than a plain step, in the runs
(`round_in_run_ms` < `plain_step_in_run_ms`; hunt 76: 99.85 < 107.33 ms was not flagged) or
by the timer (`round_ms` < `target_step_ms`), or a negative draft cost c (a round timed
shorter than its own verification; hunt 77: 37.0 < 37.6 ms gave c = -0.004, not flagged). A
round (gamma drafts and a gamma + 1-token verification) takes at least a plain step, and
its drafts some time, so such a row says the machine's load moved between its paired runs
or timer calls, not how fast speculation is; `noisy_note` names each, with the row's own
figures (empty when not noisy). `within_10pct` is each row's measured / formula within
10%; the agreement figure, `config["agreement"]`, counts the rows that are not noisy
(`within_10pct` of them, of how many) and says how many noisy rows it leaves out and what
counting them would give (hunt 77: noisy rows were counted as agreement).
Timings are most repeatable with one XLA thread (XLA_FLAGS=--xla_cpu_multi_thread_eigen=false):
the speculative and the plain decoder then get the same single core. On a machine shared
with other jobs the target step varies 1.5-2x between rows; each row's quantities are
interleaved in time, rows are not.
Predictions (the same in --quick): the formula on a fixed grid of (a, gamma, c)
(`run_predictions`, which `--sweep` reruns; they read no assumption, so a sweep is refused). --quick
measures fewer tokens, pairs and gammas, the 1-layer draft only.
"""

from __future__ import annotations

import dataclasses
import statistics

from wse_core.studies.experiment import ExperimentResult, PredictionRow

from wse_inference.speculative.verify import expected_speedup, expected_tokens_per_pass
from wse_inference.studies.speculative_timing import round_costs

__all__ = ["run", "run_predictions", "round_costs"]

SOURCE = None  # the formula is in REFERENCES.md; no measured speedup is published there
GRID = [(a, g, c) for a in (0.6, 0.8, 0.9) for g in (2, 4, 8) for c in (0.05, 0.1)]
HEAD_SCALE = 1.5  # peaked next-token distributions: a ~ 0.67 for the 1- and 2-layer drafts
CONTEXT = 1024  # prompt + new tokens: the KV cache read per step is ~25 MiB next to the weights
PREFILL_CHUNK = 128  # prefill speed only (not timed); decoding is the same at any chunk


def _target(seed: int):
    from wse_inference.testing import tiny_model

    m = tiny_model(
        "llama",
        n_layers=12,
        d_model=512,
        n_heads=8,
        n_kv_heads=4,
        d_ff=1408,
        max_seq_len=2 * CONTEXT,
        vocab_size=1024,
        seed=seed,
    )
    params = dict(m.params)
    params["final"] = {**m.params["final"], "head": m.params["final"]["head"] * HEAD_SCALE}
    return dataclasses.replace(m, params=params)


def _weight_mb(model) -> float:
    import jax

    return sum(x.nbytes for x in jax.tree_util.tree_leaves(model.params)) / 2**20


def _measure(target, draft_layers, gammas, sampling, prompt, repeats):
    from wse_inference.decoding import PlainDecoder
    from wse_inference.model_dir import truncated_model
    from wse_inference.speculative.decoder import SpeculativeDecoder

    draft = truncated_model(target, draft_layers)
    ctx = len(prompt) + sampling.max_tokens
    plain = PlainDecoder(target.config, target.params, max_context=ctx, prefill_chunk=PREFILL_CHUNK)
    plain.generate(prompt, sampling)  # compile
    rows = []
    for gamma in gammas:
        spec = SpeculativeDecoder(
            target, draft, gamma=gamma, max_context=ctx, prefill_chunk=PREFILL_CHUNK
        )
        spec.generate(prompt, sampling)  # compile
        # one cache length for every gamma (slots past the position are masked), so the
        # target-step loop compiles once
        timer = round_costs(target, draft, gamma, ctx + max(gammas) + 1)
        runs, bases, ratios, costs = [], [], [], []
        for s in range(repeats):  # interleaved, order alternating: the machine is shared
            sp = dataclasses.replace(sampling, seed=s)
            if s % 2:
                base = plain.generate(prompt, sp)
            runs.append(spec.generate(prompt, sp))
            if not s % 2:
                base = plain.generate(prompt, sp)
            bases.append(base)
            ratios.append(runs[-1].tokens_per_s / base.tokens_per_s)
            costs.append(timer())
        rows.append(_row(target, draft, draft_layers, gamma, runs, bases, ratios, costs))
    return rows


def _row(target, draft, draft_layers, gamma, runs, bases, ratios, costs) -> dict:
    """One (gamma, draft) row from the interleaved runs and timer calls of `_measure`."""
    stats = [r.metrics["speculative"] for r in runs]
    alpha = statistics.fmean(m["alpha"] for m in stats)
    rounds = sum(m["rounds"] for m in stats)
    tpp = sum(m["accepted"] + m["rounds"] for m in stats) / rounds
    cost = {k: statistics.median(c[k] for c in costs) for k in costs[0]}
    # c as the rounds run it: a round's time less its verification, per draft token
    c = statistics.median(
        (x["round_ms"] - x["verify_ms"]) / (gamma * x["target_step_ms"]) for x in costs
    )
    c_alone = statistics.median(x["draft_step_ms"] / x["target_step_ms"] for x in costs)
    v = statistics.median(x["verify_ms"] / x["target_step_ms"] for x in costs)
    v_fwd = statistics.median(x["verify_forward_ms"] / x["target_step_ms"] for x in costs)
    run_round_ms = statistics.median(r.decode_s / r.metrics["speculative"]["rounds"] for r in runs)
    plain_step_ms = statistics.median(b.decode_s / (len(b.tokens) - 1) for b in bases)
    speed = statistics.median(ratios)
    timed = (cost["round_ms"], cost["target_step_ms"], cost["verify_ms"])
    note = _noisy_note(speed, tpp, (run_round_ms * 1e3, plain_step_ms * 1e3), timed, c)
    pred = expected_speedup(alpha, gamma, c)
    corrected = expected_tokens_per_pass(alpha, gamma) / (gamma * c + v)
    return {
        "gamma": gamma,
        "draft_layers": draft_layers,
        "draft_weight_mb": _weight_mb(draft),
        "target_weight_mb": _weight_mb(target),
        "alpha": alpha,
        "acceptance_rate": sum(m["accepted"] for m in stats) / (rounds * gamma),
        "tokens_per_pass": tpp,
        "formula_tokens_per_pass": expected_tokens_per_pass(alpha, gamma),
        "cost_ratio_c": c,
        "draft_alone_c": c_alone,
        "verify_cost_ratio": v,
        "verify_forward_ratio": v_fwd,
        "target_step_ms": cost["target_step_ms"],
        "plain_step_in_run_ms": plain_step_ms * 1e3,
        "round_ms": cost["round_ms"],
        "round_in_run_ms": run_round_ms * 1e3,
        "measured_speedup": speed,
        "formula_speedup": pred,
        "ratio": speed / pred,
        "within_10pct": abs(speed / pred - 1) <= 0.10,
        "formula_with_verify_cost": corrected,
        "ratio_with_verify_cost": speed / corrected,
        "noisy": bool(note),
        "noisy_note": note,
    }


def _noisy_note(
    speed: float,
    tpp: float,
    in_runs: tuple[float, float],
    timed: tuple[float, float, float],
    c: float,
) -> str:
    """What is impossible in a row (the module docstring; "" when nothing is): `in_runs` (a
    round and a plain step in the runs, ms), `timed` (the timer's round, target step and
    verification, ms), `c` the row's draft cost (the median of per-trial (round -
    verification) / (gamma x step))."""
    (run_round, plain), (rnd, step, check) = in_runs, timed
    checks = (
        (speed > tpp, f"speedup {speed:.3f} > tokens per pass {tpp:.3f}"),
        (run_round < plain, f"a round timed faster than a plain step ({_ms(run_round, plain)} "
                            "ms in the runs)"),
        (rnd < step, f"a round timed faster than a target step ({_ms(rnd, step)} ms by the "
                     "timer)"),
        (c < 0, f"draft cost c {c:.3g} < 0: a round timed shorter than its own verification "
                f"({_ms(rnd, check) if rnd < check else f'{rnd:.1f} vs {check:.1f}'} ms by "
                "the timer, medians)"),
    )  # fmt: skip
    bad = [text for failed, text in checks if failed]
    if not bad:
        return ""
    return (f"{'; '.join(bad)}: impossible, as a round takes at least a plain step and its "
            "drafts some time; the machine's load moved between the paired runs")  # fmt: skip


def agreement(rows: list[dict]) -> dict:
    """The agreement figure (module docstring): of the rows not noisy, how many are within
    10% of the formula; the noisy rows left out, and the count with them."""
    kept = [r for r in rows if not r["noisy"]]
    return {
        "within_10pct": sum(r["within_10pct"] for r in kept),
        "rows": len(kept),
        "noisy_rows_left_out": len(rows) - len(kept),
        "within_10pct_counting_noisy": sum(r["within_10pct"] for r in rows),
        "rows_counting_noisy": len(rows),
    }


def _ms(low: float, high: float) -> str:
    """ "low < high" with the fewest decimals (one at least) that tell them apart."""
    digits = next((d for d in range(1, 6) if f"{low:.{d}f}" != f"{high:.{d}f}"), 6)
    return f"{low:.{digits}f} < {high:.{digits}f}"


def _figure(rows: list[dict]):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for i, layers in enumerate(sorted({r["draft_layers"] for r in rows})):
        sel = [r for r in rows if r["draft_layers"] == layers]
        g, col = [r["gamma"] for r in sel], f"C{i}"  # one colour per draft
        ax.plot(g, [r["measured_speedup"] for r in sel], "o-", color=col,
                label=f"measured, {layers}-layer draft")  # fmt: skip
        ax.plot(g, [r["formula_speedup"] for r in sel], "x--", color=col,
                label=f"formula, {layers}-layer draft")  # fmt: skip
        ax.plot(g, [r["formula_with_verify_cost"] for r in sel], "+:", color=col, alpha=0.6,
                label=f"formula with measured v, {layers}-layer draft")  # fmt: skip
    bad = [r for r in rows if r["noisy"]]
    if bad:  # a speedup above the tokens per pass: the load moved, not a result
        ax.plot([r["gamma"] for r in bad], [r["measured_speedup"] for r in bad], "o", ms=12,
                mfc="none", color="tab:red", label="noisy: the load moved")  # fmt: skip
    ax.set_xlabel("gamma (draft tokens per round)")
    ax.set_ylabel("speedup over the target alone")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def _prompt(n: int, vocab: int, seed: int) -> list[int]:
    """n fixed pseudo-random token ids (a long context; the model is random anyway)."""
    import numpy as np

    return np.random.default_rng(seed).integers(1, vocab, n).tolist()


def run_predictions(*, seed: int = 0) -> list[PredictionRow]:
    """The formula on `GRID` (what `--sweep` reruns: it reads no assumption, so a sweep is
    refused at once, never a rerun of the measured part per value: hunt 76)."""
    return [
        PredictionRow("speedup", expected_speedup(a, g, c), "x", {"alpha": a, "gamma": g, "c": c})
        for a, g, c in GRID
    ]


def run(*, quick: bool = False, seed: int = 0) -> ExperimentResult:
    from wse_inference.engine import SamplingParams

    target = _target(seed)
    new_tokens = 60 if quick else 120
    prompt = _prompt(CONTEXT - new_tokens, target.config.vocab_size, seed)
    sampling = SamplingParams(max_tokens=new_tokens, temperature=1.0, seed=seed)
    repeats = 3 if quick else 5
    gammas = (4,) if quick else (1, 2, 4, 6)
    rows = []
    for layers in (1,) if quick else (1, 2):
        rows += _measure(target, layers, gammas, sampling, prompt, repeats)
    predictions = run_predictions(seed=seed)
    return ExperimentResult(
        experiment="leviathan23-speculative",
        seed=seed,
        config={
            "target": "llama 12 x 512 (d_ff 1408, 8 heads, 4 kv heads), vocab 1024, head x1.5",
            "why_context": "a long context makes the step memory-bound (weights + KV cache "
            "read once per step, shared by the gamma + 1-token verification), as the formula "
            "assumes; see the module docstring",
            "target_weight_mb": _weight_mb(target),
            "temperature": 1.0,
            "new_tokens": sampling.max_tokens,
            "prompt_tokens": len(prompt),
            "context": CONTEXT,
            "gammas": list(gammas),
            "agreement": agreement(rows),
        },
        measurements=rows,
        predictions=predictions,
        figure=_figure(rows),
    )
