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
    sequence, systems, micro-batch setting (`micro_batch_size`, None when unset), global
    batch (`batch_size`, split over whatever system count is planned), memory plan
    (`runconfig.activation_stride`, `weight_chunks`: 0 as the SRAM ledger allows) and wafer
    (`runconfig.wafer`, a preset or a spec file; None: not a params file)."""

    name: str
    config: Any  # a DecoderShape with the sizes of wse_models.ModelConfig
    batch_per_system: int | None = None
    seq_len: int | None = None
    num_csx: int | None = None
    micro_batch: int | str | None = None
    global_batch: int | None = None
    activation_stride: int = 0  # hunt 71: a params file's memory plan was dropped
    weight_chunks: int = 0
    wafer: str | None = None

    def file_notes(self, priced: str) -> list[str]:
        """A params file's memory plan and wafer as a plan on wafer `priced` prices them
        (hunt 71: both were dropped); [] for no params file. A spec file's wafer is named
        BASE+STEM."""
        if self.wafer is None:
            return []
        stem = self.wafer.rsplit("/", 1)[-1].split(".")[0]
        where = (
            "the params file's runconfig.wafer, as wse train runs it"
            if priced == self.wafer or priced.endswith(f"+{stem}")
            else f"not the params file's runconfig.wafer {self.wafer!r} (wse train's): --wafer "
            "or --spec named another, or the file's is a wafer of no system (then wse3)"
        )
        return [
            f"memory plan: the params file's runconfig.activation_stride "
            f"{self.activation_stride} and weight_chunks {self.weight_chunks} (0: as the SRAM "
            "ledger allows), as wse train runs them",
            f"wafer: {priced}, {where}",
        ]
