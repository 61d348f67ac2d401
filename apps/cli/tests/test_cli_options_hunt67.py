"""Hunt 67's option-value holes (the option fuzzer, notes/s67/hunt67_fuzz.md). Broken before:
- `wse train` read `-o/--model-dir` and `--checkpoint-path` as YAML (`runconfig.k=v` text):
  `-o 'run #1'` trained into `run/`; `--checkpoint-path null`, `~`, `'#x'` were no checkpoint,
  the run starting at step 0 (exit 0); `-o 123` / `-o 'a: b'` were refused as "must be str".
- `train --validate-only` said "config is valid" for a `--checkpoint-path` the run refuses
  (/dev/zero, a folder of no steps), the run refusing it ~17 s in.
- `hpc md --potential FILE --steps 0 --steps 5` ran 5 steps: the scan for repeated options
  read FILE (a `multiple` option's value) as md's subcommand and stopped.
- `-0` passed `ge=0` and came back as "$-0" in plan's table, -0.0 in its JSON, "rate -0"
  from `wafer defects`.
- `infer serve --speculative-config ''` served without speculation and `hpc stencil --dtype
  ''` ran fp32: an empty value was taken as "not given".
- `plan --alpha 5` was refused late as "alpha must be in [0, 1], got 5", naming no option,
  and its help said only "a finite number".
Oracles: the run folder's name on disk and the step the run resumes from; the refusal line
the real run gives; the parsed JSON's sign bit."""

from __future__ import annotations

import json
import math

import pytest
import typer
import yaml
from wse_cli.app import app
from wse_cli.option_repeats import repeated
from wse_cli.options import NUMBER_MARK
from wse_cli.testing import invoke, refused_in_one_line, walk_commands
from wse_trainer.testing import tiny_params, write_corpus

pytestmark = pytest.mark.timeout(300)
ROOT = typer.main.get_command(app)
NO_STEP = "; give a model_dir, its checkpoints folder or one step folder"
MD = ["hpc", "md", "--lattice", "fcc", "--element", "Cu", "--a", "3.615", "--cells", "4", "4",
      "4", "--preset", "small"]  # fmt: skip


def _params(tmp_path):
    corpus = write_corpus(tmp_path / "data")
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(tiny_params(corpus, tmp_path / "unused")))
    return params


# --- train: a path flag is the path as typed -------------------------------------------------
def test_the_run_folder_and_the_checkpoint_are_the_paths_as_typed(tmp_path):
    params, first, second = _params(tmp_path), tmp_path / "run #1", tmp_path / "run #2"
    code, out = invoke(ROOT, ["train", params, "-o", first, "--num-steps", 1, "--max-steps", 2])
    assert code == 0, out[-2000:]
    assert (first / "checkpoints" / "1").is_dir() and not (tmp_path / "run").exists()
    code, out = invoke(ROOT, ["train", params, "-o", second, "--checkpoint-path", first,
                              "--num-steps", 1, "--max-steps", 2])  # fmt: skip
    assert code == 0, out[-2000:]
    assert "resumed from checkpoint step 1" in out and "global step 2" in out
    assert (second / "checkpoints" / "2").is_dir()


@pytest.mark.parametrize("name", ["123", "null", "[x]", "a: b"])
def test_a_model_dir_that_yaml_would_read_as_another_type_is_a_folder_name(
    tmp_path, monkeypatch, name
):
    monkeypatch.chdir(tmp_path)  # the name as typed, relative: YAML read `123` as a number
    code, out = invoke(ROOT, ["train", "tiny", "--validate-only", "-o", name])
    assert code == 0 and out.strip().endswith("config is valid"), out[-2000:]
    assert list(tmp_path.iterdir()) == []  # validation writes nothing


@pytest.mark.parametrize("path", ["null", "#x", " ", "~"])
def test_a_checkpoint_path_yaml_would_drop_is_refused(tmp_path, monkeypatch, path):
    monkeypatch.chdir(tmp_path)
    home = tmp_path / "home"  # `~` is the home folder (hunt 62), which holds no checkpoint
    home.mkdir()
    shown = str(home) if path == "~" else path
    line = f"Error: no committed checkpoint at {shown!r}{NO_STEP}"
    if path == " ":  # hunt 69: a blank path is refused as blank, from the flag or the file
        line = "Error: runconfig.checkpoint_path is empty (' '); give a run folder or one of "
        line += "its steps, or leave it out"
    refused_in_one_line(
        ROOT,
        ["train", "tiny", "--validate-only", "--checkpoint-path", path],
        line,
        env={"HOME": str(home)},
    )


# --- train --validate-only refuses what the run refuses -------------------------------------
@pytest.mark.parametrize("where", ["/dev/zero", "empty", "steps_unfinished"])
def test_validation_and_the_run_refuse_a_checkpoint_path_with_no_step(tmp_path, where):
    if where != "/dev/zero":
        (tmp_path / where).mkdir()
        if where == "steps_unfinished":  # orbax's folder of a step it never finished
            (tmp_path / where / "checkpoints" / "3.orbax-checkpoint-tmp-7").mkdir(parents=True)
        where = str(tmp_path / where)
    line = f"Error: no committed checkpoint at {where!r}{NO_STEP}"
    run = tmp_path / "run"
    base = ["train", "tiny", "-o", run, "--checkpoint-path", where]
    assert refused_in_one_line(ROOT, [*base, "--validate-only"], line) == line
    assert refused_in_one_line(ROOT, [*base, "--num-steps", 1], line) == line
    assert not run.exists()


def test_a_folder_holding_a_step_validates(tmp_path):
    (tmp_path / "old" / "checkpoints" / "4").mkdir(parents=True)  # as orbax names step 4
    for path in (tmp_path / "old", tmp_path / "old" / "checkpoints"):
        code, out = invoke(ROOT, ["train", "tiny", "--validate-only", "--checkpoint-path", path])
        assert code == 0 and out.strip().endswith("config is valid"), out[-2000:]


# --- a repeated option after a repeatable one ------------------------------------------------
@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--potential", "x.eam", "--steps", "0", "--steps", "5"],
         "Error: --steps is given twice ('0', then '5'); give it once"),
        (["--potential", "x.eam", "--potential", "y.eam", "--seed", "1", "--seed", "2"],
         "Error: --seed is given twice ('1', then '2'); give it once"),
        (["--potential=x.eam", "--dt-fs", "1", "--dt-fs", "2"],
         "Error: --dt-fs is given twice ('1', then '2'); give it once"),
    ],
)  # fmt: skip
def test_md_refuses_an_option_given_twice_after_potential(args, line):
    assert refused_in_one_line(ROOT, [*MD, *args], line) == line


def test_every_repeatable_options_value_is_skipped():
    """Every `multiple` option of every command, its value a word that would otherwise stop
    a group's scan, followed by a repeated single-valued option: refused each time."""
    checked = 0
    for path, cmd in walk_commands(ROOT):
        params = cmd.params
        single = [p for p in params if p.param_type_name == "option" and not p.multiple
                  and not p.is_flag and not p.count and p.nargs == 1]  # fmt: skip
        for p in (p for p in params if p.param_type_name == "option" and p.multiple):
            if not single:
                continue
            args = [p.opts[0], *["word"] * p.nargs, single[0].opts[0], "1", single[0].opts[0], "2"]
            why = repeated(args, params, group=hasattr(cmd, "commands"))
            assert why.startswith(f"{single[0].opts[0]} is given twice"), (path, p.opts, why)
            checked += 1
    assert checked >= 9  # --set (2), --potential, --elements, --stop, --assume (3), --sweep


def test_repeatable_options_stay_repeatable():
    md = ROOT.commands["hpc"].commands["md"]
    assert repeated(["--potential", "a", "--potential", "b", "--steps", "1"], md.params) == ""


# --- -0 is 0 ---------------------------------------------------------------------------------
def test_minus_zero_is_reported_as_zero():
    args = ["plan", "train", "-m", "tiny-gpt2", "--tokens", "1e6"]
    code, out = invoke(ROOT, [*args, "--usd-per-engineer-hour", "-0", "--json"])
    assert code == 0, out[-2000:]
    costs = [v for k, v in _items(json.loads(out)) if k == "people_usd"]
    assert costs and all(v == 0 and math.copysign(1, v) == 1 for v in costs), costs
    code, out = invoke(ROOT, [*args, "--usd-per-engineer-hour", "-0.0"])
    assert code == 0 and "$0 " in out and "$-0" not in out, out[-2000:]
    code, out = invoke(ROOT, ["wafer", "defects", "--preset", "tiny", "--defect-rate", "-0.0"])
    assert code == 0 and "(rate 0, seed 0)" in out, out[-2000:]


def _items(tree):
    """Every (key, value) of a parsed JSON document, nested ones too."""
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield k, v
            yield from _items(v)
    elif isinstance(tree, list):
        for v in tree:
            yield from _items(v)


# --- an empty value is a value ---------------------------------------------------------------
def test_an_empty_speculative_config_is_refused():
    example = '{"num_speculative_tokens": 4}'
    line = (
        f"Error: --speculative-config is empty (''); give a JSON object (e.g. '{example}') or "
        "a file holding one, or leave it out"
    )
    args = ["infer", "serve", "--model-dir", "mock", "--port", "0", "--no-warmup"]
    assert refused_in_one_line(ROOT, [*args, "--speculative-config", ""], line) == line


def test_an_empty_stencil_dtype_is_refused():
    line = (
        "Error: --dtype is empty (''); use fp32, fp16 (jacobi, heat) or mixed (bicgstab), or "
        "leave it out (jacobi: fp32)"
    )
    args = ["hpc", "stencil", "--kind", "jacobi", "--grid", "4", "4", "4", "--steps", "1",
            "--preset", "tiny", "--dtype", ""]  # fmt: skip
    assert refused_in_one_line(ROOT, args, line) == line


# --- plan --alpha states and checks its range ------------------------------------------------
def test_alpha_is_refused_naming_the_option_and_its_range():
    args = ["plan", "infer", "-m", "tiny-gpt2", "--draft", "tiny-gpt2", "--alpha", "5"]
    line = "Error: --alpha must be a finite number in [0, 1], got 5"
    assert refused_in_one_line(ROOT, args, line) == line
    (alpha,) = [p for p in ROOT.commands["plan"].commands["infer"].params if p.name == "alpha"]
    spec = getattr(alpha.callback, NUMBER_MARK)
    assert (spec.ge, spec.le) == (0, 1) and "in [0, 1]" in alpha.help
