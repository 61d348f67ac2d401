"""Checkpoints with orbax: atomic, sealed, verified on resume, never deleted by a fail-over.

`<model_dir>/checkpoints/<step>/` holds two items: `state` (MemoryX's master weights and
optimizer state by group, and the RNG key data; `StandardSave`) and `meta` (JSON: the step,
the data iterator's state, the resolved config, the model and the tokenizer's sha256). orbax
writes a step into a temporary folder and renames it when complete, so a run killed during a
save leaves only a temporary folder, which is ignored and cleaned up. Saves are asynchronous
(the device-to-host copy happens before `save` returns); `wait()` and `close()` wait for the
last one.

Sealing (`wse_trainer.seals`). Once orbax has finished a step (seen by `check()`, which the
training loop calls every step, or by the next `save`, `wait` or `close`), process 0 writes
`<step>/wse_sha256.json` (`SEAL`): the size and sha256 of every file of the step, which
`step_problem` compares before anything is restored. Every save's meta says a seal will follow
(`SEALED_KEY`), so a step whose seal is missing (deleted, or a run killed between orbax's
rename and the seal) is incomplete too; a step written before seals existed is judged by its
restore alone.
`read_step(ckpt, step, like, ...)` is the one verified read: the seal, then orbax's restore,
then the meta's keys; it returns a `StepRead` or the problem as one line. With `partial`,
`like` is part of the state (the weights alone, for a fine-tune start that loads no optimizer
state: `runconfig.load_checkpoint_states`) and only that part is read, orbax's
`PyTreeRestore(partial_restore=True)`, whatever optimizer state the step holds.
`newest_readable(folder, steps, like, ...)` tries `steps` newest first and returns the first
that reads back with the problems of the newer ones.

Fail-over (`wse_trainer.resume.open_checkpoints`): a step that fails `read_step` is moved
aside with `move_aside` into `<model_dir>/checkpoints_aside/<step>-<why>` (a sibling of
`checkpoints/`, where orbax never looks; a second one of the same name gets `-2`, `-3`...)
and the next older step is tried. Steps after a `--checkpoint-path` step are moved aside as
`superseded` the same way. Nothing is deleted.

`Checkpointer.close()` waits, seals and closes orbax's manager (its background threads), and
removes the `checkpoints/` folder again when this Checkpointer created it and no step was
saved, so a run that stops on an error leaves no empty folder behind. After a failed save, or
on Ctrl-C (a KeyboardInterrupt through `save`, `wait` or `close`), it waits for orbax at most
`save_faults.EXIT_BOUND_S` and the process's exit is bounded too (`save_faults`): orbax's
threads may wait for a signal the broken save never sends.

Multi-process runs: every process holds the same state (MemoryX is replicated per process)
and calls `save` and `restore`, as orbax requires. Each leaf is saved as one global array
replicated over the processes (one device each), so orbax writes it once, from process 0,
and every process restores the whole state onto its own device. Every process verifies the
same files and so reaches the same decision; process 0 alone seals and moves steps aside.
The model_dir must be on a filesystem every process sees.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

import jax
import numpy as np
import orbax.checkpoint as ocp
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from wse_core.errors import RunFault
from wse_core.host.distributed import is_primary
from wse_core.host.memory import format_bytes

from wse_trainer.config import ConfigError
from wse_trainer.resume_checks import resolved
from wse_trainer.save_faults import (
    free_bytes,
    os_error,
    quiet_orbax,
    save_failed,
    save_interrupted,
    within,
)
from wse_trainer.seals import SEAL, SEALED_KEY, seal_step, step_problem

__all__ = [
    "ASIDE",
    "CheckpointSaveError",
    "SEAL",
    "SEALED_KEY",
    "Checkpointer",
    "StepRead",
    "committed_steps",
    "move_aside",
    "newest_readable",
    "read_step",
    "resolve_checkpoint",
    "seal_step",
    "step_problem",
]

ASIDE = "checkpoints_aside"  # beside checkpoints/: steps moved out of the way, never deleted


def _process_devices() -> list[jax.Device]:
    """Each process's first device, in process order."""
    first: dict[int, jax.Device] = {}
    for d in sorted(jax.devices(), key=lambda d: d.id):
        first.setdefault(d.process_index, d)
    return [first[p] for p in sorted(first)]


def _to_global(state: Any) -> Any:
    """This process's state as global arrays replicated over the processes."""
    if jax.process_count() == 1:
        return state
    devices = _process_devices()
    sharding = NamedSharding(Mesh(np.array(devices), ("process",)), PartitionSpec())
    mine = devices[jax.process_index()]

    def glob(x):
        local = jax.device_put(x, mine)
        return jax.make_array_from_single_device_arrays(local.shape, sharding, [local])

    return jax.tree.map(glob, state)


def _to_local(state: Any) -> Any:
    """This process's copy of each restored global array."""
    if jax.process_count() == 1:
        return state
    return jax.tree.map(lambda x: x.addressable_data(0), state)


class StepRead(NamedTuple):
    state: Any
    meta: dict[str, Any]


def _one_line(e: BaseException) -> str:
    first = (str(e).strip().splitlines() or [""])[0]
    return f"{type(e).__name__}: {first[:120]}" if first else type(e).__name__


def read_step(
    ckpt: Checkpointer,
    step: int,
    like: Any,
    *,
    meta_keys: Iterable[str] = (),
    partial: bool = False,
) -> StepRead | str:
    """Step `step` verified and restored (state shaped like `like`; `partial`: the part of
    the state `like` is), or why it cannot be used as one line: its seal, orbax's restore,
    the seal its meta promised, then the presence of `meta_keys`."""
    problem = step_problem(ckpt.step_dir(step))
    if problem is not None:
        return problem
    try:
        state, meta = ckpt.restore(step, like, partial=partial)
    except MemoryError:
        raise
    except Exception as e:  # whatever orbax or tensorstore raise on a broken step
        return f"it does not restore ({_one_line(e)})"
    if meta.get(SEALED_KEY) and not (ckpt.step_dir(step) / SEAL).is_file():
        return f"its {SEAL} is missing (the run stopped before sealing it, or it was removed)"
    missing = [k for k in meta_keys if k not in meta]
    if missing:
        return f"its meta lacks {', '.join(missing)}"
    return StepRead(state, meta)


def move_aside(step_dir: Path, why: str) -> Path:
    """Rename a step folder to `<model_dir>/checkpoints_aside/<step>-<why>[-k]` (process 0;
    never deletes) and return the new path."""
    aside = step_dir.parent.parent / ASIDE
    target = aside / f"{step_dir.name}-{why}"
    k = 2
    while target.exists():
        target, k = aside / f"{step_dir.name}-{why}-{k}", k + 1
    if is_primary():
        aside.mkdir(exist_ok=True)
        step_dir.rename(target)
    return target


class CheckpointSaveError(RunFault):
    """A checkpoint could not be written (a full disk, a folder gone): training stops."""


class Checkpointer:
    def __init__(self, directory: str | Path, *, keep: int = 3, read_only: bool = False):
        self.directory = Path(directory).absolute()
        self._created = not read_only and not self.directory.exists()
        self._unsealed: list[int] = []
        self._failed = False  # a save failed: orbax's manager holds that error
        self._interrupted = False  # Ctrl-C inside an orbax call: its state may be half made
        options = ocp.CheckpointManagerOptions(
            max_to_keep=None if read_only else keep,  # what orbax sets (and warns of) when
            save_interval_steps=0 if read_only else 1,  # read-only, said here
            enable_async_checkpointing=not read_only,
            create=not read_only,
            cleanup_tmp_directories=not read_only,
            read_only=read_only,
        )
        if not read_only:
            quiet_orbax()  # a failed save is reported once, by `_fault`
        absl = logging.getLogger("absl")  # orbax warns of every read-only manager it opens
        level = absl.level
        absl.setLevel(logging.ERROR if read_only else level)
        try:
            self.manager = ocp.CheckpointManager(
                self.directory, options=options, item_names=("state", "meta")
            )
        finally:
            absl.setLevel(level)

    def step_dir(self, step: int) -> Path:
        return self.directory / str(step)

    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def all_steps(self) -> list[int]:
        return sorted(self.manager.all_steps())

    def last_good(self) -> str:
        """The newest sealed step, in words, for a message."""
        steps = [s for s in self.all_steps() if s not in self._unsealed]
        return f"step {steps[-1]}" if steps else "none saved yet"

    def _fault(self, step: int, needed: int, why: str) -> CheckpointSaveError:
        save_failed()
        good = self.last_good()
        self._failed = True
        self._unsealed = []  # nothing more to seal: wait() and close() must not raise again
        return CheckpointSaveError(
            f"checkpoint step {step} could not be written to {self.directory}: {why} "
            f"({format_bytes(free_bytes(self.directory))} free on that disk, the state "
            f"needs about {format_bytes(needed)}); training stopped, last good checkpoint: "
            f"{good}"
        )

    def save(self, step: int, state: Any, meta: dict[str, Any]) -> None:
        """Save `step` asynchronously; CheckpointSaveError (one line, exit 1) when the disk
        cannot hold the state (checked first) or the write fails."""
        self.wait()  # orbax waits for the previous save anyway; then it can be sealed
        needed = sum(int(getattr(x, "nbytes", 0)) for x in jax.tree.leaves(state))
        if needed > free_bytes(self.directory):
            raise self._fault(step, needed, "not enough free space")
        try:
            self.manager.save(
                step,
                args=ocp.args.Composite(
                    state=ocp.args.StandardSave(_to_global(state)),
                    meta=ocp.args.JsonSave({**meta, SEALED_KEY: True}),
                ),
                force=True,
            )
        except KeyboardInterrupt:
            self._interrupt()
            raise
        except Exception as e:
            err = os_error(e)
            if err is None:
                raise
            raise self._fault(step, needed, err.strerror or str(err)) from None
        self._unsealed.append(step)
        self._needed = needed

    def restore(self, step: int, like: Any, *, partial: bool = False) -> tuple[Any, dict[str, Any]]:
        """The state (shaped like `like`; `partial`: only the part of it `like` is, the
        rest of the step unread) and meta of checkpoint `step`."""
        target = jax.tree.map(ocp.utils.to_shape_dtype_struct, _to_global(like))
        state = (  # each leaf where `like`'s lies, as StandardRestore places them
            ocp.args.PyTreeRestore(
                target,
                restore_args=ocp.checkpoint_utils.construct_restore_args(target),
                partial_restore=True,
            )
            if partial
            else ocp.args.StandardRestore(target)
        )
        out = self.manager.restore(
            step, args=ocp.args.Composite(state=state, meta=ocp.args.JsonRestore())
        )
        return _to_local(out["state"]), dict(out["meta"])

    def wait(self) -> None:
        """Wait for the save in flight, then seal the finished steps (process 0)."""
        try:
            self.manager.wait_until_finished()
        except KeyboardInterrupt:
            self._interrupt()
            raise
        except Exception as e:
            self._raise_fault(e)
        for step in self._unsealed:
            if is_primary() and self.step_dir(step).is_dir():  # max_to_keep may have gone
                seal_step(self.step_dir(step))
        self._unsealed = []

    def check(self) -> None:
        """Without waiting: CheckpointSaveError now if the save in flight has already failed
        (the training loop asks each step, so a failed save stops the run at once), and the
        seal of a save orbax has finished (hunt 70: sealed only at the next save, a kill
        between two saves lost the newest step as "incomplete", the first one the whole run)."""
        if not self._unsealed:
            return
        try:
            self.manager.check_for_errors()
        except Exception as e:
            self._raise_fault(e)
        if not self.manager.is_saving_in_progress():  # finished: `wait` joins, never blocks
            self.wait()

    def _raise_fault(self, e: Exception) -> None:
        """The one line for orbax's error `e` of the last save when it is the disk's (after
        that line, orbax's errors are its echoes: not raised again)."""
        if self._failed:
            return
        err, step = os_error(e), (self._unsealed or [-1])[-1]
        if err is None or not self._unsealed:
            raise e
        raise self._fault(step, getattr(self, "_needed", 0), err.strerror or str(err)) from None

    def _interrupt(self) -> None:
        """Ctrl-C reached the run during an orbax call or the close."""
        self._interrupted = True
        save_interrupted()

    def close(self) -> None:
        """Wait, seal and close orbax's manager; after a failed save or on Ctrl-C for at most
        `EXIT_BOUND_S` (orbax's threads may wait for a signal that never comes: hunt 64)."""
        if isinstance(sys.exc_info()[1], KeyboardInterrupt):  # called in a `finally` on Ctrl-C
            self._interrupt()
        try:
            if self._failed or self._interrupted:
                within(self._close_manager)
            else:
                self._close_manager()
        except KeyboardInterrupt:
            self._interrupt()
            raise
        finally:
            if self._created and is_primary():
                try:
                    self.directory.rmdir()  # only if empty: no step was saved
                except OSError:
                    pass

    def _close_manager(self) -> None:
        try:
            self.wait()
        finally:
            try:
                self.manager.close()
            except Exception:  # orbax raises the failed save's error once more
                if not self._failed:
                    raise


def committed_steps(folder: Path) -> list[int]:
    """The committed steps in a checkpoints folder (none if it does not exist), ascending."""
    if not folder.is_dir():
        return []
    reader = Checkpointer(folder, read_only=True)
    try:
        return reader.all_steps()
    finally:
        reader.close()


def newest_readable(
    folder: Path,
    steps: Iterable[int],
    like: Any,
    *,
    meta_keys: Iterable[str] = (),
    partial: bool = False,
) -> tuple[int, StepRead | None, list[tuple[int, str]]]:
    """The newest of `steps` in `folder` that `read_step` reads back (`partial`: the part
    of the state `like` is), as (step, StepRead), and the newer ones that do not, as
    [(step, problem)]; (0, None, problems) if none does."""
    bad: list[tuple[int, str]] = []
    reader = Checkpointer(folder, read_only=True)
    try:
        for step in sorted(steps, reverse=True):
            got = read_step(reader, step, like, meta_keys=meta_keys, partial=partial)
            if isinstance(got, StepRead):
                return step, got, bad
            bad.append((step, got))
    finally:
        reader.close()
    return 0, None, bad


def resolve_checkpoint(path: str | Path) -> tuple[Path, int]:
    """(checkpoints folder, step) for `--checkpoint-path`: a step folder, a checkpoints
    folder or a model_dir (its latest committed step)."""
    p = resolved(path)  # hunt 70: `run/../run` was another run's folder than `run`
    if p.name.isdigit() and p.is_dir():
        return p.parent, int(p.name)
    for folder in (p / "checkpoints", p):
        if folder.is_dir():
            reader = Checkpointer(folder, read_only=True)
            try:
                step = reader.latest_step()
            finally:
                reader.close()
            if step is not None:
                return folder, step
    raise ConfigError(
        f"no committed checkpoint at {str(path)!r}; give a model_dir, its "
        "checkpoints folder or one step folder"
    )
