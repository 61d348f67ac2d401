"""Review 82, hole 6: the GPU training step priced a send after the first pipeline stage's
last backward (Megatron's `send_backward` is a no-op on the first stage), so that stage's last
gradient bucket was hidden a hop's worth and the last stage's tail counted the hop too; and
the makespan counted the same send and one after each of the last stage's forwards (its
`send_forward` is a no-op: the forward ends in the loss), m + 1 hops in all. Llama 3 8B on
4,096 H100s (dp 16 x tp 8 x pp 32, m 1): exposed 13.92 ms where the first stage's bucket,
14.09 ms, follows the backward whole; 178.72 ms a step for 178.55.

Oracle: an event simulation written here, not the plan's closed form nor hunt 80's loop: each
operation of Megatron's non-interleaved 1F1B order (schedules.py, forward_backward_pipelining_
without_interleaving: warm-up min(p - i - 1, m) forwards, then one forward one backward, then
the cool-down) is a node whose start is the later of its stage's previous operation's end
(compute, then that operation's blocking send where it has a receiver) and its input's arrival
(the producer's compute end + a hop); the end times are found by memoised recursion over that
graph. Each stage's parameters, its last gradient bucket (Megatron Core's max(40M, 1M dp)
parameters filled from the last parameter back) and its fp32 ring all-reduce by hand.
"""

from __future__ import annotations

import functools

import pytest
import wse_models
from wse_systems import gpu as gpum
from wse_systems import gpu_layout as gl
from wse_systems import gpu_schedule as gsch

PEAK, NODE, MFU = 989e12, 8, 0.39  # H100 datasheet bf16 dense; gpu.train_mfu's default
NVLINK, NV_LAT, IB, IB_LAT = 450e9, 1e-6, 50e9, 5e-6  # the H100's links and their latencies
L8B = wse_models.preset_config("llama3-8b", dtype="bfloat16")
L70B = wse_models.preset_config("llama3-70b", dtype="bfloat16")
GPT2_1B5 = wse_models.preset_config("gpt2-1.5b", dtype="bfloat16")
GPT2_124M = wse_models.preset_config("gpt2-124m", dtype="bfloat16")


def _layer_flops(m, seq: int) -> float:
    """PaLM's training flops a token of a layer: 6 x its matmul weights + 12 x (H Q) x T."""
    d, q, kv = m.d_model, m.n_heads * m.hd, m.n_kv_heads * m.hd
    return 6 * (2 * d * q + 2 * d * kv + (2 if m.arch == "gpt2" else 3) * d * m.d_ff) + 12 * q * seq


def _layer_params(m) -> int:
    d, q, kv, f = m.d_model, m.n_heads * m.hd, m.n_kv_heads * m.hd, m.d_ff
    if m.arch == "gpt2":  # the biases and two LayerNorms
        return 2 * d * q + 2 * d * kv + 2 * d * f + (q + 2 * kv + d) + (f + d) + 4 * d
    return 2 * d * q + 2 * d * kv + 3 * d * f + 2 * d


def _stage_params(m, pp: int) -> list[float]:
    """Each stage's parameters: the first with the word (and position) embeddings, the last
    with the final norm and the head (its own matrix, or the tied table's copy at pp > 1)."""
    d, body = m.d_model, m.n_layers // pp * _layer_params(m)
    words, pos = m.vocab_size * d, (m.max_seq_len * d if m.arch == "gpt2" else 0)
    norm = 2 * d if m.arch == "gpt2" else d
    if pp == 1:
        return [body + words + pos + norm + (0 if m.tie_embeddings else words)]
    return [body + words + pos] + [body] * (pp - 2) + [body + norm + words]


def _last_buckets(m, tp: int, dp: int, pp: int) -> list[float]:
    """Each stage's last bucket a GPU: the first stage's word embeddings where the rest of
    it fills a bucket, else the whole stage; every later stage whole (one bucket)."""
    own = [n / tp for n in _stage_params(m, pp)]
    words, bucket = m.vocab_size * m.d_model / tp, max(40_000_000, 1_000_000 * dp)
    return [words if own[0] - words >= bucket else own[0]] + own[1:]


def _ring_s(nbytes: float, tp: int, dp: int, pp: int) -> float:
    """A ring all-reduce over dp: NVLink where the rank order t + tp (d + dp p) keeps every
    dp group in a node, else InfiniBand."""
    groups = [[t + tp * (d + dp * p) for d in range(dp)] for p in range(pp) for t in range(tp)]
    in_node = all(len({r // NODE for r in g}) == 1 for g in groups)
    bw, lat = (NVLINK, NV_LAT) if in_node else (IB, IB_LAT)
    return 0.0 if dp == 1 else 2 * (dp - 1) / dp * nbytes / bw + 2 * (dp - 1) * lat


def _order(p: int, i: int, m: int) -> list[tuple[str, int]]:
    """Stage i's operations in Megatron's non-interleaved 1F1B."""
    warm = min(p - i - 1, m)
    steady = [op for j in range(m - warm) for op in (("F", warm + j), ("B", j))]
    return [("F", j) for j in range(warm)] + steady + [("B", j) for j in range(m - warm, m)]


def _schedule(fwd, bwd, hop: float, m: int) -> dict:
    """{(stage, kind, micro): (start, compute end, stage free)} of every operation: a
    forward sends its activations to the next stage unless it is the last, a backward its
    gradients to the previous unless it is the first; the sender waits for its send."""
    p = len(fwd)
    orders = [_order(p, i, m) for i in range(p)]
    where = {(i, op): k for i in range(p) for k, op in enumerate(orders[i])}

    @functools.cache
    def times(i: int, k: int) -> tuple[float, float, float]:
        kind, j = orders[i][k]
        ready = times(i, k - 1)[2] if k else 0.0  # the stage is free
        src = (i - 1, ("F", j)) if kind == "F" else (i + 1, ("B", j))
        if kind == "B" and i == p - 1:  # the last stage's backward follows its own forward
            src = None
        if src is not None and 0 <= src[0] < p:
            ready = max(ready, times(src[0], where[src])[1] + hop)  # arrival of the input
        end = ready + (fwd[i] if kind == "F" else bwd[i])
        sends = (kind == "F" and i < p - 1) or (kind == "B" and i > 0)
        return ready, end, end + (hop if sends else 0.0)

    return {(i, *orders[i][k]): times(i, k) for i in range(p) for k in range(len(orders[i]))}


def _oracle(m_cfg, lay: gl.TrainLayout, batch: int, seq: int) -> tuple[float, float]:
    """(the step's schedule length, the gradient rings' part past it)."""
    tp, dp, pp, b = lay.tp, lay.dp, lay.pp, lay.micro_batch
    m = batch // (dp * b)
    per = b * seq / (tp * PEAK * MFU)
    other = m_cfg.n_layers // pp * _layer_flops(m_cfg, seq) * per
    stages = [other] * (pp - 1) + [other + 6 * m_cfg.vocab_size * m_cfg.d_model * per]
    bw, lat = (NVLINK, NV_LAT) if dp * tp * pp <= NODE else (IB, IB_LAT)
    hop = 0.0 if pp == 1 else 2 * b * seq * m_cfg.d_model / tp / bw + lat
    ops = _schedule([c / 4 for c in stages], [3 * c / 4 for c in stages], hop, m)
    makespan = max(free for _, _, free in ops.values())
    params = [n / tp for n in _stage_params(m_cfg, pp)]
    ends = []
    for i, (n, bucket_n) in enumerate(zip(params, _last_buckets(m_cfg, tp, dp, pp), strict=True)):
        start, done, _ = ops[(i, "B", m - 1)]
        ring, bucket = _ring_s(4 * n, tp, dp, pp), _ring_s(4 * bucket_n, tp, dp, pp)
        ends.append(max(start + ring - bucket, done) + bucket)
    return makespan, max(0.0, max(ends) - makespan)


CASES = [  # (model, dp, tp, pp, micro-batch size, batch): m < pp, m = 1, m > pp
    (L8B, 16, 8, 32, 1, 16), (L8B, 8, 8, 16, 1, 8), (L8B, 2, 8, 8, 1, 8),
    (L8B, 1, 8, 4, 1, 32), (L8B, 4, 2, 2, 2, 64), (L8B, 8, 4, 4, 1, 16),
    (GPT2_1B5, 8, 1, 8, 1, 8), (GPT2_1B5, 32, 1, 2, 1, 512), (GPT2_1B5, 4, 1, 4, 2, 24),
    (L70B, 4, 8, 4, 1, 64), (L70B, 1, 8, 10, 1, 3), (L8B, 1, 1, 2, 1, 8),
    (L8B, 64, 2, 1, 1, 128), (GPT2_124M, 8, 2, 1, 14, 224),
]  # fmt: skip


@pytest.mark.parametrize(("m", "dp", "tp", "pp", "b", "batch"), CASES)
def test_the_step_is_the_schedule_without_the_sends_megatron_skips(m, dp, tp, pp, b, batch):
    seq = 1024 if m.arch == "gpt2" else 8192
    lay = gl.TrainLayout(dp, tp, pp, 0.0, b)
    s = gsch.priced_step(m, gpum.H100, lay, (seq, batch), (MFU, 1e-6))
    makespan, exposed = _oracle(m, lay, batch, seq)
    assert s.compute_s + s.stage_sends_s + s.bubble_s == pytest.approx(makespan, rel=1e-9)
    assert s.exposed_allreduce_s == pytest.approx(exposed, rel=1e-9, abs=1e-15)


def test_the_first_stages_last_bucket_follows_its_backward_whole():
    # the review's repro: Llama 3 8B, 16 sequences on 4,096 H100s, dp 16 x tp 8 x pp 32, m 1:
    # the first stage's one bucket (a layer + the word embeddings, 92.9M a rank) starts when
    # 1F1B's last backward ends and nothing follows it, so it is exposed whole
    s = gpum.train_step(L8B, gpum.H100, num_gpus=4096, batch=16, seq_len=8192)
    assert (s.layout.dp, s.layout.tp, s.layout.pp, s.layout.micro_batch) == (16, 8, 32, 1)
    bucket = _ring_s(4 * _last_buckets(L8B, 8, 16, 32)[0], 8, 16, 32)
    assert s.last_bucket_allreduce_s == pytest.approx(bucket, rel=1e-9)
    assert s.exposed_allreduce_s == pytest.approx(bucket, rel=1e-9)  # before: less a hop
    hop = gl.stage_hop_s(L8B, gpum.H100, s.layout, 8192)
    assert s.stage_sends_s == pytest.approx(hop)  # one gradient send, no activation send
    makespan, exposed = _oracle(L8B, s.layout, 16, 8192)
    assert s.step_s == pytest.approx(makespan + exposed + s.embedding_allreduce_s, rel=1e-9)


def test_the_oracles_schedule_is_the_textbook_one_without_sends():
    # equal stages, no hop: (m + p - 1)(f + b) (Narayanan et al. 2021)
    for p, m in ((4, 8), (8, 2), (3, 1), (1, 5)):
        ops = _schedule([1.0] * p, [2.0] * p, 0.0, m)
        assert max(free for *_, free in ops.values()) == pytest.approx((m + p - 1) * 3.0)
    # one micro-batch: every boundary crossed once each way, 2 (p - 1) hops
    ops = _schedule([1.0] * 4, [2.0] * 4, 0.5, 1)
    assert max(free for *_, free in ops.values()) == pytest.approx(4 * 3.0 + 2 * 3 * 0.5)
