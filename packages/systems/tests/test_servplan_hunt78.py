"""Hunt 78 (servplan78): two refusals of `wse plan infer` named counts that do not run.

1. A model whose 6 KV heads forbid tp 8 (vLLM's rule) on 16 H100s was told to "use at least
   3 GPUs (up to 8 per node, then whole nodes)": whole nodes run no replica of it, and 16 GPUs
   make replicas of at most 2. The refusal now names the reason and the counts that run.
2. `--wafers 3 --stages 2` on Llama 3 70B offered "--stages in [3, 80]", all refused, since 3
   wafers hold the model in no stage count. The refusal now names the least wafer count.

Oracles: the counts that run, brute-forced by building the serving system (or the wafers'
plan) on each count; vLLM's rule written out by hand (`QKVParallelLinear`: tp divides the
heads, and the KV heads, or is a multiple of them)."""

from __future__ import annotations

import dataclasses
import re

import pytest
import wse_models
from wse_core import preset
from wse_systems import gpu as gpum
from wse_systems.pipeline import PipelinePlanError
from wse_systems.planning.choice import PlanError
from wse_systems.planning.infer_inputs import default_workload
from wse_systems.planning.infer_wafers import wafer_serving
from wse_systems.serving import GpuServing, Workload
from wse_systems.transformer import DecoderCounts

WORK = Workload(prompt_tokens=1024, output_tokens=256)
# the tester's HF config: Llama, hidden 12288, 60 layers, 96 heads, 6 KV heads, ff 32768
BIG6 = DecoderCounts(
    name="big6", arch="llama", vocab_size=128256, d_model=12288, n_layers=60, n_heads=96,
    n_kv_heads=6, d_ff=32768, max_seq_len=8192, tie_embeddings=False,
)  # fmt: skip


def _vllm(heads: int, kv: int, tp: int) -> bool:
    return heads % tp == 0 and (kv % tp == 0 if tp <= kv else tp % kv == 0)


def _runs(model, gpu, n: int) -> bool:
    try:
        GpuServing(model, gpu, num_gpus=n, workload=WORK)
    except gpum.GpuMemoryError:
        return False
    return True


def _advice(message: str, node: int, top: int) -> set[int] | None:
    """The counts in 1..top the refusal's advice names (None: "at least N ... whole nodes",
    checked apart)."""
    if m := re.search(r"use (\d+)(?: to (\d+))? GPUs, or past a node a multiple of ([\d or]+)",
                      message):  # fmt: skip
        lo, gens = int(m[1]), [int(g) for g in m[3].split(" or ")]
        assert int(m[2] or m[1]) == node
        return {n for n in range(1, top + 1)
                if lo <= n <= node or (n > node and any(n % g == 0 for g in gens))}  # fmt: skip
    if "no count of these GPUs serves it" in message:
        return set()
    return None


def _refusal(model, gpu, n: int) -> str:
    with pytest.raises(gpum.GpuMemoryError) as e:
        GpuServing(model, gpu, num_gpus=n, workload=WORK)
    return str(e.value)


def _check_counts(model, gpu, top: int) -> set[int]:
    """Every refused count in 1..top names itself and exactly the counts that run."""
    runs = {n for n in range(1, top + 1) if _runs(model, gpu, n)}
    for n in set(range(1, top + 1)) - runs:
        message = _refusal(model, gpu, n)
        assert message.startswith(f"{n} x {gpu.name} cannot hold"), message
        named = _advice(message, gpu.gpus_per_node, top)
        if named is None:  # "use at least N GPUs (up to a node, then whole nodes)"
            least = int(re.search(r"use at least (\d+) GPUs", message)[1])
            assert least == min(runs)
            named = {k for k in range(least, top + 1) if k <= gpu.gpus_per_node or
                     k % gpu.gpus_per_node == 0}  # fmt: skip
            assert named <= runs, (n, message)
        else:
            assert named == runs, (n, message)
    return runs


def test_big6_on_16_gpus_names_the_kv_heads_and_the_counts_that_run():
    message = _refusal(BIG6, gpum.H100, 16)
    assert "190.0 GB" in message and "use at least 3" not in message
    assert "whole nodes at tp 8" in message and "6 KV heads" in message
    # the largest replica 16 GPUs make by vLLM's rule: a tp within a node dividing 16 (tp 8
    # is forbidden, so no whole nodes)
    largest = max(t for t in range(1, 9) if 16 % t == 0 and _vllm(96, 6, t))
    assert largest == 2 and f"replicas of at most {largest}" in message
    assert "pipeline stages of fewer than 8 GPUs across nodes" in message
    runs = _check_counts(BIG6, gpum.H100, 40)
    assert 16 not in runs and 24 in runs and min(runs) == 3
    assert {lay.tp for lay in GpuServing(BIG6, gpum.H100, num_gpus=24, workload=WORK).layouts} == {
        3, 6}  # fmt: skip


def test_heads_that_forbid_the_memory_count_name_the_least_that_runs():
    # 4 heads: tp 3 is forbidden, so 3 GPUs' memory is not a count that runs (was "use at
    # least 3 GPUs", and 3 was refused), and tp 8 neither: past a node, multiples of 4
    small = DecoderCounts(
        name="four", arch="llama", vocab_size=3_900_000, d_model=256, n_layers=2, n_heads=4,
        n_kv_heads=4, d_ff=2048, max_seq_len=2048, tie_embeddings=True,
    )  # fmt: skip
    gpu = dataclasses.replace(gpum.H100, name="one-gb", memory_bytes=1e9)
    runs = _check_counts(small, gpu, 40)
    assert min(runs) == 4 and 3 not in runs and 12 in runs and 10 not in runs
    three = _refusal(small, gpu, 3)
    assert "4 attention heads" in three and "use 4 to 8 GPUs" in three


def test_a_model_no_count_serves_says_so():
    # 9 GPUs' memory, 6 KV heads: no tp within a node holds it and tp 8 is forbidden
    huge = dataclasses.replace(BIG6, n_layers=240)
    runs = _check_counts(huge, gpum.H100, 48)
    assert runs == set()


def test_llama_70b_counts_are_unchanged_and_true():
    runs = _check_counts(wse_models.preset_config("llama3-70b"), gpum.H100, 24)
    assert min(runs) == 2


# --- 2. --wafers too few for any stage count --------------------------------------------


def test_too_few_wafers_name_the_least_wafer_count_not_a_stage_range():
    cfg, spec = wse_models.preset_config("llama3-70b"), preset("wse3")
    work = default_workload(cfg)

    def holds(wafers, stages=None) -> bool:
        try:
            wafer_serving(cfg, spec, num_wafers=wafers, workload=work, stages=stages)
        except (PlanError, PipelinePlanError):
            return False
        return True

    with pytest.raises(PlanError) as e:
        wafer_serving(cfg, spec, num_wafers=3, workload=work, stages=2)
    message = str(e.value)
    assert "--stages in [3" not in message
    m = re.search(r"give --wafers in \[(\d+), 80\] and --stages in \[(\d+), 80\]", message)
    assert m and "3 wse3 wafers hold the model in no stage count" in message, message
    need, low = int(m[1]), int(m[2])
    # brute force: 3 wafers hold it in no stage count; the named least wafer count is the
    # fewest that does; the named stages run on it
    assert not any(holds(3, s) for s in range(3, 81))
    assert need == next(n for n in range(1, 81) if holds(n))
    assert holds(need, low) and not holds(need - 1)
