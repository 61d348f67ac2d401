"""`wse demo` part: a short weight-streaming training run that saves a model the inference
side loads (`<out>/train/model_dir/hf/` with `tokenizer.json`)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["part"]


def part(console, *, out_dir: Path, quick: bool) -> None:
    """Train the shipped tiny config briefly; show the loss falling, the stall, a sample."""
    from wse_trainer.config import load_config
    from wse_trainer.run import run, validate

    steps = 20 if quick else 250  # ~2 minutes on 2 cores: loss well down, samples readable
    model_dir = out_dir / "train" / "model_dir"
    config = load_config(
        "tiny",
        [
            f"runconfig.model_dir={model_dir}",
            f"runconfig.max_steps={steps}",
            f"runconfig.log_steps={max(steps // 10, 1)}",
            f"runconfig.checkpoint_steps={steps}",
            "runconfig.sample_tokens=60",
            "train_input.max_corpus_bytes=1000000",
            "eval_input.max_corpus_bytes=1000000",
            "eval_input.eval_steps=2",
            "optimizer.warmup_steps=5",
        ],
    )
    model, plan = validate(config)
    console.print(
        f"model {model.num_params():,} parameters, {model.n_layers} layers streamed "
        f"layer by layer from MemoryX; activations kept every "
        f"{plan.streaming.stride} layer(s) in the replica's SRAM"
    )
    result = run(config, echo=lambda line: console.print(line, highlight=False, markup=False))
    first, last = result.losses[min(result.losses)], result.losses[max(result.losses)]
    console.print(
        f"loss {first:.3f} -> {last:.3f} over {len(result.losses)} steps; "
        f"{result.tokens_per_s:,.0f} tokens/s; stalled "
        f"{100 * result.stall_fraction:.1f}% waiting for weights; eval loss "
        f"{result.eval_loss:.3f}"
    )
    for text in result.samples:
        console.print(f"sample: {text!r}", highlight=False, markup=False)
    console.print(f"HF-format model for `wse infer`: {result.hf_dir}")
