"""The weight-streaming step prediction (counted by hand), the GPU baseline, sampling and the
experiment."""

import math

import jax
import numpy as np
import pytest
import wse_models
from wse_core import PerfModel, preset
from wse_core.cost.calibration import UNCALIBRATED
from wse_systems.training.performance import (
    Numerics,
    Sparsity,
    StepLayout,
    StepPlacement,
    gemm_work,
    layer_phases,
    predict_step,
)
from wse_systems.training.plan import memory_plan, plan_activations
from wse_trainer.sample import generate
from wse_trainer.studies.weight_streaming import CASES, NUM_CSX, _predictions

WSE3, TINY = preset("wse3"), preset("tiny")


def _tiny_model(**kw):
    return wse_models.preset_config(
        "tiny-gpt2", vocab_size=64, d_model=16, n_layers=2, n_heads=2, n_kv_heads=2, d_ff=32,
        max_seq_len=8, dtype="bfloat16", **kw,
    )  # fmt: skip


def test_a_product_is_counted_by_hand_on_a_tiny_wafer():
    # 8 x 8 PEs (WSE-2 SIMD: fmac_mixed and fp32 add 2-wide, 3 issue cycles); 16 tokens
    # through a 16 -> 24 product: each PE holds ceil(24/8)=3 x ceil(16/8)=2 weights; mixed
    # precision: 2 B inputs, 4 B partial sums -> 2*2 + 3*4 = 16 B a token; 96 B -> 6 tokens a
    # pass: passes of 6, 6, 4.
    pl = StepPlacement(TINY, Numerics.of("mixed"), 1, 2, 8, False, 1, 96)
    w = gemm_work(pl, 16, 24)
    assert pl.chunk(16, 24) == 6
    fmac = 12 * (3 + 3) + 6 * (3 + 2)  # 6 FMACs a pass of ceil(6/2) / ceil(4/2) steps
    add = 6 * (3 + 3) + 3 * (3 + 2)  # 3 partial sums a pass added from the west
    cost = PerfModel(TINY, UNCALIBRATED).cost(w)
    assert cost.compute_cycles == fmac + add == 153
    elems = 3 * 2 * 16
    assert w.sram_read_bytes == elems * (2 + 4) + 6 * 3 * 2  # + each weight once a pass
    assert w.sram_write_bytes == elems * 4 + 2 * 16 * 2  # partial sums + arriving inputs
    assert dict(w.links) == {"S": 2 * 16 * 2 / 4, "E": 3 * 16 * 4 / 4}
    assert cost.fabric_cycles == 48 and cost.busiest_link == "E"
    assert cost.sram_cycles == max(612 / 16, 448 / 8)
    assert w.latency_hops == 7 + 7


def test_a_layer_is_counted_by_hand():
    # tiny model on the 8 x 8 wafer, 2 x 8 tokens: per token the products hold
    # qkv 16->48: 6x2, o 16->16: 2x2, up 16->32: 4x2, down 32->16: 2x4 = 32 weights per PE;
    # attention: 2 x 8 tokens x 4.5 mean context x 2 heads = 144 scores, q.k and p.v of
    # head_dim 8 each, over 64 PEs.
    model = _tiny_model()
    pl = StepPlacement(TINY, Numerics.of("mixed"), 1, 2, 8, False, 1, 10_000)
    fwd = layer_phases(model, pl).total_work().ops_by_kind()
    attn = 2 * 144 * 8 / 64
    assert fwd["fmac_mixed.bf16"] == pytest.approx(16 * 32 + attn)
    bwd = layer_phases(model, pl, backward=True).total_work().ops_by_kind()
    assert bwd["fmac_mixed.bf16"] == pytest.approx(2 * (16 * 32 + attn))
    # the pointwise FMACs in the partial-sum dtype: softmax exp (6 per score), two norms,
    # the activation (6 + 2 per MLP hidden element), per PE
    pointwise = 144 / 64 * 6 + 2 * 16 * 16 / 64 + 8 * 16 * 32 / 64
    assert fwd["fmac.fp32"] == pytest.approx(pointwise)
    bf16 = StepPlacement(TINY, Numerics.of("bf16"), 1, 2, 8, False, 1, 10_000)
    got = layer_phases(model, bf16).total_work().ops_by_kind()
    assert got["fmac.bf16"] == pytest.approx(16 * 32 + attn + pointwise)
    assert "fmac_mixed.bf16" not in got


def test_zero_skipping_fires_only_the_sparse_operands_fmacs():
    # s = 0.75 of the MLP hidden activation is zero: the down projection (2 x 4 weights per
    # PE) forward and weight gradient, and the up projection's (4 x 2) input and weight
    # gradients fire a quarter of their 16 tokens x 8 FMACs; qkv, o and the down
    # projection's input gradient (dY W^T, dense) stay whole.
    model = _tiny_model()
    dense = StepPlacement(TINY, Numerics.of("mixed"), 1, 2, 8, False, 1, 10_000)
    sparse = StepPlacement(TINY, Numerics.of("mixed"), 1, 2, 8, False, 1, 10_000, 0.75)
    key = "fmac_mixed.bf16"
    fwd = layer_phases(model, dense).total_work().ops_by_kind()[key]
    assert layer_phases(model, sparse).total_work().ops_by_kind()[key] == pytest.approx(
        fwd - 0.75 * 16 * 8
    )
    bwd = layer_phases(model, dense, backward=True).total_work().ops_by_kind()[key]
    got = layer_phases(model, sparse, backward=True).total_work().ops_by_kind()[key]
    assert got == pytest.approx(bwd - 3 * 0.75 * 16 * 8)
    big = wse_models.preset_config("llama3-8b", dtype="bfloat16", mlp_activation="relu")
    base = predict_step(big, WSE3, num_csx=1, batch_per_system=16, seq_len=8192)
    assert predict_step(
        big, WSE3, num_csx=1, batch_per_system=16, seq_len=8192, sparsity=Sparsity(0.0)
    ).predicted_s == pytest.approx(base.predicted_s)
    assert (
        predict_step(
            big, WSE3, num_csx=1, batch_per_system=16, seq_len=8192, sparsity=Sparsity(0.5)
        ).predicted_s
        < base.predicted_s
    )


def test_the_stream_overlaps_the_layer_it_prefetches_for():
    model = wse_models.preset_config("llama3-8b", dtype="bfloat16")
    r = predict_step(model, WSE3, num_csx=1, batch_per_system=16, seq_len=8192)
    fwd = r.predicted.leaf("forward")
    w_in, layer = fwd.children
    # weights stream in the compute dtype at 150 GB/s (one system: no SwarmX tree level)
    assert w_in.seconds == pytest.approx(model.layer_params() * 2 / 150e9)
    assert fwd.repeat == model.n_layers - 1  # the last layer prefetches the head instead
    assert max(w_in.seconds, layer.seconds) == layer.seconds
    assert fwd.seconds / fwd.repeat == pytest.approx(layer.seconds, rel=1e-12)
    assert r.extra["precision"] == "mixed" and r.units == "step" and r.systems == 1
    assert r.extra["tokens_per_s"] == pytest.approx(16 * 8192 / r.predicted_s)


def test_changing_the_placement_changes_the_prediction_through_the_plan():
    model = _tiny_model()
    plan = memory_plan(model, WSE3, 4, 8)
    base = predict_step(
        model, WSE3, num_csx=1, batch_per_system=4, seq_len=8, layout=StepLayout(plan)
    )
    # the same plan object's stride: keeping every 2nd layer input recomputes one layer
    strided = memory_plan(model, WSE3, 4, 8, streaming=plan_activations(model, WSE3, 4, 8, 2))
    again = predict_step(
        model, WSE3, num_csx=1, batch_per_system=4, seq_len=8, layout=StepLayout(strided)
    )
    assert again.predicted.leaf("recompute").repeat == 1
    assert again.predicted_s > base.predicted_s
    # resident: no weight streams, the optimizer on the wafer
    res = predict_step(
        model, WSE3, num_csx=1, batch_per_system=4, seq_len=8, layout=StepLayout(plan, "resident")
    )
    assert plan.resident and res.predicted.leaf("weights_in").seconds == 0.0
    assert res.predicted.leaf("adam_on_wafer").seconds > 0
    # Saving the weight streams pays once the weights are more than a few words per PE: on
    # this 16-wide model the on-wafer Adam's DSD issue overheads outweigh them, on GPT-2
    # 124M the streams dominate.
    gpt2 = wse_models.preset_config("gpt2-124m")
    g_plan = memory_plan(gpt2, WSE3, 4, 8)
    g = [
        predict_step(
            gpt2, WSE3, num_csx=1, batch_per_system=4, seq_len=8, layout=StepLayout(g_plan, p)
        )
        for p in ("streamed", "resident")
    ]
    assert g_plan.resident and g[1].predicted_s < g[0].predicted_s
    # a larger batch: more compute through the same layout
    big = predict_step(model, WSE3, num_csx=1, batch_per_system=64, seq_len=8)
    assert big.extra["compute_s"] > base.extra["compute_s"]
    # more systems: the SwarmX tree adds its levels to every exposed stream
    four = predict_step(
        model, WSE3, num_csx=4, batch_per_system=4, seq_len=8, layout=StepLayout(plan)
    )
    lvl = (
        four.predicted.leaf("first_weights_in").seconds
        - base.predicted.leaf("first_weights_in").seconds
    )
    assert lvl == pytest.approx(2 * WSE3.system_latency_s)


def test_resident_is_refused_when_the_state_does_not_fit():
    from wse_core import WseError

    model = wse_models.preset_config("llama3-8b", dtype="bfloat16")
    with pytest.raises(WseError, match="cannot stay resident"):
        predict_step(
            model,
            WSE3,
            num_csx=1,
            batch_per_system=1,
            seq_len=1024,
            layout=StepLayout(placement="resident"),
        )


def test_tokens_per_s_scale_with_systems_as_the_overlap_says():
    model = wse_models.preset_config("llama3-8b", dtype="bfloat16")
    # weak scaling, compute-bound layers: only the SwarmX tree's latency grows
    one = predict_step(model, WSE3, num_csx=1, batch_per_system=16, seq_len=8192)
    many = predict_step(model, WSE3, num_csx=64, batch_per_system=16, seq_len=8192)
    assert many.extra["tokens_per_s"] / one.extra["tokens_per_s"] == pytest.approx(64, rel=1e-3)
    # strong scaling at a fixed global batch of 64 x 1024: per-system compute shrinks until
    # the weight stream binds; then a step cannot be shorter than every layer's weights
    # streamed in twice (forward, backward)
    rate = [
        predict_step(model, WSE3, num_csx=n, batch_per_system=64 // n, seq_len=1024)
        for n in (1, 4, 16, 64)
    ]
    floor = 2 * model.n_layers * model.layer_params() * 2 / 150e9
    assert rate[-1].predicted_s >= floor
    assert rate[-1].extra["stall_fraction"] > 0.5 > rate[0].extra["stall_fraction"]
    gain = rate[-1].extra["tokens_per_s"] / rate[0].extra["tokens_per_s"]
    # the gain is 64 times the unstalled share, corrected by what a sequence's compute costs
    # at each micro-batch (not a constant: at 64 sequences the head's chunks are shorter, so
    # a sequence issues more DSDs) and by the one system's own stall
    per_seq = [r.extra["compute_s"] / (64 // n) for r, n in zip(rate, (1, 4, 16, 64), strict=True)]
    stall = [r.extra["stall_fraction"] for r in (rate[0], rate[-1])]
    bound = 64 * (1 - stall[1]) / (1 - stall[0]) * per_seq[0] / per_seq[-1]
    assert 1 < gain < bound * 1.01
    assert math.isclose(sum(1 for _ in rate), 4)


def test_experiment_predicts_every_case_the_same_way():
    rows, curves = _predictions()
    steps = [r for r in rows if r.name == "step_s"]
    assert len(steps) == len(CASES) * len(NUM_CSX)
    assert {r.params["model"] for r in steps} == {c[0] for c in CASES}
    keys = {"model", "wafer", "systems", "precision"}
    assert all(keys <= set(r.params) for r in rows if not r.name.startswith("gpu"))
    assert all(r.published is None for r in rows)  # no published training figure
    assert _predictions()[0] == rows  # deterministic: --quick changes only measurements


def test_greedy_kv_cache_sampling_matches_full_forward():
    model = wse_models.preset_config("tiny-gpt2", vocab_size=64, max_seq_len=32)
    params = wse_models.init_params(model, jax.random.key(3))
    prompt = [5, 9, 2]
    out = generate(model, params, prompt, 6)
    # Oracle: one full forward (no cache) over prompt + output; greedy means every output
    # token is the argmax of the logits at the position before it.
    seq = np.asarray([prompt + out], np.int32)
    logits, _ = jax.jit(wse_models.forward, static_argnums=0)(model, params, seq)
    want = np.argmax(np.asarray(logits[0, len(prompt) - 1 : -1]), axis=-1)
    assert out == want.tolist()
    hot = generate(model, params, prompt, 6, temperature=1.0, seed=1)
    assert len(hot) == 6 and all(0 <= t < 64 for t in hot)


@pytest.mark.slow
def test_experiment_writes_its_files_with_a_measured_stall(tmp_path):
    import json

    from wse_core import write_experiment
    from wse_trainer.studies.weight_streaming import run

    folder = write_experiment(run(quick=True, seed=0), tmp_path)
    data = json.loads((folder / "results.json").read_text())
    assert data["experiment"] == "weight-streaming"
    assert {m["systems"] for m in data["measurements"]} == {1, 2}
    assert all(m["predicted_step_s_small_wafer"] > 0 for m in data["measurements"])
    assert all(0 <= m["measured_stall_fraction"] < 1 for m in data["measurements"])
    assert (folder / "figure.png").stat().st_size > 10_000


def test_packed_rows_price_attention_within_their_documents():
    # A row of 64 tokens as one causal sequence has 64 * 65 / 2 (query, key) pairs; packed
    # as four documents of 16, 4 * 16 * 17 / 2: only the attention FMACs shrink, by that ratio.
    model = _tiny_model()
    full = StepPlacement(TINY, Numerics.of("mixed"), 1, 2, 64, False, 1, 10_000)
    same = StepPlacement(TINY, Numerics.of("mixed"), 1, 2, 64, False, 1, 10_000, 0.0, 64 * 65 / 2)
    packed = StepPlacement(TINY, Numerics.of("mixed"), 1, 2, 64, False, 1, 10_000, 0.0, 4 * 136)
    key = "fmac_mixed.bf16"
    f = layer_phases(model, full).total_work().ops_by_kind()[key]
    assert layer_phases(model, same).total_work().ops_by_kind()[key] == pytest.approx(f)
    gemm = 2 * 64 * 32  # 2 rows x 64 tokens x 32 weights per PE
    attn = f - gemm
    got = layer_phases(model, packed).total_work().ops_by_kind()[key]
    assert got == pytest.approx(gemm + attn * (4 * 136) / (64 * 65 / 2))


def test_chunked_layer_prices_the_same_products_and_streams_them_by_chunk():
    # tiny model on the 8 x 8 wafer, every matrix in 2 column chunks: the chunks' FMACs add
    # up to the whole layer's products (each chunk's block divides the wafer evenly here:
    # qkv 16 -> 16 + 2 x 16 in chunks of 8 columns, 1 x 2 weights a PE; ...), and each
    # chunk streams its own weights at 150 GB/s in the compute dtype (bf16: 2 B).
    from wse_systems.training.chunks import forced
    from wse_systems.training.layer_cost import chunked_layer_phases
    from wse_systems.training.stream_cost import Streams

    model = _tiny_model()
    ck = forced(model, 2)
    pl = StepPlacement(TINY, Numerics.of("mixed"), 1, 2, 8, False, 1, 10_000, chunks=ck)
    whole = layer_phases(model, pl).total_work().ops_by_kind()["fmac_mixed.bf16"]
    st = Streams(pl)
    fwd = chunked_layer_phases(model, pl, st)
    assert fwd.total_work().ops_by_kind()["fmac_mixed.bf16"] == pytest.approx(whole)
    bwd = chunked_layer_phases(model, pl, st, backward=True)
    back = layer_phases(model, pl, backward=True).total_work().ops_by_kind()["fmac_mixed.bf16"]
    assert bwd.total_work().ops_by_kind()["fmac_mixed.bf16"] == pytest.approx(back)
    # host bytes: forward streams the layer once (matrices by chunks, then the vectors);
    # the backward streams it again and writes every gradient back and MemoryX's update
    # (both priced on the same link): three times the layer's parameters.
    n = model.layer_params() * 2 * TINY.host_io_bytes_per_s / 150e9
    assert fwd.total_work().host_io_bytes == pytest.approx(n)
    assert bwd.total_work().host_io_bytes == pytest.approx(3 * n)
    chunk = PerfModel(TINY).evaluate(fwd).leaf("w_up_chunks")
    assert chunk.repeat == 2
    w_in = chunk.children[0]
    assert w_in.seconds == pytest.approx(16 * 16 * 2 / 150e9)  # 16 inputs x 16 of 32 columns


def test_a_1t_model_streams_below_the_layer_and_says_where_it_stalls():
    from wse_systems.training.stall import stream_budget

    model = wse_models.preset_config(
        "llama3-70b", d_model=25600, n_layers=128, d_ff=102400, n_heads=160, n_kv_heads=16,
        dtype="bfloat16",
    )  # fmt: skip
    plan = memory_plan(model, WSE3, 3, 8192)
    assert plan.streaming is not None and plan.streaming.chunked
    ck = plan.streaming.chunks
    # the chunk's three buffers fit beside the activations the ledger keeps
    per_pe = -(-ck.largest_params * 2 // WSE3.num_pes)
    assert 3 * per_pe <= WSE3.sram_bytes_per_pe - plan.streaming.held_layers * (
        plan.streaming.activation_bytes_per_pe
    )
    r = predict_step(
        model, WSE3, num_csx=1, batch_per_system=3, seq_len=8192, layout=StepLayout(plan)
    )
    assert r.extra["weight_chunks"].startswith(f"{sum(ck.counts)} column chunks a layer")
    rows = {row.unit.split()[0]: row for row in stream_budget(
        model, WSE3, plan, num_csx=1, micro_batch=3, seq_len=8192)}  # fmt: skip
    i = [m.name for m in ck.matrices].index("w_up")
    up = rows["w_up"]
    assert up.weight_bytes == 25600 * ck.cols(i) * 2
    assert up.stream_in_s == pytest.approx(up.weight_bytes / 150e9)  # one system: no tree
    assert up.per_step == 128 * ck.counts[i]
    assert up.no_stall == (up.stream_in_s <= up.forward_s and up.write_back_s <= up.backward_s)
    assert not rows["embedding"].no_stall  # nothing to hide the embedding's stream under
    # weak scaling: 16 systems add 4 SwarmX levels (2 us each) to the streamed items, so the
    # step grows by more than nothing and at most 4 levels on every item it streams (hand
    # bound): speedup = 16 step(1) / step(16) < 16
    from wse_systems.training.stream_cost import PARTS

    many = predict_step(
        model, WSE3, num_csx=16, batch_per_system=3, seq_len=8192, layout=StepLayout(plan)
    )
    items = sum(k for leaf, k in r.phases.leaves() if leaf.name in PARTS)
    added = many.predicted_s - r.predicted_s
    assert 0 < added <= 4 * WSE3.system_latency_s * items
    assert 16 * r.predicted_s / many.predicted_s < 16


def test_a_model_over_memoryx_capacity_is_refused_with_the_numbers():
    from wse_core import WseError

    model = wse_models.preset_config("llama3-8b", dtype="bfloat16")
    # fp32 masters + Adam's two slots: 12 B x 8,030,261,248 parameters = 96.36 GB > 50 GB
    small = WSE3.replace(memoryx_capacity_bytes=5e10)
    assert 12 * model.num_params() == 96_363_134_976
    with pytest.raises(WseError, match=r"take 0\.09636 TB but MemoryX holds 0\.05 TB"):
        predict_step(model, small, num_csx=1, batch_per_system=16, seq_len=8192)
