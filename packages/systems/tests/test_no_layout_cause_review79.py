"""Review 79 (L11): below the fewest GPUs with a layout (`min_train_gpus` of a batch: the
first of `train_counts`), `no_layout_error` blamed memory ("cannot train this model ...
x 18 bytes ... use at least 20 GPUs") where no data x tensor x pipeline split of the count
exists at all. Llama 3 70B, batch 16, seq 8192, on H100s: 20 is the fewest with a layout.

Oracles by hand: the splits Megatron-LM accepts (tp in 1, 2, 4, 8 dividing 64 heads and 8
KV heads, pp dividing 80 layers, dp = n / (tp pp) dividing the batch of 16), and memory
(18 bytes x 70,553,706,496 parameters = 1,269.97 GB of states against 0.9 x 80 GiB =
77.31 GB usable a GPU: 16 GPUs hold 1,236.95 GB, less; 17 hold 1,314.26 GB, more)."""

from __future__ import annotations

import pytest
import wse_models
from wse_systems import gpu as gpum

L70B = wse_models.preset_config("llama3-70b", dtype="bfloat16")
STATES = 18 * 70_553_706_496
USABLE = 0.9 * 80 * 2**30


def _splits(n: int, batch: int = 16) -> list[tuple[int, int, int]]:
    return [(n // (tp * pp), tp, pp) for tp in (1, 2, 4, 8) for pp in range(1, 81)
            if 80 % pp == 0 and n % (tp * pp) == 0 and batch % (n // (tp * pp)) == 0]  # fmt: skip


def _refusal(n: int) -> gpum.GpuMemoryError:
    with pytest.raises(gpum.GpuMemoryError) as e:
        gpum.train_step(L70B, gpum.H100, num_gpus=n, batch=16, seq_len=8192)
    return e.value


@pytest.mark.parametrize("n", [17, 18, 19])
def test_a_count_with_no_split_is_told_so_not_that_memory_is_short(n):
    assert not _splits(n) and n * USABLE >= STATES  # 3, 17 or 19 divides n: no split
    e = _refusal(n)
    assert isinstance(e, gpum.GpuLayoutError)  # before: the memory line, "use at least 20"
    line = str(e)
    assert f"no data x tensor x pipeline split of {n} GPUs" in line and "cannot train" not in line
    assert line.endswith("use 20 GPUs")


def test_a_count_whose_splits_overflow_is_told_memory_is_short():
    assert (1, 8, 2) in _splits(16) and 16 * USABLE < STATES  # splits exist; none fits
    e = _refusal(16)
    assert not isinstance(e, gpum.GpuLayoutError) and "use at least 20 GPUs" in str(e)
