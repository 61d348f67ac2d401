"""Hunt 68, `wse train` run one command after another. Broken before:

- H1: a disk error while the end-of-run `hf/` export was written (a full disk, `ulimit -f`)
  was a 72-line SafetensorError traceback, and the previous good export was already damaged:
  config.json rewritten without its bos/eos ids before the weights failed (the export was
  written in place, file by file; a kill between the writes left the same mix);
- H2: `hf/` held no step, so after a stopped resume nothing could say that it was older than
  the run's newest checkpoint (`wse infer --model-dir RUN` served it silently: the CLI test
  checks the note); refreshing it was documented nowhere;
- H4: a resume with `runconfig.max_steps` below the checkpoint's step exited 0 with a normal
  report, saying nowhere that nothing was trained.

Oracles: each file's sha256 before and after; the exact line; the exported weights against
the in-memory weights of the step the stopped run had reached.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import jax
import numpy as np
import pytest
import wse_models
from wse_core.errors import RunFault
from wse_models import checkpoint as hf_files
from wse_trainer import export
from wse_trainer import run as run_module
from wse_trainer.checkpoints import Checkpointer
from wse_trainer.config_check import config_notes
from wse_trainer.export import ExportError, export_lag, exported_step
from wse_trainer.testing import run_on_preset as run
from wse_trainer.testing import tiny_config

STEPS = ("runconfig.max_steps=4", "runconfig.checkpoint_steps=2", "runconfig.sample_tokens=0")


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A tiny run to step 4 (checkpoints 2 and 4, hf/ of step 4)."""
    base = tmp_path_factory.mktemp("trained")
    assert run(tiny_config(base, *STEPS)).global_step == 4
    return base


def _copy(trained: Path, where: Path, *overrides: str):
    """(model_dir, config) of a copy of the trained run at `where`."""
    shutil.copytree(trained, where)
    keys = {o.partition("=")[0] for o in overrides}
    steps = [s for s in STEPS if s.partition("=")[0] not in keys]
    model_dir = where / "model_dir"
    return model_dir, tiny_config(where, *steps, f"runconfig.model_dir={model_dir}", *overrides)


def _tree(d: Path) -> dict[str, str]:
    """Every file under `d` with its content's sha256."""
    return {
        str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(d.rglob("*"))
        if p.is_file()
    }


def _steps(model_dir: Path) -> list[int]:
    ckpt = Checkpointer(model_dir / "checkpoints", read_only=True)
    try:
        return ckpt.all_steps()
    finally:
        ckpt.close()


def test_the_export_records_its_step_beside_the_hf_files(trained):
    hf = trained / "model_dir" / "hf"
    assert json.loads((hf / export.EXPORT_RECORD).read_text()) == {"step": 4}
    assert exported_step(hf) == 4
    config = json.loads((hf / "config.json").read_text())
    assert config["bos_token_id"] == config["eos_token_id"] >= 0  # the EOS named, as before
    for bad in ('{"step": true}', '{"step": "4"}', "[4]", '{"step": 4'):  # hand-edited
        (hf.parent.parent / "x").mkdir(exist_ok=True)
        (hf.parent.parent / "x" / export.EXPORT_RECORD).write_text(bad)
        assert exported_step(hf.parent.parent / "x") is None


# the disk's refusal inside safetensors' writer, as `ulimit -f` gives it (its text carries
# the errno: it is no OSError), after half the file was written
EFBIG = "Error while serializing: I/O error: File too large (os error 27)"


def _half_written_then(error: BaseException):
    def save_file(arrays, filename, metadata=None):
        Path(filename).write_bytes(b"\0" * 1000)
        raise error

    return save_file


@pytest.mark.parametrize("error", [Exception(EFBIG), KeyboardInterrupt()], ids=["efbig", "ctrl-c"])
def test_a_failed_export_leaves_the_previous_one_whole(trained, tmp_path, monkeypatch, error):
    model_dir, config = _copy(trained, tmp_path / "r")
    (model_dir / "hf" / "README.md").write_text("mine\n")  # someone's file: kept
    before = _tree(model_dir / "hf")
    monkeypatch.setattr(hf_files, "save_file", _half_written_then(error))
    with pytest.raises(type(error) if isinstance(error, KeyboardInterrupt) else ExportError) as e:
        run(config)
    assert _tree(model_dir / "hf") == before  # config.json kept its bos/eos ids
    assert sorted(p.name for p in model_dir.iterdir() if p.name.startswith(".")) == []
    if isinstance(error, KeyboardInterrupt):
        return
    hf = model_dir / "hf"
    assert isinstance(e.value, RunFault) and e.value.exit_code == 1
    text = str(e.value)
    assert "\n" not in text and "Traceback" not in text
    assert text.startswith(f"the HF export of step 4 could not be written to {hf}: File too ")
    assert "free on that disk, the export needs about " in text
    assert text.endswith(
        f"{hf} is left as it was and the checkpoints are kept: free space and rerun the "
        "command with runconfig.max_steps=4 to export step 4"
    )


def test_an_export_past_the_free_space_is_refused_before_writing(trained, tmp_path, monkeypatch):
    from wse_trainer import save_faults

    model_dir, config = _copy(trained, tmp_path / "f")
    before = _tree(model_dir / "hf")
    real = shutil.disk_usage
    monkeypatch.setattr(save_faults.shutil, "disk_usage", lambda p: real(p)._replace(free=1000))
    with pytest.raises(ExportError, match="to export step 4$") as e:
        run(config)
    assert f"written to {model_dir / 'hf'}: not enough free space (1000 B free" in str(e.value)
    assert _tree(model_dir / "hf") == before


def test_a_stopped_resume_says_hf_is_older_and_max_steps_exports_its_newest_step(
    trained, tmp_path, monkeypatch
):
    model_dir, config = _copy(trained, tmp_path / "s", "runconfig.max_steps=6")
    reached = {}

    def stopped(s, step):  # Ctrl-C once the last checkpoint is saved, before the export
        reached["params"] = jax.tree.map(np.asarray, s.trainer.memx.params_tree())
        raise KeyboardInterrupt

    monkeypatch.setattr(run_module, "export_hf", stopped)
    with pytest.raises(KeyboardInterrupt):
        run(config)
    monkeypatch.undo()
    assert _steps(model_dir) == [2, 4, 6] and exported_step(model_dir / "hf") == 4
    assert export_lag(model_dir, 6) == (
        f"; {model_dir / 'hf'} still holds step 4 (the command with runconfig.max_steps=6 "
        "exports it)"
    )
    assert export_lag(model_dir, 4) == ""
    (model_dir / "hf" / "README.md").write_text("mine\n")  # someone's: carried over
    (model_dir / "hf" / "model-00002-of-00002.safetensors").write_bytes(b"old shard")  # not
    lines: list[str] = []
    result = run(config, echo=lines.append)  # the same command: the export of step 6
    assert result.global_step == 6 and result.losses == {}  # nothing trained
    assert exported_step(model_dir / "hf") == 6 and export_lag(model_dir, 6) == ""
    assert sorted(p.name for p in (model_dir / "hf").iterdir()) == [
        "README.md", "config.json", "generation_config.json", "model.safetensors",
        "tokenizer.json", "tokenizer_config.json", export.EXPORT_RECORD]  # fmt: skip
    exported = wse_models.from_pretrained(model_dir / "hf").params()
    for x, y in zip(jax.tree.leaves(exported), jax.tree.leaves(reached["params"]), strict=True):
        np.testing.assert_array_equal(np.asarray(x), y)
    assert (
        "note: checkpoint step 6 is at runconfig.max_steps=6: nothing to train (raise "
        "runconfig.max_steps to train on); exporting step 6"
    ) in lines


def test_a_resume_past_max_steps_says_nothing_is_trained(trained, tmp_path):
    model_dir, config = _copy(trained, tmp_path / "p", "runconfig.max_steps=2")
    lines: list[str] = []
    result = run(config, echo=lines.append)
    assert result.global_step == 4 and result.losses == {}
    notes = [x for x in lines if x.startswith("note:")]
    assert notes == [
        *config_notes(config),  # the run says the config's notes (hunt 80): the warm-up's
        "note: checkpoint step 4 is past runconfig.max_steps=2: nothing to train (raise "
        "runconfig.max_steps to train on); exporting step 4",
    ]
    assert _steps(model_dir) == [2, 4]
