"""Training benchmark: the weight-streamed step against a plain fused jit train step of the
same model (target >= 0.8x) and against a minimal PyTorch CPU loop of the same GPT-2
(transformers' GPT2LMHeadModel + torch.optim.AdamW; target >= 1x), measured side by side
in one process. Also tokens/s and model FLOP/s against this machine's measured matmul peak.

    python bench/bench_train.py [--quick]

Prints a table and writes bench/results/train.json. Timings are the median of interleaved
rounds (the machine is shared), each round timing every contender once.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results"
CASES = {  # name: (d_model, n_layers, n_heads, d_ff, vocab, batch, seq)
    "tiny d128 L4": (128, 4, 4, 512, 2048, 16, 128),
    "small d256 L6": (256, 6, 8, 1024, 4096, 16, 128),
}


def _median_time(fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def matmul_peak_flops(n: int = 1024, repeats: int = 10) -> float:
    """fp32 matmul FLOP/s of this machine through XLA (the best of `repeats`)."""
    import jax
    import jax.numpy as jnp

    a = jnp.ones((n, n), jnp.float32)
    f = jax.jit(lambda x: x @ x)
    jax.block_until_ready(f(a))
    best = min(_median_time(lambda: jax.block_until_ready(f(a)), 1) for _ in range(repeats))
    return 2 * n**3 / best


def _jax_contenders(shape, seed: int):
    import jax
    import numpy as np
    import wse_models
    from wse_core import preset
    from wse_trainer.config import OptimizerConfig
    from wse_trainer.optimizer import base_transform, full_transform
    from wse_trainer.plan import plan_activations
    from wse_trainer.reference import fused_step
    from wse_trainer.stream import StreamedTrainer

    d, layers, heads, ff, vocab, batch, seq = shape
    model = wse_models.preset_config(
        "tiny-gpt2",
        d_model=d,
        n_layers=layers,
        n_heads=heads,
        n_kv_heads=heads,
        d_ff=ff,
        vocab_size=vocab,
        max_seq_len=seq,
    )
    data = np.random.default_rng(seed).integers(0, vocab, (batch, seq + 1)).astype(np.int32)
    opt = OptimizerConfig()
    params = wse_models.init_params(model, jax.random.key(seed))
    streamed = StreamedTrainer(
        model,
        params,
        base_transform(opt, 1000),
        num_csx=1,
        global_batch=batch,
        seq_len=seq,
        plan=plan_activations(model, preset("small"), batch, seq),
    )
    tx = full_transform(opt, 1000)
    step = jax.jit(fused_step(model, tx), donate_argnums=(0, 1))
    state = {"p": jax.tree.map(lambda x: x.copy(), params)}
    state["s"] = tx.init(state["p"])

    def fused():
        state["p"], state["s"], loss = step(state["p"], state["s"], data)
        jax.block_until_ready(loss)

    stalls = []

    def stream():
        stalls.append(streamed.step(data).stall_fraction)

    for _ in range(2):  # compile and warm up
        fused()
        stream()
    stalls.clear()
    return model, data, {"streamed": stream, "fused jit": fused}, stalls


def _torch_contender(shape, data, threads: int):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    d, layers, heads, ff, vocab, batch, seq = shape
    torch.manual_seed(0)
    cfg = GPT2Config(
        vocab_size=vocab,
        n_positions=seq,
        n_embd=d,
        n_layer=layers,
        n_head=heads,
        n_inner=ff,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        activation_function="gelu_new",
    )
    model = GPT2LMHeadModel(cfg)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    x = torch.from_numpy(data[:, :-1].astype("int64"))
    y = torch.from_numpy(data[:, 1:].astype("int64"))

    def torch_step():
        torch.set_num_threads(threads)
        logits = model(input_ids=x).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for _ in range(2):
        torch_step()
    return torch_step


def bench_case(name: str, shape, rounds: int) -> dict:
    model, data, fns, stalls = _jax_contenders(shape, 0)
    try:  # torch's own threading, and one thread (OpenMP spin-waits hurt on a shared host)
        for threads in (2, 1):
            fns[f"pytorch {threads}t"] = _torch_contender(shape, data, threads)
    except ImportError:
        pass
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for key, fn in fns.items():
            times[key].append(_median_time(fn, 1))
    t = {k: statistics.median(v) for k, v in times.items()}
    batch, seq = shape[5], shape[6]
    tokens = batch * seq
    flops = model.train_flops_per_token(seq) * tokens
    return {
        "case": name,
        "params": model.num_params(),
        "batch": batch,
        "seq": seq,
        "step_s": t,
        "tokens_per_s": {k: tokens / v for k, v in t.items()},
        "model_flops_per_s": {k: flops / v for k, v in t.items()},
        "streamed_vs_fused": t["fused jit"] / t["streamed"],
        "streamed_vs_torch": min(v for k, v in t.items() if k.startswith("pytorch")) / t["streamed"]
        if any(k.startswith("pytorch") for k in t)
        else None,
        "stall_fraction": statistics.median(stalls) if stalls else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="One case, fewer rounds.")
    args = ap.parse_args()
    from wse_core.runtime import configure

    configure(1)
    peak = matmul_peak_flops()
    cases = dict(list(CASES.items())[:1]) if args.quick else CASES
    rows = [bench_case(k, v, 3 if args.quick else 7) for k, v in cases.items()]
    print(f"machine: fp32 matmul peak {peak / 1e9:.1f} GFLOP/s (XLA, 1024^2)")
    print(
        f"{'case':<15}{'contender':<13}{'step ms':>9}{'tokens/s':>10}{'GFLOP/s':>9}{'of peak':>8}"
    )
    for r in rows:
        for k, v in r["step_s"].items():
            print(
                f"{r['case']:<15}{k:<13}{v * 1e3:>9.1f}{r['tokens_per_s'][k]:>10.0f}"
                f"{r['model_flops_per_s'][k] / 1e9:>9.1f}"
                f"{r['model_flops_per_s'][k] / peak:>8.1%}"
            )
        vs_torch = r["streamed_vs_torch"]
        print(
            f"  streamed vs fused jit {r['streamed_vs_fused']:.2f}x (target >= 0.8); vs "
            f"the faster PyTorch {vs_torch:.2f}x (target >= 1); stall fraction "
            f"{r['stall_fraction']:.3f}"
        )
    RESULTS.mkdir(exist_ok=True)
    out = {"peak_flops": peak, "cases": rows}
    (RESULTS / "train.json").write_text(json.dumps(out, indent=2))
    print(f"wrote {RESULTS / 'train.json'}")


if __name__ == "__main__":
    main()
