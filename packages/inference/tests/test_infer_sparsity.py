"""Activation sparsity as served: the engines count the MLP zeros of every prompt they
prefill (and the pipelined engine of every decode step), and /metrics shows them per layer
(`wse_mlp_zero_fraction{layer}`).

Oracle: `wse_models.sparsity.zero_fraction` of the same prompt tokens in one forward (the
prefill runs them in padded chunks through the KV cache; padding is not counted, so the
counts are equal up to sign flips of pre-activations within fp32 round-off of zero: the
chunked and the whole forward sum in another order. 1e-3 is a few entries of these 2 x
128 x 12 activations, and the tests see none).
"""

import numpy as np
import pytest
import wse_models
from prometheus_client.parser import text_string_to_metric_families
from wse_core import preset
from wse_inference.engine import SamplingParams
from wse_inference.pipeline.engine import PipelineEngine
from wse_inference.serve.metrics import ServeMetrics
from wse_inference.serve.scheduler import SchedulerStats
from wse_inference.testing import tiny_model


def _stats(metrics):
    return SchedulerStats(0, 0, 2, 8, 0, False, metrics)


def test_pipeline_engine_counts_prompt_zeros():
    model = tiny_model("llama", mlp_activation="relu")
    engine = PipelineEngine(model, spec=preset("wse3"), stages=2, max_context=64, prefill_chunk=8)
    prompts = [list(range(1, 13)), list(range(40, 45))]  # 12 tokens: 2 chunks, one padded
    for p in prompts:
        engine.prefill(prompt_ids=p, sampling=SamplingParams(max_tokens=2, temperature=0.0))
    m = engine.metrics()
    fracs = [wse_models.sparsity.zero_fraction(model.params, model.config, p) for p in prompts]
    want = (fracs[0] * 12 + fracs[1] * 5) / 17
    got = [m[f"mlp_zero_fraction_layer_{i}"] for i in range(model.config.n_layers)]
    np.testing.assert_allclose(got, want, atol=1e-3)
    assert 0.2 < m["mlp_zero_fraction_mean"] < 0.8
    assert m["prefills"] == 2


def test_dense_engine_reports_no_sparsity():
    engine = PipelineEngine(tiny_model("llama"), spec=preset("wse3"), stages=1, max_context=32)
    engine.prefill(prompt_ids=[1, 2, 3], sampling=SamplingParams(max_tokens=1))
    assert not any(k.startswith("mlp_zero") for k in engine.metrics())


def test_metrics_render_one_labelled_gauge_per_layer():
    metrics = ServeMetrics().bind(
        lambda: _stats(
            {
                "prefills": 3.0,
                "mlp_zero_fraction_layer_0": 0.25,
                "mlp_zero_fraction_layer_10": 0.75,
                "mlp_zero_fraction_layer_2": 0.5,
                "mlp_zero_fraction_mean": 0.5,
            }
        )
    )
    fams = {f.name: f for f in text_string_to_metric_families(metrics.render().decode())}
    layers = {s.labels["layer"]: s.value for s in fams["wse_mlp_zero_fraction"].samples}
    assert layers == {"0": 0.25, "2": 0.5, "10": 0.75}
    assert fams["wse_mlp_zero_fraction_mean"].samples[0].value == pytest.approx(0.5)
    assert fams["wse_engine_prefills"].samples[0].value == 3.0
    assert not any(n.startswith("wse_engine_mlp") for n in fams)


def _zeros(model, tokens):
    ids = np.asarray([tokens], np.int32)
    return np.asarray(wse_models.sparsity.zero_counts(model.config, model.params, ids))


def test_pipeline_engine_counts_decode_zeros_too():
    # One stage: the prefill counts the prompt; prime runs the first token t1; each generate
    # step draws the next token, embeds it and runs it through every layer in the same tick,
    # counted (the last one drawn too). Oracle: the zeros of the whole sequence minus those
    # of prompt + t1 (causal: a token's activations do not depend on later tokens), plus the
    # prompt's own, in one forward each.
    model = tiny_model("llama", mlp_activation="relu")
    engine = PipelineEngine(model, spec=preset("wse3"), stages=1, max_context=64, prefill_chunk=8)
    prompt = list(range(3, 14))
    out = engine.generate_all(
        [prompt], [SamplingParams(max_tokens=9, temperature=0.0, ignore_eos=True)]
    )[0]
    fed = len(out) - 1  # t2 .. t_n went through the layers in decode
    decode = _zeros(model, prompt + out) - _zeros(model, prompt + out[:1])
    want = (_zeros(model, prompt) + decode) / ((len(prompt) + fed) * model.config.d_ff)
    m = engine.metrics()
    got = [m[f"mlp_zero_fraction_layer_{i}"] for i in range(model.config.n_layers)]
    np.testing.assert_allclose(got, want, atol=1e-3)


def test_speculative_engine_counts_verification_zeros():
    # Each round's verification runs the last committed token and the gamma drafts through
    # the target: its MLP zeros equal those of the whole sequence + drafts minus those of the
    # sequence before that last token (causal), in one forward each.
    from wse_inference.model_dir import truncated_model
    from wse_inference.speculative.engine import SpeculativeEngine

    model = tiny_model("llama", mlp_activation="relu")
    engine = SpeculativeEngine(
        model, truncated_model(model, 1), spec=preset("wse3"), gamma=3, max_context=64
    )
    rounds, inner = [], engine._round

    def spy(params, caches, last2, n, key, s):
        r = inner(params, caches, last2, n, key, s)
        rounds.append((int(n), np.asarray(r.drafts).tolist(), np.asarray(r.mlp_zeros)))
        return r

    engine._round = spy
    prompt = list(range(5, 16))
    state = engine.init_decode_state()
    sp = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)
    state = engine.insert(
        prefix=engine.prefill(prompt_ids=prompt, sampling=sp), state=state, slot=0
    )
    seqs = {}
    for _ in range(2):
        seqs[len(rounds)] = list(state.slots[0].seq)
        state, _ = engine.generate(state=state)
    assert len(rounds) == 2
    for i, (n, drafts, got) in enumerate(rounds):
        seq = seqs[i]
        assert len(seq) == n
        want = _zeros(model, seq + drafts) - _zeros(model, seq[:-1])
        np.testing.assert_allclose(got, want, atol=2)  # fp32 sign flips at 0, see the top
    m = engine.metrics()
    total = _zeros(model, prompt) + sum(r[2] for r in rounds)
    tokens = len(prompt) + 2 * (3 + 1)
    got = [m[f"mlp_zero_fraction_layer_{i}"] for i in range(model.config.n_layers)]
    np.testing.assert_allclose(got, total / (tokens * model.config.d_ff), atol=1e-3)
