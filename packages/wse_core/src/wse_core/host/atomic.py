"""Output files written whole or not at all: every file a command writes (a potential, an
operator, a trace, a step file, a page, a picture, a result) is written to a temporary name
beside it and renamed over it only once complete.

Contract: `atomic_path(path)` yields a path in `path`'s folder, ending in `path`'s suffix (a
dotfile's whole name: `.png`), so `np.savez` adds no `.npz` and matplotlib picks the format
from it, for the caller's writer to fill. When the block ends cleanly the file is flushed to
disk and renamed onto `path` (`os.replace`: a reader sees the old file or the whole new
one); when it raises, the temporary file is removed and `path` is left as it was. A full
disk, a file-size limit (`ulimit -f`) or a kill while writing no longer leaves half a file
where a good one was (hunt 61: `ulimit -f 20; wse hpc md potential --out Cu.eam.alloy` cut
an existing potential to 20 KiB). A link is followed (its target is replaced, as writing
through it would), the new file keeps an existing file's permissions (else the umask's, as a
shell's `>` gives: the temporary stays owner-writable while written, for writers that open
it by name, and takes that mode just before the rename; hunt 65: under `umask 222` every
write was a PermissionError traceback). `write_atomically(path, data)` writes bytes or text
this way.

`atomic_folder(path, keep=)` does the same for a folder of files written together (an
experiment's results, tables and figures): the caller fills a new sibling folder, which
takes `path`'s place in one step once complete (Linux `renameat2(RENAME_EXCHANGE)`; elsewhere
two renames during which the stop signals wait), so a reader or a stopped run never sees
one run's figure beside another's results (hunt 65: SIGTERM between two renames did). The
entries of the old folder that the new one lacks and `keep(name)` accepts (a sweep's tables)
are carried into it.

- A path that is there but no regular file is refused (a `WseError`, one line), /dev/null
  alone excepted (written in place: what is written there is thrown away, as asked). Hunt 64:
  a FIFO there blocked the writer for ever, a folder was an IsADirectoryError traceback.
- An OSError of the writer that names no file (a `write` past `ulimit -f`) or names the
  temporary file is given `path` as its file name, so its one line says which file failed;
  a folder that takes no new file (permission denied; ENOENT in /proc, /sys) is a
  `RunFault`, one line.
- Folders missing above `path` are made as `mkdir -p` makes them (owner-writable, whatever
  the umask), and removed again when the write fails or is stopped (hunt 65: an interrupted
  first run left an empty `ex/wafer-yield/`).
- SIGTERM (SLURM, `timeout`, `kill`), SIGHUP (a closed terminal, a dropped ssh) or SIGQUIT
  while a file is written removes the temporary file (and the folders made for it) and then
  stops the process as the signal's default does (status 128 + the signal); the handler is
  the main thread's only while it writes and only where the program set none of its own (a
  server's or `wse launch`'s stays theirs; `nohup`'s ignored SIGHUP stays ignored), so a
  process busy elsewhere stops as before. Hunt 64/65: a `.NAME.xxxx.part.png` was left
  behind; Ctrl-C (KeyboardInterrupt) cleans up as any exception does.
- The temporary name, `.NAME.PID-HOST-XXXXXXXX.part.EXT`, names its writer: a write first
  removes its target's parts whose writer was stopped beyond any handler (`kill -9`, the OOM
  killer, a power cut) and runs no more; live writers' parts and any other file stay
  (`wse_core.host.part_files`). Hunt 71: each killed `wse train` left its `.hf.xxxx.part`
  export, hundreds of MB, for ever.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import shutil
import signal
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from wse_core.host.part_files import killed_parts, part_path

__all__ = ["atomic_path", "atomic_folder", "named_as", "sigterm_unclaimed", "write_atomically"]

# What a stop signal removes before the process stops, innermost last: (path, how)
_UNDER_WAY: list[tuple[Path, Callable[[Path], None]]] = []
_STOP_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGHUP", "SIGQUIT") if hasattr(signal, name)
)


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary path to write in place of `path`, renamed onto it on a clean exit."""
    target = Path(os.path.realpath(path))  # through a link: replace what it points at
    if str(target) == os.devnull:  # no rename onto a device: written in place
        yield target
        return
    _refuse_not_regular(path, target)
    tmp = _part(target, _extension(target), folder=False)
    mode = stat.S_IMODE(target.stat().st_mode) if target.exists() else None
    with named_as(path, tmp), _folders_for(target.parent) as made:
        with _removed_on_stop((tmp, _unlink)):
            try:
                umasked = _created(tmp)
                yield tmp
                fd = os.open(tmp, os.O_RDONLY)
                try:
                    os.fsync(fd)  # the data reaches the disk before the name does
                    os.fchmod(fd, umasked if mode is None else mode)
                finally:
                    os.close(fd)
                os.replace(tmp, target)
            except BaseException:
                _unlink(tmp)
                _remove_made(made)
                raise


def _extension(target: Path) -> str:
    """The extension the writer reads from the temporary name: pathlib's suffix, or the
    whole name of a dotfile (hunt 68: `--png .png` has no suffix to pathlib, so matplotlib
    read the format "part", and `np.savez` wrote `..npz.xxxx.part.npz` beside an empty
    `.npz`)."""
    return target.suffix or (target.name if target.name.startswith(".") else "")


def _part(target: Path, ext: str, *, folder: bool) -> Path:
    """A new part to fill for `target`, once the parts of it that killed writers left are
    removed (module doc)."""
    for left in killed_parts(target, ext, folder=folder):
        (_remove_tree if folder else _unlink)(left)
    return part_path(target, ext)


@contextlib.contextmanager
def atomic_folder(path: str | Path, *, keep: Callable[[str], bool] | None = None) -> Iterator[Path]:
    """A new folder to fill in place of the folder `path`, which it replaces whole on a clean
    exit, carrying over the old folder's entries it lacks that `keep(name)` accepts (all
    where `keep` is None); when the block raises, `path` is left as it was (module doc)."""
    if os.path.lexists(path) and not os.path.isdir(path):  # a file, a dangling link: hunt 62
        from wse_core.errors import WseError

        raise WseError(f"{path} is there but not a folder; remove it or write elsewhere")
    target = Path(os.path.realpath(path))  # through a link: replace what it points at
    stage = _part(target, "", folder=True)
    with named_as(path, stage), _folders_for(target.parent) as made:
        with _removed_on_stop((stage, _remove_tree)):
            try:
                os.mkdir(stage)
                umasked = stat.S_IMODE(os.stat(stage).st_mode)
                os.chmod(stage, umasked | 0o700)  # filled by this user whatever the umask
                yield stage
                old = stat.S_IMODE(target.stat().st_mode) if target.is_dir() else None
                later = _carried(target, stage, keep)
                os.chmod(stage, umasked | 0o300 if old is None else old)
                with _stops_deferred():  # a few renames: done whole, then the signal acts
                    if _swapped_in(stage, target):
                        for name in later:
                            os.rename(stage / name, target / name)
            except BaseException:
                _remove_tree(stage)  # the new folder, or after the swap the old one
                _remove_made(made)
                raise
            _remove_tree(stage)  # the old folder, now at `stage`'s name


def _carried(old: Path, new: Path, keep: Callable[[str], bool] | None) -> list[str]:
    """Link into `new` the entries of folder `old` that it lacks and `keep` accepts, and give
    its files the mode of the old ones of their name; the names not linked (a folder), which
    are moved once `new` has taken `old`'s place."""
    later: list[str] = []
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        for entry in os.scandir(old):
            mine = new / entry.name
            if os.path.lexists(mine):
                if entry.is_file(follow_symlinks=False):
                    with contextlib.suppress(OSError):  # another user's file: the umask's
                        os.chmod(mine, stat.S_IMODE(entry.stat(follow_symlinks=False).st_mode))
            elif keep is None or keep(entry.name):
                try:
                    os.link(entry.path, mine, follow_symlinks=False)
                except OSError:
                    later.append(entry.name)
    return later


def _swapped_in(stage: Path, target: Path) -> bool:
    """Put folder `stage` at `target` in one step; True when a folder was there (it is now at
    `stage`'s name)."""
    for _ in range(8):  # another run may make, swap or remove `target` meanwhile
        if not os.path.lexists(target):
            try:
                os.rename(stage, target)
                return False
            except OSError as e:
                if e.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                    raise
                continue
        try:
            _exchange(stage, target)
            return True
        except FileNotFoundError:
            continue
    raise OSError(errno.EBUSY, "other runs kept replacing it meanwhile", str(target))


_AT_FDCWD, _RENAME_EXCHANGE = -100, 2  # Linux's <fcntl.h> and <linux/fs.h>
_NO_EXCHANGE = {errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP}


def _exchange(a: Path, b: Path) -> None:
    """Swap the folders `a` and `b`: in one step where the system can (Linux's renameat2),
    else by three renames (`b` aside, `a` in, `b` to `a`'s name)."""
    fn = _renameat2()
    if fn is not None:
        if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
            return
        err = ctypes.get_errno()
        if err not in _NO_EXCHANGE:  # else a file system without it (NFS): renames
            raise OSError(err, os.strerror(err), str(b))
    aside = a.with_name(a.name + ".old")
    os.rename(b, aside)
    try:
        os.rename(a, b)
    except BaseException:
        os.rename(aside, b)
        raise
    os.rename(aside, a)


@functools.cache
def _renameat2() -> Callable[..., int] | None:
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):  # not glibc >= 2.28 / musl: renames
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


@contextlib.contextmanager
def _stops_deferred() -> Iterator[None]:
    """A stop signal or Ctrl-C that comes while the block runs acts once it has ended (on the
    main thread: only it may set handlers)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    held = {}
    for s in (*_STOP_SIGNALS, signal.SIGINT):
        before = signal.getsignal(s)
        if before not in (signal.SIG_IGN, None):  # None: a handler not set from Python
            held[s] = signal.signal(s, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        for s, before in held.items():
            signal.signal(s, before)
        for s in dict.fromkeys(caught):
            signal.raise_signal(s)


def _created(tmp: Path) -> int:
    """Create `tmp`, owner-writable while it is written; the mode the umask gives it."""
    fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)  # the umask applies
    try:
        umasked = stat.S_IMODE(os.fstat(fd).st_mode)
        os.fchmod(fd, umasked | 0o600)  # the writer reopens it by name (savefig, np.savez)
    finally:
        os.close(fd)
    return umasked


@contextlib.contextmanager
def named_as(path: str | Path, tmp: str | Path) -> Iterator[None]:
    """An OSError in the block naming no file or `tmp` names `path` ("cannot write
    out/figure.png: File too large"); permission denied, or `tmp` not made (ENOENT: /proc
    takes no new file; hunt 67, a traceback), is a `RunFault` (one line, exit 1)."""
    try:
        yield
    except OSError as e:
        at_tmp = e.filename == str(tmp)
        if e.strerror and e.filename in (None, str(tmp)):
            e.filename = str(path)
        if at_tmp and e.errno == errno.ENOENT:  # /proc, /sys: the folder takes no new file
            from wse_core.errors import RunFault

            raise RunFault(
                f"cannot write {path}: {Path(tmp).parent} took no new file ({e.strerror}); "
                "give a path in a writable folder"
            ) from None
        if isinstance(e, PermissionError):  # a folder that takes no new file: hunt 65
            from wse_core.errors import RunFault

            where = "" if e.filename == str(path) else f" ({e.filename})"
            raise RunFault(
                f"cannot write {path}: {e.strerror}{where}; give a folder you may write to"
            ) from None
        raise


def _refuse_not_regular(path: str | Path, target: Path) -> None:
    from wse_core.host.readers import not_regular

    if target.exists() and (why := not_regular(target)):
        from wse_core.errors import WseError

        raise WseError(f"cannot write {path}: it {why}; remove it or give another name")


@contextlib.contextmanager
def _folders_for(folder: Path) -> Iterator[list[Path]]:
    """Make `folder` and the folders missing above it as `mkdir -p` does, each owner-writable
    and -searchable whatever the umask; yields those made (outermost first), which a stop
    signal removes again while they are empty."""
    missing = []
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    made: list[Path] = []
    with _removed_on_stop():
        try:
            for p in reversed(missing):
                try:
                    os.mkdir(p)
                except FileExistsError:  # another process made it meanwhile: theirs
                    continue
                made.append(p)
                _UNDER_WAY.append((p, _rmdir))
                os.chmod(p, stat.S_IMODE(os.stat(p).st_mode) | 0o300)
        except BaseException:
            _remove_made(made)
            raise
        try:
            yield made
        finally:
            for p in made:
                _UNDER_WAY.remove((p, _rmdir))


def _remove_made(made: list[Path]) -> None:
    for p in reversed(made):
        _rmdir(p)


def _unlink(path: Path) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def _rmdir(path: Path) -> None:
    with contextlib.suppress(OSError):
        os.rmdir(path)  # only while empty: never a folder another writer filled meanwhile


def _remove_tree(path: Path) -> None:
    with contextlib.suppress(OSError):
        os.chmod(path, 0o700)  # a read-only folder (umask 222) lets no entry go
    shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def _removed_on_stop(*entries: tuple[Path, Callable[[Path], None]]) -> Iterator[None]:
    """Each (path, how) is removed if a stop signal comes while the block runs (module doc)."""
    _UNDER_WAY.extend(entries)
    own = [s for s in _STOP_SIGNALS if _unclaimed(s)]
    for s in own:
        signal.signal(s, _on_stop)
    try:
        yield
    finally:
        for entry in entries:
            _UNDER_WAY.remove(entry)
        # the outermost write's (nested ones found ours set), unless the block set its own
        for s in own:
            if signal.getsignal(s) is _on_stop:
                signal.signal(s, signal.SIG_DFL)


def sigterm_unclaimed() -> bool:
    """True where this thread may take SIGTERM for a while: the main thread (only it may set a
    handler) while SIGTERM has its default (never a program's own: a server's, `wse launch`'s)."""
    return _unclaimed(signal.SIGTERM)


def _unclaimed(signum: int) -> bool:
    return (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signum) == signal.SIG_DFL
    )


def _on_stop(signum: int, frame: object) -> None:
    for path, how in reversed(list(_UNDER_WAY)):
        how(path)
    with contextlib.suppress(OSError):  # a hangup's terminal may be gone
        name = signal.Signals(signum).name
        os.write(2, f"stopped ({name}); the files being written were left as they were\n".encode())
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)  # stop as the default would have: status 128 + signum


def write_atomically(path: str | Path, data: bytes | str) -> Path:
    """Write `data` (text as UTF-8) to `path` whole or not at all; returns `path`."""
    with atomic_path(path) as tmp:
        if isinstance(data, str):
            tmp.write_text(data, encoding="utf-8")
        else:
            tmp.write_bytes(data)
    return Path(path)
