"""Hunt 64, `wse train`'s faults during a checkpoint save, each in a child process that does
what the command does (save, wait, close in a `finally`, then print the fault's one line, or
exit 130 on Ctrl-C, as typer does) with orbax's log records printed as the command prints
them. Broken before:

- hole 1: a disk error inside tensorstore's own write of the state (a real ENOSPC, or EFBIG
  under `ulimit -f`) reached `Checkpointer` as a ValueError carrying
  `[os_error_code='27']`, not an OSError: it escaped as a traceback, with orbax's records,
  asyncio's "Task exception was never retrieved" and ~200 `RuntimeError: Event loop is
  closed` around it (3,481 lines under `ulimit -f 1024`, 512-838 for a tmpfs filled
  mid-save);
- hole 2: the model_dir turning read-only mid-save printed the right line, then the process
  hung at exit on orbax's threads waiting for a signal the broken save never sent (300 s
  each, the coordination timeout; killed by `timeout` in the hunt);
- hole 11: Ctrl-C landing inside orbax's save printed orbax's `cannot schedule new futures
  after shutdown` traceback (20-43 lines), or hung the exit the same way (301 s).
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap
import time

import pytest
from wse_trainer.checkpoints import Checkpointer
from wse_trainer.save_faults import os_error

BOUND_S = 1.0  # the children's `EXIT_BOUND_S`, short to keep the tests fast
SLACK_S = 15.0  # a loaded 2-core machine's delay on top of it; a hang was 300 s

CHILD = textwrap.dedent(
    """
    import logging, sys, time
    logging.basicConfig()  # orbax's records print as `wse` prints them
    import numpy as np
    from wse_trainer import save_faults
    from wse_trainer.checkpoints import Checkpointer, CheckpointSaveError
    save_faults.EXIT_BOUND_S = {bound}
    {setup}
    ckpt = Checkpointer(sys.argv[1])
    w = np.random.default_rng(0).standard_normal(1 << 20).astype(np.float32)
    state = {{"w": w}}  # 4 MiB that do not compress: a 4 MiB tensorstore data file
    try:
        try:
            ckpt.save(1, state, {{"step": 1}})
            ckpt.wait()
            {before_step_2}
            ckpt.save(2, state, {{"step": 2}})
            ckpt.wait()
        finally:
            ckpt.close()
            open(sys.argv[2], "w").write(repr(time.time()))  # closed: now it should exit
    except CheckpointSaveError as e:
        print(f"Error: {{e}}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
    """
)


def _child(tmp_path, setup: str = "", before_step_2: str = "pass"):
    """(exit code, output lines, seconds from the close to the exit) of CHILD."""
    code = CHILD.format(
        bound=BOUND_S,
        setup=textwrap.dedent(setup).strip(),
        before_step_2=before_step_2,
    )
    closed = tmp_path / "closed"
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "checkpoints"), str(closed)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    end = time.time()
    lines = (out.stdout + out.stderr).strip().splitlines()
    exit_s = end - float(closed.read_text()) if closed.exists() else float("inf")
    return out.returncode, lines, exit_s


def _committed(tmp_path) -> list[int]:
    reader = Checkpointer(tmp_path / "checkpoints", read_only=True)
    try:
        return reader.all_steps()
    finally:
        reader.close()


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ('RESOURCE_EXHAUSTED: Error writing local file "/r/_sharding": No space left on '
         "device [os_error_code='28'] [tensorstore_spec='{\"driver\": \"file\"}']", errno.ENOSPC),
        ('OUT_OF_RANGE: Error writing "w/0.0" in OCDBT database: Failed to write 6057984 bytes '
         "to file 9: File too large [os_error_code='27']", errno.EFBIG),
        ("PERMISSION_DENIED: Failed to open: \"/r/_sharding.__lock\": Read-only file system "
         "[os_error_code=30]", errno.EROFS),
    ],
)  # fmt: skip
def test_the_disks_errno_is_read_from_tensorstores_error_text(text, code):
    direct = os_error(ValueError(text))
    assert direct is not None and direct.errno == code
    assert direct.strerror == os.strerror(code)  # the words of the line: the OS's own
    try:  # orbax re-raising it, and an exception group around that
        try:
            raise ValueError(text)
        except ValueError as e:
            raise RuntimeError("Save failed") from e
    except RuntimeError as wrapped:
        assert os_error(wrapped).errno == code
        assert os_error(ExceptionGroup("commit", [KeyError("x"), wrapped])).errno == code


def test_an_error_without_an_errno_is_not_the_disks():
    loop = RuntimeError("a")
    loop.__context__ = ValueError("b")
    loop.__context__.__context__ = loop  # a cycle: the walk ends
    assert os_error(loop) is None
    assert os_error(ValueError("INVALID_ARGUMENT: bad spec [os_error_code='0']")) is None
    assert os_error(ValueError("Save failed: 217/217 params are missing .zarray")) is None


def test_a_real_efbig_inside_tensorstores_write_is_one_line(tmp_path):
    # `ulimit -f`: files past 1 MiB cannot grow; SIGXFSZ ignored, so the write fails EFBIG
    limit = """
        import resource, signal
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        """
    before = "resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, resource.RLIM_INFINITY))"
    rc, lines, exit_s = _child(tmp_path, limit, before)
    where = tmp_path / "checkpoints"
    assert rc == 1 and len(lines) == 1, lines[:40]
    assert lines[0] == (
        f"Error: checkpoint step 2 could not be written to {where}: "
        f"{os.strerror(errno.EFBIG)} ({lines[0].split(' (', 1)[1]}"
    )
    assert lines[0].endswith(
        "free on that disk, the state needs about 4 MiB); training stopped, last good "
        "checkpoint: step 1"
    ), lines[0]
    assert exit_s < BOUND_S + SLACK_S
    assert _committed(tmp_path) == [1]  # the failed step is no committed step


EROFS_FROM_STEP_2 = """
    import errno, os, re
    from etils.epath import gpath
    _STEP = re.compile(r"/checkpoints/(\\d+)(?:\\.orbax-checkpoint-tmp[^/]*)?(/|$)")

    def _read_only(path):
        m = _STEP.search(str(path))
        return m is not None and int(m.group(1)) >= 2

    def _refuse(real, writes):
        def wrapped(self, *args, **kwargs):
            mode = args[0] if args else kwargs.get("mode", "r")
            if _read_only(self) and (not writes or any(c in str(mode) for c in "wax")):
                raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self))
            return real(self, *args, **kwargs)
        return wrapped

    gpath._GPath.open = _refuse(gpath._GPath.open, True)
    gpath._GPath.mkdir = _refuse(gpath._GPath.mkdir, False)
    """


def test_a_folder_turned_read_only_mid_run_exits_within_the_bound(tmp_path):
    # the remount as root cannot be made here (nor a chmod, which root ignores): etils' open
    # and mkdir, which orbax creates a step's folders and files through, refuse from step 2
    # on, in the main thread and in orbax's own threads, as a read-only remount does
    rc, lines, exit_s = _child(tmp_path, EROFS_FROM_STEP_2)
    assert rc == 1 and len(lines) == 1, lines[:40]
    assert lines[0].startswith(
        f"Error: checkpoint step 2 could not be written to {tmp_path / 'checkpoints'}: "
        f"{os.strerror(errno.EROFS)} ("
    ), lines[0]
    assert lines[0].endswith("last good checkpoint: step 1"), lines[0]
    assert exit_s < BOUND_S + SLACK_S, exit_s  # was: orbax's 300 s, again and again
    assert _committed(tmp_path) == [1]


INTERRUPT_AFTER_THREAD = """
    import threading
    _real_start, _armed = threading.Thread.start, []

    def _start(self):
        _real_start(self)
        if _armed and threading.current_thread() is threading.main_thread():
            _armed.pop()
            if not _armed:
                raise KeyboardInterrupt  # Ctrl-C landing right after orbax started a thread

    threading.Thread.start = _start
    """


@pytest.mark.parametrize("nth_thread", [2, 4, 6])  # in orbax 0.12: traceback, hang, traceback
def test_ctrl_c_inside_orbaxs_save_ends_with_130_and_nothing_printed(tmp_path, nth_thread):
    arm = f"_armed.extend([0] * {nth_thread})"
    rc, lines, exit_s = _child(tmp_path, INTERRUPT_AFTER_THREAD, arm)
    assert rc == 130 and lines == [], lines[:40]
    assert exit_s < BOUND_S + SLACK_S, exit_s
    assert 1 in _committed(tmp_path)  # the last good step is untouched
