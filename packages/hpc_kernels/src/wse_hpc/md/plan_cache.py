"""MD's host-side plans kept on disk beside its compiled programs, so that a warm run does not
plan again what an earlier run planned from the same inputs.

Contract: `cached(kind, key, make)` is `make()`, loaded from `<cache>/md_plan/<digest>.pkl`
when an earlier process stored the value of the same `kind` and `key` there, else computed
and stored. `key` is a tuple of plain values and NumPy arrays (an array enters by its shape,
dtype and bytes); the digest also covers the stack's code (`exec_cache`'s hash of every
source file of `wse_hpc` and `wse_core`) and NumPy's and SciPy's versions: a code change
never reuses a stored value, and a stored value is the one `make()` returns, bit for bit.
`<cache>` is the directory of `exec_cache` (JAX's persistent compile cache,
`WSE_CACHE_DIR`); without one, or in a multi-process run, `make()` runs every time. A file
that cannot be read back is computed again; one that cannot be written is skipped. Files
are pickles, like `exec_cache`'s: the cache directory must be the user's own.

Why: a warm `wse hpc md` at 32,000 atoms spent ~0.35 s choosing its tile (six maps, each
with a window search, `mapping.choose_tile`), ~0.4 s counting each atom's neighbours per row
offset (a periodic k-d tree, `neighbour_plan.list_caps`), ~0.1 s checking the input for
overlapping atoms (`lattice.closest_pair`) and ~0.45 s importing scipy.ndimage and
scipy.spatial for them, of ~4.3 s to its first step; each depends only on its arguments,
which a repeat of a run gives again. Users: `simulate.run_md` (the tile, the closest pair)
and `neighbour_plan.plan_window` (the window a state needs, the most atoms in reach per row
offset); they cache pure functions of their arguments, never a whole plan, so a test that
patches a planner or its constants still gets what it patched.
"""

from __future__ import annotations

import functools
import hashlib
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import jax
import numpy as np

from wse_hpc.md import exec_cache

__all__ = ["cached", "plan_path"]

SUBDIR = "md_plan"  # under JAX's compile cache directory, beside exec_cache's md_exec
_FORMAT = 1  # the layout of a stored file; bump on change
T = TypeVar("T")


@functools.cache
def _versions() -> tuple[str, ...]:
    from importlib.metadata import version

    return np.__version__, version("scipy")  # the k-d tree's and filters' library


def _digest(kind: str, key: tuple) -> str:
    h = hashlib.sha256(repr((_FORMAT, kind, exec_cache._code_hash(), _versions())).encode())
    for part in key:
        if isinstance(part, np.ndarray):
            a = np.ascontiguousarray(part)
            h.update(repr(("array", a.shape, str(a.dtype))).encode())
            h.update(a.tobytes())
        else:
            h.update(repr(part).encode())
        h.update(b"\0")
    return h.hexdigest()


def plan_path(kind: str, key: tuple) -> Path | None:
    """Where the plan of `kind` at `key` is stored (None: no cache directory, or several
    processes)."""
    where = exec_cache._root()
    if not where or jax.process_count() > 1:
        return None
    return Path(where) / SUBDIR / f"{_digest(kind, key)}.pkl"


def cached(kind: str, key: tuple, make: Callable[[], T]) -> T:
    """`make()`, stored under `kind` and `key` (module doc)."""
    path = plan_path(kind, key)
    if path is not None and path.exists():
        try:
            with path.open("rb") as f:
                return pickle.load(f)
        except Exception:  # noqa: BLE001 - an unreadable entry is planned again
            pass
    value = make()
    if path is not None:
        try:
            exec_cache.write_pickle(path, value)
        except OSError:  # a full or read-only cache directory: the run goes on without it
            pass
    return value
