"""Hunt 68, a wafer spec's negative zero. Broken before: `defect_rate: -0.0` in a spec file
(or `--set defect_rate=-0.0`) passed the [0, 1) check (-0.0 >= 0) and was kept with its sign,
so `wse wafer info` printed "defect rate -0", `wse wafer defects` "(rate -0, seed 0)" and the
JSON "defect_rate": -0.0. A spec now holds zero with one sign (`WaferSpec.__post_init__`,
where every spec, read or built, is checked), so every printer shows 0.

Oracles: the sign bit (`math.copysign`), and the same spec written with `0.0`."""

from __future__ import annotations

import json
import math

import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke
from wse_core.hw.spec import load_spec, preset

ROOT = typer.main.get_command(app)
WIDE = {"COLUMNS": "200"}


def _spec_file(tmp_path, rate: str):
    path = tmp_path / f"rate{len(rate)}.yaml"
    path.write_text(f"base: wse3\nname: w\ndefect_rate: {rate}\n", encoding="utf-8")
    return path


def _run(args: list) -> str:
    code, out = invoke(ROOT, [str(a) for a in args], env=WIDE)
    assert code == 0, out[-2000:]
    return out


@pytest.mark.parametrize("rate", ["-0.0", "-0", "-0e5", "-.0"])
def test_a_spec_files_negative_zero_is_zero(tmp_path, rate):
    spec = load_spec(_spec_file(tmp_path, rate))
    assert spec.defect_rate == 0 and math.copysign(1, spec.defect_rate) == 1
    assert spec == load_spec(_spec_file(tmp_path, "0.0"))  # the same spec as a plain zero


def test_every_float_field_and_set_holds_zero_unsigned():
    spec = preset("wse3").replace(defect_rate="-0.0", router_switch_cycles=-0.0)
    spec = spec.replace(system_peak_w=-0.0)
    for field in ("defect_rate", "router_switch_cycles", "system_peak_w"):
        assert math.copysign(1, getattr(spec, field)) == 1, field


@pytest.mark.parametrize("how", ["file", "set"])
def test_the_printed_rate_is_0(tmp_path, how):
    given = ["--spec", _spec_file(tmp_path, "-0.0")] if how == "file" else [
        "--set", "defect_rate=-0.0"]  # fmt: skip
    table = _run(["wafer", "info", *given])
    (line,) = [x for x in table.splitlines() if "defect rate" in x]
    assert line.split("│")[2].strip() == "0", line  # before: "-0"
    data = json.loads(_run(["wafer", "info", *given, "--json"]))
    assert data["defect_rate"] == 0 and math.copysign(1, data["defect_rate"]) == 1
    assert '"defect_rate": 0.0' in _run(["wafer", "info", *given, "--json"])  # not -0.0
    report = _run(["wafer", "defects", *given])
    assert "(rate 0, seed 0)" in report and "-0" not in report  # before: "(rate -0, seed 0)"
