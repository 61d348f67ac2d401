"""Review 80 (hole 4): an `--xla_dump_to` that is a symbolic link to nothing was refused as
"a file, not a folder" (and a folder under it as under "a file"); /dev/null, a device, was
called a file too. The refusal stands; its reason now names what the path is.

Oracles: `os.makedirs` of the path fails (no folder can be made there), `os.readlink` the
link's target, `os.path.lexists` whether that target exists, `stat` the kind of /dev/null."""

from __future__ import annotations

import os
import stat

import pytest
from wse_core.errors import WseError
from wse_core.host import jax_env


def _reason(path: object) -> str:
    with pytest.raises(OSError):
        os.makedirs(path)  # the oracle: XLA can make no folder there either
    with pytest.raises(WseError) as e:
        jax_env.check({"XLA_FLAGS": f"--xla_dump_to={path}"})
    line = str(e.value)
    assert line.startswith(f"XLA_FLAGS: --xla_dump_to={path} is no folder XLA can make or write")
    assert "\n" not in line
    return line


def test_a_link_to_nothing_is_named_a_link_not_a_file(tmp_path):
    link = tmp_path / "dangling"
    link.symlink_to(tmp_path / "missing" / "zzz")
    assert os.path.lexists(link) and not os.path.exists(link)
    target = os.readlink(link)
    said = f"a symbolic link to '{target}', which does not exist"
    line = _reason(link)
    assert f"(it is {said})" in line and "a file" not in line  # before: "it is a file, not..."
    line = _reason(link / "sub")
    assert f"(it is under '{link}', which is {said})" in line and "a file" not in line


def test_a_loop_of_links_leads_to_nothing(tmp_path):
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    line = _reason(tmp_path / "a")
    assert "a symbolic link to 'b', which leads to nothing" in line and "a file" not in line


def test_a_device_and_a_file_are_named_as_such(tmp_path):
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert "(it is a device, not a folder)" in _reason("/dev/null")
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert "(it is a file, not a folder)" in _reason(afile)
    (tmp_path / "tofile").symlink_to(afile)  # a link to a file: the file it leads to
    assert "(it is a file, not a folder)" in _reason(tmp_path / "tofile")


def test_a_link_to_a_folder_passes(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    jax_env.check({"XLA_FLAGS": f"--xla_dump_to={tmp_path / 'link' / 'new'}"})
    assert os.listdir(tmp_path / "real") == []  # the probe left nothing
