"""Hunt 64's run-folder holes below the CLI: the model_dir's identity and records.

Before the fixes:
- two runs in one model_dir at once took no lock: both ran, interleaved metrics.jsonl and
  broke each other's saves (one with 972 lines of traceback);
- a resume with another `optimizer.optimizer_type` moved every good step aside as "corrupt"
  and trained from step 0 (exit 0); other settings that change a step (the learning rate,
  the batch) resumed silently;
- `--mode eval --checkpoint-path <an older step>` moved the newer steps aside as
  "superseded", truncated metrics.jsonl to that step and overwrote train/params_train.yaml;
  an eval moved a corrupt newest step aside;
- a step folder named 5 holding step 2 (a copy) resumed step 2's weights and data position
  as step 5, logging step 3's loss as step 6;
- a metrics.jsonl whose last line a kill cut short made every resume a 67-line
  JSONDecodeError after the compile; a bad line elsewhere a TypeError;
- a run whose folder was deleted mid-run wrote on into deleted files and reported success.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from wse_core.errors import RunFault
from wse_core.testing import one_line_error
from wse_trainer import run_lock
from wse_trainer.checkpoints import ASIDE, Checkpointer
from wse_trainer.config import ConfigError
from wse_trainer.metrics import MetricsLog, RunFolderGone, read_metrics
from wse_trainer.run_folder import check_resume, make_model_dir
from wse_trainer.run_lock import LOCK_NAME, ModelDirInUse
from wse_trainer.session import model_config
from wse_trainer.testing import run_on_preset as run
from wse_trainer.testing import tiny_config

STEPS = ("runconfig.max_steps=4", "runconfig.checkpoint_steps=2")


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A tiny run with checkpoints at steps 2 and 4 (metrics of steps 1-4)."""
    base = tmp_path_factory.mktemp("trained")
    assert sorted(run(tiny_config(base, *STEPS)).losses) == [1, 2, 3, 4]
    return base


def _copy(trained: Path, where: Path) -> Path:
    shutil.copytree(trained, where)
    return where / "model_dir"


def _config(where: Path, *overrides: str):
    """The trained run's config (its STEPS unless `overrides` set them) for the copy at
    `where`."""
    keys = {o.partition("=")[0] for o in overrides}
    steps = [s for s in STEPS if s.partition("=")[0] not in keys]
    return tiny_config(where, *steps, f"runconfig.model_dir={where / 'model_dir'}", *overrides)


def _tree(d: Path) -> dict[str, str]:
    """Every entry under `d` with its content's sha256 (folders: "dir")."""
    return {
        str(p.relative_to(d)): "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(d.rglob("*"))
    }


def _steps(model_dir: Path) -> list[int]:
    ckpt = Checkpointer(model_dir / "checkpoints", read_only=True)
    try:
        return ckpt.all_steps()
    finally:
        ckpt.close()


# --- 3: one run at a time in a model_dir ---------------------------------------------------
def _holder(model_dir: Path) -> subprocess.Popen:
    """Another process holding the model_dir's lock, as a running `wse train` does."""
    code = (
        "import sys, time; from pathlib import Path; from wse_trainer.run_lock import hold; "
        "hold(Path(sys.argv[1])); print('held', flush=True); time.sleep(120)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(model_dir)], stdout=subprocess.PIPE)
    assert proc.stdout.readline().strip() == b"held"
    return proc


def test_a_second_run_is_refused_naming_the_holder_and_a_killed_ones_lock_is_free(
    trained, tmp_path
):
    model_dir = _copy(trained, tmp_path / "r")
    holder = _holder(model_dir)
    try:
        before = _tree(model_dir)
        with pytest.raises(ModelDirInUse) as e:
            run(_config(tmp_path / "r", "runconfig.max_steps=5"))
        assert one_line_error(e.value) and not isinstance(e.value, RunFault)  # exit 2
        assert f"is in use by another wse train (pid {holder.pid}, since " in str(e.value)
        assert "give another model_dir (-o)" in str(e.value)
        assert _tree(model_dir) == before  # the holder's files, its lock file too
    finally:
        holder.send_signal(signal.SIGKILL)  # the kernel drops its lock: resume works
        holder.wait(timeout=30)
    assert (model_dir / LOCK_NAME).is_file()  # what a killed run leaves
    result = run(_config(tmp_path / "r", "runconfig.max_steps=5"))
    assert sorted(result.losses) == [5] and _steps(model_dir) == [2, 4, 5]
    # released at the end
    assert not (model_dir / LOCK_NAME).exists() and not run_lock.held(model_dir)


def test_the_lock_is_refused_without_touching_what_the_other_run_wrote(tmp_path):
    # a refusal by the lock undoes nothing: the tokenizer.json there is the holder's
    from wse_trainer.run_folder import undone_on_error

    model_dir = tmp_path / "run"
    model_dir.mkdir()
    holder = _holder(model_dir)
    try:
        with pytest.raises(ModelDirInUse), undone_on_error(model_dir):
            (model_dir / "tokenizer.json").write_text("{}")  # the holder writes it meanwhile
            make_model_dir(model_dir)
        assert (model_dir / "tokenizer.json").read_text() == "{}"
    finally:
        holder.kill()
        holder.wait(timeout=30)


# --- 4: settings that differ from the checkpoint's ----------------------------------------
def test_another_optimizer_is_refused_and_no_step_is_moved(trained, tmp_path):
    model_dir = _copy(trained, tmp_path / "o")
    before = _tree(model_dir)
    cfg = _config(tmp_path / "o", "optimizer.optimizer_type=sgd", "runconfig.max_steps=6")
    with pytest.raises(ConfigError) as e:
        run(cfg)
    text = str(e.value)
    assert one_line_error(e.value) and not isinstance(e.value, RunFault)  # exit 2
    assert f"model_dir '{model_dir}': checkpoint step 4 " in text
    assert "was trained with optimizer.optimizer_type=adamw (sgd here)" in text
    assert "resume with the same settings (optimizer.optimizer_type=adamw)" in text
    assert "or give a new model_dir (-o)" in text and "max_steps" in text
    assert _tree(model_dir) == before and not (model_dir / ASIDE).exists()


REFUSED = {  # each changes what a step computes (tiny_config's values in the comments)
    "optimizer.learning_rate=0.001": "optimizer.learning_rate=0.003 (0.001 here)",
    "optimizer.warmup_steps=0": "optimizer.warmup_steps=2 (0 here)",
    "optimizer.max_gradient_norm=1.0": "optimizer.max_gradient_norm=null (1.0 here)",
    "train_input.batch_size=2": "train_input.batch_size=4 (2 here)",
    "train_input.max_sequence_length=16": "train_input.max_sequence_length=32 (16 here)",
    "train_input.packing=true": "train_input.packing=false (true here)",
}
ALLOWED = [  # how long, how often it saves and logs, how the same step is laid out, eval
    ("runconfig.max_steps=9", "runconfig.checkpoint_steps=1", "runconfig.log_steps=1"),
    ("runconfig.keep_checkpoint_max=9", "runconfig.mode=train_and_eval"),
    ("runconfig.num_steps=1", "runconfig.sample_tokens=4", "runconfig.cpu_shards=1"),
    ("train_input.micro_batch_size=2", "runconfig.activation_stride=1", "runconfig.seed=7"),
    ("eval_input.batch_size=2", "eval_input.eval_steps=1", "runconfig.eval_frequency=2"),
]


@pytest.mark.parametrize("override", sorted(REFUSED))
def test_a_setting_that_changes_the_step_is_refused_on_resume(trained, tmp_path, override):
    _copy(trained, tmp_path / "s")
    cfg = _config(tmp_path / "s", override)
    with pytest.raises(ConfigError, match="resume with the same settings") as e:
        check_resume(cfg, model_config(cfg))
    assert REFUSED[override] in str(e.value) and one_line_error(e.value)


@pytest.mark.parametrize("overrides", ALLOWED, ids=lambda o: " ".join(o))
def test_cadence_length_and_layout_may_change_on_resume(trained, tmp_path, overrides):
    _copy(trained, tmp_path / "a")
    cfg = _config(tmp_path / "a", *overrides)
    check_resume(cfg, model_config(cfg))


def test_a_resume_with_a_new_cadence_continues(trained, tmp_path):
    model_dir = _copy(trained, tmp_path / "c")
    more = ("runconfig.max_steps=6", "runconfig.checkpoint_steps=3", "runconfig.log_steps=1")
    result = run(_config(tmp_path / "c", *more))
    assert sorted(result.losses) == [5, 6] and _steps(model_dir) == [2, 4, 6]


def test_an_eval_or_a_checkpoint_path_refuses_only_another_optimizer_state(trained, tmp_path):
    _copy(trained, tmp_path / "e")
    step2 = tmp_path / "e" / "model_dir" / "checkpoints" / "2"
    for given in (("runconfig.mode=eval",), (f"runconfig.checkpoint_path={step2}",)):
        cfg = _config(tmp_path / "e", *given, "optimizer.learning_rate=0.001")
        check_resume(cfg, model_config(cfg))  # evaluating, or starting from, with a new rate
        cfg = _config(tmp_path / "e", *given, "optimizer.optimizer_type=momentum")
        with pytest.raises(ConfigError, match=r"optimizer_type=adamw \(momentum here\)"):
            check_resume(cfg, model_config(cfg))


# --- 5: an eval reads only -----------------------------------------------------------------
def test_an_eval_of_an_older_step_moves_nothing_and_only_adds_its_record(trained, tmp_path):
    model_dir = _copy(trained, tmp_path / "v")
    before = _tree(model_dir / "checkpoints")
    lines = (model_dir / "metrics.jsonl").read_text()
    params = (model_dir / "train" / "params_train.yaml").read_text()
    step2 = model_dir / "checkpoints" / "2"
    result = run(
        _config(tmp_path / "v", "runconfig.mode=eval", f"runconfig.checkpoint_path={step2}")
    )
    assert result.global_step == 2 and result.hf_dir is None
    assert _tree(model_dir / "checkpoints") == before and not (model_dir / ASIDE).exists()
    text = (model_dir / "metrics.jsonl").read_text()
    assert text.startswith(lines) and json.loads(text[len(lines) :]) == {
        "step": 2, "mode": "eval", "loss": result.eval_loss,
        "perplexity": pytest.approx(2.718281828459045**result.eval_loss),
        "accuracy": result.eval_accuracy,  # hunt 80
    }  # fmt: skip
    assert (model_dir / "train" / "params_train.yaml").read_text() == params
    assert "mode: eval" in (model_dir / "eval" / "params_eval.yaml").read_text()
    # the oracle: the same run with step 4 gone evaluates step 2 as its newest
    other = _copy(trained, tmp_path / "w")
    shutil.rmtree(other / "checkpoints" / "4")
    again = run(_config(tmp_path / "w", "runconfig.mode=eval"))
    assert again.global_step == 2 and again.eval_loss == result.eval_loss


def test_an_eval_leaves_a_corrupt_newest_step_in_place(trained, tmp_path):
    model_dir = _copy(trained, tmp_path / "x")
    data = max((model_dir / "checkpoints" / "4").rglob("d/*"), key=lambda p: p.stat().st_size)
    data.write_bytes(data.read_bytes()[:10])
    before = _tree(model_dir / "checkpoints")
    result = run(_config(tmp_path / "x", "runconfig.mode=eval"))
    assert result.global_step == 2 and _tree(model_dir / "checkpoints") == before
    assert not (model_dir / ASIDE).exists()
    log = (model_dir / "run.log").read_text()
    assert "checkpoint step 4 is incomplete or corrupt" in log
    assert "left it in place (an eval moves nothing); evaluating step 2" in log


# --- 6: a step folder whose name is not its step -------------------------------------------
def test_a_step_folder_holding_another_step_is_refused(trained, tmp_path):
    model_dir = _copy(trained, tmp_path / "n")
    shutil.copytree(model_dir / "checkpoints" / "2", model_dir / "checkpoints" / "5")
    before = _tree(model_dir)
    for given in ((), (f"runconfig.checkpoint_path={model_dir / 'checkpoints' / '5'}",)):
        with pytest.raises(ConfigError) as e:
            run(_config(tmp_path / "n", "runconfig.max_steps=6", *given))
        assert one_line_error(e.value)
        assert f"checkpoint step 5 ({model_dir / 'checkpoints' / '5'}) holds step 2" in str(e.value)
        assert "move it out of" in str(e.value) and _tree(model_dir) == before


# --- 7: metrics.jsonl as a JSON-lines reader takes it --------------------------------------
def _records(n: int) -> str:
    return "".join(
        json.dumps({"step": i, "mode": "train", "loss": 1.0 / i}) + "\n" for i in range(1, n + 1)
    )


def test_a_cut_off_last_line_is_dropped_once_with_a_note(tmp_path, capsys):
    (tmp_path / "metrics.jsonl").write_text(_records(4) + '{"step": 5, "mode": "tra')
    assert [m["step"] for m in read_metrics(tmp_path)] == [1, 2, 3, 4]
    log = MetricsLog(tmp_path, resume_step=4)
    log.record(5, "train", {"loss": 0.2})
    log.close()
    err = capsys.readouterr().err
    assert err.count("note: dropped the cut-off last line (5) of") == 1, err
    text = (tmp_path / "metrics.jsonl").read_text()
    assert text == _records(4) + json.dumps({"step": 5, "mode": "train", "loss": 0.2}) + "\n"


def test_a_whole_last_record_without_its_newline_is_kept_on_a_line_of_its_own(tmp_path):
    (tmp_path / "metrics.jsonl").write_text(_records(3).rstrip("\n"))
    log = MetricsLog(tmp_path, resume_step=3)
    log.record(4, "train", {"loss": 0.25})
    log.close()
    assert [m["step"] for m in read_metrics(tmp_path)] == [1, 2, 3, 4]


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        (b"[1, 2]\n", "a JSON list, not an object"),
        (b'{"step": 5, "mode": "tra\n', "Unterminated string"),
        (b'{"mode": "train"}\n', "its step is null, not an integer"),
        (b'{"step": "5"}\n', 'its step is "5", not an integer'),
        (b'{"step": 5, "x": "caf\xe9"}\n', "not UTF-8 at byte 22"),
    ],
)
def test_a_bad_line_is_refused_naming_its_number(tmp_path, bad, why):
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(_records(4).encode() + bad + _records(1).encode())
    with pytest.raises(ConfigError) as e:
        read_metrics(tmp_path)
    assert f"{str(path)!r} line 5 is not a JSON record of a step ({why}" in str(e.value)
    assert one_line_error(e.value)


def test_a_resume_drops_a_cut_off_line_and_refuses_a_bad_one_before_the_tokenizer(
    trained, tmp_path, capfd
):
    model_dir = _copy(trained, tmp_path / "m")
    old = read_metrics(model_dir)
    with open(model_dir / "metrics.jsonl", "a") as f:
        f.write('{"step": 5, "mode": "tra')
    result = run(_config(tmp_path / "m", "runconfig.max_steps=5"))
    assert sorted(result.losses) == [5]
    assert read_metrics(model_dir)[:4] == old and read_metrics(model_dir)[4]["step"] == 5
    assert capfd.readouterr().err.count("note: dropped the cut-off last line") == 1
    with open(model_dir / "metrics.jsonl", "a") as f:
        f.write("[1, 2]\n")
    before = _tree(model_dir)
    with pytest.raises(ConfigError, match=r"metrics.jsonl' line 6 is not a JSON record"):
        run(_config(tmp_path / "m", "runconfig.max_steps=6"))
    assert _tree(model_dir) == before


# --- 12: the run folder deleted or replaced mid-run ----------------------------------------
@pytest.mark.parametrize("replace", [False, True], ids=["deleted", "replaced"])
def test_a_log_whose_folder_went_stops(tmp_path, replace):
    log = MetricsLog(tmp_path / "run")
    log.record(1, "train", {"loss": 1.0})
    shutil.rmtree(tmp_path / "run")
    if replace:
        (tmp_path / "run").mkdir()
        (tmp_path / "run" / "metrics.jsonl").write_text(_records(1))
    with pytest.raises(RunFolderGone) as e:
        log.record(2, "train", {"loss": 0.5})
    assert one_line_error(e.value) and e.value.exit_code == 1
    word = "another file" if replace else "gone"
    said = f"model_dir '{tmp_path / 'run'}' was deleted or replaced during the run (its "
    assert f"{said}metrics.jsonl is {word}); the run stopped" in str(e.value)
    log.close()


@pytest.mark.parametrize(
    ("when", "replace"),
    [("step", False), ("save", False), ("save", True)],
    ids=["deleted before a log write", "deleted before a save", "replaced before a save"],
)
def test_a_run_whose_folder_goes_stops_with_one_line(tmp_path, monkeypatch, capfd, when, replace):
    """`rm -rf` of the model_dir from another shell at step 3 (before its record) or at step
    4 (its record written, its save next); no save in flight then, so orbax is quiet."""
    import wse_trainer.run as run_module
    from wse_trainer.stream import StreamedTrainer

    model_dir, calls = tmp_path / "model_dir", []

    def remove() -> None:
        shutil.rmtree(model_dir)
        if replace:
            model_dir.mkdir()
            (model_dir / "metrics.jsonl").write_text(_records(2))

    def step(self, *args, real=StreamedTrainer.step, **kwargs):
        calls.append(None)
        if when == "step" and len(calls) == 3:
            remove()
        return real(self, *args, **kwargs)

    def check_weights(s, step, ckpt, real=run_module._check_weights):
        if when == "save" and step == 4:
            remove()
        return real(s, step, ckpt)

    monkeypatch.setattr(StreamedTrainer, "step", step)
    monkeypatch.setattr(run_module, "_check_weights", check_weights)
    cfg = tiny_config(tmp_path, "runconfig.max_steps=6", "runconfig.checkpoint_steps=4")
    with pytest.raises(RunFolderGone) as e:
        run(cfg)
    assert one_line_error(e.value) and e.value.exit_code == 1
    word = "another file" if replace else "gone"
    assert f"during the run (its metrics.jsonl is {word}); the run stopped" in str(e.value)
    assert len(calls) == (3 if when == "step" else 4) and not run_lock.held(model_dir)
    assert "Traceback" not in capfd.readouterr().err
    assert not (model_dir / "hf").exists() and not (model_dir / "checkpoints").exists()
