"""`wse demo` part: a short weight-streaming training run that saves a model the inference
side loads (`<out>/train/model_dir/hf/` with `tokenizer.json`).

Every demo trains from scratch: `fresh_model_dir` removes the model_dir of an earlier demo
run (marked by `MARKER`), since `wse train` resumes from a model_dir's checkpoint and a
second demo in the same folder would otherwise resume at the last step and train nothing.
A model_dir the demo did not write is never removed: that is an error naming another
`--out`.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from wse_trainer.config import ConfigError

__all__ = ["MARKER", "fresh_model_dir", "part"]

MARKER = ".wse-demo"  # file written by `wse demo` in its --out and its model_dir


def fresh_model_dir(out_dir: Path) -> Path:
    """`<out_dir>/train/model_dir`, empty and marked as the demo's; an earlier demo's model_dir
    there is removed, any other existing one refused (ConfigError, nothing touched)."""
    model_dir = out_dir / "train" / "model_dir"
    for above in (model_dir.parent, model_dir):  # hunt 62: a file `train` was a traceback
        if os.path.lexists(above) and not above.is_dir():
            raise ConfigError(
                f"{above} is not a folder, and `wse demo` writes its model in {model_dir}; "
                "remove it or pass --out with another folder"
            )
    if model_dir.exists():
        if not (model_dir / MARKER).is_file():
            raise ConfigError(
                f"{model_dir} exists and was not written by `wse demo`; "
                "pass --out with another folder"
            )
        shutil.rmtree(model_dir)
    model_dir.mkdir(parents=True)
    (model_dir / MARKER).write_text("written by `wse demo`; the next demo run replaces it\n")
    return model_dir


def part(console, *, out_dir: Path, quick: bool) -> None:
    """Train the shipped tiny config briefly; show the loss falling, the stall, a sample."""
    from wse_core import preset

    from wse_trainer.config import load_config
    from wse_trainer.run import run, validate

    steps = 20 if quick else 250  # ~2 minutes on 2 cores: loss well down, samples readable
    model_dir = fresh_model_dir(out_dir)
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
    spec = preset(config.runconfig.wafer)  # the demo is an edge: the name resolved once
    model, plan = validate(config, spec)
    console.print(
        f"model {model.num_params():,} parameters, {model.n_layers} layers streamed "
        f"layer by layer from MemoryX; activations kept every "
        f"{plan.streaming.stride} layer(s) in the replica's SRAM"
    )
    result = run(config, spec, echo=lambda line: console.print(line, highlight=False, markup=False))
    first, last = result.losses[min(result.losses)], result.losses[max(result.losses)]
    console.print(
        f"loss {first:.3f} -> {last:.3f} over {len(result.losses)} steps; "
        f"{result.tokens_per_s:,.0f} tokens/s {result.timed}; stalled "
        f"{100 * result.stall_fraction:.1f}% streaming weights; eval loss "
        f"{result.eval_loss:.3f}"
    )
    for text in result.samples:
        console.print(f"sample: {text!r}", highlight=False, markup=False)
    console.print(f"HF-format model for `wse infer`: {result.hf_dir}")
