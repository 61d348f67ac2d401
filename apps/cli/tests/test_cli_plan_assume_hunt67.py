"""Hunt 67, `wse plan train|infer --assume` and what a plan says it was priced under. Broken
before: `wse plan` had no `--assume` (a spec file's refusal pointed users at `wse experiments
run --assume` instead); the plan's JSON did not say on which wafer and at which clock the
calibration it priced with was fitted; the GPU step had no fixed floor, so tiny-gpt2 decoded
at 9.9 million tokens/s per user on an H100 with a first token in 0.1 us.

Oracles: `wse experiments run NAME --assume` (the same parser: the same refusal line for the
same item), a spec file with the field set (the wafer an assumption prices), and the library's
own calibration under the same assumption (`assume(...)` + `current()`)."""

from __future__ import annotations

import json

import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke, refused_in_one_line
from wse_core.cost.assumptions import assume
from wse_core.cost.calibration import current
from wse_core.hw.spec import preset

ROOT = typer.main.get_command(app)
TINY = ["-m", "tiny-gpt2", "--users", "1", "--prompt-tokens", "16", "--output-tokens", "16"]
INFER = ["plan", "infer", *TINY]
TRAIN = ["plan", "train", "-m", "tiny-gpt2", "--tokens", "1e6"]
WIDE = {"COLUMNS": "400"}  # one table row a line


def _json(args: list[str]) -> dict:
    code, out = invoke(ROOT, [*args, "--json"])
    assert code == 0, out[-2000:]
    return json.loads(out)


def _table(args: list[str]) -> str:
    code, out = invoke(ROOT, args, env=WIDE)
    assert code == 0, out[-2000:]
    return out


BAD = [
    ("foo=1", "unknown assumption 'foo'"),
    ("clock_hz=abc", "assumption clock_hz must be a number, got 'abc'"),
    ("clock_hz=1e30", "assumption clock_hz must be in [1e+06, 1e+11] Hz"),
    ("clock_hz", "--assume takes KEY=VALUE, got 'clock_hz'"),
    ("calibration.dsd_issue_cycles=3", "assume it as dsd_issue_cycles=VALUE"),
]


@pytest.mark.parametrize("item,message", BAD)
def test_a_bad_assumption_is_refused_as_experiments_run_refuses_it(item, message):
    theirs = refused_in_one_line(ROOT, ["experiments", "run", "wafer-yield", "--assume", item],
                                 message)  # fmt: skip
    for plan in (INFER, TRAIN):
        assert refused_in_one_line(ROOT, [*plan, "--assume", item], message) == theirs


def test_a_key_given_twice_is_refused():
    line = refused_in_one_line(ROOT, [*INFER, "--assume", "clock_hz=1e9", "--assume",
                                      "clock_hz=2e9"], "gives clock_hz twice")  # fmt: skip
    assert "give each key once" in line


def test_the_plan_says_which_calibration_it_priced_with():
    d = _json(INFER)
    cal = current()
    assert d["assume"] == {}
    assert d["calibration"] == json.loads(json.dumps(cal.to_dict()))  # the object's own
    assert d["calibration"]["wafer"] == "wse2"
    assert d["calibration"]["clock_hz"] == preset("wse2").clock_hz == 8.5e8
    assert set(d["calibration"]["values"]) == {
        "dsd_issue_cycles", "router_switch_cycles", "task_activation_cycles"}  # fmt: skip
    out = _table(INFER)
    assert "- assumptions: the presets' own (no --assume)" in out
    assert "- calibration: rows priced on wse2 at 8.5e+08 Hz; fitted router_switch_cycles" in out
    assert _json(TRAIN)["calibration"] == d["calibration"]


def test_a_wafer_field_moves_only_the_wafer_priced(tmp_path):
    spec = tmp_path / "fast.yaml"
    spec.write_text("base: wse3\nclock_hz: 1.21e9\n")
    base = _json(INFER)
    d = _json([*INFER, "--assume", "clock_hz=1.21e9"])
    oracle = _json([*INFER, "--spec", str(spec)])  # the same wafer, given as a spec file
    assert d["assume"] == {"clock_hz": 1.21e9}
    assert d["wafer"]["tokens_per_s_per_user"] == oracle["wafer"]["tokens_per_s_per_user"]
    assert d["wafer"]["tokens_per_s_per_user"] != base["wafer"]["tokens_per_s_per_user"]
    assert d["calibration"] == base["calibration"]  # the WSE-2 rows are not moved (hunt 66)
    assert d["gpu"]["tokens_per_s_per_user"] == base["gpu"]["tokens_per_s_per_user"]
    assert "- assumed (--assume): clock_hz=1.21e+09" in _table([*INFER, "--assume",
                                                                "clock_hz=1.21e9"])  # fmt: skip


def test_a_calibration_field_moves_the_calibrations_wafer_and_refits():
    key = "calibration.clock_hz"
    d = _json([*INFER, "--assume", f"{key}=1e9"])
    with assume(**{key: 1e9}):
        oracle = current()
    assert d["assume"] == {key: 1e9}
    assert d["calibration"]["clock_hz"] == 1e9 and d["calibration"]["wafer_assumed"] == {
        "clock_hz": 1e9}  # fmt: skip
    assert d["calibration"]["values"] == pytest.approx(dict(oracle.values))
    assert d["calibration"]["values"] != current().values  # refitted under it
    assert d["inputs"]["wafer"] == "wse3"
    t = _json([*TRAIN, "--assume", f"{key}=1e9"])
    assert t["assume"] == {key: 1e9} and t["calibration"] == d["calibration"]
    out = _table([*TRAIN, "--assume", f"{key}=1e9"])
    assert "- assumed (--assume): calibration.clock_hz=1e+09 (the calibration's wafer" in out
    assert "rows priced on wse2 at 1e+09 Hz (assumed: calibration.clock_hz=1e+09)" in out


def test_a_fitted_constant_assumed_is_held_and_left_out_of_the_fit():
    d = _json([*INFER, "--assume", "dsd_issue_cycles=20"])
    assert d["assume"] == {"dsd_issue_cycles": 20.0}
    assert "dsd_issue_cycles" not in d["calibration"]["values"]


def test_tiny_gpt2_on_a_gpu_pays_its_kernels():
    d = _json(INFER)
    g = d["gpu"]
    # 8 kernels a layer x 2 layers + 4, 1 us each: 20 us a step (before: 9.9e6 tokens/s, 0.1 us)
    assert g["point"]["layout"]["step_floor_s"] == pytest.approx(20e-6)
    assert g["tokens_per_s_per_user"] <= 1 / 20e-6 and g["ttft_s"] >= 20e-6
    assert any(n.startswith("GPU step floor 20 us") and "in 0.5..5 us" in n
               for n in d["assumptions"])  # fmt: skip
    row = next(line for line in _table(INFER).splitlines() if "step floor (kernels)" in line)
    assert "20 us a step: 20 kernels x 1 us (assumed, 0.5..5 us)" in row
