"""Session 85: a speculative engine's report prices the placement `wse plan infer --draft`
serves for the same job, a draft whose bytes differ from the target's included, and
`wse infer serve`'s start-up line prices its nominal request on that placement too.

Broken before: (1) a bfloat16 draft folder of a float32 target (a 1-layer draft of a 2-layer
toy, an 8 x 8 PE wafer, 3 + 11 tokens, gamma 4): the report took `plan_speculative`'s
placement (the shortest round), and `wse plan infer --draft` priced the draft at the
target's 4 bytes (76.64 us a token against the report's 56.41); (2) `wse infer serve` said
nothing for a speculative engine, and its report given no job prices the shortest round's
placement.

Oracles: the placement `wse plan infer`'s own command serves (its serving system recorded as
the command runs, at one user), compared plan summary by plan summary, target and draft;
the bytes each plan holds read off the folders' dtypes (float32 4, bfloat16 2); the request
the serve line names made by hand (a 1,024-position model: the planner's 4:1 split of it).
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner
from wse_cli.app import app
from wse_cli.commands.infer_serve_engine import served_job, speculative_prediction
from wse_core import load_spec
from wse_inference.model_dir import load_model
from wse_inference.speculative.engine import SpeculativeEngine
from wse_inference.testing import save_tiny_model
from wse_systems import serving as sv
from wse_systems.planning import infer as pi

GAMMA = 4
PROMPT, OUTPUT = 3, 11
CONTEXT = 1024  # both toys' positions: the context a speculative engine serves by default
FLOAT32_BYTES, BFLOAT16_BYTES = 4, 2


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """(target folder, bfloat16 draft folder, wafer file): a 2-layer float32 toy and a
    1-layer bfloat16 draft of its vocabulary, on an 8 x 8 PE wafer with a power (plan infer
    prices it)."""
    root = tmp_path_factory.mktemp("s85_spec")
    save_tiny_model(root / "t", n_layers=2, max_seq_len=CONTEXT)
    save_tiny_model(root / "d", n_layers=1, max_seq_len=CONTEXT, param_dtype="bfloat16", seed=1)
    wafer = root / "tinyw.yaml"
    wafer.write_text("base: tiny\nsystem_peak_w: 1000\n")
    return root / "t", root / "d", wafer


def _planned(pair, monkeypatch, *args: str) -> tuple[tuple, dict]:
    """`wse plan infer -m TARGET --draft DRAFT --gamma 4 --alpha 0 --users 1 ARGS --json`:
    (the one user's (target plan, draft plan) its serving system serves, its JSON)."""
    target, draft, wafer = pair
    made = []

    def recorded(*a, **k):
        made.append(real(*a, **k))
        return made[-1]

    real = pi.wafer_serving
    monkeypatch.setattr(pi, "wafer_serving", recorded)
    cmd = ["plan", "infer", "-m", str(target), "--draft", str(draft), "--gamma", str(GAMMA),
           "--alpha", "0", "--users", "1", "--spec", str(wafer), "--json", *args]  # fmt: skip
    res = CliRunner().invoke(app, cmd)
    assert res.exit_code == 0, res.output
    (ws,) = made
    return ws.plans(1), json.loads(res.output)


def _engine(pair) -> SpeculativeEngine:
    target, draft, wafer = pair
    return SpeculativeEngine(
        load_model(target), load_model(draft, tokenizer_required=False), gamma=GAMMA,
        spec=load_spec(wafer), max_slots=1,
    )  # fmt: skip


def _same_plans(report, plans) -> None:
    target_plan, draft_plan = plans
    assert report.extra["plan"] == target_plan.summary()
    assert report.extra["draft_plan"] == draft_plan.summary()


def test_a_draft_of_other_bytes_is_priced_on_the_planners_placement(pair, monkeypatch):
    engine = _engine(pair)
    assert engine.stats.beta_count == 0  # no draft weighed: a = 0, one token a round
    job = sv.Workload(prompt_tokens=PROMPT, output_tokens=OUTPUT)
    report = engine.report(kv_tokens=job.kv_tokens, workload=job)
    job_flags = ("--prompt-tokens", str(PROMPT), "--output-tokens", str(OUTPUT))
    plans, out = _planned(pair, monkeypatch, *job_flags)
    _same_plans(report, plans)
    # each model at its folder's bytes: `--wafer-dtype auto` reads the draft's own
    assert [p.bytes_per_param for p in plans] == [FLOAT32_BYTES, BFLOAT16_BYTES]
    assert out["inputs"]["speculation"]["draft_bytes_per_param"] == BFLOAT16_BYTES
    assert out["wafer"]["point"]["layout"]["layout"] == report.extra["plan"]["layout"]
    # the case: the draft at the target's bytes (an explicit --wafer-dtype sets both) is
    # another placement and price
    both32, out32 = _planned(pair, monkeypatch, *job_flags, "--wafer-dtype", "float32")
    assert [p.bytes_per_param for p in both32] == [FLOAT32_BYTES, FLOAT32_BYTES]
    assert both32[1].summary() != plans[1].summary()
    assert out32["wafer"]["tpot_s"] != pytest.approx(out["wafer"]["tpot_s"], rel=1e-3)


def test_serve_prices_its_nominal_request_on_the_planners_placement(pair, monkeypatch):
    engine = _engine(pair)
    assert engine.max_context == CONTEXT
    job = served_job(engine.max_context)
    # by hand: 1,024 + 256 tokens is past 1,024 positions, so the planner's 4:1 split of them
    output = CONTEXT // 5
    assert (job.prompt_tokens, job.output_tokens, job.held_tokens) == (
        CONTEXT - output, output, CONTEXT
    )  # fmt: skip
    line = speculative_prediction(engine)
    report = engine.report(kv_tokens=job.kv_tokens, workload=job)
    assert f"{report.predicted_s * 1e6:,.2f} us an emitted token" in line
    flags = (f"--prompt-tokens {job.prompt_tokens} --output-tokens {job.output_tokens} "
             f"--context-len {job.held_tokens}")  # fmt: skip
    assert flags in line
    plans, _ = _planned(pair, monkeypatch, *flags.split())
    _same_plans(report, plans)
