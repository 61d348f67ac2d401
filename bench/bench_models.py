"""Model benchmark: wse_models vs PyTorch `transformers` on the same random Llama, side by side.

Measured in one process, one JAX device (`configure(1)`), torch on 1 thread, fp32 on the CPU:
- prefill: jitted `forward` over [batch, seq] tokens vs `LlamaForCausalLM` under no_grad,
  in tokens/s, with the largest logit difference between the two;
- decode: greedy KV-cached steps (one token per step, one jitted step function reused) vs
  recomputing the whole prefix every step (our baseline without a cache) vs the transformers
  model with its own cache (`past_key_values`), in tokens/s at batch 1.
Each pair is timed in interleaved rounds (`bench/rounds.py`: ours, theirs, ours, ...) after
one warm-up call each; the table gives the median ratio with its spread and worst round.
Prints a table and writes bench/results/models.json.

    python bench/bench_models.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from rounds import interleaved, ratio, ratio_line, record, timed  # noqa: E402  (bench/rounds.py)

RESULTS = Path(__file__).parent / "results"


def _rounds(fns: dict, repeats: int) -> dict[str, list[float]]:
    for fn in fns.values():  # warm-up: compile and fill caches outside the rounds
        fn()
    return interleaved({k: timed(f) for k, f in fns.items()}, repeats)


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
    ids = torch.from_numpy(toks.astype(np.int64))

    def theirs():
        with torch.no_grad():
            return hf(input_ids=ids).logits

    times = _rounds({"ours": lambda: fwd(params, jt).block_until_ready(), "hf": theirs}, repeats)
    err = float(np.abs(np.asarray(fwd(params, jt)) - theirs().numpy()).max())
    n = batch * seq
    return {"case": f"prefill b={batch} s={seq}", "times_s": times,
            "ours_tok_s": n / min(times["ours"]), "baseline_tok_s": n / min(times["hf"]),
            "ratio": ratio(times["ours"], times["hf"]), "baseline": "transformers (torch)",
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
    times = _rounds({"ours": cached, "nocache": nocache, "hf": hf_run}, repeats)
    return {"case": f"greedy decode b=1 prompt={prompt_len} new={steps}", "times_s": times,
            "ours_tok_s": steps / min(times["ours"]),
            "ours_nocache_tok_s": steps / min(times["nocache"]),
            "baseline_tok_s": steps / min(times["hf"]),
            "ratio": ratio(times["ours"], times["hf"]),
            "baseline": "transformers (torch) with its cache", "same_tokens": same}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    RESULTS.mkdir(parents=True, exist_ok=True)
    config, ours, hf = _setup(args.quick)
    reps = 3 if args.quick else 7
    rows = [bench_prefill(config, ours, hf, 4, 64 if args.quick else 256, reps)]
    rows.append(bench_decode(config, ours, hf, 16, 16 if args.quick else 64, reps))
    print(f"model: llama d={config.d_model} L={config.n_layers} params={config.num_params():,}")
    print(f"{'case':45s} {'ours tok/s':>11s} {'baseline tok/s':>15s} {'median':>6s}  notes")
    for r in rows:
        note = (
            f"max|dlogit|={r['max_logit_diff']:.1e}"
            if "max_logit_diff" in r
            else f"no-cache {r['ours_nocache_tok_s']:.0f} tok/s; same tokens: {r['same_tokens']}"
        )
        print(f"{r['case']:45s} {r['ours_tok_s']:11.0f} {r['baseline_tok_s']:15.0f} "
              f"{r['ratio']['median']:6.2f}  {note}")  # fmt: skip
        print("  " + ratio_line("ours vs transformers", r["ratio"]))
    out = {"model": {"d_model": config.d_model, "n_layers": config.n_layers,
                     "params": config.num_params()}, "quick": args.quick, "rows": rows}  # fmt: skip
    out.update(record("torch", "transformers", "numpy"))  # host, versions, threads
    (RESULTS / "models.json").write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
