"""What `wse plan` plans for: the resolved model (`ModelChoice`) and the error of every
`wse plan` input (`PlanError`). The CLI resolves `--model` into a `ModelChoice`
(`wse_cli.model_choice.resolve_model`); the planners take it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from wse_core import WseError

__all__ = ["PlanError", "ModelChoice"]


class PlanError(WseError):
    """`wse plan` input that cannot be planned (unknown model, negative tokens...)."""


@dataclasses.dataclass(frozen=True)
class ModelChoice:
    """The model and, from a params file, its per-system batch (`batch_size` / `num_csx`),
    sequence, systems, micro-batch setting (`micro_batch_size`, None when unset) and global
    batch (`batch_size`, split over whatever system count is planned)."""

    name: str
    config: Any  # a DecoderShape with the sizes of wse_models.ModelConfig
    batch_per_system: int | None = None
    seq_len: int | None = None
    num_csx: int | None = None
    micro_batch: int | str | None = None
    global_batch: int | None = None
