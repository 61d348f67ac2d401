"""Checkpoint fail-over: a corrupt or incomplete latest step is found, moved aside (never
deleted) and training resumes from the newest good step with the losses of a run that was
never corrupted; `--checkpoint_path` to an older step continues from there.

The oracle for "same losses" is the uncorrupted run itself (resume is bit-identical,
test_trainer_resume). The loader is fuzzed on a small saved tree: truncating or deleting any
file of a step, or `wse_core.testing.mutate` on any of its files, makes the loader fall back
to the previous step and return exactly what was saved there."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wse_core.testing import mutate, one_line_error
from wse_trainer.checkpoints import (
    ASIDE,
    SEAL,
    SEALED_KEY,
    Checkpointer,
    move_aside,
    newest_readable,
    step_problem,
)
from wse_trainer.config import ConfigError
from wse_trainer.metrics import read_metrics
from wse_trainer.testing import run_on_preset as run
from wse_trainer.testing import tiny_config


def _tree(step: int) -> dict:
    return {
        "w": np.arange(64, dtype=np.float32).reshape(8, 8) * step,
        "b": np.full((5,), step, np.int32),
    }


def _files(step_dir: Path) -> list[str]:
    return sorted(p.relative_to(step_dir).as_posix() for p in step_dir.rglob("*") if p.is_file())


def _kind(rel: str) -> str:
    """One name per kind of file: the hashed data files of a folder are one kind."""
    parts = rel.split("/")
    return "/".join(parts[:-1] + ["*"]) if parts[-2:-1] == ["d"] else rel


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    """A checkpoints folder with steps 1 and 2 of a small tree, sealed."""
    folder = tmp_path_factory.mktemp("small") / "checkpoints"
    ckpt = Checkpointer(folder)
    for step in (1, 2):
        ckpt.save(step, _tree(step), {"step": step})
    ckpt.close()
    return folder


def _copy(saved: Path, where: Path) -> Path:
    shutil.rmtree(where, ignore_errors=True)
    shutil.copytree(saved, where)
    return where


def _assert_fell_back_to_1(folder: Path) -> None:
    start, got, bad = newest_readable(folder, [1, 2], _tree(0), meta_keys=("step",))
    assert start == 1 and [b for b, _ in bad] == [2], (start, bad)
    assert "\n" not in bad[0][1]
    for key, value in _tree(1).items():
        np.testing.assert_array_equal(np.asarray(got.state[key]), value)
    assert got.meta == {"step": 1, SEALED_KEY: True}


def test_a_sealed_step_reads_back_whole(saved):
    assert step_problem(saved / "2") is None and (saved / "2" / SEAL).is_file()
    start, got, bad = newest_readable(saved, [1, 2], _tree(0), meta_keys=("step",))
    assert start == 2 and not bad
    np.testing.assert_array_equal(np.asarray(got.state["w"]), _tree(2)["w"])


@pytest.mark.parametrize("op", ["truncate", "delete"])
def test_every_file_kind_of_a_step_truncated_or_deleted_falls_back(saved, tmp_path, op):
    kinds: dict[str, str] = {}
    for rel in _files(saved / "2"):
        kinds.setdefault(_kind(rel), rel)
    assert len(kinds) >= 10, kinds  # orbax's metadata, manifests, data, commit markers
    for kind, rel in kinds.items():
        folder = _copy(saved, tmp_path / "c")
        path = folder / "2" / rel
        if op == "delete":
            path.unlink()
        else:
            path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
        try:
            _assert_fell_back_to_1(folder)
        except AssertionError as e:
            raise AssertionError(f"{op} {kind}: {e}") from None


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    which=st.integers(0, 10_000),
    ops=st.lists(
        st.tuples(st.integers(0, 5), st.integers(0, 2**20), st.integers(0, 255)),
        min_size=1,
        max_size=4,
    ),
)
def test_any_corruption_of_any_file_falls_back_or_reads_what_was_saved(saved, tmp_path, which, ops):
    folder = _copy(saved, tmp_path / "h")
    files = _files(folder / "2")
    path = folder / "2" / files[which % len(files)]
    data = path.read_bytes()
    path.write_bytes(mutate(data, ops))
    if path.read_bytes() != data:
        _assert_fell_back_to_1(folder)
    else:  # the mutation changed nothing (a digit swapped for itself): step 2 is whole
        assert newest_readable(folder, [1, 2], _tree(0))[0] == 2


def test_a_step_from_before_seals_is_judged_by_its_restore(saved, tmp_path):
    folder = _copy(saved, tmp_path / "u")
    (folder / "2" / SEAL).unlink()  # a run killed before sealing: incomplete
    _assert_fell_back_to_1(_copy(folder, tmp_path / "u2"))
    meta = folder / "2" / "meta" / "metadata"
    old = {k: v for k, v in json.loads(meta.read_text()).items() if k != SEALED_KEY}
    meta.write_text(json.dumps(old))  # as saved before seals existed
    assert newest_readable(folder, [1, 2], _tree(0))[0] == 2
    data = max((folder / "2").rglob("d/*"), key=lambda p: p.stat().st_size)
    data.write_bytes(data.read_bytes()[:10])
    _assert_fell_back_to_1(folder)


def test_moving_aside_never_overwrites(saved, tmp_path):
    folder = _copy(saved, tmp_path / "m" / "checkpoints")
    first = move_aside(folder / "2", "corrupt")
    shutil.copytree(first, folder / "2")
    second = move_aside(folder / "2", "corrupt")
    assert (first.name, second.name) == ("2-corrupt", "2-corrupt-2")
    assert first.parent == second.parent == tmp_path / "m" / ASIDE
    assert _files(first) == _files(second) == _files(saved / "2")


def test_close_removes_only_an_empty_folder_it_made(tmp_path):
    Checkpointer(tmp_path / "new").close()
    assert not (tmp_path / "new").exists()
    (tmp_path / "old").mkdir()
    Checkpointer(tmp_path / "old").close()
    assert (tmp_path / "old").is_dir()


# --- through `run`: the trainer resumes from the newest good step ------------------------
STEPS = ("runconfig.max_steps=4", "runconfig.checkpoint_steps=2")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny run with checkpoints at steps 2 and 4, and its per-step losses."""
    base = tmp_path_factory.mktemp("trained")
    result = run(tiny_config(base, *STEPS))
    assert sorted(result.losses) == [1, 2, 3, 4]
    return base, result.losses


def _resume(trained, where: Path, corrupt, *overrides: str):
    """Copy the trained run to `where`, corrupt it, run it to step 4 again."""
    base, _ = trained
    shutil.copytree(base, where)
    corrupt(where / "model_dir" / "checkpoints")
    model_dir = where / "model_dir"
    return run(tiny_config(where, *STEPS, f"runconfig.model_dir={model_dir}", *overrides))


def _assert_resumed_from_2(trained, where: Path, result, original: list[str]) -> None:
    _, losses = trained
    assert result.losses == {3: losses[3], 4: losses[4]}  # exactly the uncorrupted run's
    metrics = [m for m in read_metrics(where / "model_dir") if m["mode"] == "train"]
    assert [m["step"] for m in metrics] == [1, 2, 3, 4]
    aside = where / "model_dir" / ASIDE / "4-corrupt"
    assert set(_files(aside)) >= set(original), "nothing of the corrupt step is deleted"
    notes = [
        line
        for line in (where / "model_dir" / "run.log").read_text().splitlines()
        if "incomplete or corrupt" in line
    ]
    assert len(notes) == 1 and "resuming from step 2" in notes[0], notes
    assert step_problem(where / "model_dir" / "checkpoints" / "4") is None  # saved again


def _truncate_largest_data(folder: Path) -> None:
    data = max((folder / "4").rglob("d/*"), key=lambda p: p.stat().st_size)
    data.write_bytes(data.read_bytes()[:10])


def _delete(*names: str):
    def corrupt(folder: Path) -> None:
        for name in names:
            (folder / "4" / name).unlink()

    return corrupt


@pytest.mark.parametrize(
    ("case", "corrupt"),
    [
        ("truncated data file", _truncate_largest_data),  # was an OUT_OF_RANGE traceback
        ("meta/metadata deleted", _delete("meta/metadata")),  # was FileNotFoundError
        ("state metadata deleted", _delete("state/_METADATA", "state/manifest.ocdbt")),
    ],
)
def test_a_corrupt_latest_step_resumes_from_the_previous(trained, tmp_path, case, corrupt):
    original = _files(trained[0] / "model_dir" / "checkpoints" / "4")
    kept = [f for f in original if f not in {"meta/metadata", "state/_METADATA"}]
    kept = [f for f in kept if f != "state/manifest.ocdbt"]
    result = _resume(trained, tmp_path / "r", corrupt)
    _assert_resumed_from_2(trained, tmp_path / "r", result, kept)


def test_checkpoint_path_to_an_older_step_continues_from_there(trained, tmp_path):
    where = tmp_path / "o"
    step2 = where / "model_dir" / "checkpoints" / "2"
    result = _resume(trained, where, lambda _: None, f"runconfig.checkpoint_path={step2}")
    _, losses = trained
    assert result.losses == {3: losses[3], 4: losses[4]}  # was StepAlreadyExistsError
    later = where / "model_dir" / ASIDE / "4-superseded"
    assert _files(later) == _files(trained[0] / "model_dir" / "checkpoints" / "4")
    assert step_problem(later) is None  # moved whole, still a good step


def test_checkpoint_path_to_another_runs_step_moves_this_runs_steps_aside(trained, tmp_path):
    other = trained[0] / "model_dir" / "checkpoints" / "2"
    result = _resume(trained, tmp_path / "x", lambda _: None, f"runconfig.checkpoint_path={other}")
    _, losses = trained
    assert result.losses == {3: losses[3], 4: losses[4]}
    aside = tmp_path / "x" / "model_dir" / ASIDE
    assert sorted(p.name for p in aside.iterdir()) == ["2-superseded", "4-superseded"]
    assert step_problem(aside / "2-superseded") is None  # moved whole, nothing deleted


def _orbax_threads() -> set[int]:
    return {t.ident for t in threading.enumerate() if t.is_alive() and not t.daemon}


def test_a_missing_checkpoint_path_stops_cleanly(tmp_path):
    before = _orbax_threads()
    cfg = tiny_config(tmp_path, *STEPS, f"runconfig.checkpoint_path={tmp_path / 'nowhere'}")
    with pytest.raises(ConfigError, match="no committed checkpoint") as e:
        run(cfg)
    assert one_line_error(e.value)
    assert not (tmp_path / "model_dir" / "checkpoints").exists()
    assert _orbax_threads() <= before  # no checkpointer left running


@pytest.mark.slow
@pytest.mark.parametrize("op", ["truncate", "delete"])
def test_each_file_kind_of_the_latest_step_fails_over_in_a_run(trained, tmp_path, op):
    """The whole matrix through `run`: every kind of file of step 4, truncated or deleted."""
    original = _files(trained[0] / "model_dir" / "checkpoints" / "4")
    kinds: dict[str, str] = {}
    for rel in original:
        kinds.setdefault(_kind(rel), rel)
    for i, (kind, rel) in enumerate(sorted(kinds.items())):

        def corrupt(folder: Path, rel=rel) -> None:
            path = folder / "4" / rel
            if op == "delete":
                path.unlink()
            else:
                path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])

        where = tmp_path / f"k{i}"
        try:
            result = _resume(trained, where, corrupt)
            kept = [f for f in original if op != "delete" or f != rel]
            _assert_resumed_from_2(trained, where, result, kept)
        except AssertionError as e:
            raise AssertionError(f"{op} {kind}: {e}") from None
