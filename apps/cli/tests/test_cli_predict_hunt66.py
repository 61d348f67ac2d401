"""Hunt 66 at the CLI. Broken before:

- a `--spec` file's fitted constants (`dsd_issue_cycles: 100`, ...) were accepted and dropped:
  `wse plan infer` gave the preset's 3048.3 tokens/s, `wse train --validate-only` printed the
  fitted 11.49 beside the file's name, with no word. Now each command refuses the file in
  one line (exit 2) saying the constant is fitted and how to price another value; `--set`
  likewise; a preset's dump (which restates the priors) still runs.
- `--assume clock_hz=...` refitted the calibration's WSE-2; now it is `--assume
  calibration.clock_hz=...`, and `calibration.FIELD` of a fitted constant or a setting is
  refused naming the right spelling.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
import yaml
from wse_cli.app import app
from wse_cli.testing import invoke, refused_in_one_line

pytestmark = pytest.mark.timeout(300)
ROOT = typer.main.get_command(app)
TINY_YAML = Path(__file__).parents[3] / "packages/trainer/src/wse_trainer/configs/tiny.yaml"
COMMANDS = [
    ["plan", "infer", "-m", "llama3-8b", "--users", "1"],
    ["plan", "train", "-m", "llama3-8b", "--tokens", "1e11", "--batch", "16"],
    ["train", TINY_YAML, "--validate-only"],
    ["wafer", "info"],
]


def _tree(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("command", COMMANDS, ids=["plan infer", "plan train", "train", "wafer"])
@pytest.mark.parametrize(("key", "value"), [("dsd_issue_cycles", "100"),
                                            ("task_activation_cycles", "500"),
                                            ("router_switch_cycles", "5000")])  # fmt: skip
def test_a_spec_files_fitted_constant_is_refused(tmp_path, monkeypatch, command, key, value):
    monkeypatch.chdir(tmp_path)
    spec = tmp_path / "fit.yaml"
    spec.write_text(f"base: wse3\n{key}: {value}\n")
    before = _tree(tmp_path)
    line = refused_in_one_line(ROOT, [*command, "--spec", spec], (
        f"spec file '{spec}' gives {key} = {value}, but {key} is fitted on the calibration set"
    ))  # fmt: skip
    assert line.endswith(
        f"`wse experiments run NAME --assume {key}=VALUE` (or `wse plan ... --assume`)"
    )
    assert _tree(tmp_path) == before


def test_set_of_a_fitted_constant_is_refused():
    refused_in_one_line(ROOT, ["wafer", "info", "--set", "dsd_issue_cycles=5"],
                        "--set gives dsd_issue_cycles = 5, but dsd_issue_cycles is fitted on "
                        "the calibration set")  # fmt: skip


def test_a_dump_of_wse3_plans_as_the_preset(tmp_path):
    from wse_core import preset

    spec = tmp_path / "full.yaml"
    spec.write_text(yaml.safe_dump(preset("wse3").to_dict()))
    args = ["plan", "infer", "-m", "llama3-8b", "--users", "1", "--json"]
    runs = []
    for extra in ([], ["--spec", spec]):
        code, output = invoke(ROOT, [*args, *extra])
        assert code == 0, output
        runs.append(json.loads(output)["wafer"]["tokens_per_s_per_user"])
    assert runs[0] == runs[1]


@pytest.mark.parametrize(
    ("item", "message"),
    [("calibration.dsd_issue_cycles=5", "dsd_issue_cycles is fitted on the calibration set: "
      "an assumed value is held on every wafer, the calibration's too; assume it as "
      "dsd_issue_cycles=VALUE"),
     ("calibration.table_ii_block_z=100", "table_ii_block_z is a setting of the calibration; "
      "assume it as table_ii_block_z=VALUE")],
)  # fmt: skip
def test_a_calibration_prefix_on_the_calibrations_own_key_is_refused(tmp_path, item, message):
    args = ["experiments", "run", "wafer-yield", "--assume", item, "--out", tmp_path / "o"]
    refused_in_one_line(ROOT, args, message)
    assert list(tmp_path.iterdir()) == []


def test_the_calibration_experiment_under_a_wafer_clock_keeps_its_rows(tmp_path):
    """`clock_hz` is the priced wafers': the calibration's rows (on the WSE-2 as measured)
    stay as at the presets; `calibration.clock_hz` refits them and the results say so."""
    out = {}
    for item in ("clock_hz=1e9", "calibration.clock_hz=1e9"):
        code, output = invoke(ROOT, ["experiments", "run", "cost-model-calibration", "--assume",
                                     item, "--out", tmp_path / item])  # fmt: skip
        assert code == 0, output
        path = tmp_path / item / "cost-model-calibration" / "results.json"
        out[item] = json.loads(path.read_text())["config"]
    plain, moved = out["clock_hz=1e9"], out["calibration.clock_hz=1e9"]
    assert plain["assume"] == {"clock_hz": 1e9}
    assert plain["calibration"]["clock_hz"] == 8.5e8 and plain["calibration"]["misses"] == {}
    assert plain["calibration"]["wafer_assumed"] == {}
    assert moved["calibration"]["clock_hz"] == 1e9
    assert moved["calibration"]["wafer_assumed"] == {"clock_hz": 1e9}
    assert moved["calibration"]["values"] != plain["calibration"]["values"]
