"""The stderr of `wse launch`'s children, relayed through the launcher, and its one line when a
child fails (`wse_cli.commands.launch`).

`Relay.watch(i, proc)` reads process i's stderr line by line in a thread of its own:
- a line another process already printed is not printed again (every process of a run says
  the same things);
- an `Error: ...` line is held, not printed: the first of them goes into the launcher's one
  line (`failure_line`), naming its process;
- once a process has failed (`keep_only`), the others' lines are dropped (hunt 68: their
  tracebacks and JAX's coordination-service lines came before the launcher's line);
- JAX's native log (absl's `E1205 23:34:04.034 26428 file.cc:123] ...` and what follows it:
  its continuation lines, a `*** Check failure stack trace: ***`, a `terminate called`) is
  never relayed: the first such line mutes its process, and its message is kept for the
  launcher's line (hunt 71: a child that JAX aborted relayed ~50 absl lines, and the line
  that named it came last). A run that works prints none;
- while the launcher stops its children (`stopping`), process 0's `stopped by ...` line is
  held for the launcher's own (`stop_detail`: what became of its files, hunt 71: the line
  saying `--out t.xyz keeps the 103 frames` was dropped).
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading

__all__ = ["Relay", "failure_line", "exit_words", "DRAIN_S", "SEEN_LINES"]

DRAIN_S = 2.0  # how long a failed child's last stderr lines are waited for
SEEN_LINES = 10_000  # distinct stderr lines remembered for the de-duplication
# absl's log line (glog's format: severity, date, time, thread, file:line]), E and F only: a
# run that works logs none; and what C++ prints when it ends the process itself
_NATIVE = re.compile(rb"^(?:[EF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ [^\]\s]+:\d+\] |terminate called )")
_STOPPED = b"stopped by "  # how a process stopped by a signal says so (`wse_cli.interrupts`)


class Relay:
    """The children's stderr, relayed line by line (module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[bytes, int] = {}  # line -> the process that printed it first
        self.first_error: tuple[int, str] | None = None  # (process, message)
        self.native: dict[int, str] = {}  # process -> its first native log message
        self.closed = False
        self.only: int | None = None  # once a process failed: the one whose lines are relayed
        self.stopping = False  # the launcher is stopping its children: hold process 0's line
        self.stop_line: str | None = None
        self._threads: dict[int, threading.Thread] = {}

    def watch(self, i: int, proc: subprocess.Popen) -> None:
        t = threading.Thread(target=self._read, args=(i, proc), daemon=True)
        self._threads[i] = t
        t.start()

    def _read(self, i: int, proc: subprocess.Popen) -> None:
        for line in iter(proc.stderr.readline, b""):
            with self._lock:
                self._line(i, line)
        proc.stderr.close()
        if proc.wait() != 0:  # at once, not at the next poll: the peers' next lines are noise
            self.keep_only(i, first=True)

    def keep_only(self, i: int, *, first: bool = False) -> None:
        """Relay process i's lines alone; `first`: only where no process was chosen yet."""
        with self._lock:
            if not (first and self.only is not None):
                self.only = i

    def _line(self, i: int, line: bytes) -> None:
        if self.closed or self.only not in (None, i) or i in self.native:
            return
        if _NATIVE.match(line):
            text = line.split(b"] ", 1)[-1].decode(errors="replace").strip()
            self.native[i] = " ".join(text.split())
            return
        if line.startswith(b"Error: "):
            if self.first_error is None:
                text = line[len(b"Error: ") :].decode(errors="replace").strip()
                self.first_error = (i, text)
            return
        if self.stopping and i == 0 and line.startswith(_STOPPED):
            self.stop_line = line.decode(errors="replace").strip()
            return
        if self._seen.setdefault(line, i) != i:
            return
        if len(self._seen) > SEEN_LINES:
            self._seen.clear()
        sys.stderr.buffer.write(line)
        sys.stderr.buffer.flush()

    def stop(self) -> None:
        """The launcher stops its children: relay process 0's lines alone, and hold its stop
        line (`stop_detail`)."""
        self.keep_only(0)
        with self._lock:
            self.stopping = True

    def stop_detail(self) -> str | None:
        """What process 0's stop line says beyond `stopped by SIGTERM` (its files), if any."""
        _, sep, detail = (self.stop_line or "").partition("; ")
        return detail if sep else None

    def drain(self, i: int) -> None:
        """Wait (briefly) for the lines process i wrote before it exited."""
        self._threads[i].join(timeout=DRAIN_S)

    def close(self) -> None:
        with self._lock:
            self.closed = True


def failure_line(relay: Relay, i: int, code: int, others: int) -> str:
    """The launcher's one line for process i's exit `code` (its first error, or JAX's native
    message that came before its end, if any)."""
    why = f"process {i} {exit_words(code)}; stopped the other {others}"
    if relay.first_error is not None:
        j, text = relay.first_error
        return f"Error: process {j}: {text} ({why})"
    if (native := relay.native.get(i)) is not None:
        return f"Error: {why} (JAX: {native[:300]})"
    return f"Error: {why}"


def exit_words(code: int) -> str:
    """How a child ended: "exited with code 3", or the signal that killed it by name (hunt
    68: "code -9"; SIGKILL is most often the kernel's out-of-memory killer)."""
    if code >= 0:
        return f"exited with code {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = "a signal"
    hint = "; out of memory?" if -code == signal.SIGKILL else ""
    return f"was killed by {name} (signal {-code}{hint})"
