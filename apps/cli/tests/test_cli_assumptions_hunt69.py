"""Hunt 69 on the command line: every surface lists the swept constants that move its
figures, refuses an `--assume` it never reads, and results.json carries what its tables do.

Broken before:
- `wse plan infer|train` (table and JSON), the `predicted` line of `wse train
  --validate-only`, `wse hpc swe|cfd` named no wafer constant (`clock_hz` moved them 23-29%);
- `--assume memoryx_bytes_per_s=7.5e10` was accepted by `wse plan infer` and `wse experiments
  run sc20-bicgstab`, listed and written as if priced, moving nothing;
- sc20-bicgstab's row listed `fp32_mul_width` (moves it 0%) and not `hop_latency_cycles`
  (+15%) or `ramp_latency_cycles` (+3%); results.json carried no assumption, no calibration;
- domain-translation-swe's GPU rows listed `clock_hz` (moves them not at all), not the kernel
  cost that moves them 193..606x (`KERNEL_OVERHEAD_S`, no registry key); hc24-frontier listed
  neither `clock_hz` nor `gpu.kernel_s`, which move its CS-3 and H100 rows.

Oracles: the predictions repriced through the Python API inside `assume(...)`, as `--assume`
runs them, and the calibration's own `to_dict()`.
"""

from __future__ import annotations

import csv
import json
import re

import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke, refused_in_one_line
from wse_core.cost.assumptions import assume, assumed_spec, constant_of
from wse_core.cost.calibration import current
from wse_core.cost.listing import Listed, compact, listed

ROOT = typer.main.get_command(app)
WIDE = {"COLUMNS": "400"}  # one line a note
INFER = ["plan", "infer", "-m", "tiny-llama", "--users", "4", "--prompt-tokens", "64",
         "--output-tokens", "32"]  # fmt: skip


def _run(args: list, env=None) -> str:
    code, out = invoke(ROOT, [str(a) for a in args], env)
    assert code == 0, out[-2000:]
    return out


def _names(entries) -> list[str]:
    return [e["name"] for e in entries]


def test_plan_infer_lists_each_swept_constant_in_the_table_and_the_json():
    table = _run(INFER, WIDE)
    data = json.loads(_run([*INFER, "--json"]))
    names = _names(data["assumed"])
    assert names[:2] == ["clock_hz", "hop_latency_cycles"]
    assert {"gpu.kernel_s", "attention.exp_fmacs"} <= set(names)
    assert "memoryx_bytes_per_s" not in names and "fp32_mul_width" not in names
    assert "-   clock_hz = 1.1e+09 Hz (swept 8.5e+08..1.1e+09; assumed)" in table
    # CS-3's hop, fitted on WaferLLM's MeshGEMV measured on a CS-3 (session 84; "= 1 ...
    # (swept 1..2; sourced)" before): the basis says so and the range holds the fit
    hop = current().by_system["CS-3"]["hop_latency_cycles"]
    assert 2.0 < hop < 2.1
    fit = f"(swept 1..{hop:g}; sourced; fitted on CS-3)"
    assert f"-   hop_latency_cycles = {hop:.4g} cycles/hop {fit}" in table
    assert table.count("(swept ") == len(names)  # the table lists what the JSON does


def test_an_assumption_the_command_never_reads_is_refused_in_one_line(tmp_path):
    what = "--assume memoryx_bytes_per_s: wse plan infer does not read it"
    refused_in_one_line(ROOT, [*INFER, "--assume", "memoryx_bytes_per_s=7.5e10"], what)
    line = refused_in_one_line(
        ROOT, ["plan", "train", "-m", "tiny-gpt2", "--tokens", "1e6", "--assume",
               "calibration.memoryx_bytes_per_s=1e9"], "wse plan train does not read it",
    )  # fmt: skip
    assert "it reads clock_hz, " in line and "calibration.FIELD for clock_hz" in line
    # an experiment that prices no wafer: nothing it reads, nothing written
    refused_in_one_line(ROOT, ["experiments", "run", "wafer-yield", "--quick", "--out",
                               tmp_path, "--assume", "clock_hz=1e9"],
                        "experiment wafer-yield does not read it")  # fmt: skip
    assert not (tmp_path / "wafer-yield").exists()


def test_sc20_bicgstab_lists_the_hop_not_the_fp32_width_and_results_json_says_so(tmp_path):
    from wse_hpc.studies.stencil_bicgstab import bicgstab_sc20_predictions

    _run(["experiments", "run", "sc20-bicgstab", "--quick", "--out", tmp_path])
    folder = tmp_path / "sc20-bicgstab"
    data = json.loads((folder / "results.json").read_text())
    assert data["calibration"] == current().to_dict()
    row = data["predictions"][0]
    assert (row["name"], row["params"]["kernel"]) == ("us_per_iteration", "published")
    base = bicgstab_sc20_predictions()[0].value
    for key, end, listed_here in (("hop_latency_cycles", 2.0, True),
                                  ("ramp_latency_cycles", 7.0, True),
                                  ("fp32_mul_width", 4.0, False)):  # fmt: skip
        with assume(**{key: end}):
            moved = bicgstab_sc20_predictions()[0].value != base
        assert moved == listed_here == (key in _names(row["assumed"])), key
    with (folder / "table.csv").open(newline="") as f:
        header, first = list(csv.reader(f))[:2]
    cell = first[header.index("assumed (value, sweep range, basis)")]
    assert re.findall(r"(?:^|\); )([\w.]+) = ", cell) == _names(row["assumed"])


def test_the_field_gpu_rows_list_their_kernel_cost_and_not_the_wafer_clock():
    from wse_hpc.fields.alternative import KERNEL_OVERHEAD_S, LAUNCHED_KERNEL_KEY
    from wse_hpc.studies import domain_translation_swe as dts
    from wse_systems.serving.gpu_step import KERNEL_KEY

    c = constant_of(LAUNCHED_KERNEL_KEY)  # registered: --assume and --sweep reach it
    assert LAUNCHED_KERNEL_KEY != KERNEL_KEY and c.basis == "assumed" and "CUDA" in c.source
    assert (min(c.sweep), max(c.sweep)) == (1e-6, 1e-5) and KERNEL_OVERHEAD_S == 3e-6
    plain = dts._traced(assumed_spec("wse3"), False)

    def rows():
        return {(r.name, r.params["case"]): r for r in dts._gpu_rows(assumed_spec("wse3"), plain)}

    base = rows()
    moved = {}
    for key, end in ((LAUNCHED_KERNEL_KEY, 1e-5), ("clock_hz", 0.85e9)):
        with assume(**{key: end}):
            moved[key] = {k for k, r in rows().items() if r.value != base[k].value}
    for k, r in base.items():
        names = {e.key for e in listed(r.assumed, {})}
        assert {key for key in moved if k in moved[key]} == names & set(moved), (k, names)
    gpu_row = base[("gpu_s_per_step", "one H100, unfused")]
    assert [e.key for e in listed(gpu_row.assumed, {})] == [LAUNCHED_KERNEL_KEY]


def test_hc24_frontier_lists_the_clock_on_the_cs3_and_the_kernel_on_the_h100():
    import wse_models
    from wse_inference.studies import hc24_frontier as hc

    sides = hc._case(*hc.CASES[0], None)
    shown = [{e.key for e in listed(hc._rows(s)[0].assumed, {})} for s in sides]
    config = wse_models.preset_config("llama3-8b", dtype="bfloat16")

    def one_user(**changes):
        with assume(**changes):
            return [s.point(1).user_tokens_per_s for s in hc._systems(config, 1, None)]

    base = one_user()
    for key, end in (("clock_hz", 0.85e9), ("gpu.kernel_s", 5e-6)):
        moved = [a != b for a, b in zip(one_user(**{key: end}), base, strict=True)]
        assert moved == [key in names for names in shown], (key, moved)


def test_validate_only_and_hpc_lines_name_what_moves_the_prediction():
    out = _run(["train", "tiny", "--validate-only"], {"COLUMNS": "4000"})
    line = next(x for x in out.splitlines() if x.startswith("predicted on"))
    assert "; assumed: clock_hz " in line and "attention.exp_fmacs 6" in line
    assert line.endswith("(ranges: wse experiments assumptions)")
    swe = _run(["hpc", "swe", "--n", "16", "--steps", "2"]).splitlines()
    assert swe[1].startswith("assumed: clock_hz 8.5e+08, hop_latency_cycles 1")
    data = json.loads(_run(["hpc", "swe", "--n", "16", "--steps", "2", "--json"]))
    assert _names(data["assumed"])[0] == "clock_hz"


def test_the_decode_report_generate_prints_lists_the_exponential():
    # `wse infer generate` reads its prediction from this report (its JSON "predicted")
    from wse_inference.pipeline.engine import PipelineEngine
    from wse_inference.testing import tiny_model

    eng = PipelineEngine(tiny_model("llama", n_layers=2, seed=0), stages=2, max_context=32,
                         spec=assumed_spec("wse3"))  # fmt: skip
    report = eng.report(measured_wall_s=1.0, tokens=1, kv_tokens=4)
    names = _names(report.to_dict()["assumed"])
    assert names[:2] == ["clock_hz", "hop_latency_cycles"] and "attention.exp_fmacs" in names
    with assume(**{"attention.exp_fmacs": 12.0}):
        slower = eng.report(measured_wall_s=1.0, tokens=1, kv_tokens=4)
    assert slower.predicted_s > report.predicted_s
    assert "attention.exp_fmacs* 12" in slower.assumed_compact()
    # its JSON entries print the same line again (what `generate`'s text shows from its JSON)
    entries = [Listed.from_dict(d) for d in slower.to_dict()["assumed"]]
    assert compact(entries) == slower.assumed_compact()


@pytest.mark.slow
def test_netl_gpu_rows_list_the_launched_kernel_cost():
    from wse_hpc.studies import netl_rayleigh_benard as nr

    _, _, on_wafer, on_gpu = nr._step_report(assumed_spec("wse2"), 64, 5.0)
    assert [e.key for e in listed(on_gpu, {})] == ["gpu.launched_kernel_s"]
    assert "clock_hz" in {e.key for e in listed(on_wafer, {})}
