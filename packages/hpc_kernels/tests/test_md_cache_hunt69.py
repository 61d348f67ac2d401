"""MD's program store (`wse_hpc.md.exec_cache`) on a disk that fills up, hunt 69. Before the
fix a store that failed part way (a full disk, `ulimit -f`) left its `<digest>.<pid>.tmp`
file behind in `md_exec/`, one per run, and said nothing; now nothing is left, and the run's
one note about the cache folder is `wse_core.host.compile_caches`'s."""

from __future__ import annotations

import errno

import pytest
from wse_hpc.md.exec_cache import write_pickle


class _FullDisk:
    """A value whose pickling fails part way, as a write past a full disk does."""

    def __reduce__(self):
        raise OSError(errno.ENOSPC, "No space left on device")


def test_a_store_that_fails_part_way_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "md_exec" / "abc.bin"
    with pytest.raises(OSError, match="No space left on device"):
        write_pickle(path, ["a program", _FullDisk()])
    assert list((tmp_path / "md_exec").iterdir()) == []  # before: abc.<pid>.tmp


def test_a_store_that_fits_is_renamed_into_place(tmp_path):
    import pickle

    path = tmp_path / "md_exec" / "abc.bin"
    write_pickle(path, {"targets": ["wse_md_force"]})
    assert pickle.loads(path.read_bytes()) == {"targets": ["wse_md_force"]}
    assert [p.name for p in path.parent.iterdir()] == ["abc.bin"]
