"""Hunt 79: GPU training memory priced per pipeline stage (the busiest must fit), and tied
embeddings' all-reduce between the first and the last stage, against hand counts."""

import dataclasses

import pytest
from wse_systems import gpu as gpum
from wse_systems import gpu_layout as gl
from wse_systems import gpu_schedule as gsch
from wse_systems.testing import ROUND_DECODER
from wse_systems.transformer import LLAMA31_8B, DecoderCounts

USABLE = 0.9 * 80 * 2**30  # 77,309,411,328 bytes of an H100's 80 GiB

# Llama 3.1 8B by hand: q, k, v, o 2 x 4096 x 4096 + 2 x 4096 x 1024; SwiGLU 3 x 4096 x 14336;
# two RMSNorm scales 2 x 4096
LAYER = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096
EMBED = 128256 * 4096  # the token table (first stage)
FINAL = 4096 + 128256 * 4096  # the final norm and the untied head (last stage)
PARAMS = EMBED + 32 * LAYER + FINAL


def test_llama_8b_fits_by_even_share_and_overflows_on_its_last_stage():
    m, s, tp, pp = LLAMA31_8B, 131072, 2, 2
    assert (LAYER, PARAMS) == (218_112_000, 8_030_261_248)
    sd = s * 4096
    # the even share priced before: 16 bytes x every parameter over tp x pp, L = 32 layers'
    # bf16 inputs (2 s d bytes each) and one layer's working set (34 s d), over tp
    even = 16 * PARAMS / (tp * pp) + (32 * 2 * sd + 34 * sd) / tp
    assert even == 58_427_719_680 and even < USABLE
    # the last stage: 16 layers + the final norm + the head; one micro-batch's 16 layer inputs
    # in flight (1F1B), the working set, and the output layer's input and fp32 logits
    # (Megatron: 4 s (d + V) bytes)
    last = (18 * (16 * LAYER + FINAL) + 16 * 2 * sd + 34 * sd + 4 * s * (4096 + 128256)) / tp
    # the first: 16 layers + the embedding; pp = 2 micro-batches' 16 layer inputs, the
    # working set and the int64 input ids of both
    first = (18 * (16 * LAYER + EMBED) + 2 * 16 * 2 * sd + 34 * sd + 8 * s * 2) / tp
    assert last == 88_548_216_832 > USABLE > first
    assert gl.stage_bytes(m, s, tp, pp) == (first, last)
    assert gl.train_bytes(m, s, tp, pp) == last
    # so 4 H100s run it as tp 4 x pp 1 alone, its one stage holding everything once (before:
    # tp 2 x pp 2 was accepted at an even share of 58.4 GB a GPU)
    one = 18 * PARAMS + 32 * 2 * sd + 34 * sd + 8 * s + 4 * s * (4096 + 128256)
    runs = list(gl.layouts(m, gpum.H100, 4, s, 1))
    assert [(x.dp, x.tp, x.pp, x.bytes_per_gpu) for x in runs] == [(1, 4, 1, one / 4)]
    assert gpum.train_step(m, gpum.H100, num_gpus=4, batch=1, seq_len=s).layout == runs[0]


def test_one_stage_holds_everything_once_with_its_logits():
    m, s = LLAMA31_8B, 8192
    sd = s * 4096
    one = 18 * PARAMS + 32 * 2 * sd + 34 * sd + 8 * s + 4 * s * (4096 + 128256)
    assert gl.stage_bytes(m, s, 8, 1) == (one / 8, one / 8)


def test_tied_embeddings_keep_a_copy_on_the_last_stage():
    # GPT-2 124M: tied, 12 layers of 768; positions 1024 x 768 on the first stage
    g = DecoderCounts(name="gpt2", arch="gpt2", vocab_size=50257, d_model=768, n_layers=12,
                      n_heads=12, n_kv_heads=12, d_ff=3072, max_seq_len=1024,
                      tie_embeddings=True)  # fmt: skip
    d, v = 768, 50257
    layer = 4 * d * d + 2 * d * 3072 + (3 * d + d) + (3072 + d) + 4 * d
    s, pp = 1024, 4
    first_p = 3 * layer + v * d + 1024 * d
    last_p = 3 * layer + 2 * d + v * d  # final LayerNorm + the head's copy of the table
    first = 18 * first_p + 4 * 3 * 2 * s * d + 34 * s * d + 8 * s * 4
    last = 18 * last_p + 3 * 2 * s * d + 34 * s * d + 4 * s * (d + v)
    assert gl.stage_bytes(g, s, 1, pp) == (first, last)
    assert last > first  # the logits (206 MB) outweigh the first stage's 3 more inputs
    assert gl.stage_params(g, pp) == max(first_p, last_p)


# One GPU a node below would put each stage on its own node; these have 8, as an H100's.
H100 = gpum.H100
TABLE = 4 * 376_289 * 256  # ROUND_DECODER's tied table, fp32 main gradients, bytes


@pytest.mark.parametrize(
    ("dp", "tp", "pp", "in_node"),
    [
        (4, 1, 2, True),  # 8 GPUs, one node: NVLink
        (1, 1, 12, False),  # ranks 0 and 11 on two nodes
        (3, 2, 2, False),  # 12 GPUs: rank 0 and 6 share node 0, rank 2 and 8 do not
        (8, 1, 2, False),  # 16 GPUs: each pair 8 ranks apart, on two nodes
    ],
)
def test_tied_embedding_allreduce_by_hand(dp, tp, pp, in_node):
    lay = gl.TrainLayout(dp, tp, pp, 0.0)
    assert gl.embedding_pair_in_node(tp, dp, pp, 8) is in_node
    nbytes = TABLE / tp  # the V d / tp shard a rank holds (vocab parallel), a ring of 2
    bw, lat = (450e9, 1e-6) if in_node else (50e9, 5e-6)
    want = 2 * (2 - 1) / 2 * nbytes / bw + 2 * (2 - 1) * lat
    assert gl.embedding_allreduce_s(ROUND_DECODER, H100, lay) == pytest.approx(want, rel=1e-12)
    untied = dataclasses.replace(ROUND_DECODER, tie_embeddings=False)  # Llama 3: none
    assert gl.embedding_allreduce_s(untied, H100, lay) == 0.0
    one_stage = gl.TrainLayout(dp * pp, tp, 1, 0.0)  # one copy: nothing to sum
    assert gl.embedding_allreduce_s(ROUND_DECODER, H100, one_stage) == 0.0


def test_the_step_pays_the_embedding_allreduce_after_the_backward():
    # one GPU a node, so pp 2 crosses InfiniBand at 1 GB/s and 10 us a step
    rnd = dataclasses.replace(H100, peak_flops=1e15, ib_bytes_per_s=1e9, ib_latency_s=1e-5,
                              gpus_per_node=1)  # fmt: skip
    lay = gl.TrainLayout(1, 1, 2, 0.0)
    tied = gsch.priced_step(ROUND_DECODER, rnd, lay, (1000, 4), (0.5, 1e-6))
    emb = TABLE / 1e9 + 2e-5  # 0.38533... s: exposed, after the gradient sync
    assert tied.embedding_allreduce_s == pytest.approx(emb)
    parts = tied.compute_s + tied.stage_sends_s + tied.bubble_s + tied.exposed_allreduce_s
    assert tied.step_s == pytest.approx(parts + emb)
    untied = dataclasses.replace(ROUND_DECODER, tie_embeddings=False)
    u = gsch.priced_step(untied, rnd, lay, (1000, 4), (0.5, 1e-6))
    assert u.embedding_allreduce_s == 0.0 and u.step_s == pytest.approx(parts)
    # so on 2 such GPUs the tied model weighs dp 2 (its fp32 ring, 0.401 s) against pp 2
    # (0.396 s, 0.385 s of it the tied all-reduce): both pay a whole table of fp32 gradients
    s = gpum.train_step(ROUND_DECODER, rnd, num_gpus=2, batch=4, seq_len=1000, mfu=0.5)
    dp2 = gsch.priced_step(ROUND_DECODER, rnd, gl.TrainLayout(2, 1, 1, 0.0), (1000, 4), (0.5, 1e-6))
    ring = 4 * gl.num_params(ROUND_DECODER) / 1e9 + 2 * 1e-5  # ring of 2: bytes / bw + 2 lat
    assert dp2.allreduce_s == pytest.approx(ring, rel=1e-12)
    assert (s.layout.dp, s.layout.pp) == (1, 2) and s.step_s < dp2.step_s
