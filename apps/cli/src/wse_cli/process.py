"""The `wse` process made one a user can trust whatever its surroundings (hunt 65).

`guarded(body)` runs the CLI as the whole process (the console script, `python -m wse_cli`,
`wse_cli.app.main`; never an in-process test runner's invoke):
- Ctrl-C stops it promptly with one line and exit 130, never lost, never a crash
  (`wse_cli.interrupts`);
- a closed stdout (`>&-`) takes the report and throws it away, and the command then says
  `Error: cannot write the report: stdout is closed` and exits 1, as `ls >&-` does; a closed
  pipe or a full disk under the root help or `--version` is what it is for every command;
- stdout written whole or said to be cut short (`_Stdout`): a write that stops part way (a
  full disk or quota, `ulimit -f`) is `Error: cannot write the report to stdout: File too
  large (1,024 of 10,874 bytes written)` and exit 1 (hunt 69: `--json > run.json` kept the
  first 1,024 bytes, said nothing and exited 0: Python's unbuffered stdout, PYTHONUNBUFFERED
  or `-u`, drops what a short write leaves, and its buffered one reports the error only at
  exit, "Exception ignored"); what the command writes after that goes nowhere;
- a stdout that cannot encode a character (PYTHONIOENCODING=ascii) writes '?' for it;
- COLUMNS (or the terminal) below `MIN_COLUMNS` is read as `MIN_COLUMNS`: no table drops or
  cuts its numbers;
- where matplotlib cannot write its folders in HOME, MPLCONFIGDIR is a private temporary
  folder, removed at the end (no warning on every PNG).
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import io
import os
import select
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from wse_cli import interrupts

__all__ = ["MIN_COLUMNS", "error", "guarded", "to_devnull"]


def guarded(body: Callable[[], object]) -> None:
    """Run `body` (the CLI) as the whole `wse` process: Ctrl-C, SIGTERM and SIGHUP handled
    (`wse_cli.interrupts`, installed first: hunt 69, a Ctrl-C while the streams were prepared
    was a traceback), the streams and the environment prepared (`_prepare`), a report that a
    closed stdout lost said (module docstring). Returns when `body` returns and all is well,
    else raises SystemExit, or ends the process at once after a Ctrl-C or a stop signal."""
    interrupts.install()
    closed = None
    code: object = None
    exits = True  # `body` ended with SystemExit (click's standalone mode always does)
    try:
        try:
            closed = _prepare()
            body()
            exits = False
        except SystemExit as e:
            code = e.code
        except KeyboardInterrupt:  # before the app caught it (while it loads)
            code = 130
        except BaseException:
            interrupts.hold()
            if interrupts.requested():  # a library's own error for the interrupt it got
                _end_interrupted(None)
            raise
        interrupts.hold()  # the command ended: a Ctrl-C now is not raised into what follows
        if interrupts.requested():
            _end_interrupted(code)
        if closed is not None and closed.written and code in (0, None):
            error("cannot write the report: stdout is closed")  # as `ls >&-` says it
            code, exits = 1, True
    finally:
        interrupts.uninstall()
    if exits:
        raise SystemExit(code)


def _end_interrupted(code: object) -> None:
    """End the process after a Ctrl-C or a stop signal: its line said (once), exit 130 (143,
    129) unless the command ended with its own failure (a refusal's 2, a fault's 1)."""
    generic = False  # the line said here: the process ends as the signal would end it
    if code in (0, None, 130, interrupts.code()):
        if generic := interrupts.unsaid():
            interrupts.say()
        code = interrupts.code()
    interrupts.leave(code if isinstance(code, int) else 1, by_signal=generic)


def error(message: str) -> None:
    with contextlib.suppress(AttributeError, OSError, ValueError):
        sys.stderr.write(f"Error: {message}\n")
        sys.stderr.flush()


def to_devnull(stream: object) -> None:
    """Point `stream`'s file descriptor at /dev/null: what is still buffered for it, and any
    later write, goes nowhere instead of failing again (at exit: "Exception ignored ...
    BrokenPipeError"). A stream without one (a test's) is left alone."""
    try:
        fd = stream.fileno()  # type: ignore[attr-defined]
    except (AttributeError, OSError, ValueError):
        return
    _null_fd(fd)


def _null_fd(fd: int) -> None:
    with contextlib.suppress(OSError):
        null = os.open(os.devnull, os.O_WRONLY)
        if null != fd:
            os.dup2(null, fd)
            os.close(null)


class _ClosedStdout(io.TextIOBase):
    """`sys.stdout` of a process started with fd 1 closed (`>&-`), which Python makes None
    and click's echo then drops silently (hunt 65: `wse hpc cfd --json >&-` exited 0 with
    its report lost; `wse hpc md` failed on `None.isatty()`): text is taken and thrown away,
    and `written` says whether there was any (the command's report, lost)."""

    encoding = "utf-8"
    errors = "strict"

    def __init__(self) -> None:
        super().__init__()
        self.written = False

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def write(self, text: str) -> int:
        if not isinstance(text, str):  # click probes for a binary stream with b""
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        self.written = self.written or bool(text)
        return len(text)


class _Stdout(io.RawIOBase):
    """fd 1 written whole (module docstring): each write loops until all of it is written,
    as Python's buffered writer does, or raises an OSError that says how much of what the
    command wrote reached stdout (`errors.WseGroup` prints it as one line, exit 1). A closed
    pipe (EPIPE) is raised as it is (click's and rich's quiet exit). After either, the rest
    of the report is thrown away, so nothing fails again as the process ends."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self.fd, self.asked, self.written, self.cut = fd, 0, 0, False

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return os.isatty(self.fd)

    def fileno(self) -> int:
        return self.fd

    def write(self, data) -> int:  # noqa: ANN001 (bytes-like)
        view = memoryview(data).cast("B")
        if self.cut:
            return len(view)
        self.asked += len(view)
        done = 0
        try:
            while done < len(view):
                try:
                    done += os.write(self.fd, view[done:])
                except BlockingIOError:  # a non-blocking pipe that is full: wait for room
                    select.select([], [self.fd], [])
        except OSError as e:
            self.written, self.cut = self.written + done, True
            if e.errno == errno.EPIPE:
                raise
            why = f"{e.strerror or e} ({self.written:,} of {self.asked:,} bytes written)"
            raise OSError(e.errno, why, "the report to stdout") from None
        self.written += done
        return done


def _checked_stdout() -> None:
    """`sys.stdout`, where it is Python's own stream on fd 1, as a text stream of the same
    encoding over `_Stdout` (never a caller's own stream: a test's capture)."""
    old = sys.stdout
    try:
        if old is not sys.__stdout__ or old.fileno() != 1 or not isinstance(old, io.TextIOWrapper):
            return
    except (AttributeError, OSError, ValueError):
        return
    with contextlib.suppress(OSError, ValueError):
        old.flush()
    sys.stdout = io.TextIOWrapper(
        _Stdout(1), encoding=old.encoding, errors=old.errors, newline="\n", write_through=True
    )


def _prepare() -> _ClosedStdout | None:
    """The process's streams and environment, before the CLI loads (hunt 65): a closed
    stdout, a stdout written whole or said to be cut short (hunt 69), a stdout that cannot
    encode every character, a narrow terminal, a home folder matplotlib cannot write.
    Returns the closed stdout's stand-in, if stdout was closed."""
    closed = None
    if sys.stdout is None:
        closed = _ClosedStdout()
        sys.stdout = closed
        if not _fd_open(1):  # a file the command opens would take fd 1 and get C's output
            _null_fd(1)
    else:
        _checked_stdout()
    for stream in (sys.stdout, sys.stderr):
        _replacing(stream)
    _wide_enough()
    _matplotlib_home()
    return closed


def _fd_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def _replacing(stream: object) -> None:
    """A text stream whose encoding cannot write every character (PYTHONIOENCODING=ascii,
    latin-1) writes '?' for those it cannot (hunt 65: the "µs" of `wse hpc cfd`'s report and
    the "—" of the root help were UnicodeEncodeError tracebacks after a partial report)."""
    encoding, errors = getattr(stream, "encoding", None), getattr(stream, "errors", None)
    if not encoding or errors != "strict" or not hasattr(stream, "reconfigure"):
        return
    try:
        universal = codecs.lookup(encoding).name.startswith("utf")
    except LookupError:
        universal = False
    if not universal:
        with contextlib.suppress(ValueError, OSError):
            stream.reconfigure(errors="replace")  # type: ignore[attr-defined]


MIN_COLUMNS = 80  # the width every table is laid out for (rich's, when output is a file)


def _wide_enough() -> None:
    """COLUMNS at least `MIN_COLUMNS`: rich fits a table to the console's width by dropping
    and cutting its values (hunt 65: `COLUMNS=8 wse plan train` printed a table frame without
    values, COLUMNS=30 `$16,0…`, and COLUMNS=0 printed nothing at all). A narrower terminal
    wraps the lines instead; COLUMNS that is no number is left to rich (it ignores it)."""
    columns = os.environ.get("COLUMNS", "")
    width = int(columns) if columns.isdecimal() else _terminal_columns()
    if width is not None and width < MIN_COLUMNS:
        os.environ["COLUMNS"] = str(MIN_COLUMNS)


def _terminal_columns() -> int | None:
    """The width of the first of stdin, stdout and stderr that is a terminal (as rich asks)."""
    for fd in (0, 1, 2):
        try:
            return os.get_terminal_size(fd).columns or None
        except OSError:
            continue
    return None


_PRIVATE: list[str] = []  # folders this process made for itself, removed as it ends


def _matplotlib_home() -> None:
    """MPLCONFIGDIR in a private temporary folder where matplotlib's own folders cannot be
    written (a read-only HOME): matplotlib makes one too, but warns on every run (hunt 65:
    two lines after each PNG written); or where the umask would leave the folders matplotlib
    makes closed to their owner (hunt 67: under `umask 777` matplotlib made its folders and
    its own temporary one mode 000, and a user other than root got a PermissionError
    traceback at its import). Unset where they can, as matplotlib decides."""
    if os.environ.get("MPLCONFIGDIR"):
        return
    home = Path(os.path.expanduser("~"))
    config = os.environ.get("XDG_CONFIG_HOME") or str(home / ".config")
    cache = os.environ.get("XDG_CACHE_HOME") or str(home / ".cache")
    if not _umask() & 0o700 and all(
        _can_write(Path(base) / "matplotlib") for base in (config, cache)
    ):
        return
    import atexit
    import tempfile

    with contextlib.suppress(OSError):
        folder = tempfile.mkdtemp(prefix="wse-matplotlib-")
        os.chmod(folder, 0o700)  # mkdtemp's 0o700 less the umask: 000 under `umask 777`
        _PRIVATE.append(folder)
        atexit.register(_remove_private)
        interrupts.on_leave(_remove_private)
        os.environ["MPLCONFIGDIR"] = folder


def _umask() -> int:
    """This process's umask (read by setting it: before the CLI starts a thread)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _can_write(folder: Path) -> bool:
    """Whether `folder` is a writable folder, or can be made in the nearest one above it."""
    p = folder
    while not os.path.lexists(p) and p != p.parent:
        p = p.parent
    return p.is_dir() and os.access(p, os.W_OK | os.X_OK)


def _remove_private() -> None:
    while _PRIVATE:
        shutil.rmtree(_PRIVATE.pop(), ignore_errors=True)
