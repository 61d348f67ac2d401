# %% [markdown]
# # Weight-streaming training: a tiny model, its predicted wafer step, a sample
#
# A jupytext script (`# %%` cells): open it as a notebook with jupytext, or run it as it is;
# the site build executes it (`docs/hooks.py`) at the small size below, and
# `WSE_TUTORIAL_SIZE=full` runs the size `wse demo` trains. It trains the shipped `tiny`
# config the way `wse train` does: the weights live in MemoryX and stream to the wafer layer by
# layer, the activations stay in the replica's SRAM, and every run reports the measured step
# beside the predicted wafer step (a `RunReport`).

# %%
import os
import tempfile
from pathlib import Path

from wse_core import preset
from wse_trainer.config import load_config
from wse_trainer.run import run, validate

FULL = os.environ.get("WSE_TUTORIAL_SIZE") == "full"
steps = 250 if FULL else 12
scratch = tempfile.TemporaryDirectory()  # removed when the script or kernel ends
model_dir = Path(scratch.name) / "model_dir"
config = load_config(
    "tiny",
    [
        f"runconfig.model_dir={model_dir}",
        f"runconfig.max_steps={steps}",
        f"runconfig.log_steps={max(steps // 4, 1)}",
        f"runconfig.checkpoint_steps={steps}",
        "runconfig.sample_tokens=24",
        "train_input.max_corpus_bytes=300000",
        "eval_input.max_corpus_bytes=300000",
        "eval_input.eval_steps=1",
        "optimizer.warmup_steps=3",
    ],
)

# %% [markdown]
# `validate` checks the config against the wafer before anything runs (the splits against
# the batch sizes included) and returns the model and its streaming plan.

# %%
spec = preset(config.runconfig.wafer)
model, plan = validate(config, spec)
print(
    f"{model.num_params():,} parameters in {model.n_layers} layers on {spec.name}; "
    f"activations kept every {plan.streaming.stride} layer(s)"
)

# %% [markdown]
# `run` trains, evaluates, writes a checkpoint and an HF-format model (what `wse infer`
# loads), and returns the losses, throughput, the share of time spent waiting for weights and
# a sample.

# %%
result = run(config, spec, echo=print)
first, last = result.losses[min(result.losses)], result.losses[max(result.losses)]
print(f"loss {first:.3f} -> {last:.3f} over {len(result.losses)} steps")
print(f"stalled {100 * result.stall_fraction:.1f}% of the time waiting for weights")
print(f"sample: {result.samples[0]!r}")
assert last < first  # the loss falls even in a dozen steps
assert (result.hf_dir / "config.json").is_file()

# %% [markdown]
# The predicted wafer step of the same plan, by mechanism (the measured mean step on this
# machine is its `measured_wall_s`). In a notebook the report shows itself as a table.

# %%
report = result.report
print(f"predicted {report.predicted_s:.3g} s per step, measured {report.measured_wall_s:.3g} s")
report
