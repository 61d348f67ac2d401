"""ModelZoo's runconfig keys for how its runs start and how long they train, where runs here
work one way only.

- `autoload_checkpoint` (ModelZoo: with no checkpoint_path, resume from the newest checkpoint
  in model_dir; its default true) is what every run here does: `true` (or null) is read as
  that and dropped; `false` is refused, saying how to start fresh (a new model_dir) or from a
  chosen step (`--checkpoint-path`); any other value is refused as no boolean (hunt 77: "did
  you mean 'save_initial_checkpoint'?"). `num_epochs` and `steps_per_epoch`
  (no epochs here) are refused with their note in `modelzoo_keys.MODELZOO_NOTES`; a null
  (ModelZoo's default: unset) is dropped, as the key left out (hunt 78: refused as unknown).

`runconfig_read(data)` is the runconfig mapping with `autoload_checkpoint` and the null epoch
keys read, or the line why it cannot be. The reader (`wse_trainer.config`) imports it; a
`key=null` override of a key in `READ_AS_RUNS` is no unknown key (`override_nulls`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from wse_core.errors import shown

__all__ = ["READ_AS_RUNS", "runconfig_read"]

AUTOLOAD = "autoload_checkpoint"
EPOCHS = ("num_epochs", "steps_per_epoch")  # null: unset, dropped; a value: refused
# keys whose null is read and dropped, never unknown
READ_AS_RUNS = frozenset({("runconfig", k) for k in (AUTOLOAD, *EPOCHS)})


def runconfig_read(data: Mapping[str, Any]) -> tuple[dict[str, Any], str | None]:
    """(the runconfig mapping without `autoload_checkpoint` and null epoch keys, None), or
    (it, the line why its value cannot run) (module doc)."""
    out = {k: v for k, v in data.items() if k != AUTOLOAD and not (k in EPOCHS and v is None)}
    if AUTOLOAD not in data or data[AUTOLOAD] is None or data[AUTOLOAD] is True:
        return out, None
    value = data[AUTOLOAD]
    if value is False:
        return out, (
            "runconfig.autoload_checkpoint false cannot run: a run here always resumes from "
            "the newest checkpoint in its model_dir (ModelZoo's true); to start fresh, leave "
            "the key out and give a new model_dir (-o), or --checkpoint-path for a chosen step"
        )
    return out, (
        f"runconfig.autoload_checkpoint must be true or false, got {shown(value, quote=False)} "
        "(true, ModelZoo's default, is what runs here: leave the key out)"
    )
