"""Ctrl-C on the `wse` command: the command stops, says one line, exits 130; never lost, never
a crash.

Python's own Ctrl-C failed the `wse` command in two ways (hunt 65, `wse hpc cfd` stopped
while JAX compiled or ran):
- Python raises KeyboardInterrupt wherever the main thread is when SIGINT arrives. Inside a
  finalizer (a `__del__`, a `gc.callbacks` entry: JAX's `_xla_gc_callback` runs at every
  collection) the exception is only reported ("Exception ignored in ...") and the command
  ran on to its end and exited 0 (4 of about 17 tries with a warm compile cache). The
  handler `install()` sets raises as Python's does, except in a finalizer: there it traces
  the main thread and raises at its first line outside any finalizer. A KeyboardInterrupt
  that a finalizer it does not recognise swallowed reaches `sys.unraisablehook`, which
  raises it the same way.
- An interpreter that finalizes while XLA's compile threads still run aborts or segfaults
  (`pure virtual method called`, an LLVM error, SIGSEGV: 9 of 20 tries during a cold
  compile). Once Ctrl-C came, `leave(code)` flushes stdout and stderr and ends the process
  with `os._exit`: the command's own `finally` blocks have run by then (its `.part` files
  removed, a trajectory kept), and nothing of XLA's is torn down under its threads. Once the
  command has ended (`hold()`), a Ctrl-C is recorded, and ends the process at once while it
  joins threads and runs its atexit callbacks.

The line: a command that says its own (`wse train`: "interrupted (Ctrl-C); last good
checkpoint: ...", `wse hpc md`: "stopped by Ctrl-C (SIGINT) ...") exits with
`typer.Exit(130)` (143, 129), and `wse_cli.errors.WseGroup` (or the command) calls `said()`;
any other command's interrupt is said there with `say()` (`LINE`), and one outside a command
(while the CLI loads or parses) by `wse_cli.process`, which asks `unsaid()`. Only the console script
installs the handler (`wse_cli.process.guarded`): a command run in-process (click's
CliRunner, the tests) keeps Python's own, and so `wse_trainer.interrupt` keeps its recorder
for such a caller (it leaves this handler alone).

SIGTERM (SLURM, `timeout`, `kill`) and SIGHUP (a closed terminal, a dropped ssh) stop a
command as Ctrl-C does (hunt 69: every command but `wse hpc md` died silently, `experiments
run` leaving its lock in a folder it had made): `install()` takes them where they have their
default action (nohup's ignored SIGHUP stays ignored), and the handler raises `Stopped` in
the main thread, so every `finally` on the way out cleans up (a `.part` removed, a lock
released, a trajectory kept); not a KeyboardInterrupt, so no command mistakes it for a
Ctrl-C; a second stop signal while they run ends the process at once (`leave`: hunt 75). The
line is `stopped by SIGTERM` (`described()`), and the process then ends by the signal itself
(`leave`: its default action once the cleanups ran), so a shell sees 143 / 129 and a parent
(`wse launch`, SLURM) sees a process killed by it. A command stops when the main
thread next runs Python: a long XLA compile or call finishes first (as for Ctrl-C).

Imports nothing heavy: `wse --help` runs through here (its 0.3 s budget).
"""

from __future__ import annotations

import gc
import os
import signal
import sys
import threading
import weakref
from collections.abc import Callable
from types import FrameType

__all__ = [
    "GRACE_S",
    "LINE",
    "STOP_SIGNALS",
    "Stopped",
    "code",
    "described",
    "hold",
    "in_finalizer",
    "install",
    "leave",
    "on_leave",
    "requested",
    "said",
    "say",
    "uninstall",
    "unsaid",
]

LINE = "interrupted (Ctrl-C)"  # as the commands' own lines begin
GRACE_S = 10.0  # a stopped child's time to clean up before its SIGKILL (wse launch, an orphan)
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)  # stop a command as Ctrl-C does (module doc)


class Stopped(BaseException):
    """SIGTERM or SIGHUP reached the command: raised in the main thread as Ctrl-C raises
    KeyboardInterrupt, so every block on the way out cleans up."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


_requested = threading.Event()
_signum: list[int] = []  # the signal that stopped the command (the first one)
_said = threading.Event()
_previous: dict = {}  # what `install` replaced, for `uninstall`
_collecting: list[int] = []  # the thread the garbage collector runs in, while it runs


def _track(phase: str, info: dict) -> None:
    """A gc callback (the first): the collector's finalizers (weakref callbacks too) run
    between "start" and "stop"."""
    _collecting[:] = [threading.get_ident()] if phase == "start" else []


def _finalizer_codes() -> set:
    """The code objects that run as finalizers: the garbage collector's callbacks (JAX's
    `_xla_gc_callback`) and `weakref.finalize`'s call; `__del__` methods are found by name."""
    codes = {getattr(cb, "__code__", None) for cb in gc.callbacks}
    return codes | {weakref.finalize.__call__.__code__}


def in_finalizer(frame: FrameType | None) -> bool:
    """Whether `frame` (where a signal handler landed) runs inside a finalizer, where
    CPython reports a raised exception as "ignored" instead of raising it: in a garbage
    collection of this thread, a gc callback, a `__del__` or a `weakref.finalize`."""
    if _collecting and _collecting[0] == threading.get_ident():
        return True
    codes = _finalizer_codes()
    while frame is not None:
        if frame.f_code.co_name == "__del__" or frame.f_code in codes:
            return True
        frame = frame.f_back
    return False


def _on_signal(signum: int, frame: FrameType | None) -> None:
    """SIGINT, SIGTERM or SIGHUP: the command stops with KeyboardInterrupt or `Stopped`."""
    if not _signum:
        _signum.append(signum)
    _requested.set()
    if signum != signal.SIGINT:  # a second stop signal ends the process while the first
        for s in STOP_SIGNALS:  # cleans up (hunt 75: SLURM's, timeout's, were only recorded)
            if signal.getsignal(s) is _on_signal:
                signal.signal(s, _leave_now)
    if in_finalizer(frame):  # raised here, it would be lost ("Exception ignored in ...")
        _raise_outside(frame)
        return
    _disarm()  # a second Ctrl-C, raised here: none more from the trace
    raise _raised(signum)


def _raised(signum: int) -> BaseException:
    return KeyboardInterrupt() if signum == signal.SIGINT else Stopped(signum)


# What `_raise_outside` set: the main thread's tracer before it and each frame's f_trace
_armed: list = []


def _raise_outside(frame: FrameType | None) -> None:
    """Trace the main thread until it runs a line outside any finalizer, and raise
    KeyboardInterrupt there. Not a signal sent again: the main thread, back from XLA's
    calls, runs Python first in JAX's gc callback, where such a signal landed again and again
    (hunt 65: 7 times in a row, 2.5 s on)."""
    if not _armed:
        _armed.append(sys.gettrace())
        sys.settrace(_tracer)  # new frames
    while frame is not None:  # the frames already running, on their next line
        _armed.append((frame, frame.f_trace))
        frame.f_trace = _tracer
        frame = frame.f_back


def _tracer(frame: FrameType, event: str, arg: object):
    if in_finalizer(frame):
        return _tracer
    _disarm()
    raise _raised(_signum[0] if _signum else signal.SIGINT)


def _disarm() -> None:
    """Put back what `_raise_outside` changed (a debugger's or coverage's tracer)."""
    if not _armed:
        return
    tracer, frames = _armed[0], _armed[1:]
    _armed.clear()
    for frame, before in reversed(frames):
        frame.f_trace = before
    sys.settrace(tracer)


def _unraisable(u) -> None:  # noqa: ANN001 (sys.UnraisableHookArgs)
    """The last net: a KeyboardInterrupt of this handler that a finalizer not recognised
    swallowed (a weakref callback run when its object's last reference goes) is raised
    again at the main thread's first line outside, instead of being reported as ignored."""
    lost = isinstance(u.exc_value, KeyboardInterrupt | Stopped) and _requested.is_set()
    if lost and threading.current_thread() is threading.main_thread():
        _raise_outside(sys._getframe(1))
    else:  # a hook set later may still call this one after `uninstall`
        _previous.get("unraisablehook", sys.__unraisablehook__)(u)


def install() -> None:
    """Handle SIGINT, SIGTERM and SIGHUP as the module docstring says, where each has Python's
    own handling (not where SIGINT is ignored, in a background job of a shell without job
    control, nor an ignored SIGHUP under nohup)."""
    _requested.clear()
    _said.clear()
    _signum.clear()
    if _previous:
        return
    mine = [s for s in STOP_SIGNALS if signal.getsignal(s) == signal.SIG_DFL]
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        mine.insert(0, signal.SIGINT)
    if not mine:
        return
    _previous["handlers"] = {s: signal.signal(s, _on_signal) for s in mine}
    _previous["unraisablehook"], sys.unraisablehook = sys.unraisablehook, _unraisable
    gc.callbacks.insert(0, _track)
    if not _at_exit:  # once per process; in a test's process they run as pytest ends
        _at_exit.append(True)
        register = getattr(threading, "_register_atexit", None)  # CPython's, 3.9+
        if register is not None:
            register(_exiting)


def hold() -> None:
    """The command has ended: a Ctrl-C or stop signal from now on is recorded
    (`requested()`), never raised into the code that ends the process (hunt 65: a traceback
    from there)."""
    _disarm()
    for s in _previous.get("handlers", {}):
        if signal.getsignal(s) is _on_signal:
            signal.signal(s, _record)


def _record(signum: int, frame: FrameType | None) -> None:
    if not _signum:
        _signum.append(signum)
    _requested.set()


# The process's exit, after the command (hunt 65: a Ctrl-C just after `wse hpc cfd`'s report
# was a traceback from JAX's atexit teardown): while threads are joined and the atexit
# callbacks run, Ctrl-C ends the process at once with its line. In the C teardown after
# them (~0.25 s), Python has put SIGINT's default action back: it kills the process, 130.
_at_exit: list[bool] = []


def _exiting() -> None:
    if signal.getsignal(signal.SIGINT) in (signal.default_int_handler, _record):
        signal.signal(signal.SIGINT, _leave_now)


def _leave_now(signum: int, frame: FrameType | None) -> None:
    _record(signum, frame)
    if unsaid():
        say()
    leave(code(), by_signal=True)


def uninstall() -> None:
    """Put back what `install` replaced, and forget the Ctrl-C (an in-process caller: the
    tests)."""
    _disarm()
    if _previous:
        for s, before in _previous["handlers"].items():
            if signal.getsignal(s) in (_on_signal, _record, _leave_now):
                signal.signal(s, before)
        if sys.unraisablehook is _unraisable:
            sys.unraisablehook = _previous["unraisablehook"]
        if _track in gc.callbacks:
            gc.callbacks.remove(_track)
        _previous.clear()
    _collecting.clear()
    _requested.clear()
    _said.clear()
    _signum.clear()


def requested() -> bool:
    """Whether Ctrl-C (or a stop signal) reached the command since `install()`."""
    return _requested.is_set()


def signum() -> int:
    """The signal that stopped the command: SIGINT unless a stop signal came first."""
    return _signum[0] if _signum else signal.SIGINT


def code() -> int:
    """The exit status of the command it stopped: 128 + the signal (130, 143, 129)."""
    return 128 + signum()


def described(sig: int | None = None) -> str:
    """How the stop's line begins, for `sig` (default: the signal that came): `LINE` for
    Ctrl-C, else `stopped by SIGTERM` (`stopped by SIGHUP`)."""
    sig = signum() if sig is None else sig
    return LINE if sig == signal.SIGINT else f"stopped by {signal.Signals(sig).name}"


def said() -> None:
    """The command said its own line for this Ctrl-C (`wse train`'s, `wse hpc md`'s)."""
    _said.set()


def unsaid() -> bool:
    """Whether no line was said for this Ctrl-C yet."""
    return not _said.is_set()


def say() -> None:
    """Say the stop's line (`described()`) on stderr (nothing where stderr is closed or
    full), once said."""
    _said.set()
    _write(sys.stderr, described() + "\n")


def on_leave(fn: Callable[[], object]) -> None:
    """Run `fn` (a cleanup the atexit callbacks would have run) when `leave` ends the
    process."""
    _cleanups.append(fn)


_cleanups: list[Callable[[], object]] = []


def leave(code: int, *, by_signal: bool = False) -> None:
    """End the process now with `code`, after the `on_leave` cleanups and flushing stdout
    and stderr, without finalizing the interpreter under XLA's threads (module docstring); a
    further Ctrl-C or stop signal is ignored. `by_signal`: a code of 128 + the stop signal
    that came ends the process by that signal (its default action), as it would have ended
    untouched (a command that said its own line exits with its code: `wse hpc md`'s 143)."""
    for s in (signal.SIGINT, *STOP_SIGNALS):
        signal.signal(s, signal.SIG_IGN)
    for fn in _cleanups:
        try:
            fn()
        except Exception:  # noqa: BLE001 (the process ends: nothing to do about it)
            pass
    for stream in (sys.stdout, sys.stderr):
        _flush(stream)
    if by_signal and _signum and _signum[0] in STOP_SIGNALS and code == 128 + _signum[0]:
        signal.signal(_signum[0], signal.SIG_DFL)
        os.kill(os.getpid(), _signum[0])
    os._exit(code)


def _write(stream, text: str) -> None:
    try:
        stream.write(text)
        stream.flush()
    except (AttributeError, OSError, ValueError):  # a closed or full stderr: nothing to say on
        pass


def _flush(stream) -> None:
    try:
        stream.flush()
    except (AttributeError, OSError, ValueError):
        pass
