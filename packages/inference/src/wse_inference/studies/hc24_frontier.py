"""Experiment `hc24-frontier`: Llama 3.1 8B and 70B served at 128 prompt / 20 output tokens
per user, the wafers' and an H100 DGX's latency-throughput frontiers side by side (the chart
of the Hot Chips 2024 talk, REFERENCES.md: aggregate tokens/s against tokens/s per user).

Predicted with `wse_systems.serving` (nothing fitted; see its modules for the models):
- wafers (`WaferServing`): 8B on one CS-3, 70B on four, the stage count searched as `wse plan
  infer` searches it, 16-bit weights;
  users in flight up to what fits the regions' SRAM beside the weights, each token priced
  per instruction by `wse_systems.decoder` on the plan with the one calibration, a region
  working on one token at a time; prompts in blocks pipelined over the regions;
- GPUs (`GpuServing`): one DGX H100 (8 GPUs) in replicas of every tp layout that holds the
  model, a batch per replica: a step's GEMMs (weights read once against their products)
  then its attention (every user's KV read against its products), each its own roofline at
  `HBM_FRACTION` of HBM bandwidth and `MFU`, the fractions `wse plan infer` uses too
  (`wse_systems.serving.gpu_step.FITTED_*`, fitted on TensorRT-LLM's H100 rows, the
  calibration set's GPU rows; hunt 66: 0.4 and 0.8 were assumed here, so the same GPU job
  was priced two ways), tensor-parallel all-reduces on NVLink (`wse_systems.gpu_links`);
- each system's knee (`wse_systems.serving.knee`: per-user speed x aggregate maximal), its
  one-user speed, its best aggregate, the most users that fit; energy and cost per million
  tokens at the knee with the system busy all day (hardware rate and peak power, the
  assumptions of `wse_systems.economics` and `wse_systems.gpu`; people not counted);
- speculative decoding with `DRAFT` (Llama 3.2 1B shares the Llama 3 tokenizer), gamma
  `GAMMA`, at the acceptance rates `ALPHAS` (inputs, not measured on these models): on the
  wafers the draft holds the fewest PE rows of each wafer that fit it.
The 70B tokens/s figures Cerebras published are held out (REFERENCES.md lists only their
inputs): `published` stays empty; no row is the calibration case (that is batch 1 at an
8k context, experiment `hotchips24-inference`).

Measured: the pipelined engine's schedule as run on the emulator (a tiny model on
`EMULATED_STAGES` stages, 1..S users): each stage's share of the ticks it worked on an
occupied slot, beside the serving model's occupancy at equal stage times (U / S).
`--quick` changes nothing: the emulated part is already tiny.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from wse_core.cost.assumptions import assumed_spec
from wse_core.cost.reads import recording
from wse_core.studies.experiment import ExperimentResult, PredictionRow, read_by
from wse_systems import economics as eco
from wse_systems.gpu import H100
from wse_systems.serving import (
    Frontier,
    GpuServing,
    OperatingPoint,
    Speculation,
    WaferServing,
    Workload,
    frontier,
    knee,
)
from wse_systems.serving.gpu_step import FITTED_HBM_FRACTION, FITTED_MFU, GpuFractions

__all__ = ["run", "CASES"]

NAME = "hc24-frontier"
WORKLOAD = Workload(prompt_tokens=128, output_tokens=20)  # the talk's chart
WAFER = "wse3"
# (published model name, wse_models preset, CS-3 systems)
CASES = (("llama3.1-8b", "llama3-8b", 1), ("llama3.1-70b", "llama3-70b", 4))
GPUS = 8  # one DGX H100
MFU = FITTED_MFU  # achieved fraction of the tensor peak, fitted (trtllm-h100)
HBM_FRACTION = FITTED_HBM_FRACTION  # achieved fraction of HBM bandwidth, fitted (trtllm-h100)
DRAFT, GAMMA, ALPHAS = "llama3-1b", 4, (0.6, 0.8)
EMULATED_STAGES = 2


def _systems(config: Any, wafers: int, spec: Speculation | None):
    """(wafers, GPUs): both sides' serving systems."""
    w, g = _builders(config, wafers, spec)
    return w(), g()


def _builders(config: Any, wafers: int, spec: Speculation | None):
    """(wafers, GPUs): each a function that builds that side's serving system (it prices as
    it is built: `_case` records what each side read)."""
    # the stage count searched, as `wse plan infer` plans it (hunt 75)
    w = lambda: WaferServing(config, assumed_spec(WAFER), num_wafers=wafers,  # noqa: E731
                             workload=WORKLOAD, speculation=spec, search_stages=True)  # fmt: skip
    g = lambda: GpuServing(config, H100, num_gpus=GPUS, workload=WORKLOAD,  # noqa: E731
                           fractions=GpuFractions(HBM_FRACTION, MFU), speculation=spec)  # fmt: skip
    return w, g


def _per_million(units: int, peak_w: float, usd_per_hour: float, tokens_per_s: float):
    """(kWh, $) per million tokens for `units` busy at peak power, hardware rate only."""
    s = 1e6 / tokens_per_s
    return eco.energy_j(s, units * peak_w) / 3.6e6, units * usd_per_hour * s / 3600


def _side(name: str, system, front: Frontier, k: OperatingPoint, power, usd) -> dict:
    kwh, cost = _per_million(system.units, power, usd, k.aggregate_tokens_per_s)
    return {
        "model": name,
        "system": f"{system.units} x {system.name}",
        "one_user_tokens_per_s": system.point(1).user_tokens_per_s,
        "knee_users": k.users,
        "knee_user_tokens_per_s": k.user_tokens_per_s,
        "knee_tokens_per_s": k.aggregate_tokens_per_s,
        "knee_ttft_ms": k.ttft_s * 1e3,
        "knee_bound": k.bound,
        "best_tokens_per_s": front.best_aggregate(),
        "max_users": system.max_users,
        "knee_kwh_per_mtok": kwh,
        "knee_usd_per_mtok": cost,
    }


def _case(name: str, model_name: str, wafers: int, spec: Speculation | None) -> list[dict]:
    import wse_models

    config = wse_models.preset_config(model_name, dtype="bfloat16")
    w, g = _builders(config, wafers, spec)
    wafer = assumed_spec(WAFER)
    (peak, _), usd_w = eco.system_power_w(wafer), eco.wafer_rates(wafer).usd_per_system_hour
    out = []
    for build, power, usd in ((w, peak, usd_w),
                              (g, H100.power_w_per_gpu()[0], H100.usd_per_gpu_hour)):  # fmt: skip
        # each side's rows list what its own pricing read (hunt 69: none listed clock_hz,
        # which moved the CS-3's, nor gpu.kernel_s, which moved the H100's)
        with recording() as got:
            system = build()
            front = frontier(system)
            k = knee(system, front)
            side = _side(name, system, front, k, power, usd)
        if all(p.users != k.users for p in front.points):  # the knee among the points drawn
            points = tuple(sorted((*front.points, k), key=lambda p: p.users))
            front = dataclasses.replace(front, points=points)
        side["speculation"] = "none" if spec is None else _spec_label(spec)
        side["_reads"] = got
        side["_frontier"], side["_knee"], side["_alpha"] = front, k, spec and spec.alpha
        out.append(side)
    return out


_UNITS = {
    "one_user_tokens_per_s": "tokens/s", "knee_users": "users",
    "knee_user_tokens_per_s": "tokens/s", "knee_tokens_per_s": "tokens/s",
    "knee_ttft_ms": "ms", "best_tokens_per_s": "tokens/s", "max_users": "users",
    "knee_kwh_per_mtok": "kWh", "knee_usd_per_mtok": "USD",
}  # fmt: skip


def _spec_label(spec: Speculation) -> str:
    return f"{DRAFT} gamma {spec.gamma} alpha {spec.alpha:g}"


def _rows(side: dict) -> list[PredictionRow]:
    params = {"model": side["model"], "system": side["system"], "prompt_tokens": 128,
              "output_tokens": 20, "speculation": side["speculation"]}  # fmt: skip
    rows = [PredictionRow(key, float(side[key]), unit, params) for key, unit in _UNITS.items()]
    return read_by(side["_reads"], *rows)


def _points(side: dict) -> list[dict]:
    """The side's frontier, one measurement row per load."""
    keys = ("model", "system", "speculation")
    return [{**{k: side[k] for k in keys}, "users": p.users,
             "user_tokens_per_s": p.user_tokens_per_s,
             "aggregate_tokens_per_s": p.aggregate_tokens_per_s, "ttft_ms": p.ttft_s * 1e3,
             "bound": p.bound} for p in side["_frontier"].points]  # fmt: skip


def _emulated(seed: int) -> list[dict]:
    """Users 1..S on an S-stage engine: the schedule's stage occupancy as run, and the
    model's at equal stage times."""
    from wse_systems.serving.wafer import occupancy

    from wse_inference.engine import SamplingParams
    from wse_inference.pipeline.engine import PipelineEngine
    from wse_inference.testing import tiny_model

    s = EMULATED_STAGES
    model = tiny_model("llama", n_layers=s, seed=seed)
    eng = PipelineEngine(model, stages=s, max_context=32, spec=assumed_spec(WAFER))
    greedy = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
    rows = []
    for users in range(1, s + 1):
        state = eng.init_decode_state()
        for slot in range(users):
            prefix = eng.prefill(prompt_ids=[1 + slot, 2, 3], sampling=greedy)
            state = eng.insert(prefix=prefix, state=state, slot=slot)
        for _ in range(8):
            state, _ = eng.generate(state=state)
        got = eng.stage_occupancy(state)
        model = occupancy({f"stage{j}": 1.0 for j in range(s)}, s, users)
        rows.append({"emulated": "tiny-llama", "stages": s, "users": users,
                     "stage_occupancy_emulated": [float(x) for x in got],
                     "stage_occupancy_model": list(model.values())})  # fmt: skip
    return rows


def _figure(sides: list[dict]):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from wse_systems.serving.figure import Curve, draw_frontiers

    fig, axes = plt.subplots(1, len(CASES), figsize=(11, 4.4))
    colors = {True: "tab:orange", False: "tab:green"}
    for ax, (name, _, _) in zip(axes, CASES, strict=True):
        curves = []
        for side in (s for s in sides if s["model"] == name):
            alpha = side["_alpha"]
            if alpha is not None and alpha != max(ALPHAS):
                continue
            wafer = "CS-3" in side["system"]
            label = side["system"] + ("" if alpha is None else f", {DRAFT} draft, a={alpha:g}")
            chosen = side["_knee"] if alpha is None else None
            curves.append(Curve(side["_frontier"], chosen, colors[wafer], label,
                                "-" if alpha is None else "--"))  # fmt: skip
        draw_frontiers(ax, curves, title=f"{name}: 128 prompt / 20 output tokens (* knee)")
    fig.tight_layout()
    return fig


def run(*, quick: bool = False, seed: int = 0) -> ExperimentResult:
    import wse_models

    del quick  # nothing to shrink: the predictions are analytic, the emulated part tiny
    sides = []
    for name, model_name, wafers in CASES:
        sides += _case(name, model_name, wafers, None)
        for alpha in ALPHAS:
            draft = wse_models.preset_config(DRAFT, dtype="bfloat16")
            spec = Speculation(draft=draft, gamma=GAMMA, alpha=alpha)
            sides += _case(name, model_name, wafers, spec)
    figure = _figure(sides)
    predictions = [r for side in sides for r in _rows(side)]
    summary = [{k: v for k, v in s.items() if not k.startswith("_")} for s in sides]
    points = [row for s in sides for row in _points(s)]
    return ExperimentResult(NAME, seed, _config(), summary + points + _emulated(seed),
                            predictions, figure)  # fmt: skip


def _config() -> dict:
    from wse_core.cost.calibration import current

    wafer = assumed_spec(WAFER)
    peak, idle = eco.system_power_w(wafer)
    gpeak, gidle = H100.power_w_per_gpu()
    return {
        "workload": WORKLOAD.to_dict(),
        "cases": [{"model": n, "preset": p, "cs3_systems": w} for n, p, w in CASES],
        "gpus": {"count": GPUS, "system": "DGX H100", **H100.to_dict()},
        "assumptions": {
            "mfu": MFU,
            "hbm_fraction": HBM_FRACTION,
            "gpu_fractions_source": "fitted on NVIDIA TensorRT-LLM v0.19.0's H100 FP8 rows "
            "(wse_systems.serving.gpu_step.FITTED_*, experiment trtllm-h100), as wse plan infer",
            "gpu_memory_usable": 0.9,
            "wafer_power_w": {"busy": peak, "idle": idle, "source": eco.system_of(wafer).source},
            "gpu_power_w_per_gpu": {"busy": gpeak, "idle": gidle,
                                    "source": "DGX H100 max / 8 (wse_systems.gpu)"},
            "usd_per_cs3_hour": eco.wafer_rates(wafer).usd_per_system_hour,
            "usd_per_gpu_hour": H100.usd_per_gpu_hour,
            "cost_per_mtok": "hardware hours at the knee, busy all day; people not counted",
            "speculation": {"draft": DRAFT, "gamma": GAMMA, "alphas": list(ALPHAS),
                            "alpha_source": "input (not measured on these models)"},
            "knee": "the load maximising per-user speed x aggregate throughput",
            "calibration_in_force": current().describe(),
        },
    }  # fmt: skip
