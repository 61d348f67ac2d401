"""ModelZoo's runconfig keys for how its runs start and how long they train, where runs here
work one way only.

- `autoload_checkpoint` (ModelZoo: with no checkpoint_path, resume from the newest checkpoint
  in model_dir; its default true) is what every run here does: `true` (or null) is read as
  that and dropped; `false` is refused, saying how to start fresh (a new model_dir) or from a
  chosen step (`--checkpoint-path`); any other value is refused as no boolean.
- `num_epochs`, `steps_per_epoch`: there are no epochs here (a run trains to
  `runconfig.max_steps` steps, each of `train_input.batch_size` sequences); their refusal
  says so and names max_steps (hunt 77: `num_epochs` was "did you mean 'num_steps'?",
  `autoload_checkpoint` "did you mean 'save_initial_checkpoint'?").

`zoo_hint` is `modelzoo_keys.hint` with these notes; `runconfig_read(data)` is the runconfig
mapping with `autoload_checkpoint` read, or the line why it cannot be. Imports only
`modelzoo_keys` of wse_trainer: the reader (`wse_trainer.config`) imports it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from wse_core.errors import shown

from wse_trainer import modelzoo_keys

__all__ = ["READ_AS_RUNS", "RUNCONFIG_NOTES", "runconfig_read", "zoo_hint"]

AUTOLOAD = "autoload_checkpoint"
READ_AS_RUNS = frozenset({("runconfig", AUTOLOAD)})  # keys read and dropped, never unknown

_NO_EPOCHS = (
    "no epochs here: a run trains to runconfig.max_steps steps of train_input.batch_size "
    "sequences each; give runconfig.max_steps (runconfig.num_steps: this invocation's steps)"
)
RUNCONFIG_NOTES = {
    ("runconfig", "num_epochs"): _NO_EPOCHS,
    ("runconfig", "steps_per_epoch"): _NO_EPOCHS,
}


def zoo_hint(section: str, key: str, keys: Iterable[str]) -> str:
    """What a refusal of the unknown `section.key` says to do: the note above, else
    `modelzoo_keys.hint`'s (its notes, or " (did you mean ...?)")."""
    if note := RUNCONFIG_NOTES.get((section, str(key))):
        return f" ({note})"
    return modelzoo_keys.hint(section, key, keys)


def runconfig_read(data: Mapping[str, Any]) -> tuple[dict[str, Any], str | None]:
    """(the runconfig mapping without `autoload_checkpoint`, None), or (it, the line why its
    value cannot run) (module doc)."""
    out = {k: v for k, v in data.items() if k != AUTOLOAD}
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
