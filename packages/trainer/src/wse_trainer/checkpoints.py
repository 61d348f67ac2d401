"""Checkpoints with orbax: atomic, the latest committed one resumed automatically.

`<model_dir>/checkpoints/<step>/` holds two items: `state` (MemoryX's master weights and
optimizer state by group, and the RNG key data; `StandardSave`) and `meta` (JSON: the step,
the data iterator's state, the resolved config and the tokenizer's sha256). orbax writes a
step into a temporary folder and renames it when complete, so a run killed during a save
leaves only a temporary folder, which is ignored and cleaned up; `latest_step()` is always a
complete checkpoint. Saves are asynchronous (the device-to-host copy happens before `save`
returns); `close()` waits for the last one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import orbax.checkpoint as ocp

from wse_trainer.config import ConfigError

__all__ = ["Checkpointer", "resolve_checkpoint"]


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
                state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)
            ),
            force=True,
        )

    def restore(self, step: int, like: Any) -> tuple[Any, dict[str, Any]]:
        """The state (shaped like `like`) and meta of checkpoint `step`."""
        target = jax.tree.map(ocp.utils.to_shape_dtype_struct, like)
        out = self.manager.restore(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardRestore(target), meta=ocp.args.JsonRestore()
            ),
        )
        return out["state"], dict(out["meta"])

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
