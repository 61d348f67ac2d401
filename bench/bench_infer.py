"""Inference benchmark: pipelined and plain decoding vs a PyTorch KV-cache decoder, speculative
speedup, and multi-user throughput against the number of pipeline stages.

Measured side by side in one process (2 virtual JAX devices = the 2 cores, torch on 1 thread:
two threads spin-wait on this shared machine), fp32 on the CPU, greedy, batch 1, best of
`repeats` runs after a warm-up (compile):
- decode: tokens/s after the first token of `wse_inference.torch_baseline.TorchDecoder`, the
  plain JAX decoder (`decoding.PlainDecoder`, fused while_loop) and the pipelined engine
  (`pipeline.PipelineEngine`, S stages, one user, 16 steps per dispatch), with the ratios to
  torch; all three must produce the same tokens;
- speculative: a 12-layer target and its first layer as the draft, gamma = 4, temperature 1;
  the target's head is scaled to set the operating point (acceptance ~0.8, chosen from a
  short run); speedup = speculative tokens/s / plain target tokens/s, next to Leviathan's
  (1 - a^(g+1)) / ((1 - a)(g c + 1)) with the measured a and c;
- throughput: S users on S stages, aggregate tokens/s for S = 1, 2, 4, with the stage rows
  on one device and on two (fabric shifts across devices).
Prints tables and writes bench/results/infer.json.

    python bench/bench_infer.py [--quick]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results"


def _best(fn, repeats: int):
    out = fn()  # warm-up (compile)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def _model(n_layers: int, d: int, vocab: int, head_scale: float = 1.0, seed: int = 0):
    from wse_inference.testing import tiny_model

    m = tiny_model(
        "llama",
        n_layers=n_layers,
        d_model=d,
        n_heads=4,
        n_kv_heads=2,
        d_ff=3 * d,
        max_seq_len=512,
        vocab_size=vocab,
        seed=seed,
    )
    params = dict(m.params)
    params["final"] = {**m.params["final"], "head": m.params["final"]["head"] * head_scale}
    return dataclasses.replace(m, params=params)


def _pipeline_decode(eng, prompt, sampling):
    """(decode seconds after prefill + insert, tokens) of one user, 16 steps per dispatch."""
    state = eng.init_decode_state()
    state = eng.insert(
        prefix=eng.prefill(prompt_ids=prompt, sampling=sampling), state=state, slot=0
    )
    jax_block(state)
    t0 = time.perf_counter()
    while state.seqs[0].finish_reason is None:
        state, _ = eng.generate_steps(state=state, steps=16)
    return time.perf_counter() - t0, state.seqs[0].tokens


def jax_block(state) -> None:
    import jax

    jax.block_until_ready(state.device)


def bench_decode(quick: bool, repeats: int) -> list[dict]:
    from wse_inference.decoding import PlainDecoder
    from wse_inference.engine import SamplingParams
    from wse_inference.pipeline import PipelineEngine
    from wse_inference.torch_baseline import TorchDecoder

    m = _model(4, 128 if quick else 256, 2048)
    prompt, n = list(range(1, 17)), 32 if quick else 64
    greedy = SamplingParams(max_tokens=n, temperature=0.0)
    ctx = len(prompt) + n
    torch_dec = TorchDecoder(m.config, m.params, ctx)
    ref, _ = torch_dec.generate(prompt, n)  # warm-up
    torch_s = min(torch_dec.generate(prompt, n)[1] for _ in range(repeats))
    rows = [
        {
            "decoder": "pytorch KV-cache (1 thread)",
            "tokens_per_s": (n - 1) / torch_s,
            "same_tokens": True,
        }
    ]
    plain = PlainDecoder(m.config, m.params, max_context=ctx)
    _, out = _best(lambda: plain.generate(prompt, greedy), repeats)
    best = max(plain.generate(prompt, greedy).tokens_per_s for _ in range(repeats))
    rows.append(
        {
            "decoder": "plain JAX (while_loop)",
            "tokens_per_s": best,
            "same_tokens": out.tokens == ref,
        }
    )
    for stages in (1, 2):
        eng = PipelineEngine(m, stages=stages, max_context=ctx)
        out = [_pipeline_decode(eng, prompt, greedy) for _ in range(repeats + 1)]  # 1: warm-up
        secs, toks = min(o[0] for o in out[1:]), out[-1]
        rows.append(
            {
                "decoder": f"pipelined, {stages} stage(s), 1 user",
                "tokens_per_s": (n - 1) / secs,
                "same_tokens": toks[1] == ref,
            }
        )
    for r in rows:
        r["vs_pytorch"] = r["tokens_per_s"] / rows[0]["tokens_per_s"]
    return rows


def _spec_run(target, draft, gamma, prompt, sampling, repeats):
    from wse_inference.decoding import PlainDecoder
    from wse_inference.spec_decode import SpeculativeDecoder

    spec = SpeculativeDecoder(target, draft, gamma=gamma, max_context=256)
    plain_t = PlainDecoder(target.config, target.params, max_context=256)
    plain_d = PlainDecoder(draft.config, draft.params, max_context=256)
    runs = [
        spec.generate(prompt, dataclasses.replace(sampling, seed=s)) for s in range(repeats + 1)
    ][1:]
    t_rate = max(plain_t.generate(prompt, sampling).tokens_per_s for _ in range(repeats + 1))
    d_rate = max(plain_d.generate(prompt, sampling).tokens_per_s for _ in range(repeats + 1))
    return runs, t_rate, d_rate


def bench_speculative(quick: bool, repeats: int, gamma: int = 4) -> dict:
    from wse_inference.engine import SamplingParams
    from wse_inference.loading import truncated_model
    from wse_inference.speculative import (
        AcceptanceStats,
        expected_speedup,
        expected_tokens_per_pass,
    )

    prompt = list(range(1, 17))
    sampling = SamplingParams(max_tokens=60 if quick else 120, temperature=1.0)
    layers, d = (8, 192) if quick else (12, 256)
    best = None
    for scale in (1.25, 1.5, 1.75, 2.0):  # pick the operating point nearest acceptance 0.8
        t = _model(layers, d, 1024, scale)
        runs, t_rate, d_rate = _spec_run(t, truncated_model(t, 1), gamma, prompt, sampling, 1)
        alpha = runs[-1].metrics["speculative"]["alpha"]
        if best is None or abs(alpha - 0.8) < abs(best[1] - 0.8):
            best = (scale, alpha)
    t = _model(layers, d, 1024, best[0])
    runs, t_rate, d_rate = _spec_run(t, truncated_model(t, 1), gamma, prompt, sampling, repeats)
    stats = AcceptanceStats(gamma)  # pooled over the runs; alpha = mean of the runs' alphas
    for r in runs:
        s = r.metrics["speculative"]
        stats.rounds += s["rounds"]
        stats.accepted += s["accepted"]
        stats.beta_sum += s["alpha"]
        stats.beta_count += 1
    spec_rate = max(r.tokens_per_s for r in runs)
    from wse_inference.studies.leviathan23_speculative import forward_ms

    t_step = forward_ms(t.config, t.params, 1)
    c = t_rate / d_rate  # draft decode step / target decode step (sampling included)
    v = forward_ms(t.config, t.params, gamma + 1) / t_step  # verification pass / target step
    return {
        "target_layers": layers,
        "draft_layers": 1,
        "d_model": d,
        "gamma": gamma,
        "head_scale": best[0],
        "alpha": stats.alpha,
        "acceptance_rate": stats.acceptance_rate,
        "cost_ratio_c": c,
        "mean_tokens_per_pass": stats.mean_tokens_per_pass,
        "target_tokens_per_s": t_rate,
        "speculative_tokens_per_s": spec_rate,
        "speedup": spec_rate / t_rate,
        "leviathan_speedup": expected_speedup(stats.alpha, gamma, c),
        "verify_cost_ratio": v,
        "formula_with_verify_cost": expected_tokens_per_pass(stats.alpha, gamma) / (gamma * c + v),
    }


def bench_throughput(quick: bool, repeats: int) -> list[dict]:
    from wse_inference.engine import SamplingParams
    from wse_inference.pipeline import PipelineEngine

    m = _model(4, 128 if quick else 256, 2048)
    n = 24 if quick else 48
    rows = []
    for stages, devices in ((1, 1), (2, 1), (4, 1), (2, 2), (4, 2)):
        prompts = [list(range(1 + u, 17 + u)) for u in range(stages)]
        samplings = [SamplingParams(max_tokens=n, temperature=0.0)] * stages
        eng = PipelineEngine(m, stages=stages, max_context=16 + n, mesh_rows=devices)
        secs, _ = _best(
            lambda e=eng, p=prompts, s=samplings: e.generate_all(p, s, steps_per_call=8), repeats
        )
        rows.append(
            {
                "stages": stages,
                "users": stages,
                "devices": devices,
                "tokens_per_s": stages * n / secs,
                "per_user_tokens_per_s": n / secs,
            }
        )
    return rows


def _table(title: str, rows: list[dict]) -> None:
    print(f"\n{title}")
    keys = list(rows[0])
    print(" | ".join(keys))
    for r in rows:
        print(" | ".join(f"{r[k]:.3g}" if isinstance(r[k], float) else str(r[k]) for k in keys))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    from wse_core.runtime import configure

    configure(2)
    import torch

    torch.set_num_threads(1)
    repeats = 2 if args.quick else 3
    out = {"decode": bench_decode(args.quick, repeats)}
    _table("batch-1 greedy decode (tokens/s after the first token)", out["decode"])
    out["speculative"] = bench_speculative(args.quick, repeats)
    _table("speculative decoding (gamma 4, first-layer draft)", [out["speculative"]])
    out["throughput"] = bench_throughput(args.quick, repeats)
    _table("multi-user throughput: S users on S stages", out["throughput"])
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "infer.json").write_text(json.dumps(out, indent=2, default=float))
    print(f"\nwrote {RESULTS / 'infer.json'}")


if __name__ == "__main__":
    main()
