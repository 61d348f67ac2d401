"""`--spec FILE` on every command that takes a wafer preset (`wse_cli.wafer_choice`).

Oracles: a YAML file holding a preset's every field gives the same output as the preset's
name (the spec is the same object's fields, so every figure must match to the bit); a file
with `clock_hz` doubled halves a prediction that has no host I/O (every phase is cycles over
the clock) and leaves its cycles as they were; a file and a preset together, a missing file
and a file that is not YAML exit 2 with one line on every such command."""

from __future__ import annotations

import json

import pytest
import typer
import yaml
from typer.testing import CliRunner
from wse_cli.app import app
from wse_core import preset

runner = CliRunner(env={"WSE_DEVICES": "8"})  # the root conftest runs JAX with 8 devices
STENCIL = ["hpc", "stencil", "--kind", "jacobi", "--grid", "8", "8", "16", "--steps", "5"]
PLAN = ["plan", "train", "--model", "gpt2-124m", "--tokens", "1e9", "--json"]


def _commands(cmd=None, path=()):
    cmd = cmd or typer.main.get_command(app)
    yield path, cmd
    for name, sub in getattr(cmd, "commands", {}).items():
        yield from _commands(sub, (*path, name))


def _spec_file(tmp_path, name: str, **changes) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(preset(name).replace(**changes).to_dict()))
    return str(path)


def _json(args: list[str]) -> dict:
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_every_command_taking_a_preset_takes_spec():
    takers = {
        " ".join(path): {o for p in cmd.params for o in p.opts}
        for path, cmd in _commands()
        if any(o in ("--preset", "--wafer") for p in cmd.params for o in p.opts)
    }
    assert len(takers) >= 8  # wafer info/defects/check, hpc stencil/md/tlrmvm run, plan x2
    assert not [c for c, opts in takers.items() if "--spec" not in opts]
    assert "--spec" in {o for p in typer.main.get_command(app).commands["train"].params
                        for o in p.opts}  # fmt: skip


def test_a_file_equal_to_a_preset_gives_the_presets_output(tmp_path):
    for name in ("wse2", "wse3", "tiny"):
        by_name = _json(["wafer", "info", "--preset", name, "--json"])
        assert _json(["wafer", "info", "--spec", _spec_file(tmp_path, name), "--json"]) == by_name
    assert _json([*PLAN, "--spec", _spec_file(tmp_path, "wse3")]) == _json(PLAN)
    assert _json([*PLAN, "--spec", _spec_file(tmp_path, "wse2")]) == _json(
        [*PLAN, "--wafer", "wse2"]
    )
    spec = _spec_file(tmp_path, "wse2")
    named, filed = _json([*STENCIL, "--json"]), _json([*STENCIL, "--json", "--spec", spec])
    for d in (named, filed):  # measured on this machine, not predicted
        d.pop("measured_wall_s"), d.pop("measured_cells_per_s")
    assert filed == named


def test_a_changed_field_moves_the_prediction_as_the_formula_says(tmp_path):
    clock = preset("wse2").clock_hz
    base = _json([*STENCIL, "--json"])
    fast = _json([*STENCIL, "--json", "--spec", _spec_file(tmp_path, "wse2", clock_hz=2 * clock)])
    assert base["predicted"]["children"][0]["cost"]["host_io_s"] == 0.0
    assert fast["cycles_by_mechanism"] == base["cycles_by_mechanism"]  # cycles do not move
    assert fast["predicted_s"] == pytest.approx(base["predicted_s"] / 2, rel=1e-12)
    # A file with a base: and one field: the wafer's PE count (rows x cols) in `wafer info`.
    small = tmp_path / "rows.yaml"
    small.write_text("base: wse3\npe_rows: 100\n")
    got = _json(["wafer", "info", "--spec", str(small), "--json"])
    assert got["pes"] == 100 * preset("wse3").pe_cols and got["preset"] == "wse3+rows"


@pytest.fixture(scope="module")
def operator_file(tmp_path_factory):
    from wse_hpc.tlrmvm import compress, save_operator
    from wse_hpc.tlrmvm.seismic import green_operator

    path = tmp_path_factory.mktemp("tlr") / "op.npz"
    save_operator(compress(green_operator(n=64), nb=32, threshold=1e-3), path)
    return str(path)


def _bad_spec_cases(operator_file: str) -> list[list[str]]:
    lines = [
        "wafer info",
        "wafer defects",
        "wafer check --grid 4 4",
        "hpc stencil --kind jacobi --grid 8 8 8",
        "hpc md --lattice fcc --element Cu --a 3.6 --cells 4 4 4 --potential none.eam.alloy",
        f"hpc tlrmvm run --operator {operator_file}",
        "plan train --model gpt2-124m --tokens 1e9",
        "plan infer --model llama3-8b",
        "train tiny --validate_only",
    ]
    return [line.split() for line in lines]


def test_bad_spec_input_exits_2_with_one_line_on_every_command(tmp_path, operator_file):
    not_yaml = tmp_path / "bad.yaml"
    not_yaml.write_text("base: [wse3\n")
    for args in _bad_spec_cases(operator_file):
        flag = "runconfig.wafer=small" if args[0] == "train" else (
            "--wafer" if args[0] == "plan" else "--preset")  # fmt: skip
        both = [*args, flag] if args[0] == "train" else [*args, flag, "wse3"]
        cases = {
            "not both": [*both, "--spec", str(not_yaml)],
            "cannot read spec file": [*args, "--spec", str(tmp_path / "missing.yaml")],
            "not valid YAML": [*args, "--spec", str(not_yaml)],
        }
        for expected, argv in cases.items():
            r = runner.invoke(app, argv)
            lines = r.output.strip().splitlines()
            assert r.exit_code == 2, (argv, r.output)
            assert len(lines) == 1 and expected in lines[0], (argv, r.output)
