"""What `wse plan` plans for: the resolved model (`ModelChoice`), the error of every
`wse plan` input (`PlanError`) and a draft's measured round as the acceptance rate the
serving model takes (`alpha_for_round`). The CLI resolves `--model` into a `ModelChoice`
(`wse_cli.model_choice.resolve_model`); the planners take it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from wse_core import WseError

__all__ = ["PlanError", "ModelChoice", "check_context", "alpha_for_round"]


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


def alpha_for_round(tokens_per_round: float, gamma: int) -> float:
    """The acceptance rate a at which Leviathan's round of `gamma` drafts emits
    `tokens_per_round` tokens: (1 - a^(g+1)) / (1 - a) = 1 + a + ... + a^g
    (`wse_systems.serving.tokens_per_round`, Leviathan et al. 2023 eq. 1) rises from 1 at
    a = 0 to g + 1 at a = 1, so one a in [0, 1] gives it; found by bisection to the last
    bit. It lets a measured round (the speculative engine's `tokens_per_round`: acceptance
    by draft position is not i.i.d., hunt 72: a spec_alpha of 0.6207 read as 2.393 tokens
    a round where the engine kept 2.214) be priced by `wse_systems.serving.Speculation`,
    whose only input is a. A PlanError (one line) outside [1, gamma + 1]."""
    from wse_systems.serving.frontier import tokens_per_round as emitted

    if not 1.0 <= tokens_per_round <= gamma + 1:  # also refuses NaN
        raise PlanError(
            f"--tokens-per-round must be in [1, gamma + 1 = {gamma + 1}] (a round keeps its "
            f"accepted drafts, at most gamma = {gamma}, and one drawn token), got "
            f"{tokens_per_round:g}"
        )
    if tokens_per_round == gamma + 1:  # every draft accepted: a = 1 exactly
        return 1.0
    lo, hi = 0.0, 1.0
    while (mid := (lo + hi) / 2) not in (lo, hi):  # ~53 halvings of [0, 1]
        lo, hi = (mid, hi) if emitted(mid, gamma) < tokens_per_round else (lo, mid)
    return min((lo, hi), key=lambda a: abs(emitted(a, gamma) - tokens_per_round))


@dataclasses.dataclass(frozen=True)
class ModelChoice:
    """The model and, from a params file, its per-system batch (`batch_size` / `num_csx`),
    sequence, systems, micro-batch setting (`micro_batch_size`, None when unset), global
    batch (`batch_size`, split over whatever system count is planned), memory plan
    (`runconfig.activation_stride`, 0: the fastest predicted stride that fits;
    `weight_chunks`, 0: whole layers when they fit, else as the SRAM ledger allows) and wafer
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
    # a params file's optimizer: MemoryX's state per parameter (`training.plan.slots_of`)
    # and whether it clips the global gradient norm (hunt 74: a plan sized Adam and priced
    # per-group updates for every file); a preset: Adam, no clipping (said on the plan)
    optimizer_slots: int = 2
    clip_gradients: bool = False

    def plan_settings(self) -> dict[str, Any]:
        """What every step a plan prices runs of this choice (`micro_batch.plan_step`'s
        memory plan and layout): the file's stride and chunks, its optimizer's state and
        clipping, as `wse train` runs them."""
        from wse_systems.training.placement import StepLayout

        return {"stride": self.activation_stride, "chunks": self.weight_chunks,
                "optimizer_slots": self.optimizer_slots,
                "layout": StepLayout(clip_gradients=self.clip_gradients)}  # fmt: skip

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
            f"{self.activation_stride} (0: the fastest predicted stride that fits) and "
            f"weight_chunks {self.weight_chunks} (0: whole layers when they fit, else column "
            "chunks as the SRAM ledger allows), as wse train runs them",
            f"wafer: {priced}, {where}",
        ]
