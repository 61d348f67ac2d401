"""`wse hpc md --out`: the trajectory, one extended XYZ frame per thermo row, kept as LAMMPS
keeps the file of a `dump`.

Contract:
- `check_size(out, steps, thermo_every, structure, first)` refuses, before any work, a trajectory
  past the limit `xyz_bytes` (what `--structure` reads back), as `wse hpc cfd` refuses step
  files past `step_files` (hunt 64: `--steps 10000000 --thermo-every 1` began to write
  ~386 GB, frame after frame, with no check).
- `Trajectory(out, primary)`: `write(step, frame)` appends one whole frame, a gzip member of
  its own for a --out ending in .gz (`write_xyz` cuts a failed write back to the last whole
  frame); a write that fails (a full disk, `ulimit -f`)
  stops the run as a `RunFault` (exit 1) whose line names --out, the step and the whole frames
  kept (hunt 64: a torn last frame neither wse nor ASE could read, and `cannot write: File too
  large` named no file).
- `Trajectory.kept()` wraps the run. The frames grow beside an existing --out (`.NAME.part`)
  and replace it when the run ends, faults or is stopped; a new --out grows under its own name.
  Ctrl-C, SIGTERM (SLURM, `timeout`, `kill`) and SIGHUP (a closed terminal) stop the run
  alike, whether or not --out existed: the frames written so far are kept under --out, as
  LAMMPS keeps its dump file, and one line says so (exit 130, 143 and 129, 128 + the signal's
  number). So does a closed stdout (`| head -1`: exit 141, as a C tool killed by SIGPIPE
  reports it; the thermo rows are the log, the trajectory the result, which a zero would
  pass off as whole). A run stopped before its first frame, or refused, leaves an existing
  --out as it was (hunt 61). Hunt 64: SIGTERM left a hidden `.NAME.part` (18 MB after 20 s)
  beside --out; Ctrl-C kept a new --out's frames but threw an existing one's away. Hunt 69:
  SIGHUP left the `.part` and said nothing; `| head -1` stopped the run silently, exit 1.
- The file the frames go to stays the one the first frame made (its device and inode, checked
  at each frame, as `write_xyz` opens it by name): one removed or replaced by a folder mid-run
  stops the run (exit 1) with one line saying the frames are gone (hunt 69: it was made anew
  without its first frames, exit 0). An existing --out that cannot be replaced at the end (its
  folder made read-only, --out made a folder) is one line naming the `.part` file that keeps
  the frames, exit 1 (hunt 69: a 65-line traceback).
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import typer

from wse_cli import interrupts

__all__ = ["Trajectory", "check_size", "refuse_nonfinite"]


def refuse_nonfinite(step: int, frame) -> None:
    """A frame whose forces or per-atom energies are not finite is never written (hunt 63)."""
    import numpy as np
    from wse_core.errors import RunFault

    for name, values in (("forces", frame.forces_eV_A), ("energies", frame.energies_eV)):
        if values is not None and not np.isfinite(values).all():
            bad = int((~np.isfinite(values)).any(axis=-1).sum() if values.ndim > 1
                      else (~np.isfinite(values)).sum())  # fmt: skip
            raise RunFault(
                f"step {step}: {bad:,} of {frame.num_atoms:,} atoms have {name} that are not "
                "finite; the frame was not written (check the potential file's tables)"
            )


def check_size(
    out: Path | None, steps: int, thermo_every: int, structure, first: int | None = None
) -> None:
    """Refuse a trajectory whose frames (one at the first step, one per thermo row: the
    multiples of thermo_every from the step `first`, else the structure's, and the last
    step) would be past the limit `xyz_bytes`, from `frame_bytes`'s bound of a frame."""
    if out is None or str(out) == os.devnull:
        return
    from wse_core.host.limits import check
    from wse_hpc.md.xyz import frame_bytes

    a = first if first is not None else (structure.step or 0)
    frames = 1 + (a + steps) // thermo_every - a // thermo_every
    frames += 1 if steps and (a + steps) % thermo_every else 0  # the last step's row
    symbol_chars = structure.symbols.dtype.itemsize // 4  # UCS-4: the longest symbol's length
    size = frames * frame_bytes(structure.num_atoms, symbol_chars=symbol_chars)
    check("xyz_bytes", size, f"the size of the --out trajectory of --steps {steps} "
          f"--thermo-every {thermo_every} ({frames:,} frames of {structure.num_atoms:,} "
          "atoms)")  # fmt: skip


def _raise_stopped(signum: int, frame: object) -> None:
    """SIGTERM or SIGHUP where no `wse` process handler takes it (a command run in-process):
    raised as `wse_cli.interrupts` raises it."""
    signal.signal(signum, signal.SIG_IGN)  # a second one waits while the frames are kept
    raise interrupts.Stopped(signum)


class Trajectory:
    """The --out trajectory of one run (module docstring); `out` None writes nothing."""

    def __init__(self, out: Path | None, *, primary: bool = True):
        self.out, self.primary = out, primary
        self.target = Path(os.path.realpath(out)) if out is not None else None  # through a link
        self.existed = self.target is not None and self.target.is_file()
        self.part = (
            self.target.with_name(f".{self.target.name}.part") if self.existed else self.target
        )
        self.frames, self.frame_step = 0, 0
        self.step: int | None = None  # the last thermo row's step
        self.identity: tuple[int, int] | None = None  # (st_dev, st_ino) of the file written
        self.lost = False  # the file was removed or replaced under the run

    def reached(self, step: int) -> None:
        self.step = step

    def write(self, step: int, frame) -> None:
        """Append the frame of `step` whole, or stop the run (exit 1) saying what is kept."""
        if self.part is None or not self.primary:
            return
        from wse_core.errors import RunFault
        from wse_hpc.md import write_xyz

        self._still_ours(step)
        try:
            # gzip by --out's name: the frames may grow in `.NAME.part` beside it
            gz = self.target.name.lower().endswith(".gz")
            write_xyz(self.part, [frame], append=self.frames > 0, info={"step": step}, compress=gz)
        except OSError as e:
            if self.frames == 0 and self.part.is_file() and not self.existed:
                self.part.unlink(missing_ok=True)  # the empty file its first write made
            raise RunFault(
                f"--out {self.out}: cannot write ({e.strerror or e}) at step {step:,}; "
                f"{self._what_is_kept()}"
            ) from None
        if self.frames == 0:
            self.identity = _identity(self.part)
        self.frames, self.frame_step = self.frames + 1, step
        self._still_ours(step)

    def _still_ours(self, step: int) -> None:
        """Stop the run (exit 1) when the file the frames go to is no longer the one its first
        write made: removed, or replaced by another file or a folder (hunt 69: a file removed
        mid-run was made again without its first frames, exit 0; one replaced by a folder was
        said to keep frames that were gone). `write_xyz` opens it by name for each frame."""
        if self.identity is None or _identity(self.part) == self.identity:
            return
        from wse_core.errors import RunFault

        self.lost = True
        raise RunFault(f"{self._which()} was removed or replaced while the run wrote it (seen at "
                       f"step {step:,}): {self._what_is_kept()}; the run was stopped")  # fmt: skip

    def _which(self) -> str:
        if self.existed:
            return f"--out {self.out}: its new trajectory {self._shown_part()}"
        return f"--out {self.out}"

    @contextlib.contextmanager
    def kept(self) -> Iterator[Trajectory]:
        """The run's block: what becomes of the frames when it ends, faults or is stopped (by
        a signal, or by a closed stdout: hunt 69, `| head -1` ended the run silently)."""
        from wse_core.errors import RunFault

        own = [s for s in interrupts.STOP_SIGNALS if _unclaimed(s)]  # as atomic_path's writes
        for s in own:
            signal.signal(s, _raise_stopped)
        try:
            yield self
        except (KeyboardInterrupt, interrupts.Stopped) as e:
            self._stop(e.signum if isinstance(e, interrupts.Stopped) else signal.SIGINT)
        except (BrokenPipeError, SystemExit) as e:
            if not _stdout_closed(e):
                raise
            self._stop(signal.SIGPIPE)
        except RunFault as e:
            if why := self._keep():  # the frames up to the fault, as LAMMPS's dump keeps them
                raise RunFault(f"{e}, but --out {self.out}: {why}") from None
            raise
        except BaseException:
            if self.part != self.target and self.part is not None and not self.lost:
                self.part.unlink(missing_ok=True)  # a refusal: an existing --out as it was
            raise
        else:
            if why := self._keep():
                raise RunFault(f"--out {self.out}: {why}")
        finally:
            for s in own:
                signal.signal(s, signal.SIG_DFL)

    def _stop(self, signum: int) -> None:
        """Keep the frames, say so in one line and exit 128 + `signum` (141 for a closed
        stdout, as a C tool killed by its SIGPIPE reports to the shell)."""
        why = self._keep()
        if self.primary:
            typer.echo(self._stopped_line(signum, why), err=True)
            interrupts.said()
        if signum == signal.SIGPIPE:
            from wse_cli.process import to_devnull

            to_devnull(sys.stdout)  # what is still buffered for the closed pipe goes nowhere
        raise typer.Exit(128 + signum) from None

    def _keep(self) -> str | None:
        """The frames moved under --out (an existing --out replaced by them): None, else why
        they could not be, to follow "--out NAME: " (they stay in the `.part` file, named)."""
        if self.part is None or self.part == self.target or not self.primary or self.lost:
            return None
        if not self.frames:
            self.part.unlink(missing_ok=True)
            return None
        if self.identity is not None and _identity(self.part) != self.identity:
            self.lost = True
            return f"its new trajectory {self._shown_part()} was removed or replaced meanwhile"
        try:
            os.replace(self.part, self.target)
        except OSError as e:  # hunt 69: the folder made read-only, --out made a folder
            return (
                f"cannot replace it with the new trajectory ({e.strerror or e}); "
                f"{self._frames()} are in {self._shown_part()}"
            )
        return None

    def _shown_part(self) -> Path:
        """The `.part` file as the user named --out's folder (its real one through a link)."""
        beside = Path(self.out).with_name(self.part.name)
        return beside if os.path.realpath(beside) == str(self.part) else self.part

    def _frames(self) -> str:
        whole = "the whole frame" if self.frames == 1 else f"the {self.frames:,} whole frames"
        return f"{whole} up to step {self.frame_step:,}"

    def _what_is_kept(self) -> str:
        if self.lost and self.frames == 1:
            return f"the frame written at step {self.frame_step:,} is gone"
        if self.lost:
            return f"the {self.frames:,} frames written up to step {self.frame_step:,} are gone"
        if not self.frames:
            return self._no_frame()
        return f"it keeps {self._frames()}"

    def _no_frame(self) -> str:
        return "no frame was written" + (
            f" (--out {self.out} is as it was)" if self.existed else ""
        )

    def _stopped_line(self, signum: int, why: str | None = None) -> str:
        line = f"stopped by {_NAMES.get(signum) or signal.Signals(signum).name} " + (
            "before step 0" if self.step is None else f"after step {self.step:,}"
        )
        if self.out is None:
            return line
        if why is not None:
            return f"{line}; --out {self.out}: {why}"
        if not self.frames:
            return f"{line}; {self._no_frame()}"
        return (
            f"{line}; --out {self.out} keeps the {self.frames:,} frames up to step "
            f"{self.frame_step:,}, as LAMMPS keeps its dump"
        )


_NAMES = {signal.SIGINT: "Ctrl-C (SIGINT)", signal.SIGPIPE: "a closed stdout (broken pipe)"}


def _identity(path: Path) -> tuple[int, int] | None:
    """(st_dev, st_ino) of the regular file at `path`, None where there is none."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISREG(st.st_mode) else None


def _unclaimed(signum: int) -> bool:
    """Whether the run may take `signum` (the rule `wse_core.host.atomic` follows): the main
    thread, while it has its default action (never `wse_cli.interrupts`' or a server's)."""
    return (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signum) == signal.SIG_DFL
    )


def _stdout_closed(e: BaseException) -> bool:
    """Whether `e` is a write to a closed stdout pipe: a BrokenPipeError, or rich's exit for
    one (`Console.on_broken_pipe` raises SystemExit(1) from it)."""
    if isinstance(e, SystemExit):
        return e.code == 1 and isinstance(e.__context__, BrokenPipeError)
    return isinstance(e, BrokenPipeError)
