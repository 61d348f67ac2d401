"""The `wse` script's entry point: the root help from a cache, everything else through the app.

`wse --help` is what a newcomer types first, and rendering it imports typer, click and every
command module (~0.3 s on the 2 cores). Its text changes only with the CLI's code, the
version, the terminal's width and the limits its ranges show, so `main()` keeps the rendered
text in `$WSE_CACHE_DIR/help/` (default `~/.cache/wse/help/`), keyed by those (every
`wse_cli` module's size and mtime, the version, the Python version, the width, the program's
name and the variables the ranges are read from, `LIMIT_VARIABLES`) and prints it from there
without importing typer. A miss (the first call after an install or an edit, another width,
another WSE_LIMIT_DEVICES) renders it through the app as always and stores it; a cache that
cannot be read or written is skipped. Like the command index the Azure CLI keeps for the
same reason. Nothing else is cached: every other command runs the app.

Every run of the script, `python -m wse_cli` too (`module_main`, `wse_cli.app.main`), goes
through `wse_cli.process.guarded` (Ctrl-C, closed or narrow streams, hunt 65).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import os
import shutil
import sys
from pathlib import Path

from wse_cli.process import error, guarded, to_devnull

__all__ = ["help_cache_path", "main", "module_main"]

# The variables the help's ranges are read from (`wse_core.host.limits`: a limit, and the host
# memory the devices' limit is computed from); their values are part of the cache's key
LIMIT_VARIABLES = ("WSE_LIMIT_", "WSE_HOST_MEMORY_BYTES")


def help_cache_path(prog: str) -> Path:
    """Where the root help of `prog` at this terminal width and code is kept."""
    here = Path(__file__).parent
    h = hashlib.sha256()
    for p in sorted(here.rglob("*.py")):
        st = p.stat()
        h.update(f"{p.relative_to(here)}:{st.st_size}:{st.st_mtime_ns};".encode())
    from wse_cli import __version__

    width = shutil.get_terminal_size().columns
    h.update(f"{__version__}|{sys.version}|{width}|{prog}".encode())
    for name in sorted(os.environ):  # the limits the help's ranges show (hunt 67: stale)
        if name.startswith(LIMIT_VARIABLES):
            h.update(f"|{name}={os.environ[name]}".encode())
    root = Path(os.environ.get("WSE_CACHE_DIR") or Path.home() / ".cache" / "wse")
    return root / "help" / f"{h.hexdigest()[:32]}.txt"


def main() -> None:
    """The `wse` command (the console script)."""
    prog = os.path.basename(sys.argv[0])
    guarded(lambda: _root_help(prog) if sys.argv[1:] == ["--help"] else _app())


def module_main() -> None:
    """`python -m wse_cli` (`wse launch`'s children, the tests' subprocesses): the app, from
    its import on, as the console script runs it (no root help cache: the program's name
    is click's "python -m wse_cli")."""
    guarded(_app)


def _app() -> None:
    from wse_cli.app import app

    app()


def _root_help(prog: str) -> None:
    """The root help: the stored text, else the app's (then stored); see module doc."""
    path: Path | None = None
    try:
        path = help_cache_path(prog)
        text = path.read_text()
    except (OSError, UnicodeDecodeError):  # no cache yet, or one that cannot be read
        text = None
    if text is not None:
        _emit(text)
        return
    from wse_cli.app import app

    out = io.StringIO()
    code: object = 0
    with contextlib.redirect_stdout(out):
        try:
            app(prog_name=prog)
        except SystemExit as e:
            code = e.code
    text = out.getvalue()
    if path is not None and code in (0, None) and text:
        with contextlib.suppress(OSError):
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(text)
            tmp.replace(path)  # whole or absent, never half-written
    _emit(text)
    raise SystemExit(code)


def _emit(text: str) -> None:
    """Write `text` to stdout as click does for every other command (hunt 65: tracebacks): a
    closed pipe ends quietly with 1, a full or failing disk with one line and 1."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except OSError as e:
        to_devnull(sys.stdout)  # the text still buffered would fail again at exit
        if e.errno != errno.EPIPE:
            error(f"cannot write: {e.strerror or e}")
        raise SystemExit(1) from None
