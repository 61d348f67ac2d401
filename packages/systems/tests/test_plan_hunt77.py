"""`wse plan train`, `wse plan infer` and the GPU training model (hunt 77).

- GPU training spread a global batch evenly over data-parallel ranks that do not divide it
  (16 sequences on 12 ranks priced 1.33 a rank; the busiest runs 2). Layouts are now those
  Megatron-LM runs (dp divides the global batch), and, later in the hunt, pipeline stages that
  divide the layers (24 GPUs ran Llama 3 8B as pp 3). Oracles: every layout of the count by
  hand from Megatron's documented checks (dp | batch, tp <= a node dividing the heads, pp |
  layers, the memory formula by hand), the busiest rank's compute from PaLM's flops by hand,
  the nearest counts by brute force.
- Pipeline stages sent nothing to each other (1,024 GPUs priced as 128). Oracle: the sends by
  hand (1/tp of the activations on each GPU's link), the serving model's own hop
  (`serving.gpu_step.step`'s `stage_hops_s`, the same send since hunt jobs17 F) and the
  datasheet's NVLink.
- The default wafers of a 70B with an 8B draft held no user; --stages and --wafers named
  ranges that do not hold the model; `--assume swarmx_fanout` on one system was listed as
  moving; `--micro-batch none` was refused in the ledger's words; at one output token the
  GPUs "to match speed and throughput" matched at 0 tokens/s per user. Oracles: the library
  tried count by count, the predictor at the named micro-batch, SwarmX's levels by hand.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys

import pytest
import wse_models
from wse_core import WseError, preset
from wse_core.cost.reads import recording
from wse_systems import gpu as gpum
from wse_systems import gpu_layout
from wse_systems.pipeline import PipelinePlanError, Regions
from wse_systems.planning.choice import ModelChoice, PlanError
from wse_systems.planning.infer import wafer_serving
from wse_systems.planning.train import TrainBatch, TrainGpus, plan_train
from wse_systems.serving import Speculation, WaferServing, Workload
from wse_systems.serving import gpu_step as gs
from wse_systems.training.micro_batch import plan_step

WSE = [sys.executable, "-m", "wse_cli"]
L8B = wse_models.preset_config("llama3-8b", dtype="bfloat16")
L70B = wse_models.preset_config("llama3-70b", dtype="bfloat16")
WORK = Workload(prompt_tokens=1024, output_tokens=256)  # `wse plan infer`'s default request
# datasheets; gpu.train_mfu's default (hunt 80: Narayanan et al.'s 52% HFU x 72/96)
PEAK, MFU, IB, IB_LAT, NVLINK, NV_LAT = 989e12, 0.39, 50e9, 5e-6, 450e9, 1e-6
SEQ, D, KV, FF, VOCAB = 8192, 4096, 1024, 14336, 128256  # Llama 3 8B: 32 layers


def _flops_8b() -> float:
    """PaLM's training flops a token of Llama 3 8B at 8,192 tokens, by hand."""
    matmul = 32 * (2 * D * D + 2 * D * KV + 3 * D * FF) + D * VOCAB
    return 6 * matmul + 12 * 32 * D * SEQ


def _stage_bytes(layers: int, vocab: int, seq: int, split: tuple[int, int, int]) -> float:
    """The busiest stage's bytes by hand (hunt 79: Megatron's accounting, 18 bytes a
    parameter, fp32 main gradients), a Llama-3-8B-wide model of `layers` layers and `vocab`
    tokens, `split` (tp, pp, m micro-batches of one sequence a rank): the first stage holds
    L / pp layers + the table and min(pp, m) micro-batches' layer inputs (2 s d each a layer)
    + int64 ids, the last L / pp layers + the final norm + the head and one micro-batch's
    inputs + 4 s (d + V) of logits; both one layer's 34 s d working set; at pp 1 all once."""
    tp, pp, m = split
    layer, embed = 2 * D * D + 2 * D * KV + 3 * D * FF + 2 * D, vocab * D
    inputs, work, logits = layers // pp * 2 * seq * D, 34 * seq * D, 4 * seq * (D + vocab)
    if pp == 1:
        return (18 * (2 * embed + layers * layer + D) + inputs + work + 8 * seq + logits) / tp
    k = min(pp, m)
    first = 18 * (layers // pp * layer + embed) + k * inputs + work + 8 * seq * k
    last = 18 * (layers // pp * layer + embed + D) + inputs + work + logits
    return max(first, last) / tp


def _bytes_8b(tp: int, pp: int, m: int) -> float:
    """Llama 3 8B's busiest stage at 8,192 tokens (`_stage_bytes`)."""
    return _stage_bytes(32, VOCAB, SEQ, (tp, pp, m))


def _megatron_layouts(gpus: int, batch: int) -> set[tuple[int, int, int]]:
    """Every (dp, tp, pp) Megatron-LM runs on `gpus` H100s for Llama 3 8B (32 layers, 32
    heads, 8 KV heads), from its documented checks: tp x pp x dp = the world size; tp <= 8
    (a node) dividing the attention heads and the query groups; pp dividing the layers
    ("number of layers should be divisible by the pipeline parallel size"); dp dividing the
    global batch at micro-batches of one; and the memory formula by hand."""
    every = set()
    for dp in (d for d in range(1, gpus + 1) if gpus % d == 0 and batch % d == 0):
        for tp in (t for t in range(1, 9) if (gpus // dp) % t == 0 and 32 % t == 0 == 8 % t):
            pp = gpus // (dp * tp)
            if 32 % pp == 0 and _bytes_8b(tp, pp, batch // dp) <= 0.9 * 80 * 2**30:
                every.add((dp, tp, pp))
    return every


def test_layouts_are_those_megatron_runs_and_a_step_runs_at_its_busiest_ranks_pace():
    for gpus in (8, 16, 24, 32, 48, 96, 1000, 1024):
        priced = gpu_layout.layouts(L8B, gpum.H100, gpus, SEQ, 16)
        assert {(x.dp, x.tp, x.pp) for x in priced} == _megatron_layouts(gpus, 16), gpus
    # before: 24 GPUs ran dp 1 x tp 8 x pp 3, 10.67 of the 32 layers a stage (0.9479 s a step;
    # earlier still dp 12 x tp 2, 1.33 sequences a rank); Megatron-LM refuses both
    assert not _megatron_layouts(24, 16) and (1, 8, 3) not in _megatron_layouts(24, 16)
    below = next(k for k in range(23, 0, -1) if _megatron_layouts(k, 16))
    above = next(k for k in range(25, 49) if _megatron_layouts(k, 16))
    with pytest.raises(gpum.GpuLayoutError) as e:
        gpum.train_step(L8B, gpum.H100, num_gpus=24, batch=16, seq_len=SEQ)
    assert str(e.value).endswith(f"use {below} or {above} GPUs")
    assert "pipeline parallel dividing the 32 layers" in str(e.value)
    step = gpum.train_step(L8B, gpum.H100, num_gpus=16, batch=16, seq_len=SEQ)
    lay = step.layout
    assert (lay.dp, lay.tp, lay.pp) in _megatron_layouts(16, 16)
    micro = 16 // lay.dp
    compute = micro * SEQ * _flops_8b() / (lay.tp * lay.pp * PEAK * MFU)
    assert step.compute_s == pytest.approx(compute, rel=1e-12) and lay.pp == 1
    assert step.step_s >= compute * (1 - 1e-12)


def test_min_train_gpus_counts_only_stages_that_divide_the_layers():
    def fewest(big) -> int:  # the oracle: Megatron's checks and the memory formula by hand
        layers = big.n_layers
        return min(tp * pp for tp in (1, 2, 4, 8) for pp in range(1, layers + 1)
                   if 32 % tp == 0 == 8 % tp and layers % pp == 0
                   and _stage_bytes(layers, big.vocab_size, 16, (tp, pp, pp))
                   <= 0.9 * 80 * 2**30)  # fmt: skip

    # ~10B parameters (a 400k vocabulary) need 3 GPUs of memory: 3 stages only where 3
    # divides the layers, else 4 (before: 3 for 32 and 35 layers too; hunt 79: a 500k
    # vocabulary at 18 bytes a parameter no longer fits 3 stages)
    for layers, need in ((32, 4), (33, 3), (35, 4), (36, 3)):
        big = dataclasses.replace(L8B, n_layers=layers, vocab_size=400_000)
        assert gpum.min_train_gpus(big, gpum.H100, seq_len=16) == fewest(big) == need


def test_a_count_with_no_megatron_layout_names_the_nearest_that_have_one():
    below = next(k for k in range(999, 0, -1) if _megatron_layouts(k, 16))
    above = next(k for k in range(1001, 2001) if _megatron_layouts(k, 16))
    # before: 992 or 1024 (992 = 8 x 31 x 4: 31 stages of 32 layers)
    assert not _megatron_layouts(1000, 16) and (below, above) == (512, 1024)
    with pytest.raises(gpum.GpuLayoutError) as e:
        gpum.train_step(L8B, gpum.H100, num_gpus=1000, batch=16, seq_len=SEQ)
    assert isinstance(e.value, gpum.GpuMemoryError)  # the planners' searches skip the count
    assert str(e.value).endswith(f"use {below} or {above} GPUs") and "divide it" in str(e.value)


def test_pipeline_stages_send_activations_at_the_serving_models_hop():
    step = gpum.train_step(L8B, gpum.H100, num_gpus=1024, batch=16, seq_len=SEQ)
    lay = step.layout
    assert (lay.dp, lay.tp, lay.pp) == (16, 8, 8)  # one sequence a rank: micro-batches 1
    # hunt 78: Megatron's scatter-gather sends, 1/tp of it a GPU on its own NIC
    hop = 2 * SEQ * D / 8 / IB + IB_LAT
    # the last stage's one micro-batch sends its gradients back; its forward ends in the loss
    # and sends nothing (review 82: 2 hops were priced, Megatron's send_forward a no-op there)
    assert step.stage_sends_s == pytest.approx(hop, rel=1e-12)
    # the serving model's hop is the same send (hunt jobs17 F: the whole activation over one
    # GPU's NIC, 8x the bytes): a forward of 8,192 prompt tokens over 2 stages has one
    served = gs.step(L8B, gpum.H100, gs.GpuLayout(8, 2), gs.StepBatch(prefill_tokens=SEQ,
                     prompt_tokens=SEQ)).stage_hops_s  # fmt: skip
    assert served == pytest.approx(hop, rel=1e-12)
    # hunt 80: at one micro-batch 1F1B overlaps nothing, the 8 stages run in turn: the whole
    # model's compute on tp 8 + 14 hops, each of the 7 stage boundaries crossed forward and
    # back (review 82: 16, 2 a stage, were priced; the fill and drain were priced at the last
    # stage's pace, 8 x (4 layers + the head), before hunt 80)
    whole = _flops_8b() * SEQ / (8 * PEAK * MFU)
    by_hand = whole + 7 * 2 * hop + step.exposed_allreduce_s
    assert step.step_s == pytest.approx(by_hand, rel=1e-12)
    pp1 = gpum.train_step(L8B, gpum.H100, num_gpus=128, batch=16, seq_len=SEQ)
    assert (pp1.layout.dp, pp1.layout.tp, pp1.layout.pp) == (16, 8, 1)
    assert pp1.compute_s == pytest.approx(whole, rel=1e-12)  # before: equal steps; the sends
    assert step.step_s - step.exposed_allreduce_s > pp1.step_s - pp1.exposed_allreduce_s
    # each stage's gradient ring an eighth of pp 1's: less of it exposed
    assert step.exposed_allreduce_s < pp1.exposed_allreduce_s
    tiny = gpum.train_step(wse_models.preset_config("tiny-gpt2"), gpum.H100, num_gpus=8,
                           batch=1, seq_len=128)  # fmt: skip
    nvlink_hop = 2 * 128 * 64 / tiny.layout.tp / NVLINK + NV_LAT  # one node: NVLink
    assert tiny.layout.pp == 2 and tiny.stage_sends_s == pytest.approx(nvlink_hop)  # review 82


def test_gpus_to_match_run_ranks_that_divide_the_batch():
    twelve = wse_models.preset_config(
        "llama3-8b",
        name="llama-12b",
        d_model=5120,
        n_layers=40,
        n_heads=40,
        d_ff=13824,
        dtype="bfloat16",
    )  # tco-training's
    choice = ModelChoice("llama-12b", twelve, seq_len=SEQ)
    # 8 sequences a system, the default batch this case was written at (hunt 82 ranks each
    # near batch at its fastest micro-batch: the default is 15 a system now)
    plan = plan_train(choice, tokens=2.4e11, spec=preset("wse3"), systems=4,
                      gpus=TrainGpus(gpus=32), batch=TrainBatch(8))  # fmt: skip
    batch, steps, target = plan.inputs["global_batch"], plan.inputs["steps"], plan.wafer.time_s
    m = plan.gpus_to_match
    matched = gpum.train_step(twelve, gpum.H100, num_gpus=m, batch=batch, seq_len=SEQ)
    assert batch == 32 and batch % matched.layout.dp == 0 and steps * matched.step_s <= target
    # the 40 matched before (dp 10, tp 4): its busiest rank runs 4 sequences on 4 GPUs
    flops = gpum.train_flops_per_token(twelve, SEQ)
    busiest = 4 * SEQ * flops / (4 * PEAK * MFU)
    assert steps * busiest > target and m != 40
    # the 48 matched next (dp 2 x tp 8 x pp 3: 40 layers in 3 stages) has no layout that
    # Megatron-LM runs by default: dp | 32, tp <= 8 dividing 40 heads and 8 KV heads, pp | 40
    splits = [(dp, tp, 48 // (dp * tp)) for dp in (1, 2, 4, 8, 16) for tp in (1, 2, 4, 8)]
    assert not [x for x in splits if 48 % (x[0] * x[1]) == 0 and 40 % x[2] == 0]
    assert 40 % matched.layout.pp == 0 and m > 48

    def meets(k: int) -> bool:  # the oracle for the match: every count tried below it
        try:
            step = gpum.train_step(twelve, gpum.H100, num_gpus=k, batch=batch, seq_len=SEQ)
        except gpum.GpuMemoryError:
            return False
        return steps * step.step_s <= target

    assert m == 64 and not any(meets(k) for k in range(1, m))


def test_the_default_wafers_hold_the_model_its_draft_and_one_user():
    spec, draft = preset("wse3"), Speculation(draft=L8B, gamma=4, alpha=0.8)

    def users(n: int) -> int:  # the oracle: each count tried, as the library builds it
        try:
            return WaferServing(
                L70B,
                spec,
                num_wafers=n,
                workload=WORK,
                speculation=draft,
                regions=Regions(layout=None),
                search_stages=True,
            ).max_users
        except PipelinePlanError:
            return 0

    fewest = next(n for n in range(1, 81) if users(n) >= 1)
    ws = wafer_serving(L70B, spec, num_wafers=None, workload=WORK, speculation=draft)
    assert (ws.units, fewest) == (5, 5) and ws.max_users >= 1  # before: 4 wafers, 0 users
    with pytest.raises(PlanError, match=r"draft llama3-8b but not one user's KV cache; give "
                       r"--wafers in \[5, 80\]$"):  # fmt: skip
        wafer_serving(L70B, spec, num_wafers=4, workload=WORK, speculation=draft)


@pytest.mark.parametrize("asked,named", [
    (dict(stages=200), "give --stages in [4, 80]"),  # before: [1, 80]
    (dict(num_wafers=85), "give --wafers in [4, 80]"),  # before: [1, 80]
    (dict(num_wafers=6, stages=5), "give --stages in [6, 80], or --wafers 5"),
])  # fmt: skip
def test_stage_and_wafer_counts_are_refused_naming_the_range_that_holds(asked, named):
    spec = preset("wse3")

    def holds(n: int, stages: int | None) -> bool:  # the oracle: the library, count by count
        try:
            wafer_serving(L70B, spec, num_wafers=n, workload=WORK, stages=stages)
        except (PipelinePlanError, PlanError):
            return False
        return True

    assert not holds(3, None) and holds(4, None) and holds(4, 4)  # from 4 wafers, 4 stages
    assert not holds(4, 5) and holds(5, 5) and holds(6, 6)  # 5 stages: 5 wafers
    with pytest.raises(PlanError) as e:
        wafer_serving(L70B, spec, workload=WORK, **{"num_wafers": None, **asked})
    assert str(e.value).endswith(named)


def _wse(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "300"}
    return subprocess.run([*WSE, *args], capture_output=True, text=True, timeout=600, env=env)


def _refused(*args: str) -> str:
    r = _wse(*args)
    lines = (r.stdout + r.stderr).strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("Error: "), lines
    return lines[0]


def test_swarmx_fanout_is_refused_where_no_fanout_moves_the_tree():
    def levels(systems: int, fanout: float) -> int:  # SwarmX's tree by hand
        return 0 if systems == 1 else math.ceil(math.log(systems, fanout) - 1e-12)

    assert {levels(1, f) for f in (2, 16, 1024)} == {0} and (levels(4, 2), levels(4, 16)) == (2, 1)
    tiny = ModelChoice("tiny-gpt2", wse_models.preset_config("tiny-gpt2"))
    for systems, read in ((1, False), (4, True)):
        with recording() as got:
            plan_train(tiny, tokens=1e6, spec=preset("wse3"), systems=systems,
                       batch=TrainBatch(4, None, 128))  # fmt: skip
        assert ("swarmx_fanout" in got.values) is read
    line = _refused("plan", "train", "-m", "tiny-gpt2", "--tokens", "1e6", "--assume",
                    "swarmx_fanout=16")  # fmt: skip
    assert line.startswith("Error: --assume swarmx_fanout: wse plan train does not read it")


def test_a_micro_batch_that_does_not_fit_names_the_largest_that_does():
    spec = preset("wse3")
    for m, fits in ((16, True), (32, False), (64, False)):  # the oracle: the predictor itself
        try:
            plan_step(L70B, spec, num_csx=1, batch_per_system=64, seq_len=SEQ, micro_batch=m)
            assert fits, m
        except WseError as e:
            assert not fits and "cannot be placed" in str(e), m
    for asked in ("none", "64"):
        line = _refused("plan", "train", "-m", "llama3-70b", "--tokens", "1e11", "--batch",
                        "64", "--micro-batch", asked)  # fmt: skip
        assert line.startswith(f"Error: --micro-batch {asked}: 64 sequences of 8192 tokens")
        assert "give --micro-batch 16 (the largest divisor of the per-system batch 64" in line


def test_one_output_token_matches_throughput_only():
    args = ["plan", "infer", "-m", "llama3-1b", "--output-tokens", "1"]
    d = json.loads(_wse(*args, "--json").stdout)
    assert d["wafer"]["tokens_per_s_per_user"] is None  # vLLM's TPOT: n/a at one token
    assert d["gpus_to_match"]["user_speed"] is None
    assert any("throughput only" in n for n in d["assumptions"])
    table = _wse(*args).stdout
    both = d["gpus_to_match"]["user_speed_and_throughput"]
    assert "GPUs to match throughput only" in table and "speed and throughput" not in table
    row = next(r for r in table.splitlines() if "GPUs to match throughput only" in r)
    assert row.rstrip(" │").endswith(f"{both:,}")
