"""Hunt 66 hole 9, `wse plan train|infer --spec` with a wafer that cannot be repaired. Broken
before: `printf 'base: wse3\\ndefect_rate: 0.05\\n' > def.yaml; wse wafer defects --spec
def.yaml` said "not repairable" (exit 1), yet `wse plan infer -m llama3-8b --users 1 --spec
def.yaml` and `wse plan train ... --spec def.yaml` priced the full 762 x 1176 grid as a perfect
wafer (3,048 tokens/s per user, 61,925 tokens/s: the defaults). Now both refuse it in one
line (exit 2) with the largest defect rate and the spare columns that would repair it, and a
plan on a repairable wafer states the repaired grid it prices.

Oracles: `wse wafer defects` on the same spec file (the repair itself, exit 1 for "no"),
and the plan's own JSON."""

from __future__ import annotations

import json

import typer
from wse_cli.app import app
from wse_cli.testing import invoke, refused_in_one_line

ROOT = typer.main.get_command(app)
INFER = ["plan", "infer", "-m", "tiny-gpt2", "--users", "1", "--prompt-tokens", "16",
         "--output-tokens", "16"]  # fmt: skip
TRAIN = ["plan", "train", "-m", "tiny-gpt2", "--tokens", "1e6"]
WHY = (
    "does not repair to its 762 x 1176 PE grid at defect_rate 0.05: 59.4 dead PEs expected "
    "per physical row of 1,188, 12 spare columns and 0 spare rows repair it with probability "
    "0 (wse_core.hw.repair; a plan needs at least 0.5); give defect_rate <= 0.00385 or "
    "spare_cols >= 89"
)


def _spec(tmp_path, rate: float, spare_cols: int | None = None):
    path = tmp_path / "def.yaml"
    extra = "" if spare_cols is None else f"spare_cols: {spare_cols}\n"
    path.write_text(f"base: wse3\ndefect_rate: {rate}\n{extra}")
    return path


def test_plans_refuse_the_wafer_that_wafer_defects_cannot_repair(tmp_path):
    spec = _spec(tmp_path, 0.05)
    code, out = invoke(ROOT, ["wafer", "defects", "--spec", spec])
    assert code == 1 and "not repairable" in out  # the repair's own answer
    before = sorted(p.name for p in tmp_path.iterdir())
    for args in (INFER, TRAIN):
        line = refused_in_one_line(ROOT, [*args, "--spec", spec, "--json"], WHY)
        assert line.startswith("Error: wafer wse3")
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written


def test_the_suggested_spares_make_the_wafer_plannable(tmp_path):
    spec = _spec(tmp_path, 0.05, spare_cols=89)
    code, out = invoke(ROOT, [*INFER, "--spec", spec, "--json"])
    assert code == 0, out[-2000:]
    (note,) = [a for a in json.loads(out)["assumptions"] if a.startswith("wafer grid:")]
    assert "89 spare columns and 0 spare rows hide the dead PEs at defect_rate 0.05" in note
    assert "not priced" in note  # the detours around dead PEs


def test_a_plan_on_a_repairable_wafer_states_its_grid(tmp_path):
    spec = _spec(tmp_path, 0.003)  # below the largest repairable rate, 0.00385
    code, out = invoke(ROOT, [*TRAIN, "--spec", spec, "--json"])
    assert code == 0, out[-2000:]
    (note,) = [a for a in json.loads(out)["assumptions"] if a.startswith("wafer grid:")]
    assert "the logical 762 x 1176 PEs of a repaired wse3" in note
    assert "at defect_rate 0.003; it repairs with probability 0.9" in note
