"""Hunt 69, `wse wafer` and every command's wafer options. Broken before:
- hole 1: only `wse plan` refused a wafer that does not repair; `wse train --validate-only`,
  `wse infer generate` and `wse hpc stencil` priced a WSE-3 at defect_rate 0.5 (repair
  probability 0) with exit code 0;
- hole 2: the refusal advised `spare_cols >= 1332` on a 1,176-column grid, which the spec
  then refused;
- hole 3: `wse train --spec FILE` wrote `wafer: small` into params_train.yaml and the
  checkpoints, and a rerun from them ran on small;
- hole 4: a spec file of every field with 100,000 spare rows drew a 119.7M-PE map (1.1 GB);
- hole 5: an empty field in a `base:` file silently kept the preset's value;
- hole 6: `wse wafer defects` named no retired row, and its picture showed no row repair;
- hole 7: `wse wafer check --grid 2 2` was refused after JAX by an op's message naming a
  multicast distance the user never gave;
- hole 8: `--set clock_hz=2e9` printed `"preset": "wse3"`;
- hole 9: `Base: tiny` was a list of 10 "missing" fields; `-p WSE3` had no suggestion;
- hole 10: `--set pe_rows=1.5` said "must be a number".

Oracles: `wse plan`'s own refusal line, NumPy recounts of the seeded defect map, the files
left on disk, the rerun's own prediction, and which modules a refused command imported."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import typer
import yaml
from wse_cli.app import app
from wse_cli.testing import clean_env, invoke, refused_in_one_line

ROOT = typer.main.get_command(app)
WIDE = {"COLUMNS": "200"}
BAD = "base: wse3\ndefect_rate: 0.5\n"
WHY = (
    "Error: wafer wse3+bad does not repair to its 762 x 1176 PE grid at defect_rate 0.5: 594 "
    "dead PEs expected per physical row of 1,188, 12 spare columns and 0 spare rows repair it "
    "with probability 0 (wse_core.hw.repair; a plan needs at least 0.5); give defect_rate <= "
    "0.00385 (no spare_cols <= 1,176 and no spare_rows <= 762 repairs it)"
)
# `wse ARGS`, then (last on stderr) whether it imported JAX and scipy: a refusal before any
# work imports no JAX; a preset's repair is settled by a bound, without scipy (~1 s)
PROBE = """import atexit, runpy, sys
atexit.register(lambda: print("imported", "jax" in sys.modules, "scipy" in sys.modules,
                              file=sys.stderr))
sys.argv = ["wse", *sys.argv[1:]]
runpy.run_module("wse_cli", run_name="__main__", alter_sys=True)
"""


def _file(folder, text: str, name: str):
    path = folder / name
    path.write_text(text)
    return path


def _probe(args: list, cwd) -> tuple[int, list[str]]:
    r = subprocess.run([sys.executable, "-c", PROBE, *map(str, args)], capture_output=True,
                       text=True, timeout=120, cwd=cwd, env=clean_env(**WIDE))  # fmt: skip
    return r.returncode, r.stderr.strip().splitlines()


# -- holes 1 and 2: every command that prices a wafer refuses the one plan refuses ---------------
def test_every_pricing_command_refuses_a_wafer_that_does_not_repair(tmp_path, tiny_model_dir):
    bad = _file(tmp_path, BAD, "bad.yaml")
    plan = refused_in_one_line(ROOT, ["plan", "train", "-m", "tiny-gpt2", "--tokens", "1e9",
                                      "--spec", bad], "does not repair")  # fmt: skip
    assert plan == WHY  # hole 2: no count past the grid is suggested
    before = sorted(p.name for p in tmp_path.iterdir())
    for args in (
        ["train", "tiny", "--validate-only", "--spec", bad],
        ["train", "tiny", "--max-steps", "1", "-o", tmp_path / "run", "--spec", bad],
        ["infer", "generate", "--model-dir", tiny_model_dir, "--prompt-ids", "1,2,3",
         "--max-tokens", "4", "--spec", bad, "--trace", tmp_path / "t.npz"],
        ["hpc", "stencil", "--kind", "jacobi", "--grid", "8", "8", "4", "--spec", bad,
         "--steps", "5"],
        ["hpc", "cfd", "--grid", "16", "8", "1", "--steps", "2", "--spec", bad, "--out",
         tmp_path / "cfd"],
    ):  # fmt: skip
        assert refused_in_one_line(ROOT, args, "does not repair", WIDE) == WHY, args
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written
    # the commands that show the wafer itself still answer: the repair's own "no" is exit 1
    code, out = invoke(ROOT, ["wafer", "defects", "--spec", bad])
    assert code == 1 and out.startswith("not repairable: physical row"), out
    code, out = invoke(ROOT, ["wafer", "info", "--spec", bad, "--json"])
    assert code == 0 and json.loads(out)["defect_rate"] == 0.5, out


def test_the_refusal_comes_before_jax_and_a_preset_needs_no_scipy(tmp_path):
    _file(tmp_path, BAD, "bad.yaml")
    code, lines = _probe(["hpc", "stencil", "--kind", "jacobi", "--grid", "8", "8", "4",
                          "--spec", "bad.yaml"], tmp_path)  # fmt: skip
    assert code == 2 and lines == [WHY, "imported False True"], lines
    code, lines = _probe(["train", "tiny", "--validate-only"], tmp_path)  # a preset, checked
    assert code == 0 and lines[-1] == "imported False False", lines


# -- hole 3: the run folder records the wafer the run used ----------------------------------------
def test_train_records_the_spec_file_and_a_rerun_uses_it(tmp_path, monkeypatch):
    from wse_cli.commands import train as train_command

    fast = _file(tmp_path, "base: wse3\nclock_hz: 2e9\n", "fast.yaml")
    seen = {}
    monkeypatch.setattr(train_command, "_train", lambda console, config, spec: seen.update(
        config=config, spec=spec))  # fmt: skip
    code, out = invoke(ROOT, ["train", "tiny", "--max-steps", "1", "-o", tmp_path / "run",
                              "--spec", fast], WIDE)  # fmt: skip
    assert code == 0, out[-2000:]
    assert seen["spec"].name == "wse3+fast" and seen["spec"].clock_hz == 2e9
    assert seen["config"].runconfig.wafer == str(fast.resolve())
    # what the run writes (params_train.yaml, the checkpoints' config) is this config's dict;
    # a rerun from it reads its runconfig.wafer, the file's path
    recorded = seen["config"].to_dict()["runconfig"]["wafer"]
    assert recorded == str(fast.resolve())
    code, out = invoke(ROOT, ["train", "tiny", "--validate-only", f"runconfig.wafer={recorded}"],
                       WIDE)  # fmt: skip
    assert code == 0, out[-2000:]
    code, direct = invoke(ROOT, ["train", "tiny", "--validate-only", "--spec", fast], WIDE)
    assert code == 0, direct[-2000:]
    (rerun,) = [line for line in out.splitlines() if line.startswith("predicted on")]
    assert rerun.startswith("predicted on 1 x wse3+fast (fp32)") and rerun in direct, out
    refused_in_one_line(ROOT, ["train", "tiny", "--validate-only", f"runconfig.wafer={fast}",
                               "--spec", fast], "or --spec FILE, not both")  # fmt: skip


# -- hole 4: a whole-field file holds its spares within its grid --------------------------------
def test_a_whole_field_file_with_100000_spare_rows_is_refused(tmp_path):
    from wse_core import preset

    whole = {**preset("wse3").to_dict(), "spare_rows": 100_000, "name": "big"}
    path = _file(tmp_path, yaml.safe_dump(whole), "wholebig.yaml")
    line = "spare_rows must be at most pe_rows (762), got 100,000"
    refused_in_one_line(ROOT, ["wafer", "defects", "--spec", path, "--png", tmp_path / "b.png"],
                        line)  # fmt: skip
    refused_in_one_line(ROOT, ["wafer", "defects", "--set", "spare_rows=100000"], line)
    assert not (tmp_path / "b.png").exists()


# -- holes 5, 9, 10: one line naming what the user typed ----------------------------------------
def test_spec_typos_are_named(tmp_path):
    blank = _file(tmp_path, "base: tiny\npe_rows:\nclock_hz: ~\n", "blank.yaml")
    for args in (
        ["wafer", "info", "--spec", blank],
        ["plan", "train", "-m", "tiny-gpt2", "--tokens", "1e9", "--spec", blank],
    ):
        refused_in_one_line(ROOT, args, f"pe_rows in spec file '{blank}' has no value; give "
                            "an integer in [1, 100,000] or remove the line", env=WIDE)  # fmt: skip
    cap = _file(tmp_path, "Base: tiny\n", "cap.yaml")
    line = refused_in_one_line(ROOT, ["wafer", "info", "--spec", cap], "unknown spec field")
    assert line == "Error: unknown spec field 'Base' (did you mean 'base'?)"
    refused_in_one_line(ROOT, ["wafer", "info", "-p", "WSE3"],
                        "unknown wafer preset 'WSE3' (did you mean 'wse3'?)")  # fmt: skip
    line = refused_in_one_line(ROOT, ["wafer", "info", "-p", "wse3", "--set", "pe_rows=1.5"], "")
    assert line == "Error: pe_rows must be an integer in [1, 100,000], got '1.5'"


# -- hole 6: the rows retired, named and drawn ---------------------------------------------------
def _retired(rows: int, cols: int, seed: int, rate: float, spare_cols: int) -> list[int]:
    """The recount: physical rows of the seeded map with more dead PEs than spare columns."""
    dead = np.random.default_rng(seed).random((rows, cols)) < rate
    return [int(r) for r in np.flatnonzero(dead.sum(1) > spare_cols)]


@pytest.mark.parametrize(
    ("args", "physical", "rate", "spare"),
    [(["-p", "tiny", "--seed", "1000"], (9, 9), 0.01, (1, 1)),
     (["-p", "demo", "--seed", "3", "--defect-rate", "0.02", "--set", "spare_rows=30"],
      (94, 99), 0.02, (30, 3)),
     (["-p", "tiny", "--seed", "1"], (9, 9), 0.01, (1, 1))],
)  # fmt: skip
def test_defects_names_the_retired_rows(args, physical, rate, spare):
    seed = int(args[args.index("--seed") + 1])
    rows = _retired(*physical, seed, rate, spare[1])
    code, out = invoke(ROOT, ["wafer", "defects", *args, "--json"])
    assert code == 0 and json.loads(out)["retired_rows"] == rows, out
    code, out = invoke(ROOT, ["wafer", "defects", *args], WIDE)
    shown = ", ".join(map(str, rows[:5])) + (f" and {len(rows) - 5} more" if len(rows) > 5 else "")
    said = {0: "no row", 1: f"row {shown}"}.get(len(rows), f"rows {shown}")
    assert code == 0 and f"; repairable: {said} retired ({len(rows)}/{spare[0]} spare rows " \
        "used) and at most" in out, out  # fmt: skip


def test_the_picture_draws_the_row_repair(tmp_path):
    from wse_cli.commands.wafer import defects_figure
    from wse_core import defect_map, preset, remap

    spec = preset("demo").replace(spare_rows=30, defect_rate=0.02)
    dm = defect_map(spec, 3)
    rm = remap(spec, dm)
    retired = _retired(94, 99, 3, 0.02, 3)
    assert len(retired) == 17
    fig = defects_figure(dm, rm)
    image = fig.axes[1].images[0]
    placed = np.asarray(image.get_array())
    # blank: past the colour scale (drawn white); the others, each logical PE's column shift
    empty = [r for r in range(94) if (placed[r] > image.norm.vmax).all()]
    kept = [r for r in range(94) if r not in retired][:64]  # the recount of the rows used
    assert empty == [r for r in range(94) if r not in kept]  # retired rows and unused spares
    dead = np.random.default_rng(3).random((94, 99)) < 0.02
    for logical, row in enumerate(kept):  # logical column j on the row's j-th live PE
        live = np.flatnonzero(~dead[row])[:96]
        assert (placed[row, live] == live - np.arange(96)).all(), logical
        assert (placed[row, np.setdiff1d(np.arange(99), live)] > image.norm.vmax).all()
    for ax in fig.axes[:2]:  # hatched bands over exactly the retired rows, on both panels
        (bands,) = ax.collections[-1:]
        drawn = set()
        for path in bands.get_paths():
            lo, hi = path.vertices[:, 1].min(), path.vertices[:, 1].max()
            drawn |= set(range(int(lo + 0.5), int(hi + 0.5)))
        assert sorted(drawn) == retired and bands.get_hatch() == "///"
    code, out = invoke(ROOT, ["wafer", "defects", "-p", "tiny", "--seed", "1000", "--png",
                              tmp_path / "r.png"])  # fmt: skip
    assert code == 0 and (tmp_path / "r.png").read_bytes()[:4] == b"\x89PNG", out


# -- hole 7: wafer check's grid ------------------------------------------------------------------
@pytest.mark.parametrize("grid", [("2", "2"), ("1", "8")])
def test_check_refuses_a_grid_too_short_before_jax(tmp_path, grid):
    code, lines = _probe(["wafer", "check", "-p", "tiny", "--grid", *grid], tmp_path)
    want = (f"Error: --grid {grid[0]} {grid[1]}: the check's multicast_S_3 needs at least 3 "
            "rows; give --grid ROWS >= 3")  # fmt: skip
    assert code == 2 and lines == [want, "imported False False"], lines


def test_check_help_says_the_least_rows():
    code, out = invoke(ROOT, ["wafer", "check", "--help"], WIDE)
    assert code == 0 and "rows >= 3" in out, out


# -- hole 8: a wafer changed by --set is named as changed ---------------------------------------
def test_set_names_the_changed_wafer():
    code, out = invoke(ROOT, ["wafer", "info", "-p", "wse3", "--set", "clock_hz=2e9", "--json"])
    d = json.loads(out)
    assert code == 0 and d["preset"] == "wse3+set" and d["clock_hz"] == 2e9, out
    code, out = invoke(ROOT, ["wafer", "defects", "-p", "wse3", "--set", "spare_cols=0",
                              "--defect-rate", "0"])  # fmt: skip
    assert code == 0 and out.startswith("wse3+set: 0 dead of 896,112 physical PEs"), out
    code, out = invoke(ROOT, ["wafer", "info", "-p", "wse3", "--json"])
    assert json.loads(out)["preset"] == "wse3"  # the preset itself keeps its name
