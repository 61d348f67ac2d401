"""Hunt 77 (speculative decoding, as a vLLM user finds it). Broken before:

1. The warm-up's speculative rounds were on /metrics before any request (18 drafted tokens,
   spec_alpha 0.0966, with wse_generation_tokens_total 0), and the pipeline engine's
   `wse_engine_*` counters held the warm-up's steps and prefills.
2. vLLM v1's speculative counters (`vllm:spec_decode_num_drafts_total`, `..._num_draft_tokens_
   total`, `..._num_accepted_tokens_total`, `..._num_accepted_tokens_per_pos_total{position}`)
   were missing.
3. A draft larger than the target ran in `wse infer generate` and serve (`wse plan infer`
   refuses it).
4. `--speculative-config` took any `method` ("xyz", "eagle", "ngram") and ran a draft model;
   a draft model without `num_speculative_tokens` drafted 4 (vLLM requires it).
5. leviathan23-speculative: a negative draft cost c was not flagged noisy, and noisy rows were
   counted in the agreement figure.

Oracles: a fresh engine that never ran a warm-up, running the same greedy request alone; the
speculative decoder's own fused loop (its acceptance statistics); the parameter count of the
weight arrays themselves; vLLM's names (vllm/v1/spec_decode/metrics.py, vllm/config's
`method`) written out here; the study's c recomputed by hand from a row's timings.
"""

from __future__ import annotations

import json
import types

import httpx
import numpy as np
import pytest
import typer
from prometheus_client.parser import text_string_to_metric_families
from wse_cli.app import app
from wse_cli.testing import refused_in_one_line
from wse_core import preset
from wse_inference.engine import SamplingError, SamplingParams
from wse_inference.load import load_engine
from wse_inference.model_files import ModelLoadError
from wse_inference.serve.app import ServeConfig, Server
from wse_inference.serve.metrics import ServeMetrics
from wse_inference.serve.scheduler import SchedulerStats
from wse_inference.speculative.config import SpeculativeConfig, parse_speculative_config
from wse_inference.testing import one_request, save_tiny_model

pytestmark = pytest.mark.timeout(600)
ROOT = typer.main.get_command(app)
GAMMA, PROMPT, TOKENS, CONTEXT = 3, [5, 6, 7], 12, 48
GREEDY = SamplingParams(max_tokens=TOKENS, temperature=0.0, ignore_eos=True)
# vLLM v1's SpecDecodingProm counters, `vllm:` for our `wse_` (vllm/v1/spec_decode/metrics.py)
VLLM_SPEC_COUNTERS = (
    "spec_decode_num_drafts",
    "spec_decode_num_draft_tokens",
    "spec_decode_num_accepted_tokens",
    "spec_decode_num_accepted_tokens_per_pos",
)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    save_tiny_model(root / "target", n_layers=2)
    save_tiny_model(root / "draft", n_layers=1, seed=7)
    save_tiny_model(root / "big_draft", n_layers=4, seed=3)
    return root


def _engine(models, speculative: bool):
    cfg = {"model": str(models / "draft"), "num_speculative_tokens": GAMMA}
    return load_engine(
        str(models / "target"),
        spec=preset("wse3"),
        max_slots=2,
        max_context=CONTEXT,
        speculative_config=cfg if speculative else None,
    )


def _families(server) -> dict:
    text = httpx.get(f"{server.http_url}/metrics", timeout=10).text
    return {f.name: f for f in text_string_to_metric_families(text)}


def _value(fams, name: str) -> float:
    return next(s.value for s in fams[name].samples if s.name.endswith(("_total", name)))


def _served(models, speculative: bool):
    """/metrics right after the warm-up, and after one greedy request of TOKENS tokens."""
    engine = _engine(models, speculative)
    server = Server(engine, ServeConfig(port=0, drain_s=2.0)).start()
    try:
        server.warmup()
        before = _families(server)
        body = {"model": engine.model_name, "prompt": PROMPT, "max_tokens": TOKENS,
                "temperature": 0, "ignore_eos": True}  # fmt: skip
        r = httpx.post(f"{server.http_url}/v1/completions", json=body, timeout=120)
        assert r.is_success, r.text
        return before, _families(server)
    finally:
        server.close()


@pytest.fixture(scope="module")
def speculative_served(models):
    return _served(models, speculative=True)


# -- hole 1: the warm-up is not counted by the engine either ----------------------------------
@pytest.mark.parametrize("speculative", [True, False])
def test_the_engines_counters_start_at_zero_after_the_warm_up(models, speculative, request):
    if speculative:
        before, after = request.getfixturevalue("speculative_served")
    else:
        before, after = _served(models, speculative=False)
    engine_gauges = {n: f for n, f in before.items() if n.startswith("wse_engine_")}
    assert engine_gauges  # spec_draft_tokens, ... or steps, prefills, tokens, ...
    for name, fam in engine_gauges.items():
        assert [s.value for s in fam.samples] == [0.0], name  # hunt 77: 18 drafted tokens
    assert _value(before, "wse_generation_tokens") == 0
    # the oracle: a fresh engine, no warm-up, the same request alone
    fresh = _engine(models, speculative)
    tokens, _ = one_request(fresh, PROMPT, GREEDY)
    assert len(tokens) == TOKENS
    assert _value(after, "wse_generation_tokens") == TOKENS
    for key, value in fresh.metrics().items():
        name = f"wse_engine_{key}"
        if name in after:  # the per-position and round counts are counters (hole 2)
            assert _value(after, name) == pytest.approx(value, rel=1e-9), name


# -- hole 2: vLLM's speculative counters --------------------------------------------------------
def test_vllms_speculative_counters_are_served(models, speculative_served):
    from wse_inference.speculative.decoder import SpeculativeDecoder

    before, after = speculative_served
    for name in VLLM_SPEC_COUNTERS:
        assert before[f"wse_{name}"].type == "counter", name
        assert all(s.value == 0 for s in before[f"wse_{name}"].samples), name
    # the oracle: the decoder's fused loop on the same greedy request (same rounds)
    fresh = _engine(models, speculative=True)
    dec = SpeculativeDecoder(fresh.target, fresh.draft, gamma=GAMMA, max_context=CONTEXT)
    res = dec.generate(PROMPT, GREEDY)
    rounds = dec.stats.rounds
    assert res.metrics["speculative"]["rounds"] == rounds > 0
    assert _value(after, "wse_spec_decode_num_drafts") == rounds
    assert _value(after, "wse_spec_decode_num_draft_tokens") == rounds * GAMMA
    assert _value(after, "wse_spec_decode_num_accepted_tokens") == dec.stats.accepted
    per_pos = after["wse_spec_decode_num_accepted_tokens_per_pos"].samples
    got = {s.labels["position"]: s.value for s in per_pos}
    assert got == {str(i): float(n) for i, n in enumerate(dec.stats.per_position)}
    assert sum(got.values()) == dec.stats.accepted  # vLLM's: position i counts drafts with > i
    # vLLM's per-position counts never grow with the position
    assert all(got[str(i)] >= got[str(i + 1)] for i in range(GAMMA - 1))
    # the gauges stay beside them
    assert _value(after, "wse_engine_spec_draft_tokens") == rounds * GAMMA


def _rendered(engine_metrics: dict[str, float]) -> str:
    stats = SchedulerStats(0, 0, 2, 8, 0, False, engine_metrics)
    return ServeMetrics("m").bind(lambda: stats).render().decode()


def test_the_counters_need_an_engine_that_speculates():
    plain = _rendered({"steps": 3.0, "tokens": 9.0})
    mock = _rendered({"steps": 3.0, "spec_draft_tokens": 0.0, "spec_accepted_tokens": 0.0})
    for text in (plain, mock):  # no speculation reported: no speculative counter
        assert "wse_spec_decode_num" not in text, text
    spec = _rendered({"spec_drafts": 2.0, "spec_draft_tokens": 6.0, "spec_accepted_tokens": 4.0,
                      "spec_accepted_tokens_pos_0": 2.0, "spec_accepted_tokens_pos_1": 1.0,
                      "spec_accepted_tokens_pos_2": 1.0})  # fmt: skip
    assert 'wse_spec_decode_num_drafts_total{model_name="m"} 2.0' in spec
    assert (
        'wse_spec_decode_num_accepted_tokens_per_pos_total{model_name="m",position="1"} 1.0' in spec
    )
    assert (
        "wse_engine_spec_accepted_tokens_pos_" not in spec and "wse_engine_spec_drafts" not in spec
    )


# -- hole 3: a draft larger than the target -----------------------------------------------------
def _weights(model) -> int:
    import jax

    return sum(int(np.size(x)) for x in jax.tree_util.tree_leaves(model.params))


def test_a_draft_larger_than_the_target_is_refused(models):
    from wse_inference.model_dir import load_model
    from wse_inference.speculative.decoder import SpeculativeDecoder

    target, big = load_model(str(models / "target")), load_model(str(models / "big_draft"))
    assert _weights(big) > _weights(target)  # the oracle: the arrays themselves
    with pytest.raises(ModelLoadError, match="a draft must be at most the model's size") as e:
        SpeculativeDecoder(target, big, gamma=2)
    assert f"({_weights(big):,} parameters)" in str(e.value) and "\n" not in str(e.value)
    SpeculativeDecoder(target, target, gamma=2)  # as large as the target: allowed


@pytest.mark.parametrize("command", ["generate", "serve"])
def test_the_cli_refuses_a_larger_draft_in_one_line(models, command):
    cfg = json.dumps({"model": str(models / "big_draft"), "num_speculative_tokens": 2})
    args = {
        "generate": ["infer", "generate", "--model-dir", models / "target", "--prompt-ids",
                     "1,2", "--max-tokens", "2"],
        "serve": ["infer", "serve", "--model-dir", models / "target", "--port", "0",
                  "--no-warmup"],
    }[command]  # fmt: skip
    line = refused_in_one_line(ROOT, [*args, "--speculative-config", cfg], "is larger than")
    target, big = str(models / "target"), str(models / "big_draft")
    assert f"the draft {big!r} (" in line and f"the model {target!r} (" in line, line
    assert "a draft must be at most the model's size" in line  # `wse plan infer`'s words


def test_the_engines_and_wse_plan_infer_refuse_a_draft_by_one_rule_in_one_format(models):
    """megatron77: the rule was written twice (here and in `wse plan infer`); now one helper,
    `wse_systems.planning.infer_inputs.check_draft_size`, whose words both give."""
    from wse_inference.model_dir import load_model
    from wse_inference.speculative.config import check_draft_size
    from wse_systems.planning.choice import ModelChoice, PlanError
    from wse_systems.planning.infer_inputs import Draft, speculation_of
    from wse_systems.serving import Workload

    target, big = load_model(str(models / "target")), load_model(str(models / "big_draft"))
    n_target, n_big = _weights(target), _weights(big)  # the oracle: the arrays themselves
    assert n_big > n_target
    rule = f"({n_big:,} parameters) is larger than the model {{}} ({n_target:,}): a draft must "
    rule += "be at most the model's size; give a smaller "
    with pytest.raises(ModelLoadError) as engine:
        check_draft_size(target.config, big.config, "t", "d")
    assert str(engine.value) == f"the draft 'd' {rule.format(repr('t'))}draft, or leave " + (
        "--speculative-config out"
    )
    asked, served = Draft(ModelChoice("d", big.config), None, 0.5), ModelChoice("t", target.config)
    work = Workload(prompt_tokens=4, output_tokens=4)
    with pytest.raises(PlanError) as plan:
        speculation_of(asked, served, work)
    assert str(plan.value) == f"--draft d {rule.format('t')}--draft"
    check_draft_size(target.config, target.config, "t", "t")  # as large: allowed by both
    assert speculation_of(Draft(served, None, 0.5), served, work) is not None


# -- hole 4: vLLM's method names and num_speculative_tokens ------------------------------------
@pytest.mark.parametrize("method", ["xyz", "eagle", "ngram", "medusa", 3])
def test_a_method_that_does_not_run_here_is_refused(method):
    with pytest.raises(SamplingError, match='method must be "draft_model"') as e:
        parse_speculative_config(json.dumps({"model": "d", "num_speculative_tokens": 2,
                                             "method": method}))  # fmt: skip
    assert "\n" not in str(e.value)


def test_vllms_draft_model_method_and_no_method_are_taken():
    # vLLM's SpeculativeConfig infers "draft_model" for a model that is not ngram/eagle/...
    a = parse_speculative_config('{"model": "d", "num_speculative_tokens": 2}')
    b = parse_speculative_config(
        '{"model": "d", "num_speculative_tokens": 2, "method": "draft_model"}'
    )
    assert a.draft_dir() == b.draft_dir() == "d"
    assert a.num_speculative_tokens == b.num_speculative_tokens == 2


def test_a_draft_model_needs_num_speculative_tokens():
    # vLLM: "num_speculative_tokens must be provided with speculative model"
    with pytest.raises(SamplingError, match="without num_speculative_tokens") as e:
        parse_speculative_config('{"model": "d"}')
    assert "\n" not in str(e.value)
    mock = parse_speculative_config('{"mock_accepted_tokens": 2}')  # the mock's default: 4
    assert mock.num_speculative_tokens == 4 == SpeculativeConfig().num_speculative_tokens


def test_generate_refuses_a_draft_model_without_num_speculative_tokens(models):
    cfg = json.dumps({"model": str(models / "draft")})
    args = ["infer", "generate", "--model-dir", models / "target", "--prompt-ids", "1,2",
            "--max-tokens", "2", "--speculative-config", cfg]  # fmt: skip
    refused_in_one_line(ROOT, args, "without num_speculative_tokens")


# -- hole 5: leviathan23-speculative's noisy rows -----------------------------------------------
def _study_row(round_ms: float, verify_ms: float, step_ms: float = 36.9) -> dict:
    from wse_inference.studies.leviathan23_speculative import _row

    m = {"alpha": 0.68, "accepted": 160, "rounds": 100}
    runs = [types.SimpleNamespace(metrics={"speculative": m}, decode_s=4.0, tokens=[0] * 121)]
    bases = [types.SimpleNamespace(decode_s=4.4, tokens=[0] * 121)]
    cost = {"round_ms": round_ms, "verify_ms": verify_ms, "target_step_ms": step_ms,
            "draft_step_ms": 1.8, "verify_forward_ms": 37.2}  # fmt: skip
    model = types.SimpleNamespace(params={})
    return _row(model, model, 1, 4, runs, bases, [2.0], [cost])


def test_a_negative_draft_cost_is_noisy():
    row = _study_row(37.0, 37.6)  # the hunt's figures
    assert row["cost_ratio_c"] == pytest.approx((37.0 - 37.6) / (4 * 36.9))  # by hand: < 0
    assert row["noisy"] is True
    assert "draft cost c -0.00407 < 0" in row["noisy_note"], row["noisy_note"]
    assert "(37.0 < 37.6 ms by the timer" in row["noisy_note"]
    clean = _study_row(45.0, 37.6)
    assert clean["cost_ratio_c"] > 0 and clean["noisy"] is False


def test_noisy_rows_are_left_out_of_the_agreement():
    from wse_inference.studies.leviathan23_speculative import agreement

    rows = [{"noisy": False, "within_10pct": True}, {"noisy": False, "within_10pct": False},
            {"noisy": True, "within_10pct": True}]  # fmt: skip
    assert agreement(rows) == {
        "within_10pct": 1,
        "rows": 2,
        "noisy_rows_left_out": 1,
        "within_10pct_counting_noisy": 2,
        "rows_counting_noisy": 3,
    }
