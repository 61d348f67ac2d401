"""Experiment `hotchips24-inference`: predicted batch-1 decode tokens/s on one or more wafers.

Predicted (`wse_inference.decode_perf`): Llama-3.1 8B on one WSE-3 — the calibration case,
whose published 1,800 tokens/s (Cerebras, Hot Chips 2024; REFERENCES.md) fixes the model's one
fitted number, the efficiency — then Llama 3.2 1B / 3B, Llama 3.1 70B and 405B on the fewest
WSE-3s that hold weights + KV cache for an 8k context, and on twice as many (true
predictions; nothing else is published in REFERENCES.md, so `published` is null there).
Measured: the plans (regions per wafer, bytes per PE, bound) and, on the emulator, a tiny
model's pipelined decode (greedy) agreeing token for token with the plain decoder.
"""

from __future__ import annotations

from wse_core.experiment import ExperimentResult, PredictionRow

from wse_inference.decode_perf import CALIBRATION_TOKENS_PER_S, predict_model

__all__ = ["run", "CASES"]

SOURCE = "Cerebras, Hot Chips 2024"
CASES = ("llama3-1b", "llama3-3b", "llama3-8b", "llama3-70b", "llama3-405b")
CONTEXT = 8192


def _predictions() -> tuple[list[PredictionRow], list[dict]]:
    rows, plans = [], []
    for model in CASES:
        pred, plan = predict_model(model, context_len=CONTEXT)
        for wafers in sorted({plan.num_wafers, 2 * plan.num_wafers}):
            if wafers != plan.num_wafers:
                pred, plan = predict_model(model, num_wafers=wafers, context_len=CONTEXT)
            published = CALIBRATION_TOKENS_PER_S if (model, wafers) == ("llama3-8b", 1) else None
            params = {
                "model": model,
                "wafers": wafers,
                "wafer": "wse3",
                "context": CONTEXT,
                "stages": plan.num_stages,
            }
            rows.append(
                PredictionRow(
                    "tokens_per_s",
                    pred.tokens_per_s,
                    "tokens/s",
                    params,
                    published,
                    SOURCE if published else None,
                )
            )
            plans.append(
                {
                    **params,
                    "tokens_per_s": pred.tokens_per_s,
                    "ms_per_token": pred.seconds_per_token * 1e3,
                    "sram_us": pred.sram_s * 1e6,
                    "latency_us": pred.latency_s * 1e6,
                    "inter_wafer_us": pred.inter_wafer_s * 1e6,
                    "efficiency": pred.efficiency,
                    "max_bytes_per_pe": max(s.bytes_per_pe for s in plan.stages),
                }
            )
    return rows, plans


def _emulated(seed: int) -> dict:
    """A tiny model on 2 pipelined stages vs the plain decoder, greedy."""
    from wse_inference.decoding import PlainDecoder
    from wse_inference.engine import SamplingParams
    from wse_inference.pipeline import PipelineEngine
    from wse_inference.testing import tiny_model

    model = tiny_model("llama", n_layers=2, seed=seed)
    greedy = SamplingParams(max_tokens=16, temperature=0.0)
    prompt = [1, 2, 3, 4]
    eng = PipelineEngine(model, stages=2, max_context=32)
    got = eng.generate_all([prompt], [greedy], steps_per_call=8)[0]
    ref = PlainDecoder(model.config, model.params, max_context=32).generate(prompt, greedy)
    return {
        "model": "tiny-llama (emulated)",
        "stages": 2,
        "tokens": len(got),
        "equal_to_plain_decoder": got == ref.tokens,
    }


def _figure(plans: list[dict]):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    labels = [f"{p['model']}\n{p['wafers']} wafer(s)" for p in plans]
    ax.bar(range(len(plans)), [p["tokens_per_s"] for p in plans], color="tab:blue")
    ax.axhline(
        CALIBRATION_TOKENS_PER_S,
        color="tab:red",
        ls="--",
        lw=1,
        label="published: Llama 3.1 8B, 1 WSE-3 (calibration)",
    )
    ax.set_xticks(range(len(plans)), labels, rotation=60, fontsize=7)
    ax.set_ylabel("predicted batch-1 tokens/s")
    ax.set_yscale("log")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def run(*, quick: bool = False, seed: int = 0) -> ExperimentResult:
    predictions, plans = _predictions()
    measurements = [*plans, _emulated(seed)]
    return ExperimentResult(
        experiment="hotchips24-inference",
        seed=seed,
        config={
            "wafer": "wse3",
            "context": CONTEXT,
            "cases": list(CASES),
            "calibration": "efficiency fitted to Llama 3.1 8B on 1 WSE-3 = 1800 tokens/s",
        },
        measurements=measurements,
        predictions=predictions,
        figure=_figure(plans),
    )
