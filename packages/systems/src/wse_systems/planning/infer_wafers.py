"""The wafers `wse plan infer` serves on: `wafer_serving`, the serving system of the pipeline
plan on the fewest wafers that hold the model, its draft and one user (or the count asked)
in the stages asked or searched, and the one-line errors where no count or no stage count
holds it, naming the range of --wafers and --stages that would (hunt 77: "[1, 80]" was named
where 1 to 3 wafers do not hold Llama 3 70B, and the pipeline's own words named no option).
`wse_systems.planning.infer` plans with it and re-exports it."""

from __future__ import annotations

from typing import Any

from wse_core import WaferSpec

from wse_systems import serving as sv
from wse_systems.pipeline import PipelinePlanError, Regions
from wse_systems.placement import data_note
from wse_systems.planning.choice import PlanError

__all__ = ["wafer_serving"]


def wafer_serving(
    config: Any, spec: WaferSpec, *, num_wafers: int | None, workload: sv.Workload,
    speculation: sv.Speculation | None = None, gemv: str = "sdk", bytes_per_param: int = 2,
    stages: int | None = None,
) -> sv.WaferServing:  # fmt: skip
    """The wafers' serving system on `num_wafers` (default: the fewest that hold the model, its
    draft and one user: `max_users` >= 1), `bytes_per_param` bytes a value, `stages` (None:
    searched) stages."""
    kw = dict(workload=workload, speculation=speculation, gemv=gemv,
              bytes_per_param=bytes_per_param)  # fmt: skip
    _check_counts(config, spec, num_wafers, stages, kw)
    layers = config.n_layers
    for n in [num_wafers] if num_wafers else range(1, (stages or layers) + 1):
        try:
            ws = _built(config, spec, n, stages, kw)
        except PipelinePlanError:
            if num_wafers:
                raise
            continue
        if ws is not None:
            return ws
        if num_wafers:  # hunt 77: 4 wafers held the 70B and its draft, and no user
            raise _no_user(config, spec, n, speculation, _fewest(config, spec, kw, stages))
    need = _fewest(config, spec, kw)
    if stages is None or need is None:
        raise _none_holds(spec, layers)
    # hunt 76: wafer counts up to --stages only were tried, and the error named the layers
    why = (f"the model needs at least {need} {spec.name} wafers, and a stage count is at least "
           f"the wafer count" if need > stages else f"no number of {spec.name} wafers up to "
           f"{stages} holds the model in {stages} stages{data_note(spec)}")  # fmt: skip
    low = _least_stages(config, spec, kw, None) or need
    raise PlanError(f"--stages {stages}: {why}; give --stages in [{low}, {layers}]")


def _built(config: Any, spec: WaferSpec, n: int, stages: int | None,
           kw: dict[str, Any]) -> sv.WaferServing | None:  # fmt: skip
    """`n` wafers' serving system in `stages` (None: searched); None where they hold the
    weights but no user; PipelinePlanError where they do not hold the weights."""
    ws = sv.WaferServing(
        config, spec, num_wafers=n, workload=kw["workload"], speculation=kw["speculation"],
        regions=Regions(stages=stages, layout=None, gemv=kw["gemv"]),
        bytes_per_param=kw["bytes_per_param"], search_stages=stages is None,
    )  # fmt: skip
    return ws if ws.max_users >= 1 else None


def _holds(config: Any, spec: WaferSpec, n: int, stages: int | None, kw) -> bool:
    try:
        return _built(config, spec, n, stages, kw) is not None
    except PipelinePlanError:
        return False


def _fewest(config: Any, spec: WaferSpec, kw, stages: int | None = None) -> int | None:
    """The fewest wafers that hold the model, its draft and one user in `stages` stages
    (None: searched); None where no count up to the stages (or the layers) does."""
    top = stages or config.n_layers
    return next((n for n in range(1, top + 1) if _holds(config, spec, n, stages, kw)), None)


def _least_stages(config: Any, spec: WaferSpec, kw, wafers: int | None) -> int | None:
    """The fewest stages that hold the model, its draft and one user on `wafers` wafers (None:
    on the fewest that hold them in those stages); None where no stage count does."""
    start = wafers or _fewest(config, spec, kw)
    for s in range(start or config.n_layers + 1, config.n_layers + 1):
        if (_holds(config, spec, wafers, s, kw) if wafers else
                _fewest(config, spec, kw, s) is not None):  # fmt: skip
            return s
    return None


def _no_user(config, spec, n: int, speculation, need: int | None) -> PlanError:
    """`n` wafers hold the weights (and the draft's) but not one user's KV cache."""
    draft = "" if speculation is None else f" and its draft {speculation.to_dict()['draft']}"
    more = "" if need is None else f"; give --wafers in [{need}, {config.n_layers}]"
    return PlanError(f"--wafers {n}: {n} {spec.name} wafers hold the model{draft} but not one "
                     f"user's KV cache{more}")  # fmt: skip


def _check_counts(config, spec, wafers: int | None, stages: int | None, kw) -> None:
    """--wafers and --stages within what a pipeline can be (hunts 57, 75, 77): each wafer at
    least one stage, each stage at least one layer, and at least the fewest wafers that hold
    the model (found only when a range must be named), each error naming the range that
    holds it (its low end found; above it, more stages or wafers taken to hold it too)."""
    layers, name = config.n_layers, spec.name
    if stages is not None and not 1 <= stages <= layers:
        low, need = _least_stages(config, spec, kw, wafers), _fewest(config, spec, kw)
        if need is None:
            raise _none_holds(spec, layers)
        what = (f"each of --wafers {wafers} at least one stage; give" if wafers else "each "
                f"wafer at least one stage, and the model needs at least {need} {name} wafers; "
                "give")  # fmt: skip
        if low is None:  # --wafers too few for any stage count
            low = _least_stages(config, spec, kw, None) or need
            what = (f"{wafers} {name} wafers hold it in no stage count; give --wafers "
                    f"{_span(need, layers)} and")  # fmt: skip
        raise PlanError(
            f"--stages {stages}: a stage holds at least one of the model's {layers} layers and "
            f"{what} --stages {_span(low, layers)}"
        )
    if wafers and wafers > layers:  # the pipeline's "stages" error (hunt 57)
        need, top = _fewest(config, spec, kw, stages), min(layers, stages or layers)
        if need is None:
            raise _none_holds(spec, top)
        fewer = f", and fewer than {need} {name} wafers do not hold it" if need > 1 else ""
        raise PlanError(
            f"--wafers {wafers}: each wafer holds at least one of the model's {layers} "
            f"layers{fewer}; give --wafers {_span(need, top)}"
        )
    if wafers and stages is not None and stages < wafers:
        low, lo = _least_stages(config, spec, kw, wafers), _fewest(config, spec, kw, stages)
        if low is None:  # hunt 78: "--stages in [3, 80]" was named where 3 wafers hold none
            need = _fewest(config, spec, kw)
            if need is None:
                raise _none_holds(spec, layers)
            raise PlanError(
                f"--stages {stages} on --wafers {wafers}: each wafer holds at least one stage, "
                f"and {wafers} {name} wafers hold the model in no stage count; give --wafers "
                f"{_span(need, layers)} and --stages "
                f"{_span(_least_stages(config, spec, kw, None) or need, layers)}"
            )
        fewer = "" if lo is None else f", or --wafers {_span(lo, stages)}"
        raise PlanError(
            f"--stages {stages} on --wafers {wafers}: each wafer holds at least one stage; give "
            f"--stages {_span(low, layers)}{fewer}"
        )


def _none_holds(spec: WaferSpec, top: int) -> PlanError:
    """No wafer count up to `top` holds the model: said with a PE's bytes for data and the
    program's reserve beside them (review 82: at code_stack_bytes_per_pe=49151 the reserve
    that left 1 B a PE went unsaid)."""
    return PlanError(
        f"no number of {spec.name} wafers up to {top} holds the model{data_note(spec)}"
    )


def _span(low: int, high: int) -> str:
    """ "in [low, high]", or the one value where they meet."""
    return str(low) if low == high else f"in [{low}, {high}]"
