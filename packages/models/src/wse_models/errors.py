"""Errors of the model package: a bad config or a bad checkpoint, named, never a wrong model.

Every error subclasses `wse_core.errors.WseError`, so the `wse` command turns it into exit
code 2 and one readable line naming the option, tensor or file at fault.
"""

from __future__ import annotations

import re

from wse_core.errors import WseError

__all__ = ["ModelError", "ModelConfigError", "CheckpointError", "renamed_fields"]


class ModelError(WseError):
    """Base class of the model package's user-facing errors."""


class ModelConfigError(ModelError):
    """A model config, preset name or config option is invalid or unsupported."""


class CheckpointError(ModelError):
    """A checkpoint directory is missing files, tensors, or holds tensors of the wrong shape."""


def renamed_fields(message: str, names: dict[str, str]) -> str:
    """`message` with each `ModelConfig` field in `names` called by the name the user wrote
    (a params file's `model.n_layers`, a config.json's `num_hidden_layers`): a refusal names a
    key the user's file has (hunt 56)."""
    for field, name in names.items():
        message = re.sub(rf"(?<![\w.]){re.escape(field)}\b", name, message)
    return message
