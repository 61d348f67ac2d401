"""The engine a model directory serves, built where it is consumed (not by the loader).

Contract. `load_engine(model_dir, spec=wafer, speculative_config=None, max_slots=4,
max_context=None)` loads the model with `model_dir.load_model` and returns the `Engine` the
server runs:
without a speculative config, the pipelined wafer engine (`pipeline.engine.PipelineEngine`)
with min(max_slots, n_layers) stages, one slot per stage (`pipeline_stages`; `slot_cap_line`
is what a server says at start when that is fewer than `max_slots`); with a
`speculative.config.SpeculativeConfig` (or the mapping it is parsed from), a
`speculative.engine.SpeculativeEngine` of `max_slots` independent slots whose draft is the
config's `model`. Either engine predicts its tokens on `spec` (a `WaferSpec`, required: the
caller resolved it). `model_dir` builds no engine, so the engines may import it without a
circle.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from wse_core.hw.spec import WaferSpec

from wse_inference.model_dir import load_model
from wse_inference.pipeline.engine import PipelineEngine
from wse_inference.speculative.config import SpeculativeConfig
from wse_inference.speculative.engine import SpeculativeEngine

__all__ = ["load_engine", "pipeline_stages", "slot_cap_line"]


def pipeline_stages(max_slots: int, n_layers: int) -> int:
    """The pipelined engine's stages for `max_slots` asked of a model of `n_layers`: its
    decode slots, one per stage, and at most one stage per layer."""
    return max(1, min(max_slots, n_layers))


def slot_cap_line(max_slots: int, n_layers: int) -> str | None:
    """The line a server says once at start when the pipeline holds fewer slots than the
    `max_slots` asked (hunt 68: 256 asked of a 32-layer model served 32, silently); None
    when it holds them all."""
    stages = pipeline_stages(max_slots, n_layers)
    if stages == max_slots:
        return None
    return (
        f"max_num_seqs {max_slots} > {stages} pipeline stages (one slot per layer of a "
        f"{n_layers}-layer model): serving {stages} slot{'s' * (stages != 1)}"
    )


def load_engine(
    model_dir: str,
    *,
    spec: WaferSpec,
    speculative_config: SpeculativeConfig | Mapping[str, Any] | None = None,
    max_slots: int = 4,
    max_context: int | None = None,
    weights: dict[str, Any] | None = None,
    draft_weights: dict[str, Any] | None = None,
) -> PipelineEngine | SpeculativeEngine:
    """The engine the server runs for `model_dir` (see the module contract); `weights` and
    `draft_weights`: the target's and the draft's tensors already read
    (`model_dir.read_weights`), taken, not read again."""
    sc = speculative_config
    if sc is not None and not isinstance(sc, SpeculativeConfig):
        sc = SpeculativeConfig.from_mapping(sc) if sc else None
    target = load_model(model_dir, weights=weights)
    if sc is not None:
        draft = load_model(sc.draft_dir(), tokenizer_required=False, weights=draft_weights)
        return SpeculativeEngine(
            target,
            draft,
            gamma=sc.num_speculative_tokens,
            spec=spec,
            max_slots=max_slots,
            max_context=max_context,
        )
    stages = pipeline_stages(max_slots, target.config.n_layers)
    return PipelineEngine(target, stages=stages, max_context=max_context, spec=spec)
