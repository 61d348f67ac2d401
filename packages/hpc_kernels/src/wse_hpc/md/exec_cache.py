"""MD's compiled programs kept on disk, so that a warm run neither traces nor lowers them.

Contract: `compiled(jitted, args, key)` is `jitted.lower(*args).compile()`, loaded from
`<cache>/md_exec/<digest>.bin` when an earlier process stored the same program there, else
compiled (through JAX's persistent compile cache) and stored. `Cached(fn, key)` is
`jax.jit(fn)` compiled that way at its first call's arguments (a later call whose arguments
the executable does not take runs `jax.jit(fn)`). `runner_key(...)` is the static part of a
runner's key: the wafer (spec, grid, mesh, device ids, defects), a digest of the potential's
tables, the window plan, the thermostat, the timestep, the masses and the atom count.

The digest covers `key`, the arguments' shapes, dtypes and shardings, the backend and its
devices, the process count, jax/jaxlib versions, XLA_FLAGS, the stack's version and a hash
of every source file of `wse_hpc` and `wse_core`: a code change never reuses a stored
program. `<cache>` is JAX's persistent compile cache directory (`jax_compilation_cache_dir`,
which `wse_core.host.runtime.configure` sets to `WSE_CACHE_DIR`); without one nothing is
stored, nor where it takes no new file (a full disk: one note, `wse_core.host.compile_caches`,
and the run goes on). Multi-process runs are not stored. A file that cannot be read back (truncated,
written by another jaxlib) is compiled again. Files are pickles, like JAX's own cache
entries: the cache directory must be the user's own.

Why the executable and not `jax.export`: the 32,000-atom step is 188 `shard_map` blocks
whose tracing and lowering took ~5 s of a warm run's ~9 s to its first step (profile of
`wse hpc md`, issue 44). An exported module skips the tracing but is lowered again and looked
up in the compile cache at every start; the serialised executable (`jax.experimental.
serialize_executable`, the same bytes the compile cache holds) skips all three, and runs the
very binary the first run compiled, so its results are bit-identical. The XLA FFI targets
the program calls (the numba PE kernels, `wse_md_*`) are recorded with it and registered
(numba loads them from its own cache) before it is loaded. A program not stored is traced
with its targets only named (`pe_compile.deferred`) while helper processes compile the
kernels a runner names (`kernels`), and registered after lowering, before XLA compiles it.

Only a program compiled afresh is stored: an executable that JAX's compile cache handed back
serialises without its compiled kernels (jaxlib 0.10.2: loading it again fails at its first
run with "Function ... fusion not found"). So a program this cache is to store is compiled
with JAX's compile cache off (`_fresh_compile`): after a change to the stack's code (a new
source hash, the same HLO) the first run compiles it once, as a cold run does, and the runs
after it load it (CHANGELOG has the figures).
"""

from __future__ import annotations

import contextlib
import copyreg
import functools
import hashlib
import os
import pickle
import re
from collections.abc import Callable
from pathlib import Path

import jax
import numpy as np
from wse_core.host import compile_caches

from wse_hpc.md import pe_compile

__all__ = ["Cached", "compiled", "runner_key", "cache_path"]

SUBDIR = "md_exec"  # under JAX's compile cache directory
_TARGET = re.compile(r"custom_call @(wse_md_\w+)")  # an FFI call in the lowered StableHLO
_FORMAT = 1  # the layout of a stored file; bump on change


@functools.cache
def _code_hash() -> str:
    """sha256 of every .py file of wse_hpc and wse_core (paths and bytes)."""
    import wse_core

    import wse_hpc

    h = hashlib.sha256()
    for pkg in (wse_hpc, wse_core):
        root = Path(pkg.__file__).parent
        for f in sorted(root.rglob("*.py")):
            h.update(str(f.relative_to(root)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def _environment() -> tuple:
    from importlib.metadata import version

    import wse_core

    devices = tuple((d.platform, d.id, d.device_kind) for d in jax.devices())
    return (
        _FORMAT,
        jax.__version__,
        version("jaxlib"),  # its distribution, not an import of a package not declared
        wse_core.__version__,
        _code_hash(),
        os.environ.get("XLA_FLAGS", ""),
        jax.process_count(),
        devices,
    )


def _arg_spec(x) -> tuple:
    dtype = x.dtype if hasattr(x, "dtype") else np.result_type(x)  # PRNG keys: key<fry>
    return (np.shape(x), str(dtype), repr(getattr(x, "sharding", None)))


def _root() -> str | None:
    """The directory the programs are stored under: JAX's compile cache's (None: none)."""
    return jax.config.jax_compilation_cache_dir


def cache_path(jitted_key: tuple, args: tuple) -> Path | None:
    """Where the program of `jitted_key` at `args` is stored (None: no cache directory, or a
    multi-process run)."""
    where = _root()
    if not where or jax.process_count() > 1:
        return None
    leaves, tree = jax.tree.flatten(args)
    text = repr((jitted_key, str(tree), [_arg_spec(x) for x in leaves], _environment()))
    return Path(where) / SUBDIR / f"{hashlib.sha256(text.encode()).hexdigest()}.bin"


def _register(target: str) -> None:
    """Register the FFI target `target` (a numba PE kernel) as tracing would have."""
    if target in ("wse_md_build", "wse_md_build_pairs"):
        from wse_hpc.md.neighbours.build import _build_target as make

        got = make(target.removeprefix("wse_md_"))
    else:
        from wse_hpc.md.pe_pairs import _target

        got = _target(target.removeprefix("wse_md_"))
    if got != target:
        raise KeyError(target)


def _auto_layout():
    """JAX's `AutoLayout` singleton (what a pickled one unpickles to: `_keep_auto_layout`)."""
    from jax._src.layout import AutoLayout

    return AutoLayout


def _keep_auto_layout() -> None:
    """Pickle JAX's `AutoLayout` as the singleton itself. JAX 0.12.1 pickles it as a new
    instance that compares unequal to its own, so an executable loaded from this cache
    returned arrays whose type no traced program matched: a warm run whose next chunk was
    not stored stopped at `while_loop`'s "the layouts do not match" (stop 73's Python 3.12
    lane). Older JAX (no such class) is left as it is."""
    try:
        from jax._src.layout import AutoLayoutSingleton
    except ImportError:  # pragma: no cover - a JAX without per-array layouts
        return
    copyreg.pickle(AutoLayoutSingleton, lambda _: (_auto_layout, ()))


def _load(path: Path):
    from jax.experimental.serialize_executable import deserialize_and_load

    with path.open("rb") as f:
        targets, ids, payload, in_tree, out_tree = pickle.load(f)
    for t in targets:
        _register(t)
    by_id = {d.id: d for d in jax.devices()}
    devices = [by_id[i] for i in ids]  # the executable's own, in its order
    return deserialize_and_load(payload, in_tree, out_tree, execution_devices=devices)


def _store(path: Path, targets: list[str], exe) -> None:
    from jax.experimental.serialize_executable import serialize

    _keep_auto_layout()
    try:
        payload, in_tree, out_tree = serialize(exe)
        ids = [d.id for d in exe._executable._unloaded_executable.device_list]
    except (ValueError, NotImplementedError, AttributeError):  # JAX cannot serialise it
        return
    write_pickle(path, (targets, ids, payload, in_tree, out_tree))


def write_pickle(path: Path, value) -> None:
    """`value` pickled to `path` (folders made): written beside it, then renamed over it,
    so a concurrent reader sees all of it or nothing (`plan_cache` stores this way too); a
    write that fails (a full disk) or is stopped leaves no temporary file behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    try:
        with tmp.open("wb") as f:
            pickle.dump(value, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def compiled(jitted, args: tuple, key: tuple, kernels: tuple[str, ...] = ()):
    """`jitted.lower(*args).compile()`, from the disk cache when it holds it (module doc);
    `kernels`: the FFI targets the program may call, compiled by helper processes while it
    is traced and lowered when it is not stored (`pe_compile`)."""
    path = cache_path(key, args)
    if path is not None and path.exists():
        try:
            return _load(path)
        except Exception:  # noqa: BLE001 - any unreadable entry is compiled again
            pass
    pe_compile.start(kernels)
    with pe_compile.deferred():  # the PE kernels named, not compiled: numba runs meanwhile
        lowered = jitted.lower(*args)
    targets = sorted(set(_TARGET.findall(lowered.as_text())))
    for t in targets:  # XLA looks them up as it compiles
        _register(t)
    if path is None:
        return lowered.compile()
    with _fresh_compile():  # only a fresh compile serialises whole (module doc)
        exe = lowered.compile()
    if compile_caches.writable(SUBDIR):
        try:
            _store(path, targets, exe)
        except OSError as e:  # a full or read-only cache directory: the run goes on without it
            compile_caches.unwritable(SUBDIR, path.parent.parent, e)  # one note (hunt 69)
    return exe


@contextlib.contextmanager
def _fresh_compile():
    """JAX's persistent compile cache off for the compiles inside (and back as it was after):
    `jax_enable_compilation_cache`, with `reset_cache` so that JAX checks the flag again."""
    from jax.experimental.compilation_cache import compilation_cache as cc

    was = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", False)
    cc.reset_cache()
    try:
        yield
    finally:
        jax.config.update("jax_enable_compilation_cache", was)
        cc.reset_cache()


class Cached:
    """`jax.jit(fn)`, compiled through `compiled` at its first call's arguments (`kernels`:
    the FFI targets it may call)."""

    def __init__(self, fn: Callable, key: tuple, kernels: tuple[str, ...] = ()):
        self._jit, self._key, self._exe = jax.jit(fn), key, None
        self._kernels = kernels

    def __call__(self, *args):
        if self._exe is None:
            self._exe = compiled(self._jit, args, self._key, self._kernels)
        try:
            return self._exe(*args)
        except (TypeError, ValueError):  # arguments this executable does not take
            return self._jit(*args)


def _potential_digest(pot) -> str:
    h = hashlib.sha256()
    scalars = (pot.kind, pot.elements, pot.masses_amu, pot.numbers, pot.nrho, pot.drho, pot.rhomax)
    h.update(repr(scalars + (pot.nr, pot.dr, pot.cutoff_A)).encode())
    for table in (pot.frho, pot.rhor, pot.z2r):
        a = np.ascontiguousarray(table)
        h.update(repr((a.shape, str(a.dtype))).encode())
        h.update(a.tobytes())
    return h.hexdigest()


def runner_key(wafer, pot, plan, config, masses, n_atoms: int) -> tuple:
    """The static choices a runner's programs close over (module doc)."""
    devices = tuple(int(d.id) for d in wafer.mesh.devices.flat)
    where = (repr(wafer.spec), repr(wafer.describe()), devices, config.defect_seed)
    statics = (repr(plan), repr(config.thermostat), float(config.dt_fs))
    return (where, _potential_digest(pot), statics, tuple(map(float, masses)), int(n_atoms))
