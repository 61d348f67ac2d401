"""Checkpoints with orbax: atomic, the latest committed one resumed automatically.

`<model_dir>/checkpoints/<step>/` holds two items: `state` (MemoryX's master weights and
optimizer state by group, and the RNG key data; `StandardSave`) and `meta` (JSON: the step,
the data iterator's state, the resolved config and the tokenizer's sha256). orbax writes a
step into a temporary folder and renames it when complete, so a run killed during a save
leaves only a temporary folder, which is ignored and cleaned up; `latest_step()` is always a
complete checkpoint. Saves are asynchronous (the device-to-host copy happens before `save`
returns); `close()` waits for the last one.

Multi-process runs: every process holds the same state (MemoryX is replicated per process)
and calls `save` and `restore`, as orbax requires. Each leaf is saved as one global array
replicated over the processes (one device each), so orbax writes it once, from process 0,
and every process restores the whole state onto its own device. The model_dir must be on a
filesystem every process sees.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from wse_trainer.config import ConfigError

__all__ = ["Checkpointer", "resolve_checkpoint"]


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


class Checkpointer:
    def __init__(self, directory: str | Path, *, keep: int = 3, read_only: bool = False):
        self.directory = Path(directory).absolute()
        options = ocp.CheckpointManagerOptions(
            max_to_keep=keep,
            enable_async_checkpointing=not read_only,
            create=not read_only,
            cleanup_tmp_directories=not read_only,
            read_only=read_only,
        )
        self.manager = ocp.CheckpointManager(
            self.directory, options=options, item_names=("state", "meta")
        )

    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def all_steps(self) -> list[int]:
        return list(self.manager.all_steps())

    def save(self, step: int, state: Any, meta: dict[str, Any]) -> None:
        self.manager.save(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardSave(_to_global(state)), meta=ocp.args.JsonSave(meta)
            ),
            force=True,
        )

    def restore(self, step: int, like: Any) -> tuple[Any, dict[str, Any]]:
        """The state (shaped like `like`) and meta of checkpoint `step`."""
        target = jax.tree.map(ocp.utils.to_shape_dtype_struct, _to_global(like))
        out = self.manager.restore(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardRestore(target), meta=ocp.args.JsonRestore()
            ),
        )
        return _to_local(out["state"]), dict(out["meta"])

    def wait(self) -> None:
        self.manager.wait_until_finished()

    def close(self) -> None:
        self.manager.wait_until_finished()
        self.manager.close()


def resolve_checkpoint(path: str | Path) -> tuple[Path, int]:
    """(checkpoints folder, step) for `--checkpoint_path`: a step folder, a checkpoints
    folder or a model_dir (its latest committed step)."""
    p = Path(path).absolute()
    if p.name.isdigit() and p.is_dir():
        return p.parent, int(p.name)
    for folder in (p / "checkpoints", p):
        if folder.is_dir():
            steps = Checkpointer(folder, read_only=True).latest_step()
            if steps is not None:
                return folder, steps
    raise ConfigError(
        f"no committed checkpoint at {str(path)!r}; give a model_dir, its "
        "checkpoints folder or one step folder"
    )
