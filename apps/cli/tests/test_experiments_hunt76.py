"""Hunt 76 on `wse experiments run`. Broken before:

- `--sweep` never refused a key the experiment does not read: `wafer-yield --sweep clock_hz`
  exited 0 with 32 rows of +0.0%, `leviathan23-speculative --sweep clock_hz` reran its ~150 s
  measured run per value; `--assume` refused the same key in one line.
- `run nosuch` said "see `wse experiments list`" and named no experiment.
- `cost-model-calibration --sweep attention.exp_fmacs` printed one 8B figure at every value.

Oracles: the refusal `--assume` gives for the same key (`wse_core.cost.listing`'s line); the
names `wse experiments list` prints; the `--assume` runs' results.json, one per value.
"""

from __future__ import annotations

import json

import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke, refused_in_one_line
from wse_inference.studies import leviathan23_speculative as lev

pytestmark = pytest.mark.timeout(300)
ROOT = typer.main.get_command(app)


def test_a_sweep_of_a_key_the_experiment_never_reads_is_refused_as_an_assume(tmp_path):
    line = refused_in_one_line(
        ROOT, ["experiments", "run", "wafer-yield", "--assume", "clock_hz=1e9", "--out",
               tmp_path / "a"], "--assume clock_hz: experiment wafer-yield does not read it",
    )  # fmt: skip
    swept = refused_in_one_line(
        ROOT, ["experiments", "run", "wafer-yield", "--sweep", "clock_hz", "--out",
               tmp_path / "s"], "--sweep clock_hz: ",
    )  # fmt: skip
    assert swept == line.replace("--assume", "--sweep", 1)  # the same line, the option given
    assert not (tmp_path / "s").exists()  # nothing written


def test_a_sweep_of_the_formula_alone_never_runs_the_measured_part(tmp_path, monkeypatch):
    def measured(*args, **kwargs):
        raise AssertionError("the measured part ran")

    monkeypatch.setattr(lev, "_measure", measured)
    args = ["experiments", "run", "leviathan23-speculative", "--sweep", "clock_hz=1e9,2e9",
            "--out", tmp_path]  # fmt: skip
    line = refused_in_one_line(ROOT, args, "--sweep clock_hz: experiment leviathan23-speculative")
    assert line.endswith("it reads no assumption")


def test_an_unread_assume_beside_a_sweep_is_refused(tmp_path):
    args = ["experiments", "run", "trtllm-h100", "--sweep", "gpu.kernel_s=1e-6,2e-6",
            "--assume", "hop_latency_cycles=2", "--out", tmp_path]  # fmt: skip
    line = refused_in_one_line(ROOT, args, "--assume hop_latency_cycles: experiment trtllm-h100")
    assert "gpu.kernel_s" in line  # what it does read


def test_an_unknown_experiment_is_refused_with_every_name():
    code, listing = invoke(ROOT, ["experiments", "list"])
    assert code == 0
    names = [line.split()[0] for line in listing.strip().splitlines()]
    line = refused_in_one_line(ROOT, ["experiments", "run", "nosuch"], "unknown experiment")
    assert line.startswith("Error: unknown experiment 'nosuch'; known: ")
    known = line.removeprefix("Error: unknown experiment 'nosuch'; known: ").split(" (")[0]
    assert known.split(", ") == names


def _tokens_per_s(folder) -> float:
    rows = json.loads((folder / "results.json").read_text())["predictions"]
    return next(r["value"] for r in rows if r["name"] == "tokens_per_s")


@pytest.mark.slow
def test_a_sweep_prints_the_values_of_separate_assume_runs(tmp_path):
    values = ("12", "4", "6")
    alone = []
    for v in values:
        code, out = invoke(ROOT, ["experiments", "run", "cost-model-calibration", "--assume",
                                  f"attention.exp_fmacs={v}", "--out", tmp_path / v])  # fmt: skip
        assert code == 0, out[-2000:]
        alone.append(_tokens_per_s(tmp_path / v / "cost-model-calibration"))
    sweep = f"attention.exp_fmacs={','.join(values)}"
    code, out = invoke(ROOT, ["experiments", "run", "cost-model-calibration", "--sweep", sweep,
                              "--out", tmp_path])  # fmt: skip
    assert code == 0, out[-2000:]
    csv = (tmp_path / "cost-model-calibration" / "sweep_attention.exp_fmacs.csv").read_text()
    line = next(r for r in csv.splitlines() if r.startswith("tokens_per_s"))
    swept = [float(x) for x in line.split(",")[-3:]]
    assert swept == pytest.approx(alone, rel=1e-12) and len(set(swept)) == 3
