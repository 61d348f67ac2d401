"""Hunt 68, commands run one after another and two at once. Broken before:

- H1: `wse train` whose end-of-run `hf/` export met a file-size limit (`ulimit -f`) printed a
  72-line SafetensorError traceback (exit 1) and left the previous export damaged
  (config.json rewritten without its bos/eos ids);
- H2: after a stopped resume, `wse infer generate --model-dir RUN` ran the older `hf/` export
  (the export is written at a clean end only) without a word, and the Ctrl-C line did not say
  that `hf/` held an older step;
- H3: two `wse experiments run X --out O` at once both printed "wrote O/X/results.json ..." and
  exited 0; one run's results were lost.

Oracles: the exact lines and exit codes; each file's sha256 before and after; the results
the first run wrote.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer
import yaml
from wse_cli.app import app
from wse_cli.commands import experiments
from wse_cli.commands.train import _interrupted_line
from wse_cli.testing import clean_env, invoke, refused_in_one_line
from wse_core.host.run_files import EXPORT_RECORD
from wse_inference import run_export
from wse_trainer import run as run_module
from wse_trainer.config import config_from_dict
from wse_trainer.testing import run_on_preset, tiny_params, write_corpus

pytestmark = pytest.mark.timeout(300)
ROOT = typer.main.get_command(app)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(run folder, its params) of a tiny run to step 4: checkpoints 2 and 4, hf/ of step 4."""
    base = tmp_path_factory.mktemp("trained")
    data = tiny_params(write_corpus(base / "data"), base / "run")
    data["runconfig"].update(max_steps=4, checkpoint_steps=2, sample_tokens=0)
    assert run_on_preset(config_from_dict(data)).global_step == 4
    return base / "run", data


def _copy(trained, where: Path, **runconfig):
    """(run folder, params.yaml) of a copy of the trained run at `where`."""
    run, data = trained
    shutil.copytree(run, where / "run")
    data = json.loads(json.dumps(data))
    data["runconfig"].update(model_dir=str(where / "run"), **runconfig)
    params = where / "params.yaml"
    params.write_text(yaml.safe_dump(data))
    return where / "run", params


def _tree(d: Path) -> dict[str, str]:
    return {
        str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(d.rglob("*"))
        if p.is_file()
    }


# --- H1: a file-size limit during the export -----------------------------------------------
# `wse ARGS` under a file-size limit (`ulimit -f`), set in the child (as hunt 64's tests do)
LIMITED = """import resource, runpy, sys
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]),) * 2)
sys.argv = ["wse", *sys.argv[2:]]
runpy.run_module("wse_cli", run_name="__main__", alter_sys=True)
"""


def test_a_file_size_limit_during_the_export_is_one_line_and_keeps_the_old_export(
    trained, tmp_path
):
    run, params = _copy(trained, tmp_path)  # at step 4 already: the export alone is written
    hf = run / "hf"
    before = _tree(hf)
    assert (hf / "model.safetensors").stat().st_size > 60_000  # past the limit below
    done = subprocess.run(
        [sys.executable, "-c", LIMITED, "60000", "train", str(params)],
        capture_output=True, text=True, timeout=240, env=clean_env(WSE_DEVICES="1"),
    )  # fmt: skip
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1, done.stderr[-3000:]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert lines[0].startswith(
        f"Error: the HF export of step 4 could not be written to {hf}: File too large ("
    )
    assert lines[0].endswith(
        f"{hf} is left as it was and the checkpoints are kept: free space and rerun the "
        "command with runconfig.max_steps=4 to export step 4"
    )
    assert _tree(hf) == before  # config.json kept its bos/eos ids; the weights theirs
    assert [p.name for p in run.iterdir() if p.name.startswith(".hf")] == []


# --- H2: the export of an older step ------------------------------------------------------
@pytest.fixture
def stopped(trained, tmp_path, monkeypatch):
    """A copy resumed to step 6 and stopped (Ctrl-C) before its export: hf/ of step 4."""
    run, params = _copy(trained, tmp_path, max_steps=6)

    def interrupted(s, step):
        raise KeyboardInterrupt

    monkeypatch.setattr(run_module, "export_hf", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_on_preset(config_from_dict(yaml.safe_load(params.read_text())))
    monkeypatch.undo()
    return run, params


def test_the_ctrl_c_line_says_that_hf_holds_an_older_step(stopped):
    run, _ = stopped
    assert _interrupted_line(run) == (
        f"interrupted (Ctrl-C); last good checkpoint: {run / 'checkpoints' / '6'} (step 6); "
        f"the same command resumes from it; {run / 'hf'} still holds step 4 (the command with "
        "runconfig.max_steps=6 exports it)"
    )


def test_infer_on_a_run_whose_export_is_older_says_so_once(stopped, tmp_path):
    run, _ = stopped
    note = (
        f"note: {run / 'hf'} is the export of step 4; {run / 'checkpoints'} holds step 6 "
        "(rerun its wse train command with runconfig.max_steps=6 to export that step)"
    )
    args = ["--prompt-ids", "1,2", "--max-tokens", "2", "--temperature", "0", "--json"]
    code, output = invoke(ROOT, ["infer", "generate", "--model-dir", run, *args])
    assert code == 0, output
    assert output.splitlines().count(note) == 1, output  # the folder is resolved 5 times
    assert run_export.stale_export(run / "hf") == note  # what `--model-dir RUN/hf` resolves
    shutil.copytree(run / "hf", tmp_path / "elsewhere")  # an export copied out of its run
    assert run_export.stale_export(tmp_path / "elsewhere") is None
    (run / "hf" / EXPORT_RECORD).write_text('{"step": "4"}')  # hand-edited
    assert run_export.stale_export(run / "hf") is None


# --- H3: two experiments into one --out ---------------------------------------------------
# `wse experiments run hunt68-slow`: writes its pid's row once the file argv[-1] appears
_RUN_SLOW = """
import os, sys, time
from pathlib import Path
from wse_cli.commands import experiments
from wse_core.studies.experiment import ExperimentResult, PredictionRow

GO = Path(sys.argv.pop())

def slow(*, quick, seed):
    print("running", flush=True)
    while not GO.exists():
        time.sleep(0.05)
    return ExperimentResult("hunt68-slow", seed, {}, [], [PredictionRow("t", 1.0, "s", {})])

experiments.EXPERIMENTS["hunt68-slow"] = ("__main__:slow", "waits for a file")
sys.argv = ["wse", *sys.argv[1:]]
from wse_cli.entry import module_main
module_main()
"""


def test_a_second_experiment_into_the_same_out_is_refused_naming_the_first(tmp_path, monkeypatch):
    out, go = tmp_path / "o", tmp_path / "go"
    args = ["experiments", "run", "hunt68-slow", "--out", str(out)]
    first = subprocess.Popen(
        [sys.executable, "-c", _RUN_SLOW, *args, "--seed", "1", str(go)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env(),
    )  # fmt: skip
    try:
        assert first.stdout.readline().strip() == "running"
        ran = []
        monkeypatch.setitem(experiments.EXPERIMENTS, "hunt68-slow", ("x:y", "the second"))
        monkeypatch.setattr(experiments, "load", lambda name: lambda **kw: ran.append(kw))
        line = refused_in_one_line(ROOT, [*args, "--seed", "2"], "hunt68-slow")
        assert line.startswith(
            f"Error: --out {out / 'hunt68-slow'} is being written by another wse experiments "
            f"run (pid {first.pid}, since "
        )
        assert line.endswith("); wait for it, or give another --out") and ran == []
    finally:
        go.touch()
        stdout, stderr = first.communicate(timeout=120)
    assert first.returncode == 0, stderr[-2000:]
    assert stdout.endswith(f"wrote {out / 'hunt68-slow'}/results.json, table.md, table.csv, "
                           "figure.png\n")  # fmt: skip
    assert json.loads((out / "hunt68-slow" / "results.json").read_text())["seed"] == 1
    assert sorted(p.name for p in out.iterdir()) == ["hunt68-slow"]  # the lock file went


def test_a_failed_experiment_leaves_no_out_folder(tmp_path, monkeypatch):
    def broken(**kw):
        raise experiments.UserInputError("the experiment refused its input")

    monkeypatch.setattr(experiments, "load", lambda name: broken)
    out = tmp_path / "a" / "b"
    refused_in_one_line(ROOT, ["experiments", "run", "wafer-yield", "--out", out], "refused its")
    assert not (tmp_path / "a").exists()  # made for the lock file, removed with it
