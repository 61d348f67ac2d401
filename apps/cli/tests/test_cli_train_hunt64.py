"""Hunt 64's `wse train` run-folder holes through the CLI: each refusal exits 2 with one line
and leaves the run folder as it was; a folder that goes mid-run exits 1 with one line.

Before the fixes: a second `wse train` in a running one's model_dir ran beside it (both
failed, one with 972 lines); `optimizer.optimizer_type=sgd` on an adamw run moved every
step aside as "corrupt" and trained from step 0, exit 0; `--mode eval --checkpoint-path
<an older step>` moved the newer steps aside and truncated metrics.jsonl; a copied step
folder (5 holding step 2) resumed as step 5; a metrics.jsonl cut off by a kill was a
67-line traceback on every resume, a bad line a 55-line TypeError; a run whose folder was
deleted reported success."""

from __future__ import annotations

import hashlib
import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke, refused_in_one_line
from wse_trainer.testing import QUICK_OVERRIDES

pytestmark = pytest.mark.timeout(300)
ROOT = typer.main.get_command(app)
QUICK = list(QUICK_OVERRIDES)  # what is checked here is the run folder, not the data


def _train(run: Path, *extra: object, steps: int = 2, every: int = 1, mode: str = "train"):
    return ["train", "tiny", *QUICK, f"runconfig.max_steps={steps}",
            f"runconfig.checkpoint_steps={every}", *map(str, extra), "--mode", mode,
            "-o", str(run)]  # fmt: skip


def _tree(d: Path) -> dict[str, str]:
    return {
        str(p.relative_to(d)): "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(d.rglob("*"))
    }


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A 2-step tiny run on a slice of the stdlib corpus, a checkpoint at each step (one per
    file)."""
    run = tmp_path_factory.mktemp("trained") / "run"
    code, output = invoke(ROOT, _train(run))
    assert code == 0, output[-2000:]
    return run


def _copy(trained: Path, where: Path) -> Path:
    shutil.copytree(trained, where)
    return where


def test_a_second_wse_train_in_a_held_model_dir_is_refused_naming_the_pid(tmp_path, trained):
    run = _copy(trained, tmp_path / "run")
    code = (
        "import sys, time; from pathlib import Path; from wse_trainer.run_lock import hold; "
        "hold(Path(sys.argv[1])); print('held', flush=True); time.sleep(120)"
    )
    holder = subprocess.Popen([sys.executable, "-c", code, str(run)], stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline().strip() == b"held"
        before = _tree(tmp_path)
        refused_in_one_line(
            ROOT, _train(run, steps=3),
            f"model_dir '{run}' is in use by another wse train (pid {holder.pid}, since ",
        )  # fmt: skip
        assert _tree(tmp_path) == before
    finally:
        holder.kill()
        holder.wait(timeout=30)


def test_another_optimizer_is_refused_and_nothing_is_moved(tmp_path, trained):
    run = _copy(trained, tmp_path / "run")
    before = _tree(tmp_path)
    refused_in_one_line(  # adam: tiny's beta2 and eps are refused for sgd (hunt 70)
        ROOT, _train(run, "optimizer.optimizer_type=adam", steps=6),
        f"model_dir '{run}': checkpoint step 2 ({run / 'checkpoints' / '2'}) was trained with "
        "optimizer.optimizer_type=adamw (adam here); resume with the same settings "
        "(optimizer.optimizer_type=adamw), or give a new model_dir (-o)",
    )  # fmt: skip
    assert _tree(tmp_path) == before


def test_an_eval_of_an_older_step_changes_no_step_and_no_record(tmp_path, trained):
    run = _copy(trained, tmp_path / "run")
    steps, lines = _tree(run / "checkpoints"), (run / "metrics.jsonl").read_text()
    args = _train(run, "--checkpoint-path", run / "checkpoints" / "1", mode="eval")
    code, output = invoke(ROOT, args)
    assert code == 0, output[-2000:]
    assert "superseded" not in output and not (run / "checkpoints_aside").exists()
    assert _tree(run / "checkpoints") == steps
    text = (run / "metrics.jsonl").read_text()
    assert text.startswith(lines)
    added = json.loads(text[len(lines) :])
    assert (added["step"], added["mode"]) == (1, "eval")


def test_a_copied_step_folder_is_refused_naming_both_steps(tmp_path, trained):
    run = _copy(trained, tmp_path / "run")
    shutil.copytree(run / "checkpoints" / "1", run / "checkpoints" / "5")
    before = _tree(tmp_path)
    refused_in_one_line(
        ROOT, _train(run, steps=6),
        f"checkpoint step 5 ({run / 'checkpoints' / '5'}) holds step 1 (its meta's step)",
    )  # fmt: skip
    assert _tree(tmp_path) == before


def test_a_cut_off_metrics_line_is_dropped_and_a_bad_one_refused(tmp_path, trained):
    run = _copy(trained, tmp_path / "run")
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"step": 3, "mode": "tra')
    code, output = invoke(ROOT, _train(run, steps=3))
    assert code == 0, output[-2000:]
    assert output.count("note: dropped the cut-off last line (3) of") == 1
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [(m["step"], m["mode"]) for m in records] == [(1, "train"), (2, "train"), (3, "train")]
    with open(run / "metrics.jsonl", "a") as f:
        f.write("[1, 2]\n")
    before = _tree(tmp_path)
    refused_in_one_line(
        ROOT, _train(run, steps=4),
        f"'{run / 'metrics.jsonl'}' line 4 is not a JSON record of a step (a JSON list, not "
        "an object); remove that line to resume, or give a new model_dir (-o)",
    )  # fmt: skip
    assert _tree(tmp_path) == before


def test_a_run_folder_deleted_mid_run_exits_1_with_one_line(tmp_path, monkeypatch):
    from wse_trainer.stream import StreamedTrainer

    run, calls = tmp_path / "run", []

    def step(self, *args, real=StreamedTrainer.step, **kwargs):
        calls.append(None)
        if len(calls) == 2:
            shutil.rmtree(run)  # as `rm -rf run` from another shell
        return real(self, *args, **kwargs)

    monkeypatch.setattr(StreamedTrainer, "step", step)
    code, output = invoke(ROOT, _train(run, steps=3, every=3))
    lines = [line for line in output.splitlines() if line.startswith("Error: ")]
    assert code == 1 and "Traceback" not in output, output[-2000:]
    assert lines == [
        f"Error: model_dir '{run}' was deleted or replaced during the run (its metrics.jsonl is "
        "gone); the run stopped, its logs and checkpoints from then on unwritten; start it again"
    ]
    assert "global step" not in output and not run.exists()


@pytest.mark.slow
def test_two_real_runs_in_one_model_dir(tmp_path, trained):
    """A running `wse train` (another process) and a second in its folder: refused naming
    it; once the first is killed (SIGKILL), the folder resumes."""
    run = _copy(trained, tmp_path / "run")
    args = [str(a) for a in _train(run, steps=400)]
    first = subprocess.Popen([sys.executable, "-m", "wse_cli", *args],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        lock, deadline = run / ".wse-train.lock", time.time() + 120
        while f"pid {first.pid} " not in (lock.read_text() if lock.exists() else ""):
            assert first.poll() is None and time.time() < deadline
            time.sleep(0.05)
        refused_in_one_line(
            ROOT, _train(run, steps=400), f"is in use by another wse train (pid {first.pid}, "
        )  # fmt: skip
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    code, output = invoke(ROOT, _train(run, "--num-steps", 1, steps=400))
    assert code == 0 and "resumed from checkpoint step" in output, output[-2000:]
