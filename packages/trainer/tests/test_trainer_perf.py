"""The weight-streaming performance model, the GPU baseline, sampling and the experiment."""

import jax
import numpy as np
import pytest
import wse_models
from wse_core import preset
from wse_trainer.experiment import CASES, NUM_CSX, _predictions
from wse_trainer.performance import H100, GpuSpec, layer_flops, predict_gpu, predict_stream
from wse_trainer.sample import generate

WSE3 = preset("wse3")


def test_no_stall_condition_is_where_compute_covers_the_stream():
    model = wse_models.preset_config("llama3-8b")
    p = predict_stream(model, WSE3, num_csx=1, batch=4, seq_len=8192)
    b = p.no_stall_batch
    above = predict_stream(model, WSE3, num_csx=1, batch=b, seq_len=8192)
    below = predict_stream(model, WSE3, num_csx=1, batch=b - 1, seq_len=8192)
    # Above the threshold only the (tiny) embedding/head part can stall.
    assert above.stall_fraction < 0.01 < below.stall_fraction
    # The condition by hand: MemoryX rate >= layer bytes / layer compute time.
    compute = layer_flops(model, b * 8192, 8192) / WSE3.peak_flops("bf16")
    assert WSE3.memoryx_bytes_per_s >= above.layer_bytes / compute


def test_weak_scaling_is_nearly_linear_on_wse3():
    model = wse_models.preset_config("gpt2-124m")
    one = predict_stream(model, WSE3, num_csx=1, batch=112, seq_len=1024)
    many = predict_stream(model, WSE3, num_csx=64, batch=112, seq_len=1024)
    assert many.samples_per_s / one.samples_per_s == pytest.approx(64, rel=0.02)
    assert many.step_s >= one.step_s


def test_gpu_ring_allreduce_by_hand():
    model = wse_models.preset_config("gpt2-124m")
    gpu = GpuSpec(mfu=0.5, link_bytes_per_s=1e9, hop_latency_s=0.0)
    one = predict_gpu(model, gpu, num_gpus=1, batch=8, seq_len=1024)
    two = predict_gpu(model, gpu, num_gpus=2, batch=8, seq_len=1024)
    ring = 2 * (2 - 1) / 2 * 4 * model.num_params() / 1e9
    exposed = max(0.0, ring - one["step_s"] * 2 / 3)
    assert two["step_s"] == pytest.approx(one["step_s"] + exposed)
    assert two["scaling_efficiency"] == pytest.approx(one["step_s"] / two["step_s"])
    assert (
        predict_gpu(wse_models.preset_config("llama3-8b"), H100, num_gpus=8, batch=1, seq_len=8192)[
            "fits_memory"
        ]
        == 0.0
    )


def test_experiment_predicts_every_case_the_same_way():
    rows, curves = _predictions()
    steps = [r for r in rows if r.name == "step_s"]
    assert len(steps) == len(CASES) * len(NUM_CSX)
    assert {r.params["model"] for r in steps} == {c[0] for c in CASES}
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
    from wse_trainer.experiment import run

    folder = write_experiment(run(quick=True, seed=0), tmp_path)
    data = json.loads((folder / "results.json").read_text())
    assert data["experiment"] == "weight-streaming"
    assert {m["num_csx"] for m in data["measurements"]} == {1, 2}
    assert all(0 <= m["measured_stall_fraction"] < 1 for m in data["measurements"])
    assert (folder / "figure.png").stat().st_size > 10_000
