"""Device benchmark: the stack on JAX's default device (the GPU where there is one) against the
device's own limit and against jax-md and PyTorch on the same device, side by side in one run.

- roofline: the device's memory bandwidth from a device copy measured in this run (y = x + 1
  over a float32 array far beyond the caches: bytes read + written / best time), and the
  7-point Jacobi sweep as the shell runs it (`bench_stencil.bench_jacobi`, one device, fp32)
  in GB/s of the bytes a sweep must move (read u and f, write u) and as a fraction of the copy
  (target on a GPU: >= 0.7);
- md: EAM Cu (fcc, 1600 K, NVE, 1 fs) atom-steps/s of the wafer emulator and of jax-md's EAM
  at the same sizes (`bench_md`'s contenders, each timed on its own loop after compiling),
  every size in a child process under a time limit, sizes growing until one fails or runs
  out of time: the last that ran is the largest crystal that runs;
- train: one training step of the same GPT-2 (the fused jit step and the weight-streamed step
  of `bench_train`, planned for the small wafer and for a CS-3; on a GPU each streamed step
  runs as one program, `Layout.device_loop`) against transformers' GPT2LMHeadModel + AdamW
  on the same device, interleaved rounds, medians; the streamed steps against the fused one
  (target >= 0.8x);
- decode: greedy batch-1 decoding of the same random Llama: the plain JAX decoder (one fused
  loop, `wse_inference.decoding.PlainDecoder`) against `bench/torch_baseline.TorchDecoder`
  (preallocated KV cache) and transformers with its own cache, on the same device, whole
  calls (prompt + new tokens) timed, the same tokens required.
On a CPU the same code runs with the CPU as the device; there the copy is XLA's on one
device. fp32 everywhere; JAX's float32 dots here ask for HIGHEST precision (the models do;
PyTorch's default keeps TF32 off for matmuls), so neither side runs TF32.

    python bench/bench_device.py [--quick] [--parts roofline,train,decode,md] [--out FILE]
        [--md-budget-s S] [--deadline-s S]

Prints a table per part; writes bench/results/device.json (and FILE with --out) after every
part, so a run stopped by a time limit keeps the parts it finished.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Before JAX starts: take GPU memory as needed (PyTorch shares the device in this process).
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
RESULTS = Path(__file__).parent / "results"
sys.path.insert(0, str(Path(__file__).parent))
from rounds import interleaved, ratio, ratio_line, record  # noqa: E402  (bench/rounds.py)

PARTS = ("roofline", "train", "decode", "md")  # md last: it grows into the time left


def _setup() -> dict:
    """One device (the GPU's, or one CPU device); the device as the JSON names it."""
    from wse_core.host.runtime import configure

    configure(1, compile_cache=False)
    import jax

    d = jax.devices()[0]
    return {"platform": d.platform, "kind": d.device_kind, "count": len(jax.devices())}


def _torch_device() -> str:
    import jax
    import torch

    return "cuda" if jax.default_backend() == "gpu" and torch.cuda.is_available() else "cpu"


def copy_gb_s(n_bytes: int, repeats: int) -> float:
    """The device's memory bandwidth: y = x + 1 over n_bytes of float32 (read + write), the
    input donated to the output (no fresh allocation, hence no first-touch page faults, on a
    CPU), best of `repeats` calls after two warm-ups."""
    import jax
    import jax.numpy as jnp
    from wse_core.host.runtime import wall_s

    x = jnp.zeros(n_bytes // 4, jnp.float32)
    add = jax.jit(lambda a: a + 1.0, donate_argnums=0)
    times = []
    for _ in range(repeats + 2):
        x, seconds = wall_s(add, x)
        times.append(seconds)
    return 2 * n_bytes / min(times[2:]) / 1e9


def roofline(quick: bool, gpu: bool) -> dict:
    from bench_stencil import bench_jacobi

    n_bytes = (1 << 30) if gpu else (128 << 20 if quick else 512 << 20)
    bw = copy_gb_s(n_bytes, 10 if gpu else 3)
    n, steps = (512, 50) if gpu else ((96, 5) if quick else (256, 10))
    j = bench_jacobi(n, steps, 3 if gpu else 2, (1, 1))
    j["copy_gb_s"] = bw
    j["copy_bytes"] = n_bytes
    j["gcells_per_s"] = n**3 / j["wafer_s_per_sweep"] / 1e9
    j["fraction_of_copy"] = j["wafer_gb_s"] / bw
    j["target_fraction"] = 0.7
    print(f"\nroofline: device copy {bw:.0f} GB/s ({n_bytes >> 20} MiB, read + write)")
    print("| kernel | grid | ms/sweep | GB/s | Gcell/s | of copy | max rel diff vs NumPy |")
    print("|---|---|---|---|---|---|---|")
    print(
        f"| jacobi fp32 | {j['grid']} | {j['wafer_s_per_sweep'] * 1e3:.3f} | "
        f"{j['wafer_gb_s']:.0f} | {j['gcells_per_s']:.1f} | {j['fraction_of_copy']:.0%} | "
        f"{j['max_rel_diff_vs_numpy']:.1e} |"
    )
    return j


def md_worker(cells: int, steps: int) -> dict:
    """One size, both codes, in this (child) process: a JSON-able dict."""
    from bench_md import jax_md_eam, potential_files, wafer_emulator_md
    from wse_hpc.md import maxwell_boltzmann
    from wse_hpc.md.lattice import crystal

    with tempfile.TemporaryDirectory() as tmp:
        pot, _, setfl = potential_files(Path(tmp))
        s = crystal("fcc", "Cu", 3.615, (cells, cells, cells))
        s.velocities_A_ps = maxwell_boltzmann([pot.masses_amu[0]] * s.num_atoms, 1600.0, seed=1)
        row = {"atoms": s.num_atoms, "steps": steps}
        for name, fn in (("wafer_emulator", wafer_emulator_md), ("jax_md", jax_md_eam)):
            t0 = time.perf_counter()
            try:
                row[name] = fn(s, pot if name == "wafer_emulator" else setfl, steps)
            except Exception as e:  # a size that fails is a result here
                row[name] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
            row[name]["wall_s"] = time.perf_counter() - t0
    return row


def md(quick: bool, gpu: bool, budget_s: float) -> dict:
    """Growing crystals, each in a child under a time limit, until one fails or times out."""
    cells = [20, 40, 60, 80, 100] if gpu else ([4, 10] if quick else [4, 10, 20])
    steps = 100 if gpu else (40 if quick else 100)
    start, rows = time.perf_counter(), []
    for c in cells:
        left = budget_s - (time.perf_counter() - start)
        if left < 20:
            rows.append({"atoms": 4 * c**3, "skipped": f"{budget_s:.0f} s budget spent"})
            break
        cmd = [sys.executable, __file__, "--md-worker", str(c), "--steps", str(steps)]
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=left)
            row = (
                json.loads(out.stdout.strip().splitlines()[-1])
                if out.returncode == 0
                else {"atoms": 4 * c**3, "error": out.stderr.strip()[-500:]}
            )
        except subprocess.TimeoutExpired:
            row = {"atoms": 4 * c**3, "error": f"no result within {left:.0f} s"}
        rows.append(row)
        print(_md_line(row), flush=True)
        if "atom_steps_per_s" not in row.get("wafer_emulator", {}):
            break
    ran = [r["atoms"] for r in rows if "atom_steps_per_s" in r.get("wafer_emulator", {})]
    return {
        "steps": steps,
        "budget_s": budget_s,
        "rows": rows,
        "largest_atoms_run": max(ran or [0]),
    }


def _md_line(row: dict) -> str:
    ours = row.get("wafer_emulator", {}).get("atom_steps_per_s")
    theirs = row.get("jax_md", {}).get("atom_steps_per_s")
    if ours is None:
        return f"md {row['atoms']:>9,} atoms: {row.get('error') or row.get('wafer_emulator')}"
    ratio = f"{ours / theirs:.2f}x" if theirs else f"jax-md: {row['jax_md'].get('error')}"
    theirs_s = f"{theirs / 1e6:.2f} M" if theirs else "n/a"
    return (
        f"md {row['atoms']:>9,} atoms: emulator {ours / 1e6:.2f} M atom-steps/s, "
        f"jax-md {theirs_s}, {ratio} (target >= 1x)"
    )


def train(quick: bool, gpu: bool) -> dict:
    from bench_train import CASES, jax_contenders, torch_contender
    from wse_core.host.runtime import wall_s

    name, shape = (
        ("d512 L8 b16 s256", (512, 8, 8, 2048, 8192, 16, 256)) if gpu else next(iter(CASES.items()))
    )
    # on a GPU the chosen layout runs the step as one program (Layout.device_loop); its
    # host loop (0.11x PyTorch on an H200, 2026-11-27) is not timed again: compiling its
    # many small programs took most of that run's 193 s
    model, data, fns, stalls, layout = jax_contenders(shape, 0, host_loop=not gpu)
    # the small wafer's plan (bench_train's) cuts each matrix into column chunks and keeps
    # every 2nd layer input: its backward runs each layer's forward again, and half of them
    # a third time (4.5 layer-forward units a step against the fused step's 3, so <= 0.67x
    # of it at equal speed); on a CS-3 the same model streams whole layers at stride 1
    fns["streamed cs3"] = _streamed_on(model, data, "wse3")
    fns["pytorch"] = torch_contender(shape, data, _torch_device())
    for fn in fns.values():  # one untimed round: each was warmed before the next was built
        fn()  # (H200, 2026-12-04: without it the first round's streamed step ran 0.62x fused)
    times = interleaved({k: lambda fn=fn: wall_s(fn)[1] for k, fn in fns.items()},
                        3 if quick else 7)  # fmt: skip
    step_s = {k: statistics.median(v) for k, v in times.items()}
    tokens = shape[5] * shape[6]
    out = {
        "case": name,
        "params": model.num_params(),
        "torch_device": _torch_device(),
        "step_s": step_s,
        "tokens_per_s": {k: tokens / v for k, v in step_s.items()},
        "fused_vs_torch": ratio(times["fused jit"], times["pytorch"], 1.0),
        "streamed_vs_torch": ratio(times["streamed"], times["pytorch"], 0.8, floor=0.8),
        "streamed_vs_fused": ratio(times["streamed"], times["fused jit"], 0.8, floor=0.8),
        "streamed_cs3_vs_fused": ratio(times["streamed cs3"], times["fused jit"], 0.8, floor=0.8),
        "stall_fraction": statistics.median(stalls) if stalls else None,
        "layout": str(layout),
    }
    print(f"\ntrain: GPT-2 {name}, {out['params']:,} params, one step (median)")
    for k, v in step_s.items():
        print(f"  {k:<10} {v * 1e3:9.1f} ms  {tokens / v:11.0f} tokens/s")
    print("  " + ratio_line("fused vs PyTorch", out["fused_vs_torch"]))
    print("  " + ratio_line("streamed vs PyTorch", out["streamed_vs_torch"]))
    print("  " + ratio_line("streamed vs fused", out["streamed_vs_fused"]))
    print("  " + ratio_line("streamed cs3 vs fused", out["streamed_cs3_vs_fused"]))
    print(f"  layout: {layout}")
    return out


def _streamed_on(model, data, wafer: str):
    """bench_train's streamed step of `model` planned for the preset `wafer` (its layout
    chosen as `wse train` does), compiled and warmed up: a callable that runs one step."""
    import jax
    import wse_models
    from bench_train import streamed_trainer

    params = wse_models.init_params(model, jax.random.key(0))
    tr, _ = streamed_trainer(model, params, data, wafer)
    for _ in range(2):  # compile and warm up
        tr.step(data)
    return lambda: tr.step(data)


def decode(quick: bool, gpu: bool) -> dict:
    import numpy as np
    import wse_models as wm
    from bench_models import decode_hf
    from torch_baseline import TorchDecoder
    from wse_core.host.runtime import wall_s
    from wse_inference.decoding import PlainDecoder
    from wse_inference.engine import SamplingParams
    from wse_models.testing import hf_model

    d, layers, new = (1024, 8, 128) if gpu else ((128, 2, 16) if quick else (256, 4, 64))
    config = wm.ModelConfig(
        arch="llama", vocab_size=8192, d_model=d, n_layers=layers, n_heads=8, n_kv_heads=4,
        d_ff=4 * d, max_seq_len=512,
    )  # fmt: skip
    device = _torch_device()
    hf = hf_model(config, seed=0)
    with tempfile.TemporaryDirectory() as ckpt:  # through the HF format, as a user would
        hf.save_pretrained(ckpt)
        params = wm.from_pretrained(ckpt).params()
    hf = hf.to(device)
    prompt = np.random.default_rng(1).integers(0, config.vocab_size, 16).tolist()
    ours = PlainDecoder(config, params, max_context=len(prompt) + new)
    hand = TorchDecoder(config, params, max_len=len(prompt) + new, device=device)
    hf_run = decode_hf(hf, np.asarray([prompt]), new, device)
    greedy = SamplingParams(max_tokens=new, temperature=0.0, ignore_eos=True)
    fns = {
        "jax plain decoder": lambda: ours.generate(prompt, greedy).tokens,
        "torch KV-cache decoder": lambda: hand.generate(prompt, new)[0],
        "transformers (cache)": lambda: hf_run()[0, len(prompt) :].tolist(),
    }
    tokens = {k: fn() for k, fn in fns.items()}  # warm-up (compiles) and the tokens
    times = interleaved({k: lambda fn=fn: wall_s(fn)[1] for k, fn in fns.items()},
                        3 if quick else 5)  # fmt: skip
    call_s = {k: statistics.median(v) for k, v in times.items()}
    ref = tokens["jax plain decoder"]
    out = {
        "model": {"d_model": d, "n_layers": layers, "params": config.num_params()},
        "prompt_tokens": len(prompt),
        "new_tokens": new,
        "torch_device": device,
        "call_s": call_s,
        "tokens_per_s": {k: new / v for k, v in call_s.items()},
        "same_tokens": {k: v == ref for k, v in tokens.items()},
        "vs_torch_kv_cache": ratio(
            times["jax plain decoder"], times["torch KV-cache decoder"], 1.0
        ),
        "vs_transformers": ratio(times["jax plain decoder"], times["transformers (cache)"], 1.0),
    }
    print(f"\ndecode: Llama d{d} L{layers}, batch 1, {len(prompt)} + {new} tokens, whole calls")
    for k, v in call_s.items():
        same = out["same_tokens"][k]
        print(f"  {k:<24} {new / v:9.0f} tokens/s  same tokens: {same}")
    print("  " + ratio_line("vs torch KV-cache decoder", out["vs_torch_kv_cache"]))
    print("  " + ratio_line("vs transformers", out["vs_transformers"]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="CPU-sized problems, fewer rounds")
    ap.add_argument("--parts", default=",".join(PARTS), help="comma-separated subset")
    ap.add_argument(
        "--deadline-s", type=float, default=None, help="end within this (md gets what is left)"
    )
    ap.add_argument("--md-budget-s", type=float, default=240.0, help="all MD sizes together")
    ap.add_argument("--out", default=None, help="also write the JSON here")
    ap.add_argument("--md-worker", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--steps", type=int, default=100, help=argparse.SUPPRESS)
    args = ap.parse_args()
    device = _setup()
    if args.md_worker is not None:
        print(json.dumps(md_worker(args.md_worker, args.steps), default=float))
        return
    import jax

    gpu = jax.default_backend() == "gpu"
    result = {"benchmark": "device", "device": device, "jax": jax.__version__}
    result |= {"quick": args.quick, "load_average_start": os.getloadavg()}
    result["record"] = record("torch", "transformers", "jax-md", "numpy")
    paths = [RESULTS / "device.json", *([Path(args.out)] if args.out else [])]
    start = time.perf_counter()
    for part in args.parts.split(","):
        if part not in PARTS:
            raise SystemExit(f"unknown part {part!r}; use {', '.join(PARTS)}")
        t0 = time.perf_counter()
        try:
            if part == "md":
                budget = args.md_budget_s
                if args.deadline_s is not None:
                    budget = min(budget, args.deadline_s - (time.perf_counter() - start) - 10)
                result[part] = md(args.quick, gpu, budget)
            else:
                result[part] = {"roofline": roofline, "train": train, "decode": decode}[part](
                    args.quick, gpu
                )
        except Exception as e:  # one part's failure must not lose the others
            result[part] = {"error": f"{type(e).__name__}: {str(e)[:500]}"}
            print(f"\n{part}: FAILED {result[part]['error']}")
        result[part]["part_wall_s"] = time.perf_counter() - t0
        result["load_average_end"] = os.getloadavg()
        _write(result, paths)  # after every part: a run stopped later keeps what it measured
    print("wrote " + ", ".join(map(str, paths)))


def _write(result: dict, paths: list[Path]) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    for path in paths:
        path.write_text(json.dumps(result, indent=2, default=float) + "\n")


if __name__ == "__main__":
    main()
