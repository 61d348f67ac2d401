"""`wse_core.host.atomic`: a file is replaced whole or left as it was (hunt 61: an existing
potential was cut to the `ulimit -f` size, the old file lost)."""

from __future__ import annotations

import os
import stat

import pytest
from wse_core.host.atomic import atomic_path, write_atomically


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "out.npz"
    path.write_bytes(b"old")
    with pytest.raises(OSError, match="disk full"), atomic_path(path) as tmp:
        assert tmp.parent == tmp_path and tmp.suffix == ".npz" and tmp != path
        tmp.write_bytes(b"half")
        raise OSError("disk full")
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.npz"]


def test_a_write_replaces_the_file_and_keeps_its_mode(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("old")
    os.chmod(path, 0o640)
    assert write_atomically(path, "new ü") == path
    assert path.read_text(encoding="utf-8") == "new ü"
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    write_atomically(tmp_path / "sub" / "b.bin", b"\x00\x01")  # the folder is made
    assert (tmp_path / "sub" / "b.bin").read_bytes() == b"\x00\x01"


def test_a_link_is_followed_and_a_device_written_in_place(tmp_path):
    target = tmp_path / "target.txt"
    target.write_text("old")
    os.symlink(target, tmp_path / "link.txt")
    write_atomically(tmp_path / "link.txt", "new")
    assert (tmp_path / "link.txt").is_symlink() and target.read_text() == "new"
    with atomic_path(os.devnull) as tmp:
        assert str(tmp) == os.devnull  # never renamed over the device
