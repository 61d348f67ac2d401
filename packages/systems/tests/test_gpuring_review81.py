"""Review 81 (H1, H2): the data-parallel gradient ring against Megatron Core's buckets.

- H1: `gpu._exposed_ring_s` let a ring hide whole under the last micro-batch's backward
  (GPT-2 124M on 16 H100s at 224 sequences: an 18.8 ms ring, exposed 0, 31.76 ms a step).
  Under --overlap-grad-reduce Megatron Core all-reduces gradients in buckets of max(40M, 1M
  x dp) parameters (megatron/core/distributed/distributed_data_parallel.py,
  DistributedDataParallelConfig.bucket_size), filled in reverse parameter order
  (param_and_grad_buffer.py) and each started once all its gradients are ready
  (`register_grad_ready`), with bucketing off on every pipeline stage but the first: the
  last bucket, which holds the word embeddings, starts only after the backward has ended.
  Oracles: Megatron's bucket fill written out here over each model's tensors listed by hand
  (GPTModel's order: the embeddings first, the layers, the final norm, the untied head),
  a hand count of the ring, and brute force over every layout for the micro-batch search
  (the event simulation of 1F1B with the buckets is test_gputrain_hunt80's).
- H2: `_bubble_s`'s example called GFLOP a token "layers' time". Oracle: PaLM's flops by hand.
"""

from __future__ import annotations

import pytest
import wse_models
from wse_systems import gpu as gpum
from wse_systems import gpu_layout as gl
from wse_systems import gpu_schedule as gsch

GPT2_124M = wse_models.preset_config("gpt2-124m", dtype="bfloat16")
GPT2_1B5 = wse_models.preset_config("gpt2-1.5b", dtype="bfloat16")
L8B = wse_models.preset_config("llama3-8b", dtype="bfloat16")
TINY = wse_models.preset_config("tiny-gpt2", dtype="bfloat16")
IB, IB_LAT, MFU = 50e9, 5e-6, 0.39  # DGX H100's NDR per GPU; 5 us a ring step; gpu.train_mfu


def _tensors(m) -> list[int]:
    """Each parameter tensor's size in Megatron's GPTModel order (the embedding built first,
    then the decoder's layers and final norm, then an untied output layer), by hand."""
    d, f, q, kv = m.d_model, m.d_ff, m.n_heads * m.hd, m.n_kv_heads * m.hd
    if m.arch == "gpt2":  # learned positions, biases, LayerNorm weight and bias
        layer = [d, d, (q + 2 * kv) * d, q + 2 * kv, d * q, d, d, d, f * d, f, d * f, d]
        return [m.vocab_size * d, m.max_seq_len * d, *layer * m.n_layers, d, d]
    layer = [d, (q + 2 * kv) * d, d * q, d, 2 * f * d, d * f]  # RMSNorm, SwiGLU's fc1
    return [m.vocab_size * d, *layer * m.n_layers, d, m.vocab_size * d]


def _megatron_last_bucket(tensors: list[int], bucket: int) -> int:
    """Megatron Core's fill (param_and_grad_buffer.py: `for param in params[::-1]`, a bucket
    closed once it holds >= bucket_size elements): the size of the bucket the first tensor
    lands in, the last to become ready."""
    size = 0
    for i in reversed(range(len(tensors))):
        size += tensors[i]
        if size >= bucket and i > 0:  # closed; the first tensor's bucket is the last
            size = 0
    return size


def test_the_bucket_is_megatron_cores_default():
    for dp in (1, 8, 16, 40, 64, 128, 1024):
        assert gl.grad_bucket_params(dp) == max(40_000_000, 1_000_000 * dp)
    assert (gl.GRAD_BUCKET_MIN_PARAMS, gl.GRAD_BUCKET_PARAMS_PER_RANK) == (40_000_000, 1_000_000)


@pytest.mark.parametrize("m,dp", [(GPT2_124M, 16), (GPT2_124M, 64), (GPT2_1B5, 64),
                                  (GPT2_1B5, 8), (L8B, 16), (L8B, 128), (TINY, 8)])  # fmt: skip
def test_the_last_bucket_priced_is_a_floor_of_megatrons(m, dp):
    tensors = _tensors(m)
    assert sum(tensors) == sum(gl.end_stage_params(m, 1)) / 2  # the hand list is the model
    actual = _megatron_last_bucket(tensors, max(40_000_000, 1_000_000 * dp))
    first, last = gl.last_bucket_params(m, 1, dp, 1)
    assert first == last <= actual  # at pp 1 the one stage, the first
    # what the floor leaves out is less than one bucket (where the bucket before it closes)
    assert actual - first < max(40_000_000, 1_000_000 * dp)
    if sum(tensors) - tensors[0] < max(40_000_000, 1_000_000 * dp):  # tiny: one bucket
        assert first == actual == sum(tensors)
    else:  # the word embeddings, the first tensor
        assert first == tensors[0] == m.vocab_size * m.d_model


def test_a_later_pipeline_stage_is_one_bucket():
    # Megatron turns bucketing off past the first stage: the last stage's whole ring starts
    # after its backward; the first stage's last bucket is its word embeddings over tp
    for m, tp, dp, pp in ((L8B, 8, 8, 16), (GPT2_1B5, 1, 8, 2), (GPT2_124M, 4, 16, 4)):
        first_p, last_p = gl.end_stage_params(m, pp)
        first, last = gl.last_bucket_params(m, tp, dp, pp)
        assert last == last_p / tp
        word = m.vocab_size * m.d_model / tp
        assert first == (word if first_p / tp - word >= gl.grad_bucket_params(dp) else first_p / tp)


def test_no_data_parallel_layout_hides_its_last_bucket():
    # the hunt's repro: GPT-2 124M, 224 sequences on 16 H100s (2 nodes: every dp ring over
    # InfiniBand). Each layout's exposed ring is at least its word-embedding bucket's ring;
    # at pp 1 nothing follows the backward that could hide it
    runs = list(gl.layouts(GPT2_124M, gpum.H100, 16, 1024, 224))
    assert any(x.dp == 16 and x.micro_batch == 14 for x in runs)
    for x in runs:
        s = gsch.priced_step(GPT2_124M, gpum.H100, x, (1024, 224), (MFU, 1e-6))
        if x.dp > 1 and x.pp == 1:
            word = 50257 * 768 / x.tp
            rest = 124_439_808 / x.tp - word
            n = word if rest >= 40_000_000 else 124_439_808 / x.tp
            p = x.dp
            bucket = 2 * (p - 1) / p * 4 * n / IB + 2 * (p - 1) * IB_LAT
            assert s.exposed_allreduce_s >= bucket * (1 - 1e-12) and bucket > 0.0013
    # dp 16 at 14 sequences a micro-batch, the plan's choice before: 31.76 -> 37.70 ms
    s = gsch.priced_step(GPT2_124M, gpum.H100, gl.TrainLayout(16, 1, 1, 0.0, 14), (1024, 224),
                     (MFU, 1e-6))  # fmt: skip
    bucket = 2 * 15 / 16 * 4 * 38_597_376 / IB + 30 * IB_LAT
    assert s.exposed_allreduce_s == pytest.approx(bucket) and s.step_s > 0.0376
    assert s.last_bucket_allreduce_s == pytest.approx(bucket)


@pytest.mark.parametrize("m,gpus,batch,seq", [
    (GPT2_124M, 16, 224, 1024), (GPT2_124M, 8, 512, 1024), (GPT2_124M, 128, 1792, 1024),
    (GPT2_124M, 8, 16, 1024), (GPT2_1B5, 64, 512, 1024), (GPT2_1B5, 16, 8, 1024),
    (L8B, 64, 64, 8192), (L8B, 1024, 8, 8192), (L8B, 32, 64, 8192),
])  # fmt: skip
def test_the_micro_batch_search_equals_brute_force(m, gpus, batch, seq):
    # every layout priced (`priced_step`), the first of the fastest in `layouts`' order: the
    # search's skip bound (with the last bucket at pp 1) must never skip the fastest
    at = (gpum.TRAIN_MFU, 1e-6)
    every = [(gsch.priced_step(m, gpum.H100, x, (seq, batch), at), i)
             for i, x in enumerate(gl.layouts(m, gpum.H100, gpus, seq, batch))]  # fmt: skip
    best, _ = min(every, key=lambda t: (t[0].step_s, t[1]))
    got = gpum.train_step(m, gpum.H100, num_gpus=gpus, batch=batch, seq_len=seq)
    assert got.step_s == best.step_s and got.layout == best.layout


def test_the_bubble_example_is_in_gflop_a_token():
    # Llama 3 8B at 8,192 tokens on pp 16: a stage's 2 layers 3.42 GFLOP a token, the last
    # stage's 2 layers + the head 6.57 (PaLM's 6 N + 12 L H Q T by hand)
    d, kv, f, seq = 4096, 8 * 128, 14336, 8192
    layer = 6 * (2 * d * d + 2 * d * kv + 3 * d * f) + 12 * d * seq
    assert round(2 * layer / 1e9, 2) == 3.42
    assert round((2 * layer + 6 * 128256 * d) / 1e9, 2) == 6.57
    assert gpum.layers_flops_per_token(L8B, seq, 16) == pytest.approx(2 * layer)
    doc = " ".join(gsch._bubble_s.__doc__.split())
    assert "16 x 6.57 GFLOP a token" in doc and "15 x 3.42 (2 layers) + 6.57" in doc
    assert "6.57 layers' time" not in doc
