"""Experiment `hotchips24-inference`: predicted batch-1 decode tokens/s, the published rows.

Predicted (`wse_systems.published.served_token`: each model on the plan `wse plan infer
--users 1` serves it on for the measuring workload, its search over both layouts, the stage
counts and the placements; 16-bit weights, KV cache for an 8k context, priced mechanism by
mechanism by `wse_systems.decoder`; hunt decode41: one region per layer was priced, 32 stages
for 8B where the planner takes 16), row for row, each with its cycles per token by mechanism and
`params["head_and_io_cycles"]`: the part of those cycles outside the layers (the head's
product, the argmax, the next token's embedding and its trip to the host where paid; hunt
73: named `per_token_cycles`, it read as the whole token's, 8,185 of 8B's ~365k cycles):

- Llama 3.1 8B on one WSE-3: a calibration-set row (`params["calibration"]` is True) used
  as a check: its published 1,800 tokens/s (Cerebras, Hot Chips 2024;
  references/calibration-rows.md) fits nothing; the ratio shows how far mechanisms alone land.
  Beside it (`params["swept ..."]`, `wse_systems.published.check_sweeps`): the check at each
  value of the assumptions that move it and that no row identifies (the clock, the cache the
  attention reads, the trip to the host's latency, the users in flight).
- Llama 3.1 70B on 4 CS-3 and 405B on the fewest WSE-3 that hold it (`params["wafers"]`
  says how many): true predictions. REFERENCES.md lists only their inputs, so `published`
  is None there.

Each row reads the cache of the workload that measured the published figures (Artificial
Analysis' 1k workload: `wse_systems.published.PUBLISHED_SETUP["kv_tokens"]` cached tokens on
average); the 8B and 70B rows (the August 2024 release, whose wafer I/O waited on compute)
pay the token's trip to the host per token, the 405B row (November 2024, after the release
that made the wafer's I/O asynchronous) does not (`PUBLISHED_SETUP`'s sources).

Each GEMV is priced as the SDK gemv dataflow (`PUBLISHED_SETUP["gemv"]`, the row's value:
Cerebras' kernels are not public); WaferLLM's MeshGEMV (`gemv="meshgemv"`,
`wse_systems.meshgemv`) is priced beside it on the plan `wse plan infer --gemv meshgemv`
serves it on (`plans[i]["meshgemv_tokens_per_s"]`), a stated alternative, never the row's
value, with its route resets' assumed cost swept (`plans[i]["meshgemv_route_resets"]`).

Measured: the plans (regions per wafer, bytes per PE), the predicted phases' bound and the
time between wafers, and, on the emulator, a tiny model's pipelined decode (greedy) agreeing
token for token with the plain decoder, with its engine's own report beside its wall time.
`--quick` changes nothing here: the emulated part is already tiny.
"""

from __future__ import annotations

import time

from wse_core.cost.assumptions import assumed_spec
from wse_core.studies.experiment import ExperimentResult, PredictionRow
from wse_models import preset_config
from wse_systems.decoder import PER_TOKEN
from wse_systems.published import PUBLISHED_SETUP, check_sweeps, served_token, sweep_params

from wse_inference.pipeline.perf import CALIBRATION_TOKENS_PER_S, tokens_per_s

__all__ = ["run", "run_predictions", "case_token", "CASES"]

SOURCE = "Cerebras, Hot Chips 2024"
CONTEXT = int(PUBLISHED_SETUP["context_len"])  # the API's context (tokens)
KV_TOKENS = int(PUBLISHED_SETUP["kv_tokens"])  # the measuring workload's mean cache
# (published model name, wse_models preset, wafers: a number, or None for the fewest,
# the token's trip to the host on the step's path: the release the figure was measured on)
CASES = (
    ("llama3.1-8b", "llama3-8b", 1, True),
    ("llama3.1-70b", "llama3-70b", 4, True),
    ("llama3.1-405b", "llama3-405b", None, False),
)
CALIBRATION_CASE = "llama3.1-8b"


GEMV = str(PUBLISHED_SETUP["gemv"])  # the program each row's value prices its GEMVs as


def _predictions() -> tuple[list[PredictionRow], list[dict]]:
    rows, plans = [], []
    for name, model_name, wafers, token_out in CASES:
        report, plan = case_token(model_name, wafers, token_out)
        mesh, mesh_plan = case_token(model_name, wafers, token_out, gemv="meshgemv")
        calibration = name == CALIBRATION_CASE
        published = CALIBRATION_TOKENS_PER_S if calibration else None
        params = {
            "model": name,
            "wafer": "wse3",
            "wafers": plan.num_wafers,
            "precision": "fp16",
            "context": CONTEXT,
            "kv_tokens": KV_TOKENS,
            "token_out": token_out,
            "calibration": calibration,
            "gemv": plan.gemv,
        }
        rate = tokens_per_s(report)
        mech = report.predicted.by_mechanism()
        # the token's cost outside the layers (`wse_systems.decoder.PER_TOKEN`, on the head
        # region): lm_head, argmax, the next embedding and, where paid, the trip out
        head = report.predicted.leaf(PER_TOKEN).seconds * plan.spec.clock_hz
        params |= {"per": "token", "head_and_io_cycles": head}
        params |= sweep_params(check_sweeps()) if calibration else {}
        source = f"{SOURCE} (calibration set, check)" if published else None
        rows.append(
            PredictionRow("tokens_per_s", rate, "tokens/s", params, published, source, mech)
        )
        between = report.predicted.leaf("between_wafers")
        plans.append(
            {
                **params,
                "preset": model_name,
                "stages": plan.num_stages,
                "tokens_per_s": rate,
                "layout": plan.layout,
                "meshgemv_tokens_per_s": tokens_per_s(mesh),
                "meshgemv_layout": mesh_plan.layout,
                "meshgemv_stages": mesh_plan.num_stages,
                "meshgemv_route_resets": _resets_swept(model_name, mesh_plan, token_out),
                "ms_per_token": report.predicted_s * 1e3,
                "bound": report.bound,
                "critical_phase": report.predicted.critical().name,
                "between_wafers_us": between.seconds * 1e6,
                "max_bytes_per_pe": max(s.bytes_per_pe for s in plan.stages),
                "calibration_in_force": report.calibration.describe(),
            }
        )
    return rows, plans


def _resets_swept(model_name: str, plan, token_out: bool) -> str:
    """The MeshGEMV figure on `plan` at each value of its route resets' assumed cost
    (`wse_systems.meshgemv.ROUTE_RESET`'s sweep; hunt decode41), the one priced marked."""
    from wse_core.cost.assumptions import assume, system_constant
    from wse_core.cost.reads import recording
    from wse_systems.meshgemv import ROUTE_RESET, ROUTE_RESET_KEY
    from wse_systems.token import price_token

    config, out = preset_config(model_name), []
    with recording(isolated=True):  # the values swept are no values the row read
        priced = system_constant(ROUTE_RESET_KEY)
        for cycles in ROUTE_RESET.sweep:
            with assume(**{ROUTE_RESET_KEY: cycles}):
                report = price_token(config, plan, kv_tokens=KV_TOKENS, token_out=token_out)
            mark = " (priced)" if cycles == priced else ""
            out.append(f"{cycles:g} cycles a colour{mark}: {tokens_per_s(report):,.0f}")
    return "; ".join(out)


def case_token(
    model_name: str, wafers: int | None, token_out: bool, gemv: str = GEMV, spec=None
):  # fmt: skip
    """(report, plan) of one decode token of a row's case (`CASES`) on `spec` (default: WSE-3
    under the assumptions in force): the plan `wse plan infer --users 1` serves it on for the
    measuring workload (`wse_systems.published.served_token`), `KV_TOKENS` cached tokens
    read, the trip to the host where the row's release paid it, each GEMV priced as `gemv`."""
    config = preset_config(model_name)
    spec = assumed_spec("wse3") if spec is None else spec
    return served_token(config, spec, num_wafers=wafers, gemv=gemv, kv_tokens=KV_TOKENS,
                        token_out=token_out)  # fmt: skip


def _emulated(seed: int) -> dict:
    """A tiny model on 2 pipelined stages vs the plain decoder, greedy; the engine's report."""
    from wse_inference.decoding import PlainDecoder
    from wse_inference.engine import SamplingParams
    from wse_inference.pipeline.engine import PipelineEngine
    from wse_inference.testing import tiny_model

    model = tiny_model("llama", n_layers=2, seed=seed)
    greedy = SamplingParams(max_tokens=16, temperature=0.0)
    prompt = [1, 2, 3, 4]
    eng = PipelineEngine(model, stages=2, max_context=32, spec=assumed_spec("wse3"))
    eng.generate_all([prompt], [greedy], steps_per_call=8)  # compile
    t0 = time.perf_counter()
    got = eng.generate_all([prompt], [greedy], steps_per_call=8)[0]
    wall = time.perf_counter() - t0
    ref = PlainDecoder(model.config, model.params, max_context=32).generate(prompt, greedy)
    report = eng.report(measured_wall_s=wall, tokens=len(got), kv_tokens=len(prompt) + 8)
    return {
        "model": "tiny-llama (emulated)",
        "stages": 2,
        "tokens": len(got),
        "equal_to_plain_decoder": got == ref.tokens,
        "measured_s_per_token": report.measured_wall_s,
        "predicted_wafer_s_per_token": report.predicted_s,
        "predicted_bound": report.bound,
    }


def _figure(plans: list[dict]):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    labels = [f"{p['model']}\n{p['wafers']} WSE-3" for p in plans]
    colors = ["tab:gray" if p["calibration"] else "tab:blue" for p in plans]
    ax.bar(range(len(plans)), [p["tokens_per_s"] for p in plans], color=colors)
    ax.axhline(
        CALIBRATION_TOKENS_PER_S,
        color="tab:red",
        ls="--",
        lw=1,
        label="published: Llama 3.1 8B, 1 WSE-3 (calibration check, gray bar)",
    )
    ax.set_xticks(range(len(plans)), labels, fontsize=8)
    ax.set_ylabel("predicted batch-1 tokens/s")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def _stage_regions_figure():
    """The 8B check's plan on one WSE-3 (`wse_systems.published.check_case`: the planner's),
    per PE: the head and the stages' regions, their SRAM and predicted busy cycles (each PE
    works only while the token is in its stage), reading the workload's cache."""
    from wse_core.trace.png import trace_figure
    from wse_systems.published import check_case
    from wse_systems.trace import pipeline_traces
    from wse_systems.transformer import LLAMA31_8B

    plan = check_case().plan
    trace = pipeline_traces(LLAMA31_8B, plan, kv_tokens=KV_TOKENS)[0]
    return trace_figure(trace, title="Llama 3.1 8B on one WSE-3: stage regions, per PE")


def run_predictions(*, seed: int = 0) -> list[PredictionRow]:
    """The prediction rows alone (for `wse experiments run --sweep`)."""
    return _predictions()[0]


def run(*, quick: bool = False, seed: int = 0) -> ExperimentResult:
    predictions, plans = _predictions()
    measurements = [*plans, _emulated(seed)]
    return ExperimentResult(
        experiment="hotchips24-inference",
        seed=seed,
        config={
            "wafer": "wse3",
            "context": CONTEXT,
            "kv_tokens": KV_TOKENS,
            "gemv": f"{GEMV} (each row's value); meshgemv_tokens_per_s beside it: WaferLLM's "
            "MeshGEMV, a published program, not the software Cerebras measured",
            "cases": [
                {"model": n, "preset": p, "wafers": w, "token_out": o} for n, p, w, o in CASES
            ],
            "calibration": "Llama 3.1 8B on 1 WSE-3 = 1800 tokens/s is in the calibration set "
            "as a check (nothing is fitted on it; wse_core.cost.calibration); the other rows are "
            "predictions",
        },
        measurements=measurements,
        predictions=predictions,
        figure=_figure(plans),
        extra_figures={"per_pe_llama8b_wse3": _stage_regions_figure()},
    )
