"""A disk that fills up while training: the save is refused or fails with ENOSPC, and the run
stops with one line naming the disk, the bytes needed and the last good step (exit 1)."""

from __future__ import annotations

import errno
import shutil
import subprocess
import sys

import numpy as np
import pytest
from wse_trainer import save_faults
from wse_trainer.checkpoints import Checkpointer, CheckpointSaveError

STATE = {"w": np.arange(1024, dtype=np.float32)}  # 4 KiB


def _one_line(e: pytest.ExceptionInfo) -> str:
    text = str(e.value)
    assert "\n" not in text and e.value.exit_code == 1
    return text


def test_a_save_past_the_free_space_is_refused_before_writing(tmp_path, monkeypatch):
    ckpt = Checkpointer(tmp_path / "ckpt")
    try:
        ckpt.save(1, STATE, {"step": 1})
        ckpt.wait()
        real = shutil.disk_usage
        monkeypatch.setattr(save_faults.shutil, "disk_usage", lambda p: real(p)._replace(free=4095))
        with pytest.raises(CheckpointSaveError) as e:
            ckpt.save(2, STATE, {"step": 2})
        text = _one_line(e)
        assert "checkpoint step 2" in text and "not enough free space" in text
        assert "4 KiB" in text and "last good checkpoint: step 1" in text, text
        assert ckpt.all_steps() == [1]
    finally:
        ckpt.close()


def test_enospc_while_writing_stops_with_one_line(tmp_path, monkeypatch):
    ckpt = Checkpointer(tmp_path / "ckpt")

    def full(*args, **kwargs):
        raise RuntimeError("orbax failed") from OSError(errno.ENOSPC, "No space left on device")

    try:
        monkeypatch.setattr(ckpt.manager, "save", full)
        with pytest.raises(CheckpointSaveError) as e:
            ckpt.save(1, STATE, {"step": 1})
        text = _one_line(e)
        assert "No space left on device" in text and "none saved yet" in text, text
    finally:
        ckpt.close()  # must not raise a second time


def test_enospc_in_the_async_write_surfaces_at_the_next_wait(tmp_path, monkeypatch):
    ckpt = Checkpointer(tmp_path / "ckpt")
    try:
        ckpt.save(1, STATE, {"step": 1})

        def failed_write():
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(ckpt.manager, "wait_until_finished", failed_write)
        with pytest.raises(CheckpointSaveError) as e:
            ckpt.wait()
        assert "checkpoint step 1" in _one_line(e)
    finally:
        monkeypatch.undo()
        ckpt.close()


def test_after_a_failed_save_orbaxs_unawaited_writes_print_nothing_at_exit():
    # orbax's queued writes for the failed save are collected unawaited when the process
    # ends; CPython prints "sys:1: RuntimeWarning: coroutine ... was never awaited" for each
    def run(failed: bool) -> str:
        code = (
            "import warnings\n"
            "from wse_trainer.save_faults import save_failed\n"
            "async def write_fragment():\n    pass\n"
            f"if {failed}:\n    save_failed()\n"
            "pending = [write_fragment(), write_fragment()]\n"  # collected at exit
            "warnings.warn('still shown', RuntimeWarning)\n"
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        assert "RuntimeWarning: still shown" in out.stderr  # other warnings still print
        return out.stderr

    assert "was never awaited" in run(False)  # the control: CPython does print it
    err = run(True)
    assert "never awaited" not in err and "tracemalloc" not in err, err
