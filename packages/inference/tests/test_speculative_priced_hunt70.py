"""Hunt 70 (runs, holes 1 and 8): what speculative `wse infer generate` prices per token.

Broken before:
- hole 1: a token was priced at one round over `mean_tokens_per_pass` (the tokens the
  drafting accepted), though a round cut at max_tokens, a stop string or an end-of-sequence
  token keeps fewer tokens and still runs whole. The hunt's model at max_tokens 8, gamma 4
  (2 rounds for 7 tokens) printed 23.31 us (0.2 rounds per token) where the run cost
  2 x 116.5 us / 7 = 33.30 us: 30% low. Now the price is rounds run / tokens kept
  (`AcceptanceStats.emitted`, `emitted_per_round`); the acceptance statistics still
  describe the drafting, unchanged.
- hole 8: the speculative plan was sized for the models' whole context (unless
  --max-context), where the pipelined path and `wse plan infer` size it for prompt +
  max_tokens; on a wafer where that moves the placement, the same job had two prices (an
  8 x 8 PE wafer, context 1,024 against 14 tokens: 25.34 against 24.78 us a token). Now the
  engine holds the job's context, as `_pipelined` does.

Oracles: the hand count (rounds x the round's time / tokens kept, the round priced by
`wse_systems.serving.speculative.speculative_round`), `wse plan infer --draft`'s Python API
(`plan_infer`) at the same prompt, output and acceptance, and the tokens in the output.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner
from wse_cli.app import app
from wse_cli.commands import infer_generate
from wse_cli.model_choice import resolve_model
from wse_core import load_spec, preset
from wse_inference.engine import SamplingParams
from wse_inference.pipeline.perf import plan_speculative
from wse_inference.speculative.decoder import SpeculativeDecoder
from wse_inference.speculative.engine import SpeculativeEngine
from wse_inference.testing import one_request, save_tiny_model, tiny_model
from wse_systems import serving as sv
from wse_systems.planning import infer as pi
from wse_systems.serving.speculative import speculative_round

GAMMA = 4
PROMPT = [1, 2, 3]


def _round_s(config, spec, context: int, kv_tokens: int) -> float:
    """One round (gamma drafts, then the target's pass), the model its own draft."""
    kw = dict(gamma=GAMMA, kv_tokens=kv_tokens)
    plans = plan_speculative(config, config, spec=spec, context_len=context, **kw,
                             bytes_per_param=4, draft_bytes_per_param=4)  # fmt: skip
    return speculative_round(config, plans[0], config, plans[1], **kw).seconds


@pytest.fixture(scope="module")
def greedy8():
    """The model drafting for itself, greedy, 8 tokens (`SpeculativeDecoder`'s fused loop):
    every draft accepted, 5 tokens a round, so the 7 after the prefill's take 2 rounds, the
    second cut after 2 of its 5 -> (model, decoder, tokens, its statistics)."""
    model = tiny_model("llama", n_layers=2)
    dec = SpeculativeDecoder(model, model, gamma=GAMMA, max_context=32)
    out = dec.generate(PROMPT, SamplingParams(max_tokens=8, temperature=0.0))
    return model, dec, out.tokens, dec.stats


def _priced_per_kept_token(report, stats, kept: int, config) -> None:
    """The report prices the rounds run over the tokens kept; the drafting's statistics
    still count every accepted draft, the discarded ones too."""
    assert stats.emitted == kept and stats.emitted_per_round == kept / stats.rounds
    assert stats.accepted == GAMMA * stats.rounds and stats.mean_tokens_per_pass == GAMMA + 1
    rep = report(tokens=kept, kv_tokens=8)
    assert rep.extra["rounds_per_token"] == stats.rounds / kept
    round_s = _round_s(config, preset("wse3"), 32, 8)
    assert rep.predicted_s == pytest.approx(round_s * stats.rounds / kept, rel=1e-12)


def test_the_decoder_prices_a_round_cut_at_max_tokens_whole(greedy8):
    model, dec, tokens, stats = greedy8
    assert (len(tokens) - 1, stats.rounds) == (7, 2)
    report = lambda **kw: dec.report(spec=preset("wse3"), **kw)  # noqa: E731
    _priced_per_kept_token(report, stats, 7, model.config)


def test_the_engine_prices_a_round_cut_at_a_stop_token_whole(greedy8):
    """A stop token at the 5th token (the 4th of the first round's 5) keeps 4 of them."""
    model, _, greedy, _ = greedy8
    assert greedy[4] not in greedy[:4]  # the stop comes at the 5th token, no sooner
    eng = SpeculativeEngine(model, model, gamma=GAMMA, spec=preset("wse3"), max_slots=1,
                            max_context=32)  # fmt: skip
    sampling = SamplingParams(max_tokens=20, temperature=0.0, stop_token_ids=(greedy[4],))
    tokens, reason = one_request(eng, PROMPT, sampling)
    assert (tokens, reason, eng.stats.rounds) == (greedy[:5], "stop", 1)
    _priced_per_kept_token(eng.report, eng.stats, 4, model.config)


# ---- the CLI against `wse plan infer --draft` --------------------------------------------
runner = CliRunner()


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """A tiny model of 1,024 positions and an 8 x 8 PE wafer, where the plan's context moves
    the placement (1,024 against the job's 14 tokens: 25.34 against 24.78 us a token)."""
    root = tmp_path_factory.mktemp("hunt70_spec")
    save_tiny_model(root / "m" / "hf", n_layers=2, max_seq_len=1024)
    wafer = root / "tinyw.yaml"
    wafer.write_text("base: tiny\nsystem_peak_w: 1000\n")  # plan infer prices its power
    return root / "m" / "hf", wafer


def _generate(job, max_tokens: int) -> dict:
    model_dir, wafer = job
    cfg = json.dumps({"model": str(model_dir), "num_speculative_tokens": GAMMA})
    args = ["--model-dir", model_dir, "--prompt-ids", ",".join(map(str, PROMPT)),
            "--max-tokens", max_tokens, "--temperature", 0, "--spec", wafer,
            "--speculative-config", cfg, "--json"]  # fmt: skip
    res = runner.invoke(app, ["--devices", "8", "infer", "generate", *map(str, args)])
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def _plan_infer_s(job, output_tokens: int, alpha: float) -> float:
    """`wse plan infer MODEL --draft MODEL --alpha A --users 1`'s seconds per token."""
    model_dir, wafer = job
    choice = resolve_model(str(model_dir))
    plan = pi.plan_infer(
        choice,
        wafer=pi.WaferSetup(load_spec(wafer), None, "sdk", choice.config.param_dtype),
        workload=sv.Workload(prompt_tokens=len(PROMPT), output_tokens=output_tokens),
        target=pi.Target(users=1),
        draft=pi.Draft(choice, GAMMA, alpha),
    )
    return 1.0 / plan.wafer_point.user_tokens_per_s


def test_generate_and_plan_infer_price_the_same_job_alike(job):
    """11 tokens: 10 after the prefill's, 2 whole rounds of 5, as plan infer's
    (1 - a^(g+1)) / (1 - a) = g + 1 at the run's acceptance (a = 1)."""
    out = _generate(job, 11)
    spec = out["speculative"]
    assert (spec["alpha"], spec["rounds"], spec["emitted"]) == (1.0, 2, 10)
    assert out["predicted"]["wafer_s_per_token"] == pytest.approx(
        _plan_infer_s(job, 11, spec["alpha"]), rel=1e-12
    )


def test_generate_prices_its_cut_round_and_says_so(job, capsys):
    """8 tokens: 7 in 2 rounds, the second cut. Generate's token is its round x 2 / 7, and
    the text says what it priced; plan infer prices the same 2 whole rounds for the 7 tokens
    (hunt 75: ceil((O - 1) / E) rounds; before, g + 1 tokens a round, no cut round)."""
    out = _generate(job, 8)
    spec = out["speculative"]
    assert (spec["rounds"], spec["emitted"], spec["emitted_per_round"]) == (2, 7, 3.5)
    assert (spec["accepted"], spec["acceptance_rate"], spec["mean_tokens_per_pass"]) == (
        8, 1.0, 5.0
    )  # fmt: skip
    assert out["predicted"]["wafer_s_per_token"] == pytest.approx(
        _plan_infer_s(job, 8, 1.0), rel=1e-12
    )
    infer_generate._report(out, as_json=False)
    line = capsys.readouterr().out.splitlines()[-1]
    assert line.endswith(
        "mean tokens per target pass 5.00, per position [1.00, 1.00, 1.00, 1.00]; priced at "
        "the 3.50 tokens kept per round (7 in 2): a round cut at max_tokens or a stop runs whole"
    )
