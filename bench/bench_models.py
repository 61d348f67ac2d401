"""Model benchmark: wse_models vs PyTorch `transformers` on the same random Llama, side by side.

Measured in one process, one JAX device (`configure(1)`), torch on 1 thread, fp32 on the CPU:
- prefill: jitted `forward` over [batch, seq] tokens vs `LlamaForCausalLM` under no_grad,
  in tokens/s, with the largest logit difference between the two;
- decode: greedy KV-cached steps (one token per step, one jitted step function reused) vs
  recomputing the whole prefix every step (our baseline without a cache) vs the transformers
  model with its own cache (`past_key_values`), in tokens/s at batch 1.
Prints a table and writes bench/results/models.json.

    python bench/bench_models.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

RESULTS = Path(__file__).parent / "results"


def _best(fn, repeats: int) -> float:
    from wse_core.host.runtime import wall_times_s  # imported late: the bench sets up first

    return min(wall_times_s(fn, repeats=repeats))  # after one warm-up (compile)


def _setup(quick: bool):
    from wse_core.host.runtime import configure

    configure(1)
    import torch
    import wse_models as wm
    from wse_models.testing import hf_model

    torch.set_num_threads(1)  # 2 threads collapsed (spin-waits) on the shared 2-core machine
    d = 128 if quick else 256
    config = wm.ModelConfig(
        arch="llama", vocab_size=4096, d_model=d, n_layers=4, n_heads=8, n_kv_heads=4,
        d_ff=4 * d, max_seq_len=512,
    )  # fmt: skip
    hf = hf_model(config, seed=0)
    with tempfile.TemporaryDirectory() as ckpt:  # through the HF format, as a user would
        hf.save_pretrained(ckpt)
        ours = wm.from_pretrained(ckpt)
    return config, ours, hf


def bench_prefill(config, ours, hf, batch: int, seq: int, repeats: int) -> dict:
    import jax
    import numpy as np
    import torch
    import wse_models as wm

    toks = np.random.default_rng(0).integers(0, config.vocab_size, (batch, seq), dtype=np.int32)
    params = ours.params()
    fwd = jax.jit(lambda p, t: wm.forward(config, p, t)[0])
    jt = jax.numpy.asarray(toks)
    t_ours = _best(lambda: fwd(params, jt).block_until_ready(), repeats)
    ids = torch.from_numpy(toks.astype(np.int64))
    with torch.no_grad():
        t_hf = _best(lambda: hf(input_ids=ids).logits, repeats)
        ref = hf(input_ids=ids).logits.numpy()
    err = float(np.abs(np.asarray(fwd(params, jt)) - ref).max())
    n = batch * seq
    return {"case": f"prefill b={batch} s={seq}", "ours_tok_s": n / t_ours,
            "baseline_tok_s": n / t_hf, "baseline": "transformers (torch)",
            "max_logit_diff": err}  # fmt: skip


def decode_ours(config, params, prompt, steps: int, cached: bool):
    import jax
    import jax.numpy as jnp
    import wse_models as wm

    step = jax.jit(lambda p, t, pos, c: wm.forward(config, p, t, pos, c))
    full = jax.jit(lambda p, t: wm.forward(config, p, t)[0][:, -1])

    def run():
        toks = jnp.asarray(prompt)
        if not cached:
            for _ in range(steps):  # recompute the whole prefix: one compile per length
                nxt = jnp.argmax(full(params, toks), -1)[:, None].astype(jnp.int32)
                toks = jnp.concatenate([toks, nxt], 1)
            return toks.block_until_ready()
        cache = wm.init_cache(config, 1, prompt.shape[1] + steps)
        logits, cache = step(params, toks, wm.default_positions(toks), cache)
        out = [jnp.argmax(logits[:, -1], -1)[:, None].astype(jnp.int32)]
        for i in range(steps - 1):
            pos = jnp.full((1, 1), prompt.shape[1] + i, jnp.int32)
            logits, cache = step(params, out[-1], pos, cache)
            out.append(jnp.argmax(logits[:, -1], -1)[:, None].astype(jnp.int32))
        return jnp.concatenate([toks, *out], 1).block_until_ready()

    return run


def decode_hf(hf, prompt, steps: int, device: str = "cpu"):
    """Greedy decoding with transformers' own KV cache (`past_key_values`), `hf` and its
    tokens on `device`; returns a function giving the token ids as NumPy."""
    import numpy as np
    import torch

    def run():
        with torch.no_grad():
            ids = torch.from_numpy(prompt.astype(np.int64)).to(device)
            out = hf(input_ids=ids, use_cache=True)
            seq = [out.logits[:, -1].argmax(-1, keepdim=True)]
            for _ in range(steps - 1):
                out = hf(input_ids=seq[-1], past_key_values=out.past_key_values, use_cache=True)
                seq.append(out.logits[:, -1].argmax(-1, keepdim=True))
            return torch.cat([ids, *seq], 1).cpu().numpy()

    return run


def bench_decode(config, ours, hf, prompt_len: int, steps: int, repeats: int) -> dict:
    import numpy as np

    prompt = np.random.default_rng(1).integers(0, config.vocab_size, (1, prompt_len), np.int32)
    cached, nocache = (decode_ours(config, ours.params(), prompt, steps, c) for c in (1, 0))
    hf_run = decode_hf(hf, prompt, steps)
    same = bool(np.array_equal(np.asarray(cached()), hf_run()))
    same &= bool(np.array_equal(np.asarray(cached()), np.asarray(nocache())))
    t_c, t_n, t_h = (_best(f, repeats) for f in (cached, nocache, hf_run))
    return {"case": f"greedy decode b=1 prompt={prompt_len} new={steps}",
            "ours_tok_s": steps / t_c, "ours_nocache_tok_s": steps / t_n,
            "baseline_tok_s": steps / t_h, "baseline": "transformers (torch) with its cache",
            "same_tokens": same}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    RESULTS.mkdir(parents=True, exist_ok=True)
    config, ours, hf = _setup(args.quick)
    reps = 2 if args.quick else 5
    rows = [bench_prefill(config, ours, hf, 4, 64 if args.quick else 256, reps)]
    rows.append(bench_decode(config, ours, hf, 16, 16 if args.quick else 64, reps))
    print(f"model: llama d={config.d_model} L={config.n_layers} params={config.num_params():,}")
    print(f"{'case':45s} {'ours tok/s':>11s} {'baseline tok/s':>15s} {'ratio':>6s}  notes")
    for r in rows:
        note = (
            f"max|dlogit|={r['max_logit_diff']:.1e}"
            if "max_logit_diff" in r
            else f"no-cache {r['ours_nocache_tok_s']:.0f} tok/s; same tokens: {r['same_tokens']}"
        )
        ratio = r["ours_tok_s"] / r["baseline_tok_s"]
        print(f"{r['case']:45s} {r['ours_tok_s']:11.0f} {r['baseline_tok_s']:15.0f} "
              f"{ratio:6.2f}  {note}")  # fmt: skip
    out = {"model": {"d_model": config.d_model, "n_layers": config.n_layers,
                     "params": config.num_params()}, "quick": args.quick, "rows": rows}  # fmt: skip
    from wse_core.host.memory import host_record

    out["host"] = host_record()  # bandwidth, load average, CPUs, machine, time
    (RESULTS / "models.json").write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
