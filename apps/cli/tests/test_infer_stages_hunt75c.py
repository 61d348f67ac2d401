"""Hunt 75: `wse infer generate` predicted a token on its own stage count (--stages, default
1: 2 regions, banded, 39.37 us for a 4-layer folder's 8 + 16 token request) while `wse plan
infer` for the same request planned 5 regions (compact, 36.04 us), neither saying so, and
plan infer had no --stages. Now generate labels its token with its stage count and, where
the plan's count differs, prints the plan's token for the request beside it; `plan infer
--stages N` pins the count.

Oracles: each surface's own JSON against the other's (generate run at the plan's count
must predict the plan's token to rounding; the plan's figure generate shows must be plan
infer's own), and the layer count of the folder's config for the refusals.
"""

from __future__ import annotations

import json

import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke, refused_in_one_line

ROOT = typer.main.get_command(app)
PROMPT, OUTPUT, LAYERS = [1, 2, 3, 4, 5, 6, 7, 8], 16, 4


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    from wse_inference.testing import save_tiny_model

    path = tmp_path_factory.mktemp("tiny4") / "hf"
    save_tiny_model(path, n_layers=LAYERS)
    return path


def _run(args) -> tuple[dict, str]:
    code, output = invoke(ROOT, args)
    assert code == 0, output[-2000:]
    return (json.loads(output[output.index("{") :]) if "--json" in args else {}), output


def _generate(folder, *extra) -> tuple[dict, str]:
    ids = ",".join(map(str, PROMPT))
    return _run(["infer", "generate", "--model-dir", folder, "--prompt-ids", ids, "--max-tokens",
                 OUTPUT, "--temperature", 0, "--ignore-eos", *extra])  # fmt: skip


def _plan(folder, *extra) -> dict:
    got = _run(["plan", "infer", "-m", folder, "--users", 1, "--prompt-tokens", len(PROMPT),
                "--output-tokens", OUTPUT, *extra, "--json"])[0]  # fmt: skip
    return got["wafer"]["point"]["layout"]


def test_generate_shows_the_plans_token_and_matches_it_at_the_plans_count(folder):
    plan = _plan(folder)
    n = plan["stages"]
    assert plan["regions"] == n + 1 and n != 1  # the plan's count is not generate's default
    gen, _ = _generate(folder, "--json")
    assert gen["predicted"]["stages"] == 1
    shown = gen["plan_predicted"]  # plan infer's own figure, labelled with its count
    assert shown["stages"] == n and shown["layout"] == plan["layout"]
    assert shown["wafer_s_per_token"] == pytest.approx(plan["token_s"], rel=1e-12)
    at_n, _ = _generate(folder, "--stages", n, "--json")  # the plan's count: one figure
    assert "plan_predicted" not in at_n and at_n["predicted"]["stages"] == n
    assert at_n["predicted"]["regions"] == plan["regions"]
    assert at_n["predicted"]["layout"] == plan["layout"]
    assert at_n["predicted"]["wafer_s_per_token"] == pytest.approx(plan["token_s"], rel=1e-9)
    _, text = _generate(folder)
    assert "1 stage(s), " in text and f"places this request on {n} stage(s)" in text
    assert f"--stages {n} emulates the plan's" in text


def test_plan_infer_stages_pins_the_count_and_refuses_outside_the_layers(folder):
    assert _plan(folder, "--stages", 2)["stages"] == 2
    assert _plan(folder, "--stages", 2)["regions"] == 3
    refused_in_one_line(ROOT, ["plan", "infer", "-m", folder, "--stages", 0], "--stages")
    line = refused_in_one_line(ROOT, ["plan", "infer", "-m", folder, "--stages", LAYERS + 1],
                               f"--stages {LAYERS + 1}")  # fmt: skip
    assert f"[1, {LAYERS}]" in line
