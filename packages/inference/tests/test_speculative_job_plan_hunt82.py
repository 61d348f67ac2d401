"""Session 84 (hunt 82, jobs18 L4's follow-up): `wse infer generate` prices a speculative job
on the placement `wse plan infer --draft` serves it on.

Broken before: generate's report placed the models by `plan_speculative`, which takes the
layout whose round is shortest; the planner (`WaferServing`, `placements.served`) takes the
layout whose requests give the most output tokens/s, within `OUTPUT_TIE` a tie, then the
sooner first token. Once the draft's footprints took every row count of a small wafer (L4),
a 2-layer float32 toy on an 8 x 8 PE wafer (3 + 11 tokens, gamma 4, a = 1) had banded's
round shorter (the draft on 5 rows, the target on 3: 121.96 us) and compact's request as
fast within 0.35% with a sooner first token: plan infer served compact (24.81 us a token),
generate priced banded (24.39 us). Now generate prices the planner's placement.

Oracles: the policy's choice between the layouts made by hand from each layout's own
serving point (its output tokens/s and first token, the 1% tie), and the token priced by
hand: the rounds run x that placement's round (`speculative_round`) / the tokens kept.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner
from wse_cli.app import app
from wse_cli.model_choice import resolve_model
from wse_core import load_spec
from wse_inference.testing import save_tiny_model
from wse_systems import serving as sv
from wse_systems.pipeline import Regions
from wse_systems.serving.placements import OUTPUT_TIE
from wse_systems.serving.speculative import speculative_round

GAMMA = 4
PROMPT = [1, 2, 3]
MAX_TOKENS = 11  # 10 after the prefill's: 2 whole rounds of 5 at a = 1


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    root = tmp_path_factory.mktemp("hunt82_spec")
    save_tiny_model(root / "m" / "hf", n_layers=2, max_seq_len=1024)
    wafer = root / "tinyw.yaml"
    wafer.write_text("base: tiny\n")
    return root / "m" / "hf", wafer


def _generate(job) -> dict:
    model_dir, wafer = job
    cfg = json.dumps({"model": str(model_dir), "num_speculative_tokens": GAMMA})
    args = ["--model-dir", model_dir, "--prompt-ids", ",".join(map(str, PROMPT)),
            "--max-tokens", MAX_TOKENS, "--temperature", 0, "--spec", wafer,
            "--speculative-config", cfg, "--json"]  # fmt: skip
    res = CliRunner().invoke(app, ["--devices", "8", "infer", "generate", *map(str, args)])
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def _by_layout(job) -> dict[str, tuple[sv.WaferServing, float]]:
    """Each layout's own serving system for the job at a = 1 (one wafer holds it) and its
    placement's round (s)."""
    model_dir, wafer = job
    config = resolve_model(str(model_dir)).config
    work = sv.Workload(prompt_tokens=len(PROMPT), output_tokens=MAX_TOKENS)
    out = {}
    for layout in ("banded", "compact"):
        ws = sv.WaferServing(
            config, load_spec(wafer), num_wafers=1, workload=work,
            speculation=sv.Speculation(draft=config, gamma=GAMMA, alpha=1.0),
            regions=Regions(layout=layout), bytes_per_param=4,
        )  # fmt: skip
        target, draft = ws.plans(1)
        rnd = speculative_round(config, target, config, draft, gamma=GAMMA,
                                kv_tokens=work.kv_tokens)  # fmt: skip
        out[layout] = (ws, rnd.seconds)
    return out


def _policy(points: dict[str, sv.OperatingPoint]) -> str:
    """The layout the serving policy takes, by hand: the most output tokens/s, any within
    OUTPUT_TIE of it a tie, then the sooner first token."""
    most = max(p.aggregate_tokens_per_s for p in points.values())
    tied = [k for k, p in points.items() if p.aggregate_tokens_per_s >= most * (1 - OUTPUT_TIE)]
    return min(tied, key=lambda k: points[k].ttft_s)


def test_generate_prices_the_layout_the_planner_serves(job):
    layouts = _by_layout(job)
    chosen = _policy({k: ws.point(1) for k, (ws, _) in layouts.items()})
    shortest = min(layouts, key=lambda k: layouts[k][1])
    # the case: the policy and the shortest round disagree (else this checks nothing)
    assert (chosen, shortest) == ("compact", "banded")
    out = _generate(job)
    spec = out["speculative"]
    assert (spec["alpha"], spec["rounds"], spec["emitted"]) == (1.0, 2, 10)
    predicted = out["predicted"]
    assert predicted["layout"] == chosen
    round_s = layouts[chosen][1]
    assert predicted["wafer_s_per_token"] == pytest.approx(round_s * 2 / 10, rel=1e-12)
