"""Hunt 71 on `wse_core.host.atomic`: the parts a killed writer leaves. Broken before:

- a writer stopped where no handler runs (`kill -9`, the OOM killer, a power cut) left its
  hidden `.NAME.xxxxxxxx.part.EXT` (for `wse train`'s hf export a `.hf.xxxxxxxx.part` folder
  of hundreds of MB) beside the target for ever, and each killed run added another: no later
  write could tell a dead writer's part from a live one's, the name said nothing of its writer.

Now the part is `.NAME.PID-HOST-XXXXXXXX.part.EXT` and a write removes its target's parts whose
writer runs no more on this host; a live writer's part, another target's, another host's and
an older version's are left as they are.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest
from wse_core.host.atomic import atomic_folder, atomic_path, write_atomically

pytestmark = pytest.mark.timeout(60)

# A writer that stops inside its write: it prints its part's name, then waits for a line
WRITER = """
import sys
from wse_core.host.atomic import atomic_folder, atomic_path
kind, path = sys.argv[1:]
with (atomic_folder if kind == "folder" else atomic_path)(path) as part:
    (part / "model.safetensors" if kind == "folder" else part).write_bytes(b"theirs")
    print(part.name, flush=True)
    sys.stdin.readline()
"""
NAMED = re.compile(r"\.(.+)\.(\d+)-([0-9a-f]{6})-([0-9a-f]{8})\.part(.*)")


def _writer(kind: str, path) -> tuple[subprocess.Popen, str]:
    """A child process inside a write of `path`, and the name of the part it fills."""
    proc = subprocess.Popen([sys.executable, "-c", WRITER, kind, str(path)], text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # fmt: skip
    part = proc.stdout.readline().strip()
    assert part, proc.communicate(timeout=30)
    return proc, part


def _old(kind: str, path) -> None:
    """What an earlier run left at `path`, made without `atomic` (which lists the folder)."""
    if kind == "folder":
        path.mkdir()
        (path / "model.safetensors").write_bytes(b"old")
    else:
        path.write_bytes(b"old")


def _write(kind: str, path, data: bytes) -> None:
    if kind == "folder":
        with atomic_folder(path) as stage:
            (stage / "model.safetensors").write_bytes(data)
    else:
        write_atomically(path, data)


def _read(kind: str, path) -> bytes:
    return (path / "model.safetensors" if kind == "folder" else path).read_bytes()


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()  # reaped: its pid runs no more
    return proc.pid


@pytest.mark.parametrize("kind", ["file", "folder"])
def test_a_part_left_by_a_writer_killed_with_sigkill_goes_at_the_next_write(tmp_path, kind):
    path = tmp_path / ("hf" if kind == "folder" else "out.npz")
    _old(kind, path)
    proc, part = _writer(kind, path)
    proc.kill()  # SIGKILL: no handler runs, the part stays
    assert proc.wait(timeout=30) == -9
    assert sorted(os.listdir(tmp_path)) == sorted([part, path.name]) and _read(kind, path) == b"old"
    _write(kind, path, b"new")
    # before: the killed writer's part stayed beside the new file or folder, for ever
    assert os.listdir(tmp_path) == [path.name] and _read(kind, path) == b"new"
    assert NAMED.fullmatch(part)[2] == str(proc.pid)  # the part named its writer


def test_a_process_that_wrote_there_before_removes_a_part_left_since(tmp_path):
    path = tmp_path / "out.npz"
    write_atomically(path, b"old")  # this process lists the folder
    proc, part = _writer("file", path)
    proc.kill()
    proc.wait(timeout=30)
    # listed again once 100 listings' time has passed (ms here; more on a loaded machine)
    for _ in range(100):
        write_atomically(path, b"new")
        if os.listdir(tmp_path) == [path.name]:
            break
        time.sleep(0.1)
    assert os.listdir(tmp_path) == [path.name] and path.read_bytes() == b"new"


@pytest.mark.parametrize("kind", ["file", "folder"])
def test_a_live_writers_part_survives_another_write_of_the_same_target(tmp_path, kind):
    path = tmp_path / ("hf" if kind == "folder" else "out.npz")
    proc, part = _writer(kind, path)
    _write(kind, path, b"ours")  # lists the folder: the child's part is a live writer's
    assert (
        sorted(os.listdir(tmp_path)) == sorted([part, path.name]) and _read(kind, path) == b"ours"
    )
    proc.stdin.write("go\n")
    proc.stdin.flush()
    assert proc.wait(timeout=30) == 0  # both writes work, the last one's stays
    assert os.listdir(tmp_path) == [path.name] and _read(kind, path) == b"theirs"


def test_only_the_targets_own_dead_parts_go(tmp_path):
    with atomic_path(tmp_path / "probe.npz") as probe:  # this host's tag, as the writer makes it
        here = NAMED.fullmatch(probe.name)[3]
    other = f"{(int(here, 16) + 1) % 0x1000000:06x}"
    out, dead = tmp_path / "out", _dead_pid()
    out.mkdir()
    (tmp_path / "elsewhere").write_bytes(b"kept")
    left = [
        f".t.npz.{dead}-{here}-0123abcd.part.npz",  # t.npz's, by a writer no longer running
        f".t.npz.{dead}-{here}-89abcdef.part.npz",  # another one
    ]
    kept = [
        f".u.npz.{dead}-{here}-0123abcd.part.npz",  # another target's
        f".t.npz.{dead}-{here}-0123abcd.part.png",  # another extension
        f".t.npz.{dead}-{other}-0123abcd.part.npz",  # another host's: its pid says nothing here
        ".t.npz.0123abcd.part.npz",  # an older version's: whose, and is it running?
        f"t.npz.{dead}-{here}-0123abcd.part.npz",  # not hidden: not a part
        f".t.npz.{dead}-{here}-0123abcd.part.npz.bak",  # a user's copy
        f".t.npz.1-{here}-0123abcd.part.npz",  # pid 1 runs (another user's where not root)
        f".t.npz.{os.getppid()}-{here}-0123abcd.part.npz",  # our parent's
        f".t.npz.{os.getpid()}-{here}-0123abcd.part.npz",  # our own
    ]
    for name in left + kept:
        (out / name).write_bytes(b"kept")
    link = f".t.npz.{dead}-{here}-fedcba98.part.npz"
    os.symlink(tmp_path / "elsewhere", out / link)  # a link: never followed, never removed
    (out / f".t.npz.{dead}-{here}-76543210.part.npz").mkdir()  # a folder where a file part goes
    kept += [link, f".t.npz.{dead}-{here}-76543210.part.npz"]
    write_atomically(out / "t.npz", b"new")
    assert sorted(os.listdir(out)) == sorted([*kept, "t.npz"])  # before: `left` stayed too
    assert (tmp_path / "elsewhere").read_bytes() == b"kept"
    write_atomically(out / "u.npz", b"new")  # u's own write: its part goes
    assert sorted(os.listdir(out)) == sorted([*kept[1:], "t.npz", "u.npz"])


def test_a_killed_writers_part_folder_of_another_target_is_left(tmp_path):
    hf, other = tmp_path / "hf", tmp_path / "hf2"
    proc, part = _writer("folder", other)
    proc.kill()
    proc.wait(timeout=30)
    _write("folder", hf, b"new")  # hf's write: hf2's dead part is not its own
    assert sorted(os.listdir(tmp_path)) == sorted([part, "hf"])
    _write("folder", other, b"new")
    assert sorted(os.listdir(tmp_path)) == ["hf", "hf2"]
