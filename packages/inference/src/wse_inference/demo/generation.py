"""`wse demo` part: pipelined and speculative generation from the model the trainer saved.

Uses `<out>/train/model_dir` (written by the training part that runs first); without it,
saves a tiny random model with `wse_models.save_pretrained` and uses that. Shows the wafer
plan, the pipelined engine's text equal to the plain decoder's, speculative generation with a
first-layer draft (greedy: the same text; acceptance statistics), and the calibration set's
8B check on one WSE-3 priced on its published setup (`wse_systems.published.decode_check_row`)
beside the 70B on 4 WSE-3s priced on the same setup, the `hotchips24-inference` experiment's
row (`decode_70b`: its `case_token`, on the plan `wse plan infer` serves it on; hunt 71:
priced on `predict_model`'s defaults, 8k context, 4,096 cached tokens and no trip to the
host, unnamed on the line: 694 tokens/s beside the row's 741).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["part", "decode_line", "decode_70b"]


def demo_model_dir(console, out_dir: Path) -> Path:
    trained = out_dir / "train" / "model_dir"
    if (trained / "hf" / "config.json").is_file() or (trained / "config.json").is_file():
        return trained
    import jax
    import wse_models

    path = out_dir / "infer" / "tiny-model"
    config = wse_models.preset_config("tiny-llama", n_layers=4)
    model = wse_models.Transformer(config, params=wse_models.init_params(config, jax.random.key(0)))
    wse_models.save_pretrained(model, path)
    console.print(f"(no trained model in {trained}; using a tiny random model in {path})")
    return path


def part(console, *, out_dir: Path, quick: bool) -> None:
    """Load, plan, generate pipelined and speculatively, print the figures."""
    from wse_core import preset
    from wse_core.cost.report import stopwatch

    from wse_inference.engine import SamplingParams
    from wse_inference.model_dir import load_model, truncated_model
    from wse_inference.pipeline.engine import PipelineEngine
    from wse_inference.speculative.decoder import SpeculativeDecoder

    wse3 = preset("wse3")  # the demo is an edge: this part's wafer, resolved once, passed down
    model = load_model(demo_model_dir(console, out_dir))
    c = model.config
    prompt = model.tokenizer.encode("The wafer ") if model.tokenizer else [1, 2, 3]
    n = 24 if quick else 48
    greedy = SamplingParams(max_tokens=n, temperature=0.0)
    stages = min(2, c.n_layers)
    eng = PipelineEngine(model, spec=wse3, stages=stages, max_context=len(prompt) + n + 8)
    plan = eng.plan  # the layout the engine emulates and its report prices
    console.print(
        f"model {model.name}: {c.n_layers} layers, d_model {c.d_model}, vocab {c.vocab_size}; "
        f"planned on {plan.num_wafers} {plan.spec.name}: "
        + ", ".join(
            f"{s.name} {s.region.rows}x{s.region.cols} PEs {s.bytes_per_pe} B/PE"
            for s in (plan.head, *plan.stages)
        )
    )
    with stopwatch() as t:
        piped = eng.generate_all([prompt], [greedy], steps_per_call=8)[0]
    rep = eng.report(measured_wall_s=t["s"], tokens=len(piped), kv_tokens=len(prompt) + n // 2)
    console.print(
        f"predicted wafer time {rep.predicted_s * 1e6:.1f} us/token ({rep.bound}-bound); "
        f"measured on this emulator {rep.measured_wall_s * 1e3:.2f} ms/token (with compilation)"
    )
    text = model.tokenizer.decode(piped) if model.tokenizer else ""
    console.print(f"pipelined ({stages} stages), greedy: {text!r}", highlight=False)
    _speculative(
        console,
        model,
        truncated_model(model, max(1, c.n_layers // 4)),
        prompt,
        n,
        piped,
        SpeculativeDecoder,
        SamplingParams,
    )
    console.print(decode_line(wse3), highlight=False)


def decode_line(spec) -> str:
    """The 8B calibration check and the 70B beside it, both on the published setup."""
    from wse_systems.published import decode_check_row

    from wse_inference.pipeline.perf import tokens_per_s

    check = decode_check_row()  # the calibration set's 8B case, priced as it was measured
    big, plan70, setup = decode_70b(spec)
    return (
        f"predicted batch-1 decode on the published setup ({setup}): Llama 3.1 8B on 1 WSE-3 "
        f"{1 / float(check['model']):,.0f} tokens/s (a calibration check: published "
        f"{1 / float(check['published']):,.0f}); 70B on {plan70.num_wafers} WSE-3s "
        f"{tokens_per_s(big):,.0f} tokens/s (as hotchips24-inference)"
    )


def decode_70b(spec):
    """(report, plan, the setup in words) of Llama 3.1 70B's batch-1 decode token on `spec`,
    priced as the `hotchips24-inference` experiment prices its row: the same case, context,
    cache, trip to the host and GEMV program, the 8B check's published setup."""
    from wse_inference.studies.hotchips24_inference import (
        CASES,
        CONTEXT,
        GEMV,
        KV_TOKENS,
        case_token,
    )

    _, preset_name, wafers, token_out = next(c for c in CASES if c[0] == "llama3.1-70b")
    report, plan = case_token(preset_name, wafers, token_out, spec=spec)
    trip = "the token's trip to the host" if token_out else "no trip to the host"
    setup = (f"{CONTEXT:,}-token context, {KV_TOKENS:,} cached tokens read per token, {trip}, "
             f"{GEMV} GEMVs, 16-bit weights")  # fmt: skip
    return report, plan, setup


def _speculative(console, model, draft, prompt, n, ref, decoder_cls, params_cls) -> None:
    spec = decoder_cls(model, draft, gamma=4, max_context=len(prompt) + n + 8)
    out = spec.generate(prompt, params_cls(max_tokens=n, temperature=0.0))
    m = out.metrics["speculative"]
    console.print(
        f"speculative (draft = first {draft.config.n_layers} layer(s), gamma 4), greedy: same "
        f"tokens as the pipelined target: {out.tokens == ref}; acceptance "
        f"{m['acceptance_rate']:.2f}, {m['mean_tokens_per_pass']:.2f} tokens per target pass"
    )
    sampled = spec.generate(prompt, params_cls(max_tokens=n, temperature=0.8, seed=0))
    m = sampled.metrics["speculative"]
    console.print(
        f"sampled (T 0.8, seed 0): {sampled.text!r}; acceptance {m['acceptance_rate']:.2f}, "
        f"per position {[round(x, 2) for x in m['position_acceptance']]}",
        highlight=False,
    )
