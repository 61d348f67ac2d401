"""The on-disk compile caches (JAX's persistent cache, numba's) as what they are: an
optimisation that never fails a run, never warns on every run, never hands back half an
entry.

Hunt 69, with `ulimit -f` (a full disk or a quota acts alike):
- numba's cache write failed `wse hpc md` with `Error: cannot write: File too large`, naming
  no file, though its --out would have fit; numba raises the OSError of a cache write.
- JAX's write (`lru_cache.LRUCache.put`: `write_bytes` in place, jax 0.10.2) left an entry
  cut at 4,096 bytes, with a 2-line warning; every later run then warned that it could not
  read it ("incomplete or truncated stream") and never wrote it again (`put` keeps a file
  that is there).

Contract: `guard()` (`runtime.configure` calls it, before JAX or numba is imported; once is
enough) acts on each library as it is imported (`_after_import`: JAX and numba are heavy,
and a command that imports neither, `wse --version`, must not pay for them):
- JAX: the cache JAX makes (`compilation_cache.get_file_cache`) is wrapped, as JAX's own
  `VerificationCache` wraps it, in `_WholeEntries`, whose `put` writes an entry beside its
  name and renames it onto it (where JAX's LRU eviction is off, the default; with
  `jax_compilation_cache_max_size` set, JAX's own `put`, and a cut entry removed); and an
  entry that cannot be read (cut by an older run, a SIGKILL) is removed and the program
  compiled and stored again, without a warning (`get_executable_and_time` wrapped; with
  `jax_raise_persistent_cache_errors` JAX's error is raised as JAX would). JAX exposes no
  public hook for either: these are the two names of `jax._src.compilation_cache` that
  JAX's compiler looks up at each call.
- numba: a cache write that fails (`Cache.save_overload`) is given up; the function is
  compiled already, and runs.
- A write that fails in either (or in a project cache, `wse_hpc.md.exec_cache`) is one note
  on stderr naming the folder (`unwritable`), once a process, and that cache takes no more
  writes in this process: `note: the compile cache /c cannot be written (File too large);
  the run goes on without it; set WSE_CACHE_DIR to a writable folder with room`.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import os
import sys
from collections.abc import Callable
from pathlib import Path

__all__ = ["guard", "unwritable", "writable"]

_OFF: set[str] = set()  # the caches that take no more writes in this process
_SAID: list[str] = []  # the note, once said


def unwritable(which: str, folder: object, error: OSError) -> None:
    """Cache `which` ("jax", "numba", "md_exec") takes no more writes in this process; the
    note naming `folder` is said once (module doc)."""
    _OFF.add(which)
    if _SAID:
        return
    _SAID.append(str(folder))
    with contextlib.suppress(AttributeError, OSError, ValueError):
        sys.stderr.write(
            f"note: the compile cache {folder} cannot be written ({error.strerror or error}); "
            "the run goes on without it; set WSE_CACHE_DIR to a writable folder with room\n"
        )
        sys.stderr.flush()


def writable(which: str) -> bool:
    """Whether cache `which` still takes writes in this process."""
    return which not in _OFF


def guard() -> None:
    """Make JAX's and numba's caches whole and optional, now or as each is imported."""
    _after_import("jax._src.compilation_cache", _guard_jax)
    _after_import("numba.core.caching", _guard_numba)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs `fn(module)` once module `name` has been executed (its first import)."""

    def __init__(self, name: str, fn: Callable[[object], None]) -> None:
        self.name, self.fn = name, fn

    def find_spec(self, fullname, path, target=None):  # noqa: ANN001, ANN201 (the protocol's)
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        for finder in sys.meta_path:
            spec = getattr(finder, "find_spec", lambda *a: None)(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader.exec_module = _then(spec.loader.exec_module, self.fn)  # type: ignore[method-assign]
                return spec
        return None


def _then(run: Callable[[object], None], fn: Callable[[object], None]) -> Callable[[object], None]:
    """A loader's `exec_module`, then `fn` on the module it ran."""

    def exec_module(module: object) -> None:
        run(module)
        _quietly(fn, module)

    return exec_module


def _after_import(name: str, fn: Callable[[object], None]) -> None:
    if name in sys.modules:
        _quietly(fn, sys.modules[name])
    elif not any(isinstance(f, _AfterImport) and f.name == name for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(name, fn))


def _quietly(fn: Callable[[object], None], module: object) -> None:
    """A library whose internals moved (another version) keeps its own behaviour."""
    with contextlib.suppress(Exception):
        fn(module)


def _guard_jax(cc) -> None:  # noqa: ANN001 (jax._src.compilation_cache)
    from jax._src.compilation_cache_interface import CacheInterface

    make, read = cc.get_file_cache, cc.get_executable_and_time
    if getattr(make, "whole_entries", False):
        return

    class _WholeEntries(CacheInterface):
        """JAX's cache `base`, each new entry written whole (module doc)."""

        def __init__(self, base) -> None:  # noqa: ANN001
            self.base = base

        @property
        def _path(self):  # noqa: ANN202 (JAX reads it, as VerificationCache's)
            return self.base._path

        def get(self, key: str):  # noqa: ANN201
            return self.base.get(key)

        def put(self, key: str, value: bytes) -> None:
            if writable("jax"):
                _put_whole(self.base, key, value)

    def get_file_cache(path):  # noqa: ANN001, ANN202
        made = make(path)
        return None if made is None else (_WholeEntries(made[0]), made[1])

    def get_executable_and_time(cache_key: str, *args, **kwargs):  # noqa: ANN202
        try:
            return read(cache_key, *args, **kwargs)
        except Exception:
            if cc.config.raise_persistent_cache_errors.value:
                raise
            cache = cc._cache  # the one `read` used
            local = None if cache is None else _local(cache._path)
            if local is not None:  # dropped: compiled and stored again
                with contextlib.suppress(OSError):
                    os.unlink(local / f"{cache_key}-cache")
            return None, None

    get_file_cache.whole_entries = True  # type: ignore[attr-defined]
    cc.get_file_cache, cc.get_executable_and_time = get_file_cache, get_executable_and_time


def _put_whole(base, key: str, value: bytes) -> None:  # noqa: ANN001 (JAX's LRUCache)
    """`value` stored as entry `key` of JAX's cache `base`: written beside its name and
    renamed onto it where `base` is a local folder without eviction (JAX's default), else by
    JAX's own `put` (an entry it leaves cut is dropped at its next read). A write that fails
    is the one note (`unwritable`)."""
    folder = base._path
    try:
        if (local := _local(folder)) and getattr(base, "eviction_enabled", True) is False:
            _write_aside(local / f"{key}-cache", value)
        else:
            base.put(key, value)
    except OSError as e:
        unwritable("jax", folder, e)


def _local(folder: object) -> Path | None:
    """JAX's cache folder (a pathlib or an etils.epath path: `jax._src.path`) as a local
    path, as JAX's LRU cache tells one (None: another file system)."""
    text = str(folder)
    if "://" in text and not text.startswith("file://"):
        return None
    return Path(text.removeprefix("file://"))


def _write_aside(entry: Path, value: bytes) -> None:
    if entry.exists():  # as JAX's `put`: an entry that is there is kept
        return
    tmp = entry.with_name(f".{entry.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(value)
        os.replace(tmp, entry)
    except BaseException:  # a full disk; Ctrl-C and a stop signal too
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _guard_numba(caching) -> None:  # noqa: ANN001 (numba.core.caching)
    save = caching.Cache.save_overload
    if getattr(save, "optional", False):
        return

    def save_overload(self, sig, data) -> None:  # noqa: ANN001
        if not writable("numba"):
            return
        try:
            save(self, sig, data)  # numba removes its own temporary file when a write fails
        except OSError as e:
            folder = os.environ.get("NUMBA_CACHE_DIR") or getattr(self, "_cache_path", "")
            unwritable("numba", folder, e)

    save_overload.optional = True  # type: ignore[attr-defined]
    caching.Cache.save_overload = save_overload
