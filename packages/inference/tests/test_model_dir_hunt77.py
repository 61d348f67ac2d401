"""Hunt 77: `wse infer generate --model-dir run` on a run folder killed during its final HF
export (checkpoints up to 12, a leftover `.hf.<pid>-....part`, `.wse-train.lock`, no hf/) said
"'run' is neither an HF-format directory ... nor a `wse train` model_dir with an hf/ export".
It now says the folder is a run without an export, names its newest finished checkpoint and
the rerun that exports it.

Oracle: the folder built here (which steps carry their seal, `wse_core.host.run_files.SEAL`,
orbax's finished steps as the trainer seals them) and the trainer's documented advice, a
rerun with `runconfig.max_steps` at the checkpoint's step (`wse_trainer.export.refresh`; a
run at its max_steps trains nothing and exports: checked by hand in the hunt's report)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from wse_core.host.run_files import SEAL
from wse_inference.model_dir import ModelLoadError, resolve_model_dir


def _killed_in_export(root, sealed=(4, 8, 12), unsealed=(16,)):
    run = root / "run"
    for step in (*sealed, *unsealed):
        (run / "checkpoints" / str(step) / "state").mkdir(parents=True)
    for step in sealed:
        (run / "checkpoints" / str(step) / SEAL).write_text("{}")
    (run / ".hf.4242-abcdef-0123abcd.part").mkdir()  # the export a kill cut short
    (run / ".wse-train.lock").write_text("4242\n")
    (run / "metrics.jsonl").write_text('{"step": 12, "mode": "train", "loss": 6.5}\n')
    return run


def test_a_run_folder_without_its_export_names_its_newest_finished_step(tmp_path):
    run = _killed_in_export(tmp_path)
    with pytest.raises(ModelLoadError) as e:
        resolve_model_dir(run)
    line = str(e.value)
    assert "\n" not in line and "neither" not in line  # before: "neither an HF-format ..."
    assert "without an hf/ export" in line
    assert "newest checkpoint is step 12" in line  # 16 has no seal: unfinished
    assert "runconfig.max_steps=12" in line


def test_a_run_folder_with_no_finished_step_says_so(tmp_path):
    run = _killed_in_export(tmp_path, sealed=(), unsealed=(4,))
    with pytest.raises(ModelLoadError, match="holds no finished step; train it with wse train"):
        resolve_model_dir(run)


def test_a_folder_that_is_no_run_is_refused_as_before(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(ModelLoadError, match="neither an HF-format directory"):
        resolve_model_dir(tmp_path)


def test_wse_infer_generate_says_it_in_one_line_exit_2(tmp_path):
    run = _killed_in_export(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "wse_cli", "infer", "generate", "--model-dir", str(run),
         "--prompt", "hi"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().count("\n") == 0
    assert "runconfig.max_steps=12" in done.stderr
