"""GPU training plans (hunt 78, tag gputrain78).

Oracles, each independent of `wse_systems.gpu_layout`: every layout enumerated here from
Megatron-LM's documented checks (tp x dp x pp = the world size; tp dividing the attention
heads and the query groups, at most a node, each tp group in one node; pp dividing the
layers; dp dividing the global batch at micro-batches of one), the memory formula by hand,
ranks placed by Megatron's default order (rank = t + tp (d + dp p)) to see which groups
leave a node, PaLM's flops split by hand over the stages, brute force for the nearest and
matching counts, and a hint's command run.

1. The default GPU count (8 a system) with no layout lost the whole plan (Llama 3 70B on 3,
   7 and 9 systems).
2. A count large enough but with no split was refused as too few GPUs ("at least 2").
3. That refusal walked every count (96 s at 999,998 GPUs).
4. The gradient ring was priced on InfiniBand whenever the job spanned nodes.
5. The micro-batch hint named a command the plan then refused.
6. GPUs to match: none for a model whose layouts sit at counts not powers of two.
7. The output head was spread evenly over the pipeline's stages.
8. Stage sends put the whole tensor on one link; tp was held to 1, 2, 4 or 8.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
import wse_models
from wse_core import preset
from wse_systems import gpu as gpum
from wse_systems import gpu_layout
from wse_systems import gpu_schedule as gsch
from wse_systems.planning.choice import ModelChoice
from wse_systems.planning.train import TrainBatch, TrainGpus, plan_train

WSE = [sys.executable, "-m", "wse_cli"]
# H100 datasheet; gpu.train_mfu's default (hunt 80: Narayanan et al.'s 52% HFU x 72/96)
PEAK, MFU, NODE, HBM = 989e12, 0.39, 8, 0.9 * 80 * 2**30
NVLINK, NV_LAT, IB, IB_LAT = 450e9, 1e-6, 50e9, 5e-6
L8B = wse_models.preset_config("llama3-8b", dtype="bfloat16")
L70B = wse_models.preset_config("llama3-70b", dtype="bfloat16")
GPT2 = wse_models.preset_config("gpt2-1.5b", dtype="bfloat16")


def _layer(m) -> int:
    """One layer's parameters by hand (GPT-2: biases and two LNs; Llama: two RMS norms)."""
    d, q, kv, f = m.d_model, m.n_heads * m.hd, m.n_kv_heads * m.hd, m.d_ff
    if m.arch == "gpt2":
        return 2 * d * q + 2 * d * kv + 2 * d * f + (q + 2 * kv + d) + (f + d) + 4 * d
    return 2 * d * q + 2 * d * kv + 3 * d * f + 2 * d


def _params(m) -> int:
    """Every parameter by hand (Llama: untied head, RMS norms; GPT-2: tied, biases, LNs)."""
    d = m.d_model
    if m.arch == "gpt2":
        return m.vocab_size * d + m.max_seq_len * d + m.n_layers * _layer(m) + 2 * d
    return 2 * m.vocab_size * d + m.n_layers * _layer(m) + d


def _largest_stage(m, pp: int) -> int:
    """The parameters of the stage holding the most, by hand: all at pp 1, else L / pp layers
    and the first's embedding (GPT-2's positions too) or the last's final norm and head (a
    copy of the tied embedding: Megatron's), whichever is more (hunt 78's review)."""
    if pp == 1:
        return _params(m)
    d = m.d_model
    first = m.vocab_size * d + (m.max_seq_len * d if m.arch == "gpt2" else 0)
    last = m.vocab_size * d + (2 * d if m.arch == "gpt2" else d)
    return m.n_layers // pp * _layer(m) + max(first, last)


def _busiest_stage_bytes(m, seq: int, tp: int, pp: int, flight: int | None = None) -> float:
    """Hunt 79: the busier of the first and last stage by hand (Megatron's theoretical memory
    accounting, 1F1B): 18 bytes a parameter (fp32 main gradients) of the stage's own, pp
    (first) or 1 (last) micro-batches' L / pp layer inputs (2 s d bytes), one layer's working
    set (34 s d), the first's int64 ids (8 s a micro-batch in flight), the last's logits
    (4 s (d + V)); over tp. Before: an even share of the parameters and L layer inputs on
    every GPU. `flight`: the first stage's micro-batches in flight, min(pp, m) (hunt 79;
    None: pp)."""
    d, n = m.d_model, m.n_layers // pp
    pp_in = pp if flight is None else min(pp, flight)
    ids, logits, working = 8 * seq, 4 * seq * (d + m.vocab_size), 34 * seq * d
    if pp == 1:
        return (18 * _params(m) + m.n_layers * 2 * seq * d + working + ids + logits) / tp
    first_p = n * _layer(m) + m.vocab_size * d + (m.max_seq_len * d if m.arch == "gpt2" else 0)
    last_p = n * _layer(m) + m.vocab_size * d + (2 * d if m.arch == "gpt2" else d)
    first = 18 * first_p + pp_in * n * 2 * seq * d + working + pp_in * ids
    last = 18 * last_p + n * 2 * seq * d + working + logits
    return max(first, last) / tp


def _megatron(m, gpus: int, batch: int, seq: int) -> set[tuple[int, int, int]]:
    """Every (dp, tp, pp) Megatron-LM runs on `gpus` H100s (module docstring's checks)."""
    out = set()
    for tp in range(1, NODE + 1):
        if m.n_heads % tp or m.n_kv_heads % tp or gpus % tp:
            continue
        if gpus > NODE and NODE % tp:  # a tp group would straddle two nodes
            continue
        for pp in range(1, m.n_layers + 1):
            if m.n_layers % pp or gpus % (tp * pp) or batch % (gpus // (tp * pp)):
                continue
            if _busiest_stage_bytes(m, seq, tp, pp, batch // (gpus // (tp * pp))) <= HBM:
                out.add((gpus // (tp * pp), tp, pp))
    return out


def _runs(m, gpus, batch, seq) -> bool:
    return bool(_megatron(m, gpus, batch, seq))


def test_layouts_and_tp_are_every_divisor_megatron_accepts():
    for m, batch, seq, counts in ((L8B, 16, 8192, range(1, 70)), (GPT2, 8, 1024, range(1, 41)),
                                  (L70B, 12, 8192, (16, 24, 32, 40, 64, 80))):  # fmt: skip
        for n in counts:
            got = {(x.dp, x.tp, x.pp) for x in gpu_layout.layouts(m, gpum.H100, n, seq, batch)}
            assert got == _megatron(m, n, batch, seq), (m.name, n)
    # hunt 78: tp 5 for GPT-2 1.5B's 25 heads (before: tp 1/2/4/8 only, so tp 1)
    assert (1, 5, 1) in _megatron(GPT2, 5, 8, 1024)
    assert {x.tp for x in gpu_layout.layouts(GPT2, gpum.H100, 5, 1024, 8)} == {5}


@pytest.mark.parametrize("model,gpus,batch", [
    (L8B, 17, 16), (L8B, 3, 16), (L8B, 7, 16), (L8B, 13, 16), (L8B, 999983, 16),
    (L70B, 33, 4),
])  # fmt: skip
def test_a_count_with_no_split_names_the_nearest_that_run(model, gpus, batch):
    seq = 8192
    need = min(n for n in range(1, 65) if _runs(model, n, 1, seq))  # memory alone: dp 1
    assert gpus >= need and not _runs(model, gpus, batch, seq)
    top = batch * NODE * model.n_layers  # no layout has more GPUs than dp x tp x pp can
    below = next(n for n in range(min(gpus - 1, top), 0, -1) if _runs(model, n, batch, seq))
    above = next((n for n in range(gpus + 1, min(top, 2 * gpus) + 1)
                  if _runs(model, n, batch, seq)), None)  # fmt: skip
    with pytest.raises(gpum.GpuLayoutError) as e:  # before: "use at least 2 GPUs"
        gpum.train_step(model, gpum.H100, num_gpus=gpus, batch=batch, seq_len=seq)
    near = f"{below} or {above}" if above else f"{below}"
    assert str(e.value).endswith(f"use {near} GPUs"), str(e.value)
    if (model, gpus) == (L8B, 17):
        assert str(e.value).endswith("use 16 or 32 GPUs")


def test_a_count_below_the_memory_minimum_names_it():
    with pytest.raises(gpum.GpuMemoryError) as e:
        gpum.train_step(L70B, gpum.H100, num_gpus=8, batch=4, seq_len=8192)
    need = min(n for n in range(1, 65) if _runs(L70B, n, 1, 8192))
    assert not isinstance(e.value, gpum.GpuLayoutError) and f"at least {need} GPUs" in str(e.value)


@pytest.mark.parametrize("gpus", [999998, 100000])
def test_the_refusal_of_a_huge_count_is_immediate(gpus):
    t0 = time.perf_counter()
    with pytest.raises(gpum.GpuLayoutError) as e:  # before: 96 s and 14 s
        gpum.train_step(L8B, gpum.H100, num_gpus=gpus, batch=16, seq_len=8192)
    assert time.perf_counter() - t0 < 1.0
    largest = 16 * 8 * 32  # dp 16 x tp 8 x pp 32 (memory holds it)
    assert _runs(L8B, largest, 16, 8192) and str(e.value).endswith(f"use {largest} GPUs")


def test_train_counts_are_the_counts_with_a_megatron_layout():
    got = gpu_layout.train_counts(GPT2, gpum.H100, seq_len=1024, batch=8)
    assert got == [n for n in range(1, 8 * 8 * 48 + 1) if _runs(GPT2, n, 8, 1024)]


def _dp_ring_on_nvlink(tp: int, dp: int, pp: int) -> bool:
    """Megatron's rank order by hand: every dp group's ranks in one node."""
    groups = [[t + tp * (d + dp * p) for d in range(dp)] for p in range(pp) for t in range(tp)]
    return all(len({r // NODE for r in g}) == 1 for g in groups)


def _end_stages(m, pp: int) -> tuple[int, int]:
    """(first, last) stage's parameters by hand: all at pp 1, else L / pp layers and the
    first's embedding (GPT-2's positions too), the last's final norm and head."""
    if pp == 1:
        return _params(m), _params(m)
    d = m.d_model
    first = m.vocab_size * d + (m.max_seq_len * d if m.arch == "gpt2" else 0)
    last = m.vocab_size * d + (2 * d if m.arch == "gpt2" else d)
    return m.n_layers // pp * _layer(m) + first, m.n_layers // pp * _layer(m) + last


def _step_by_hand(m, tp: int, dp: int, pp: int, batch: int, seq: int) -> float:
    """A step of 1F1B by hand, micro-batches of one sequence, PaLM's flops split by hand over
    the stages (kernel floor below it). Hunt 80: the fill and drain run at each stage's own
    pace, m (t_last + 2 hops) + (pp - 1) (t_other + 2 hops), where every stage was paced as
    the last; review 82: m (t_last + hop) + (pp - 1) t_other + (2 pp - 3) hops, the last
    stage sending no activations and the first no gradients (Megatron's no-op sends); each
    end stage's fp32 gradient ring hides under its last micro-batch's
    backward (3 of full recompute's 4 passes) and, the last stage's, the other stages' last
    backwards after it, where 2/3 of all micro-batches' busy time hid the largest ring;
    review 81: but not its last bucket (Megatron Core's buckets of max(40e6, 1e6 dp)
    parameters, filled from the last parameter back: the first stage's word embeddings, or
    the whole stage where the rest fill no bucket; at pp > 1 the last stage is one bucket),
    which starts when that backward ends and runs under what follows it alone."""
    d, q, kv = m.d_model, m.n_heads * m.hd, m.n_kv_heads * m.hd
    mlp = (2 if m.arch == "gpt2" else 3) * d * m.d_ff
    layer = 6 * (2 * d * q + 2 * d * kv + mlp) + 12 * q * seq
    other = m.n_layers // pp * layer  # a stage without the head (the embedding: a gather)
    last = other + 6 * d * m.vocab_size  # the head on the last stage
    micro, n = batch // dp, dp * tp * pp
    t_last, t_other = (seq * f / (tp * PEAK * MFU) for f in (last, other))  # one micro-batch
    t_other = t_last if pp == 1 else t_other
    bw, lat = (NVLINK, NV_LAT) if n <= NODE else (IB, IB_LAT)
    hop = 0.0 if pp == 1 else 2 * seq * d / tp / bw + lat
    pipeline = micro * (t_last + hop) + (pp - 1) * t_other + (2 * pp - 3) * hop
    bw, lat = (NVLINK, NV_LAT) if _dp_ring_on_nvlink(tp, dp, pp) else (IB, IB_LAT)
    rings = [0.0 if dp == 1 else 2 * (dp - 1) / dp * 4 * p / tp / bw + 2 * (dp - 1) * lat
             for p in _end_stages(m, pp)]  # fmt: skip
    first, last = (p / tp for p in _end_stages(m, pp))
    word, size = m.vocab_size * d / tp, max(40_000_000, 1_000_000 * dp)
    head = first if first - word < size else word
    buckets = [0.0 if dp == 1 else 2 * (dp - 1) / dp * 4 * p / bw + 2 * (dp - 1) * lat
               for p in (head, last if pp > 1 else head)]  # fmt: skip
    back = 3 / 4 * t_other  # a stage's last backward (recompute + backward)
    tails = (0.0, (pp - 1) * (hop + back))  # after each end stage's last backward: the first's
    windows = (back + tails[0], 3 / 4 * t_last + tails[1])  # ends the step (review 82)
    exposed = max(0.0, rings[0] - windows[0], rings[1] - windows[1],
                  buckets[0] - tails[0], buckets[1] - tails[1])  # fmt: skip
    tied = 0.0  # hunt 79: the tied table's gradient summed by each first/last stage pair
    if m.tie_embeddings and pp > 1:
        pairs = [(r, r + tp * dp * (pp - 1)) for r in range(tp * dp)]
        near = all(a // NODE == b // NODE for a, b in pairs)
        bw, lat = (NVLINK, NV_LAT) if near else (IB, IB_LAT)
        tied = 4 * m.vocab_size * d / tp / bw + 2 * lat  # a ring of 2, fp32 main gradients
    return pipeline + exposed + tied


def test_the_gradient_ring_is_on_nvlink_where_its_group_sits_in_a_node():
    assert _dp_ring_on_nvlink(1, 8, 2) and not _dp_ring_on_nvlink(1, 16, 1)
    assert not _dp_ring_on_nvlink(2, 3, 2)  # tp x dp <= a node, but stage 1 is ranks 6..11
    for tp, dp, pp in ((1, 8, 2), (1, 2, 8), (1, 16, 1), (2, 3, 2), (4, 4, 2)):
        assert gpu_layout.dp_ring_in_node(tp, dp, pp, NODE) == _dp_ring_on_nvlink(tp, dp, pp)
    # the repro: 16 GPUs of GPT-2 1.5B at 8 sequences chose dp 2 x pp 8 at 38.1 ms
    step = gpum.train_step(GPT2, gpum.H100, num_gpus=16, batch=8, seq_len=1024)
    by_hand = {k: _step_by_hand(GPT2, k[1], k[0], k[2], 8, 1024)
               for k in _megatron(GPT2, 16, 8, 1024)}  # fmt: skip
    best = min(by_hand, key=by_hand.get)
    assert (step.layout.dp, step.layout.tp, step.layout.pp) == best == (8, 1, 2)
    assert step.step_s == pytest.approx(by_hand[best], rel=1e-9) and step.step_s < 0.0381


def test_the_pipeline_runs_at_its_last_stages_pace():
    # GPT-2 1.5B pp 8: 6 layers + the head on the last stage = 1.33 x the even share
    for tp, dp, pp in ((1, 1, 8), (1, 2, 8), (1, 8, 2)):
        lay = gpu_layout.TrainLayout(dp, tp, pp, 0.0)
        floor = gpum.train_floor(GPT2, gpum.H100, lay, seq_len=1024, batch=8, kernel_s=0.0)
        got = gsch._step(GPT2, gpum.H100, lay, seq_len=1024, batch=8, mfu=MFU, floor=floor)
        assert got.step_s == pytest.approx(_step_by_hand(GPT2, tp, dp, pp, 8, 1024), rel=1e-9)
    even = gpum.train_flops_per_token(GPT2, 1024) / 8
    assert gpum.stage_flops_per_token(GPT2, 1024, 8) / even == pytest.approx(1.33, abs=0.005)
    plan = plan_train(ModelChoice("gpt2-1.5b", GPT2), tokens=1e7, spec=preset("wse3"),
                      gpus=TrainGpus(gpus=16), batch=TrainBatch(8, None, 1024))  # fmt: skip
    assert any("output head" in n and "busiest stage" in n for n in plan.assumptions)


def test_stage_sends_are_a_tp_share_on_each_gpus_link():
    lay = gpu_layout.TrainLayout(16, 8, 8, 0.0)
    hop = gpu_layout.stage_hop_s(L8B, gpum.H100, lay, 8192)
    assert hop == pytest.approx(2 * 8192 * 4096 / 8 / IB + IB_LAT, rel=1e-12)


def _wse(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "300"}
    return subprocess.run([*WSE, *args], capture_output=True, text=True, timeout=600, env=env)


@pytest.mark.parametrize("systems,default,priced", [(3, 24, 32), (7, 56, 64), (9, 72, 80)])
def test_a_default_count_with_no_layout_moves_to_the_nearest_whole_nodes(systems, default,
                                                                         priced):  # fmt: skip
    plan = plan_train(ModelChoice("llama3-70b", L70B), tokens=1e9, spec=preset("wse3"),
                      systems=systems)  # fmt: skip
    batch = plan.inputs["global_batch"]
    assert not _runs(L70B, default, batch, 8192)  # before: exit 2, the wafer side lost too
    up = next(n for n in range(default, 2 * default + 1, NODE) if _runs(L70B, n, batch, 8192))
    assert plan.gpu is not None and plan.gpu.units == up == priced
    lay = plan.gpu.figures["layout"]
    assert (lay["dp"], lay["tp"], lay["pp"]) in _megatron(L70B, up, batch, 8192)
    note = next(n for n in plan.assumptions if n.startswith(f"GPUs: {default} GPUs"))
    assert "80 layers/64 heads" in note and note.endswith(
        f"{up} priced, the nearest whole-node count above with one"
    )


def test_gpus_to_match_are_the_smallest_count_whatever_gpus_priced(tmp_path):
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 6144,
        "num_hidden_layers": 45,
        "num_attention_heads": 48,
        "num_key_value_heads": 6,
        "intermediate_size": 16384,
        "vocab_size": 128256,
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-5,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    got = {}
    for gpus in (10, 30):
        r = _wse("plan", "train", "-m", str(tmp_path), "--tokens", "1e11", "--gpus", str(gpus),
                 "--json")  # fmt: skip
        assert r.returncode == 0, r.stderr
        got[gpus] = json.loads(r.stdout)
    d = got[10]
    m = wse_models.preset_config("llama3-8b", name="x", d_model=6144, n_layers=45, n_heads=48,
                                 n_kv_heads=6, d_ff=16384, dtype="bfloat16")  # fmt: skip
    batch, steps, target = (d["inputs"]["global_batch"], d["inputs"]["steps"],
                            d["wafer"]["train_s"])  # fmt: skip

    def meets(n: int) -> bool:  # brute force: the library's step at every count with a layout
        if not _runs(m, n, batch, 8192):
            return False
        s = gpum.train_step(m, gpum.H100, num_gpus=n, batch=batch, seq_len=8192)
        return steps * s.step_s <= target

    first_whole = next(n for n in range(1, 4096) if (n <= NODE or n % NODE == 0) and meets(n))
    assert got[10]["gpus_to_match"] == got[30]["gpus_to_match"] == first_whole  # before: None
    assert first_whole == 24  # a brute force over every count: 18 is the first, 24 in nodes


def test_the_micro_batch_hint_is_a_command_that_runs():
    r = _wse("plan", "train", "-m", "llama3-8b", "--tokens", "1e12", "--json")
    d = json.loads(r.stdout)
    hint, batch = d["wafer"]["micro_batch_hint"], d["inputs"]["batch_per_system"]
    command = hint.split("plan it with ")[1].split()
    assert command[:2] == ["--batch", str(batch)]  # before: --micro-batch 8 alone
    again = _wse("plan", "train", "-m", "llama3-8b", "--tokens", "1e12", *command, "--json")
    assert again.returncode == 0, again.stderr  # before: exit 2, "does not divide ... 17"
    e = json.loads(again.stdout)
    assert e["inputs"]["batch_per_system"] == batch and e["inputs"]["micro_batch_size"] == 8
    assert e["wafer"]["step_s"] == pytest.approx(d["wafer"]["explored"]["step_s"], rel=1e-12)
    # the micro-batch alone keeps the default plan's batch too (before: 8 refused; 1 -> 17)
    for micro in ("8", "1"):
        alone = _wse("plan", "train", "-m", "llama3-8b", "--tokens", "1e12", "--micro-batch",
                     micro, "--json")  # fmt: skip
        assert alone.returncode == 0 and json.loads(alone.stdout)["inputs"][
            "batch_per_system"] == batch  # fmt: skip
