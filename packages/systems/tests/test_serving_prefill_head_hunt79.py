"""Hunt 79 (jobs15 M4, L1): the GPU prompt's head and the bound of an all-prompt request.

- M4: `gpu_step.step` priced the head (the vocabulary projection) on every prompt token;
  vLLM computes logits at `logits_indices` only, one row a request a step (vllm-project/
  vllm, vllm/v1/worker/gpu_model_runner.py). Oracles: the flops of a prefill chunk counted
  by hand from the preset's dimensions (Llama 3.2 1B: the head's 2 V d on 4,095 of 4,096
  tokens is 19.2% of the old count), and the 8B tp 8 TTFT of a 1,024-token prompt
  recomputed from its kernels (the hunter's 9.98 ms; 10.49 ms priced before).
- L1: with one output token a request is all prompt, but its bound was the decode round's
  ("hbm"), a round it never runs.
"""

from __future__ import annotations

import pytest
from wse_models import preset_config
from wse_systems import gpu as gpum
from wse_systems.serving import gpu_step as gs
from wse_systems.serving.frontier import Workload
from wse_systems.serving.gpus import GpuServing

pytestmark = pytest.mark.timeout(120)

H100 = gpum.H100
FIT = gs.GpuFractions(0.727, 0.273, 1e-6)


def _hand(name: str) -> dict[str, float]:
    """The preset's dimensions, and its per-token products counted by hand."""
    m = preset_config(name)
    d, hd = m.d_model, m.d_model // m.n_heads
    attn = d * m.n_heads * hd + 2 * d * m.n_kv_heads * hd + m.n_heads * hd * d  # q, k, v, o
    mlp = 3 * d * m.d_ff  # gate, up, down
    return {"layers": m.n_layers * (attn + mlp), "head": m.vocab_size * d,
            "attn": 2 * m.n_layers * m.n_heads * hd, "d": d, "L": m.n_layers}  # fmt: skip


def _flops(name: str, tokens: int, prompt: int, rows: float) -> float:
    """A prefill chunk's flops by hand: every token's layers and causal attention, the head
    on `rows` rows."""
    h = _hand(name)
    return tokens * (2 * h["layers"] + h["attn"] * prompt) + rows * 2 * h["head"]


@pytest.mark.parametrize(
    ("name", "share"), [("llama3-1b", 0.192), ("llama3-8b", 0.065), ("llama3-70b", 0.015)]
)
def test_prefill_chunk_flops_price_the_head_once(name, share):
    model, p = preset_config(name), 4096
    batch = gs.StepBatch(prefill_tokens=p, prompt_tokens=p, logit_rows=1)
    priced = gs.step(model, H100, gs.GpuLayout(1, 1), batch, fractions=FIT)
    flops = priced.compute_s * FIT.mfu * H100.peak_flops
    assert flops == pytest.approx(_flops(name, p, p, 1), rel=1e-12)
    every = _flops(name, p, p, p)  # the old count: the head on every prompt token
    assert (every - flops) / every == pytest.approx(share, abs=0.0015)
    # a middle chunk alone: no prompt ends in it, its one (discarded) row the head's only work
    mid = gs.step(model, H100, gs.GpuLayout(1, 1), batch._replace(logit_rows=0), fractions=FIT)
    assert mid.compute_s * FIT.mfu * H100.peak_flops == pytest.approx(_flops(name, p, p, 0))
    # left out, a spread of c prompt tokens ends c / P prompts on average
    half = gs.step(model, H100, gs.GpuLayout(1, 1), gs.StepBatch(prefill_tokens=p / 2,
                   prompt_tokens=p), fractions=FIT)  # fmt: skip
    assert half.compute_s * FIT.mfu * H100.peak_flops == pytest.approx(
        _flops(name, p / 2, p, 0.5), rel=1e-12
    )


def _ttft_by_hand(name: str, prompt: int, tp: int, chunks: list[int]) -> float:
    """One user's first token on one tp replica: each chunk compute-bound (checked), its tp
    all-reduces (multimem at 8 H100s) and its kernels, one logits row a chunk."""
    h, model = _hand(name), preset_config(name)
    total = 0.0
    for c in chunks:
        compute = _flops(name, c, prompt, 1) / tp / (FIT.mfu * H100.peak_flops)
        reads = 2 * (h["layers"] + h["head"]) + 2 * 2 * model.n_kv_heads * (
            h["d"] // model.n_heads) * h["L"] * c  # fmt: skip
        assert reads / tp / (FIT.hbm_fraction * H100.hbm_bytes_per_s) < compute
        act = 2 * h["d"] * c
        # vLLM v0.11.0's at 8 H100s (review 82): past the custom kernel's 256 KiB, within
        # symmetric memory's 64 MiB, multimem: 9/8 of it each way, 2 barriers, 2 HBM copies
        assert tp in (1, 8) and 256 * 1024 <= act <= 64 * 2**20
        multimem = (tp + 1) / tp * act / 450e9 + 2 * 1e-6 + 4 * act / 3.35e12
        total += compute + 2 * h["L"] * multimem * (tp > 1) + (8 * h["L"] + 4) * 1e-6
    return total


def test_ttft_of_8b_on_tp8_recomputed_from_its_kernels():
    work = Workload(prompt_tokens=1024, output_tokens=256)
    serve = GpuServing(preset_config("llama3-8b"), H100, num_gpus=8, workload=work,
                       fractions=FIT)  # fmt: skip
    ttft = serve.ttft_s(gs.GpuLayout(8, 1), 1)
    assert ttft == pytest.approx(_ttft_by_hand("llama3-8b", 1024, 8, [1024]), rel=1e-9)
    # the hunter's 9.98 ms (10.49 ms before hunt 79); 9.12 ms at review 82 (multimem, not
    # NCCL's ring, and the refit's MFU)
    assert ttft == pytest.approx(9.12e-3, abs=0.01e-3)


def test_ttft_in_chunks_computes_one_logits_row_each():
    """20,000 tokens in the budget's chunks of 8,192: 8,192 + 8,192 + 3,616, each with
    its one row (vLLM samples a partial prefill's last token and discards it)."""
    work = Workload(prompt_tokens=20000, output_tokens=16)
    serve = GpuServing(preset_config("llama3-1b"), H100, num_gpus=1, workload=work,
                       fractions=FIT)  # fmt: skip
    hand = _ttft_by_hand("llama3-1b", 20000, 1, [8192, 8192, 3616])
    assert serve.ttft_s(gs.GpuLayout(1, 1), 1) == pytest.approx(hand, rel=1e-9)


def test_all_prompt_request_is_bound_by_its_prompt():
    """8 users of 1,024 prompt tokens and one output token on 8 H100s (tp 1 replicas): the
    prompt is 1.43e13 flops, ~53 ms of compute against 6 ms of weight reads."""
    model = preset_config("llama3-8b")
    one = GpuServing(model, H100, num_gpus=8, fractions=FIT,
                     workload=Workload(prompt_tokens=1024, output_tokens=1))  # fmt: skip
    point = one.point(8)
    assert point.layout["tp"] == 1 and point.bound == "compute"
    chunk = gs.step(model, H100, gs.GpuLayout(1, 1), gs.StepBatch(prefill_tokens=1024,
                    prompt_tokens=1024, logit_rows=1), fractions=FIT)  # fmt: skip
    assert chunk.compute_s > 5 * chunk.memory_s
    # a long output: the decode rounds take most of the request, and bind as before
    long = GpuServing(model, H100, num_gpus=8, fractions=FIT,
                      workload=Workload(prompt_tokens=1024, output_tokens=256))  # fmt: skip
    assert long.point(8).bound == "hbm"


def test_wafer_prompt_runs_its_head_once():
    """The wafer's prompt (GPT-2 355M, 256 tokens in 32 blocks of 8; 124M until session 84,
    whose per-token element became the bottleneck at CS-3's fitted hop and relay latencies,
    which the premise below excludes): the per-token element
    holds each block for its tokens' embedding rows only, and the head's product and the
    argmax once, one token's (their Works priced by `PerfModel` from `decode_phases`' tree);
    before, 32 blocks of 8 tokens' head (reverted in hunt 79 while the engine's prompt pass
    unembedded every position; session 80: it runs the head on the last position alone)."""
    from wse_core import PerfModel, preset
    from wse_core.cost.perf import Work
    from wse_systems.decoder import PER_TOKEN, decode_phases
    from wse_systems.serving.wafer import WaferServing

    gpt2 = preset_config("gpt2-355m")
    serve = WaferServing(gpt2, preset("wse3"), num_wafers=1,
                         workload=Workload(prompt_tokens=256, output_tokens=64))  # fmt: skip
    req, plan = serve.request(1, 8), serve.plans(1)[0]
    model = PerfModel(plan.spec)
    per = next(p for p in decode_phases(gpt2, plan, kv_tokens=128).parts if p.name == PER_TOKEN)
    parts = {p.name: p for p in per.parts}
    assert set(parts) == {"norm_final", "lm_head", "argmax", "embed"}  # the norm: session 86
    lat = ("latency_hops", "fixed_cycles", "system_hops")
    embed = parts["embed"].work
    stream = model.cost(Work(**{f: getattr(embed, f) for f in ("links", "relay_stages",
                        "task_activations")})).seconds  # fmt: skip
    latency = model.cost(Work(**{f: getattr(embed, f) for f in lat})).seconds
    once = sum(model.seconds(parts[n]) for n in ("norm_final", "lm_head", "argmax"))
    assert req.prompt_held_s[PER_TOKEN] == pytest.approx(32 * (8 * stream + latency) + once)
    # the pass: the old one (every block's head) less the first block's head, plus the once
    pipe = serve.pipelines(1, prompt=True)[0]
    old_hold = pipe.occupancy_s(8)[PER_TOKEN]
    assert req.prompt_held_s[PER_TOKEN] < 0.25 * 32 * old_hold
    # the case's premise (review 79: this check sat under an `if` and might never run): a
    # layer, not the per-token element, is the bottleneck, so the pass is the old one's
    # blocks less the per-token element's share
    held = pipe.occupancy_s(8)
    assert max(held, key=held.get) != PER_TOKEN
    old = pipe.blocks_s(256, 8)
    assert req.prompt_s == pytest.approx(old - old_hold + 8 * stream + latency + once)
