"""What `wse plan` plans for: the resolved model (`ModelChoice`) and the error of every
`wse plan` input (`PlanError`). The CLI resolves `--model` into a `ModelChoice`
(`wse_cli.model_choice.resolve_model`); the planners take it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from wse_core import WseError

__all__ = ["PlanError", "ModelChoice", "check_context"]


class PlanError(WseError):
    """`wse plan` input that cannot be planned (unknown model, negative tokens...)."""


def check_context(config: Any, what: str, tokens: int) -> None:
    """`what` (a sequence of `tokens` tokens) within the model's `max_seq_len`, for GPT-2
    (the rows of its position table) and Llama (the longest context trained for) alike: the
    rule `wse train` applies to a params file's max_sequence_length (`check_config`), and
    the inference engines' context limit (hunt 63: `--seq-len 4096` planned GPT-2)."""
    if tokens > config.max_seq_len:
        raise PlanError(
            f"{what} exceeds the model's max_seq_len={config.max_seq_len}; use at most "
            f"{config.max_seq_len}"
        )


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
