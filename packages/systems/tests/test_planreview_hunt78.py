"""Review of hunt 78's GPU training plans (tag planreview78).

1. `wse plan train -m gpt2-124m --tokens 1e17 --systems 20480 --batch 1048576` hung (killed
   at 120 s): the GPU layouts listed the global batch's divisors (2^20 x 20480 = 2.1e10) by
   trying every integer up to it. Oracles: products of the prime factorization and brute
   force; the repro in a subprocess bounded by its timeout.
2. The gradient ring was priced at an even share of the parameters, num_params / (tp pp),
   where the compute puts the head on the last stage. Oracle: the stages' parameters from
   the published totals of GPT-2 124M (HF: 124,439,808 = 12 x 7,087,872 layers + 38,597,376
   tokens + 786,432 positions + 1,536 final LN) and Llama 3 8B (8,030,261,248 = 32 x
   218,112,000 + 2 x 525,336,576 untied + 4,096), and the ring formula and Megatron's rank
   order written here.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import pytest
import wse_models
from wse_core.divisors import divisors
from wse_systems import gpu as gpum
from wse_systems import gpu_layout

GPT2_124M = wse_models.preset_config("gpt2-124m", dtype="bfloat16")
L8B = wse_models.preset_config("llama3-8b", dtype="bfloat16")
NODE, IB, IB_LAT, NVLINK, NV_LAT = 8, 50e9, 5e-6, 450e9, 1e-6  # H100 figures (gpu.py)
# published parameter counts (HF model cards / config sums), not this stack's formula
GPT2_LAYER, GPT2_WTE, GPT2_WPE, GPT2_LNF = 7_087_872, 38_597_376, 786_432, 1_536
L8B_LAYER, L8B_EMBED, L8B_NORM = 218_112_000, 525_336_576, 4_096


def _by_factors(n: int) -> list[int]:
    """Every product of n's prime powers (trial division), another route than divisors'."""
    out, p = [1], 2
    while p * p <= n:
        k = 0
        while n % p == 0:
            n, k = n // p, k + 1
        out = [d * p**e for d in out for e in range(k + 1)]
        p += 1 if p == 2 else 2
    out = out + [d * n for d in out] if n > 1 else out
    return sorted(out)


def test_divisors_are_the_factorizations_and_brute_forces():
    for n in range(1, 2000):
        assert divisors(n) == [d for d in range(1, n + 1) if n % d == 0], n
    rng = random.Random(78)
    for n in [2**32 * 5, 720720 * 20160, 10**12 + 39, 999_999_000_001]:
        assert divisors(n) == _by_factors(n), n
    for _ in range(50):
        n = rng.randrange(1, 10**10)
        assert divisors(n) == _by_factors(n), n
    with pytest.raises(ValueError):
        divisors(0)


def _in_subprocess(code: str, timeout: int) -> str:
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=timeout, env={**os.environ, "COLUMNS": "300"})  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout


def test_train_counts_of_a_huge_batch_return_at_once():
    # 2^20 x 20480 sequences: before, 2.1e10 trials (the plan was killed at 120 s)
    batch = 2**20 * 20480
    code = (
        "import json, wse_models; from wse_systems import gpu_layout, gpu;"
        "m = wse_models.preset_config('gpt2-124m', dtype='bfloat16');"
        f"print(json.dumps(gpu_layout.train_counts(m, gpu.H100, seq_len=1024, batch={batch})))"
    )
    counts = json.loads(_in_subprocess(code, timeout=60))
    # every count is dp x tp x pp with dp | batch and a split that fits, and each one has a
    # layout (`layouts`, Megatron's rules: test_gputrain_hunt78's oracle checks them)
    dps = _by_factors(batch)
    assert counts == sorted(counts) and len(counts) == len(set(counts))
    for n in counts[:40] + counts[-40:]:
        assert any(True for _ in gpu_layout.layouts(GPT2_124M, gpum.H100, n, 1024, batch)), n
    assert max(counts) <= max(dps) * NODE * GPT2_124M.n_layers


@pytest.mark.slow
def test_the_huge_plan_finishes_within_its_timeout():
    code = (
        "import sys; from wse_cli.entry import main; sys.argv = ['wse', 'plan', 'train', "
        "'-m', 'gpt2-124m', '--tokens', '1e17', '--systems', '20480', '--batch', '1048576', "
        "'--json']; main()"
    )
    plan = json.loads(_in_subprocess(code, timeout=120))  # before: still running at 120 s
    assert plan["inputs"]["global_batch"] == 2**20 * 20480
    assert (
        plan["gpu"]["layout"]["dp"] * plan["gpu"]["layout"]["tp"] * plan["gpu"]["layout"]["pp"]
        == plan["gpu"]["units"]
    )


GPT2_TOTAL = 12 * GPT2_LAYER + GPT2_WTE + GPT2_WPE + GPT2_LNF  # 124,439,808
L8B_TOTAL = 32 * L8B_LAYER + 2 * L8B_EMBED + L8B_NORM  # 8,030,261,248
# (the first stage's end, the last's): GPT-2's tied head is Megatron's copy on the last
ENDS = {"gpt2-124m": (GPT2_WTE + GPT2_WPE, GPT2_LNF + GPT2_WTE),
        "llama3-8b": (L8B_EMBED, L8B_NORM + L8B_EMBED)}  # fmt: skip


@pytest.mark.parametrize("m,pp,want", [
    (GPT2_124M, 1, GPT2_TOTAL),
    (GPT2_124M, 2, 6 * GPT2_LAYER + GPT2_WTE + GPT2_WPE),  # the first: + the positions
    (GPT2_124M, 12, GPT2_LAYER + GPT2_WTE + GPT2_WPE),
    (L8B, 1, L8B_TOTAL),
    (L8B, 2, 16 * L8B_LAYER + L8B_EMBED + L8B_NORM),  # the last: the head + the final norm
    (L8B, 8, 4 * L8B_LAYER + L8B_EMBED + L8B_NORM),
])  # fmt: skip
def test_the_largest_stage_holds_its_layers_and_an_end(m, pp, want):
    assert gpu_layout.stage_params(m, pp) == want
    total = GPT2_TOTAL if m is GPT2_124M else L8B_TOTAL
    assert want >= total / pp  # before: the even share (GPT-2 124M's at pp 12: 22% of this)


def _ring_by_hand(params: int, tp: int, dp: int, pp: int) -> float:
    """fp32 main gradients (Megatron's bf16 default; hunt 79: bf16 before) over tp, ring
    all-reduced over dp (2 (p-1)/p n / bw + 2 (p-1) lat),
    on NVLink only where Megatron's rank order t + tp (d + dp p) keeps each group in a node."""
    groups = [[t + tp * (d + dp * p) for d in range(dp)] for p in range(pp) for t in range(tp)]
    nvlink = all(len({r // NODE for r in g}) == 1 for g in groups)
    bw, lat = (NVLINK, NV_LAT) if nvlink else (IB, IB_LAT)
    return 2 * (dp - 1) / dp * 4 * params / tp / bw + 2 * (dp - 1) * lat


@pytest.mark.parametrize("m,gpus", [(GPT2_124M, 128), (GPT2_124M, 256), (L8B, 1024), (L8B, 256)])
def test_the_ring_priced_is_the_largest_stages(m, gpus):
    # layouts at pp > 1 (2, 4, 16, 8) where the ring is exposed past the backward (hunt 79:
    # GPT-2 on 64 GPUs ran pp 2 before its tied table's all-reduce over IB was priced; now
    # dp 16 x tp 4 x pp 1, so 128)
    s = gpum.train_step(m, gpum.H100, num_gpus=gpus, batch=16, seq_len=2048)
    dp, tp, pp = s.layout.dp, s.layout.tp, s.layout.pp
    layer = GPT2_LAYER if m is GPT2_124M else L8B_LAYER
    params = m.n_layers // pp * layer + max(ENDS[m.name])
    assert pp > 1 and s.exposed_allreduce_s > 0
    assert s.allreduce_s == pytest.approx(_ring_by_hand(params, tp, dp, pp), rel=1e-12)
    # hunt 80: each end stage's ring against what follows its last micro-batch's backward
    # (3/4 of a micro-batch under full recompute): the first stage's is 1F1B's last, and no
    # send follows it (review 82: a hop did); the last stage's is followed by its send and
    # the other pp - 1 stages' backwards and sends (2/3 of every micro-batch's busy time hid
    # the largest ring before). A layer's matmul flops by hand:
    # GPT-2 12 d^2 (its layer less 9,984 biases and LNs), Llama 3 8B's less its 2 norms
    d, micro = m.d_model, 16 // dp
    matmul = 12 * d * d if m is GPT2_124M else L8B_LAYER - 2 * d
    other = m.n_layers // pp * (6 * matmul + 12 * d * 2048)  # flops a token, no head
    busy = max(s.compute_s, s.floor.floor_s)
    other_s = max(s.compute_s * other / (other + 6 * m.vocab_size * d), s.floor.floor_s)
    hop = 2 * 2048 * d / tp / IB + IB_LAT  # the job spans nodes
    back = 3 / 4 * other_s / micro
    rings = [_ring_by_hand(m.n_layers // pp * layer + end, tp, dp, pp) for end in ENDS[m.name]]
    tails = (0.0, (pp - 1) * (back + hop))
    windows = (back, 3 / 4 * busy / micro + tails[1])
    # review 81: Megatron Core's last gradient bucket starts when its stage's backward ends:
    # the first stage's word embeddings, or the whole stage where its other parameters fill
    # no bucket of max(40M, 1M dp) a GPU (GPT-2's 3 layers and positions over tp 4: 5.5M),
    # and the whole last stage (one bucket past the first stage), under what follows alone
    first = m.n_layers // pp * layer + ENDS[m.name][0]
    whole = (first - m.vocab_size * d) / tp < max(40_000_000, 1_000_000 * dp)
    buckets = (rings[0] if whole else _ring_by_hand(m.vocab_size * d, tp, dp, pp), rings[1])
    exposed = max(*(r - w for r, w in zip(rings, windows, strict=True)),
                  *(b - t for b, t in zip(buckets, tails, strict=True)))  # fmt: skip
    assert s.exposed_allreduce_s == pytest.approx(exposed, rel=1e-12)
