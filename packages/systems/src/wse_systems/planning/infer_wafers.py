"""The wafers `wse plan infer` serves on: `wafer_serving`, the serving system of the pipeline
plan on the fewest wafers that hold the model (or the count asked) in the stages asked or
searched, and the one-line errors where no count or no stage count holds it (naming what
would). `wse_systems.planning.infer` plans with it and re-exports it."""

from __future__ import annotations

from typing import Any

from wse_core import WaferSpec

from wse_systems import serving as sv
from wse_systems.pipeline import PipelinePlanError, Regions
from wse_systems.planning.choice import PlanError

__all__ = ["wafer_serving"]


def wafer_serving(
    config: Any, spec: WaferSpec, *, num_wafers: int | None, workload: sv.Workload,
    speculation: sv.Speculation | None = None, gemv: str = "sdk", bytes_per_param: int = 2,
    stages: int | None = None,
) -> sv.WaferServing:  # fmt: skip
    """The wafers' serving system on `num_wafers` (default: the fewest that hold the model, its
    draft and one user), `bytes_per_param` bytes a value, `stages` (None: searched) stages."""
    if stages is not None and not 1 <= stages <= config.n_layers:  # hunt 75
        raise PlanError(
            f"--stages {stages}: the pipeline has 1 to {config.n_layers} layer "
            f"stages (one a layer at most); give --stages in [1, {config.n_layers}]"
        )
    if num_wafers and num_wafers > config.n_layers:  # the pipeline's "stages" error (hunt 57)
        raise PlanError(
            f"--wafers {num_wafers}: a replica holds at least one of the model's "
            f"{config.n_layers} layers on each wafer; give --wafers in [1, {config.n_layers}]"
        )
    counts = [num_wafers] if num_wafers else range(1, (stages or config.n_layers) + 1)
    for n in counts:
        try:
            return sv.WaferServing(
                config, spec, num_wafers=n, workload=workload, speculation=speculation,
                regions=Regions(stages=stages, layout=None, gemv=gemv),
                bytes_per_param=bytes_per_param, search_stages=stages is None,
            )  # fmt: skip
        except PipelinePlanError:
            if num_wafers:
                raise
    if stages is None:
        raise PlanError(f"no number of {spec.name} wafers up to {config.n_layers} holds the model")
    # hunt 76: wafer counts up to --stages only were tried, and the error named the layers
    need = wafer_serving(config, spec, num_wafers=None, workload=workload, speculation=speculation,
                         gemv=gemv, bytes_per_param=bytes_per_param).units  # fmt: skip
    raise PlanError(
        f"--stages {stages}: the model needs at least {need} {spec.name} wafers, and a stage "
        f"count is at least the wafer count; give --stages of {need} or more"
        if need > stages else f"--stages {stages}: no number of {spec.name} wafers up to "
        f"{stages} holds the model in {stages} stages; leave --stages out ({need} wafers "
        "hold it in the stages searched)"
    )  # fmt: skip
