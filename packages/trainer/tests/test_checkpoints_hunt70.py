"""Hunt 70's checkpoint and resume holes, each checked against an uninterrupted run or the
files left untouched. Broken before:

1. a finished save was sealed only by the next save, so a kill between two saves threw the
   newest step away as "incomplete ... (the save did not finish)";
2. `save_initial_checkpoint` with a resume from the saved step 0 saved step 0 again:
   orbax's StepAlreadyExistsError traceback, on every retry;
3. a resume with another max_steps stretched a decay without optimizer.decay_steps
   mid-run (the learning rate jumped 58%), unsaid;
4. a step folder that is a symlink failed every save once keep_checkpoint_max retired it;
5. `--checkpoint-path <own older step>` with nothing to train moved the newer steps aside
   and cut metrics.jsonl;
6. `--checkpoint-path run/../run` was "another run": the step it started from was moved
   aside as superseded, and the strict resume check (the batch size) was skipped;
7. a checkpoint of another tokenizer was refused with "use its model_dir" (which would
   alter the source run), 14 s in even when the model_dir's tokenizer.json told it at once.
"""

from __future__ import annotations

import hashlib
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
from wse_trainer.checkpoints import SEAL, Checkpointer, newest_readable
from wse_trainer.config import ConfigError
from wse_trainer.metrics import read_metrics
from wse_trainer.optimizer import schedule
from wse_trainer.testing import run_on_preset as run
from wse_trainer.testing import text_docs, tiny_config


def _tree_digest(folder: Path) -> dict[str, str]:
    """Every file and link under `folder` with its bytes' sha256 (or its link target)."""
    out = {}
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder).as_posix()
        if p.is_symlink():
            out[rel] = f"-> {p.readlink()}"
        elif p.is_file():
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _losses(model_dir: Path) -> dict[int, float]:
    return {m["step"]: m["loss"] for m in read_metrics(model_dir) if m["mode"] == "train"}


def _refused(config, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        run(config)
    assert str(e.value) == message
    assert "\n" not in str(e.value)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, dict[int, float]]:
    """The tiny run (6 steps, saved at 3 and 6) and its losses: the uninterrupted oracle."""
    where = tmp_path_factory.mktemp("trained")
    result = run(tiny_config(where))
    return where, result.losses


def _copy(trained, to: Path) -> Path:
    shutil.copytree(trained[0], to)
    return to


# 1 -----------------------------------------------------------------------------------------


def test_a_finished_save_is_sealed_before_the_next_one_and_survives_a_kill(tmp_path):
    folder = tmp_path / "checkpoints"
    tree = {"w": np.arange(64, dtype=np.float32).reshape(8, 8)}
    ckpt = Checkpointer(folder)
    ckpt.save(4, tree, {"step": 4})
    deadline = time.monotonic() + 30
    while not (folder / "4" / SEAL).is_file() and time.monotonic() < deadline:
        ckpt.check()  # what the training loop calls every step
        time.sleep(0.05)
    assert (folder / "4" / SEAL).is_file()  # was sealed only by the next save or close
    # a kill -9 now: the manager is abandoned without close(); a new run reads step 4
    step, got, bad = newest_readable(folder, [4], tree)
    assert (step, bad) == (4, [])
    np.testing.assert_array_equal(got.state["w"], tree["w"])


# 2 -----------------------------------------------------------------------------------------


def test_a_resume_from_the_saved_step_0_does_not_save_it_again(tmp_path, trained):
    initial = ("runconfig.save_initial_checkpoint=true", "runconfig.max_steps=3")
    first = run(tiny_config(tmp_path, *initial))
    assert (tmp_path / "model_dir/checkpoints/0").is_dir()
    step0 = tmp_path / "model_dir/checkpoints/0"
    again = run(tiny_config(tmp_path, *initial, f"runconfig.checkpoint_path={step0}"))
    assert again.losses == first.losses == {k: trained[1][k] for k in (1, 2, 3)}


# 3 -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def stopped(tmp_path_factory) -> Path:
    """The tiny run stopped at step 3 of its 6 (cosine over 6 steps, warm-up 2)."""
    where = tmp_path_factory.mktemp("stopped")
    run(tiny_config(where, "runconfig.num_steps=3"))
    return where


def test_another_max_steps_keeps_the_planned_decay_and_says_so(tmp_path, stopped, trained, capfd):
    where = _copy((stopped, None), tmp_path / "s")
    capfd.readouterr()
    result = run(tiny_config(where, "runconfig.max_steps=12", "runconfig.num_steps=3"))
    # oracle: the uninterrupted 6-step run, bit for bit (the lr of steps 4-6 is its own)
    assert result.losses == {k: trained[1][k] for k in (4, 5, 6)}
    note = (
        "note: the run keeps the cosine decay over 6 steps it was trained on "
        "(optimizer.decay_steps=6); runconfig.max_steps=12 only says where it stops"
    )
    assert note in capfd.readouterr().err + (where / "model_dir" / "run.log").read_text()
    cfg, kept = tiny_config(where), tiny_config(where, "optimizer.decay_steps=6")
    for k in (3, 4, 5, 6, 9):  # the schedule it goes on with is the planned one
        assert schedule(kept.optimizer, 12)(k) == schedule(cfg.optimizer, 6)(k)
    saved = (where / "model_dir" / "train" / "params_train.yaml").read_text()
    assert "decay_steps: 6" in saved  # as it ran: a later resume keeps it too


def test_another_decay_steps_is_refused_and_changes_nothing(tmp_path, stopped):
    where = _copy((stopped, None), tmp_path / "s")
    before = _tree_digest(where / "model_dir")
    step = where / "model_dir" / "checkpoints" / "3"
    _refused(
        tiny_config(where, "optimizer.decay_steps=12"),
        f"model_dir '{where / 'model_dir'}': checkpoint step 3 ({step}) was trained on a cosine "
        "decay over 6 steps (optimizer.decay_steps=null, runconfig.max_steps=6); "
        "optimizer.decay_steps=12 here would change the learning rate of the steps to come; "
        "leave it out or give optimizer.decay_steps=6 (the run keeps its decay), or give a "
        "new model_dir (-o)",
    )
    assert _tree_digest(where / "model_dir") == before


# 4 -----------------------------------------------------------------------------------------


def test_a_linked_step_folder_is_refused_before_training(tmp_path, trained):
    where = _copy(trained, tmp_path / "r")
    step = where / "model_dir" / "checkpoints" / "6"
    shutil.rmtree(step)
    target = trained[0] / "model_dir" / "checkpoints" / "6"
    step.symlink_to(target)
    before = _tree_digest(where / "model_dir")
    _refused(
        tiny_config(where, "runconfig.max_steps=8", "runconfig.keep_checkpoint_max=1"),
        f"checkpoint step 6 ({step}) is a symlink to {target}: orbax cannot delete it when "
        "runconfig.keep_checkpoint_max retires it, so every save from then on would fail; "
        f"copy the step folder in its place, or start a new model_dir from it with "
        f"--checkpoint-path {target}",
    )
    assert _tree_digest(where / "model_dir") == before


# 5 -----------------------------------------------------------------------------------------


def test_exporting_an_older_step_into_the_run_is_refused_and_changes_nothing(tmp_path, trained):
    where = _copy(trained, tmp_path / "r")
    step3 = where / "model_dir" / "checkpoints" / "3"
    before = _tree_digest(where / "model_dir")
    _refused(
        tiny_config(where, "runconfig.max_steps=3", f"runconfig.checkpoint_path={step3}"),
        f"--checkpoint-path: checkpoint step 3 ({step3}) trains nothing at "
        f"runconfig.max_steps=3, and exporting it into model_dir '{where / 'model_dir'}' "
        "would move its step 6 aside and cut its metrics.jsonl at step 3; to export step 3 "
        "give a new model_dir (-o), or raise runconfig.max_steps to train on from it",
    )
    assert _tree_digest(where / "model_dir") == before  # step 6 in place, 6 records kept


# 6 -----------------------------------------------------------------------------------------


def test_the_runs_own_folder_by_another_spelling_is_the_run_itself(tmp_path, trained):
    where = _copy(trained, tmp_path / "r")
    own = where / "model_dir"
    steps = _tree_digest(own / "checkpoints")
    link = tmp_path / "link"
    link.symlink_to(own)
    result = run(tiny_config(where, f"runconfig.checkpoint_path={link}"))  # nothing to train
    assert result.global_step == 6 and not (own / "checkpoints_aside").exists()
    assert _tree_digest(own / "checkpoints") == steps and _losses(own) == trained[1]
    spelled = f"runconfig.checkpoint_path={own}/../model_dir"
    result = run(tiny_config(where, spelled, "runconfig.max_steps=7"))
    assert sorted(result.losses) == [7]  # from step 6, which stays (was moved aside)
    assert not (own / "checkpoints_aside").exists()
    assert sorted(int(p.name) for p in (own / "checkpoints").iterdir()) == [3, 6, 7]
    assert _tree_digest(own / "checkpoints" / "6") == _tree_digest(
        trained[0] / "model_dir" / "checkpoints" / "6"
    )


# 7 -----------------------------------------------------------------------------------------


def test_another_tokenizer_names_the_source_runs_tokenizer_as_the_remedy(tmp_path, trained):
    docs = text_docs(tmp_path / "docs")
    source = trained[0] / "model_dir"
    new = tmp_path / "ft" / "model_dir"
    args = (f"train_input.data_dir={docs}", f"runconfig.checkpoint_path={source}",
            "runconfig.max_steps=7")  # fmt: skip
    cfg = tiny_config(tmp_path / "ft", *args)
    message = (
        f"checkpoint step 6 ({source / 'checkpoints' / '6'}) was trained with another "
        f"tokenizer than {new / 'tokenizer.json'} (the one {{}}); copy its run's tokenizer "
        f"({source / 'tokenizer.json'}) into {new} to fine-tune from it"
    )
    _refused(cfg, message.format("this run trained on its data"))
    assert not new.exists()  # nothing left behind
    # a model_dir whose tokenizer.json is another: refused before any data is read
    from wse_trainer.data import corpus_texts, train_tokenizer

    new.mkdir(parents=True)
    train_tokenizer(corpus_texts(cfg.train_input), 320).save(str(new / "tokenizer.json"))
    t0 = time.perf_counter()
    _refused(cfg, message.format("in the model_dir"))
    assert time.perf_counter() - t0 < 5
    # the named remedy works: the source run's tokenizer copied in, it fine-tunes from step 6
    shutil.copy(source / "tokenizer.json", new / "tokenizer.json")
    before = _tree_digest(source)
    assert run(cfg).global_step == 7
    assert _tree_digest(source) == before  # the source run is untouched
