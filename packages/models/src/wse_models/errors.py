"""Errors of the model package: a bad config or a bad checkpoint, named, never a wrong model.

Every error subclasses `wse_core.errors.WseError`, so the `wse` command turns it into exit
code 2 and one readable line naming the option, tensor or file at fault.
"""

from __future__ import annotations

from wse_core.errors import WseError

__all__ = ["ModelError", "ModelConfigError", "CheckpointError"]


class ModelError(WseError):
    """Base class of the model package's user-facing errors."""


class ModelConfigError(ModelError):
    """A model config, preset name or config option is invalid or unsupported."""


class CheckpointError(ModelError):
    """A checkpoint directory is missing files, tensors, or holds tensors of the wrong shape."""
