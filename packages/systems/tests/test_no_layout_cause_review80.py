"""Review 80 (hole 2): above the fewest GPUs with a layout, a count whose data x tensor x
pipeline splits all overflow memory was refused with the divisibility line ("no layout runs
the global batch of 48 sequences: Megatron-LM needs data-parallel ranks that divide it
..."), which sends the user to the batch and the split rules, neither of which can help.

Llama 3 70B, batch 48, seq 8192, on 24 H100s. Oracles by hand: the splits Megatron-LM
accepts (tp in 1, 2, 4, 8, dividing the 64 heads, 8 KV heads and the 8-GPU node; pp
dividing the 80 layers; dp = 24 / (tp pp) dividing 48): 3 divides 24 and no pp, so every
replica tp x pp is at most 8 GPUs. The least memory a GPU of any of them holds is tp 8 x
pp 1's (Megatron's theoretical_memory_usage by hand: 18 bytes x 70,553,706,496 parameters,
80 layers' bf16 inputs 2 s d, one layer's working set 34 s d, the ids 8 s and the fp32
logits 4 s (d + V), all over tp 8): 160.9 GB, over 0.9 x 80 GiB = 77.3 GB."""

from __future__ import annotations

import wse_models
from wse_systems import gpu as gpum

L70B = wse_models.preset_config("llama3-70b", dtype="bfloat16")
PARAMS, LAYERS, D, VOCAB, SEQ = 70_553_706_496, 80, 8192, 128_256, 8192
USABLE = 0.9 * 80 * 2**30


def _splits(n: int, batch: int) -> list[tuple[int, int, int]]:
    return [(tp, pp, n // (tp * pp)) for tp in (1, 2, 4, 8) for pp in range(1, LAYERS + 1)
            if LAYERS % pp == 0 and n % (tp * pp) == 0 and batch % (n // (tp * pp)) == 0
            and (n <= 8 or 8 % tp == 0)]  # fmt: skip


def test_splits_that_all_overflow_are_told_memory_is_short_not_to_divide():
    splits = _splits(24, 48)
    assert splits and max(tp * pp for tp, pp, _ in splits) == 8
    tp8 = (18 * PARAMS + LAYERS * 2 * SEQ * D + 34 * SEQ * D + 8 * SEQ
           + 4 * SEQ * (D + VOCAB)) / 8  # fmt: skip
    assert tp8 > USABLE and 18 * PARAMS / 8 > USABLE  # no split fits, whatever its shape
    try:
        gpum.train_step(L70B, gpum.H100, num_gpus=24, batch=48, seq_len=SEQ)
    except gpum.GpuMemoryError as e:
        err = e
    line = str(err)
    # before: a GpuLayoutError, "24 x H100-SXM5-80GB: no layout runs the global batch of 48
    # sequences: Megatron-LM needs data-parallel ranks that divide it (...); use 20 or 32 GPUs"
    assert not isinstance(err, gpum.GpuLayoutError) and "divide it" not in line
    assert "replica of at most 8 GPUs" in line and f"at least {tp8 / 1e9:.1f} GB" in line
    assert f"more than the {USABLE / 1e9:.1f} GB of its memory usable" in line
    # the nearest counts that run: 20 (dp 1 x tp 4 x pp 5) below, 32 above
    below = next(n for n in range(23, 0, -1) if _runs(n, 48))
    above = next(n for n in range(25, 49) if _runs(n, 48))
    assert (below, above) == (20, 32) and line.endswith("use 20 or 32 GPUs")
    assert "the fewest GPUs with a layout are 20 (dp 1 x tp 4 x pp 5)" in line
    assert "\n" not in line


def _runs(n: int, batch: int) -> bool:
    return bool(list(gpum.layouts(L70B, gpum.H100, n, SEQ, batch)))


def test_no_split_at_all_keeps_the_divisibility_line():
    """26 = 2 x 13: 13 divides none of the heads, the layers or the batch: no split at all."""
    try:
        gpum.train_step(L70B, gpum.H100, num_gpus=26, batch=48, seq_len=SEQ)
    except gpum.GpuMemoryError as e:
        err = e
    assert not _splits(26, 48) and isinstance(err, gpum.GpuLayoutError)
    assert "no data x tensor x pipeline split of 26 GPUs" in str(err)
