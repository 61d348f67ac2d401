"""`wse hpc md --out`: the trajectory, one extended XYZ frame per thermo row, kept as LAMMPS
keeps the file of a `dump`.

Contract:
- `check_size(out, steps, thermo_every, structure)` refuses, before any work, a trajectory
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
  Ctrl-C and SIGTERM (SLURM, `timeout`, `kill`) stop the run alike, whether or not --out
  existed: the frames written so far are kept under --out, as LAMMPS keeps its dump file, and
  one line says so (exit 130 and 143, 128 + the signal's number). A run stopped before its
  first frame, or refused, leaves an existing --out as it was (hunt 61). Hunt 64: SIGTERM left
  a hidden `.NAME.part` (18 MB after 20 s) beside --out; Ctrl-C kept a new --out's frames but
  threw an existing one's away.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import typer

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


def check_size(out: Path | None, steps: int, thermo_every: int, structure) -> None:
    """Refuse a trajectory whose frames (one at step 0, one per thermo row) would be past the
    limit `xyz_bytes`, from `frame_bytes`'s bound of a frame."""
    if out is None or str(out) == os.devnull:
        return
    from wse_core.host.limits import check
    from wse_hpc.md.xyz import frame_bytes

    frames = 1 + -(-steps // thermo_every)
    symbol_chars = structure.symbols.dtype.itemsize // 4  # UCS-4: the longest symbol's length
    size = frames * frame_bytes(structure.num_atoms, symbol_chars=symbol_chars)
    check("xyz_bytes", size, f"the size of the --out trajectory of --steps {steps} "
          f"--thermo-every {thermo_every} ({frames:,} frames of {structure.num_atoms:,} "
          "atoms)")  # fmt: skip


class Stopped(BaseException):
    """SIGTERM reached the run: raised in the main thread by the handler `kept` sets, as
    Ctrl-C raises KeyboardInterrupt, so every block on the way out cleans up."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _raise_stopped(signum: int, frame: object) -> None:
    signal.signal(signum, signal.SIG_IGN)  # a second one waits while the frames are kept
    raise Stopped(signum)


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

    def reached(self, step: int) -> None:
        self.step = step

    def write(self, step: int, frame) -> None:
        """Append the frame of `step` whole, or stop the run (exit 1) saying what is kept."""
        if self.part is None or not self.primary:
            return
        from wse_core.errors import RunFault
        from wse_hpc.md import write_xyz

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
        self.frames, self.frame_step = self.frames + 1, step

    @contextlib.contextmanager
    def kept(self) -> Iterator[Trajectory]:
        """The run's block: what becomes of the frames when it ends, faults or is stopped."""
        from wse_core.errors import RunFault
        from wse_core.host.atomic import sigterm_unclaimed

        own = sigterm_unclaimed()  # the rule atomic_path's writes follow
        if own:
            signal.signal(signal.SIGTERM, _raise_stopped)
        try:
            yield self
        except (KeyboardInterrupt, Stopped) as e:
            self._keep()
            signum = e.signum if isinstance(e, Stopped) else signal.SIGINT
            if self.primary:
                typer.echo(self._stopped_line(signum), err=True)
            raise typer.Exit(128 + signum) from None
        except RunFault:
            self._keep()  # the frames up to the fault, as LAMMPS's dump keeps them
            raise
        except BaseException:
            if self.part != self.target and self.part is not None:
                self.part.unlink(missing_ok=True)  # a refusal: an existing --out as it was
            raise
        else:
            self._keep()
        finally:
            if own:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)

    def _keep(self) -> None:
        if self.part is None or self.part == self.target or not self.primary:
            return
        if self.frames:
            os.replace(self.part, self.target)
        else:
            self.part.unlink(missing_ok=True)

    def _what_is_kept(self) -> str:
        if not self.frames:
            return self._no_frame()
        whole = "the whole frame" if self.frames == 1 else f"the {self.frames:,} whole frames"
        return f"it keeps {whole} up to step {self.frame_step:,}"

    def _no_frame(self) -> str:
        return "no frame was written" + (
            f" (--out {self.out} is as it was)" if self.existed else ""
        )

    def _stopped_line(self, signum: int) -> str:
        name = "SIGTERM" if signum == signal.SIGTERM else "Ctrl-C (SIGINT)"
        line = f"stopped by {name} " + (
            "before step 0" if self.step is None else f"after step {self.step:,}"
        )
        if self.out is None:
            return line
        if not self.frames:
            return f"{line}; {self._no_frame()}"
        return (
            f"{line}; --out {self.out} keeps the {self.frames:,} frames up to step "
            f"{self.frame_step:,}, as LAMMPS keeps its dump"
        )
