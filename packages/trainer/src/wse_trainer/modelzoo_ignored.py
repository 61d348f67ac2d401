"""ModelZoo's keys that change nothing here at the values that mean what runs: read and
dropped with a note (`IGNORED_NOTES`), refused at another value with the line why.

`ignored(section, key, value)` is `Ignored(note, None)` for a value read and dropped,
`Ignored(None, why)` for one refused, None for a key none of these (hunt 79: such keys were
refused one a run, with no note or none that fitted):

- PyTorch DataLoader performance settings (`LOADER_KEYS`): no loader runs here.
- Loss scaling (`LOSS_SCALE_KEYS`), which ModelZoo applies to float16 gradients: model.dtype
  is float32 or bfloat16 here (their 8-bit exponent needs none), and none is applied.
  ModelZoo's loss_scaling_factor is 1.0 (none) unless given; its initial/max/min_loss_scale
  and steps_per_increase are read by "dynamic" scaling only.
- `shuffle` (hunt 80: one note for both sections said eval batches were shuffled; they never
  are): training batches are drawn in a seeded shuffle (`data.BatchIterator`), eval batches in
  the eval split's order (`session.evaluate`), so train's true and eval's false are what runs.
- A data processor's `vocab_size` (hunt 80: "did you mean 'batch_size'?"): the run tokenizes
  both splits with its own tokenizer of model.vocab_size tokens; the reader checks the two
  agree (`config_read.config_from_moved`), since only the model section knows the model's.
- `optimizer.correct_bias` true (adam and adamw correct the bias here, optax's
  `scale_by_adam`), `amsgrad` false (ModelZoo's default; true is refused: `_amsgrad`),
  `grad_accum_steps` 1 (ModelZoo's GPU accumulation, a no-op on a CS system; here a step's
  batch is accumulated over `train_input.micro_batch_size`), `log_summaries`
  (summaries only), `adjust_learning_rate` at 1 (no multiplier), `save_losses` (loss files:
  metrics.jsonl records the logged steps' losses either way), `precision_opt_level` 0 or 1
  (the compiler's; the arithmetic here is model.dtype's).

Imports only `modelzoo_keys` of wse_trainer; the reader (`wse_trainer.config`) and
`wse_trainer.override_nulls` import it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from wse_trainer.modelzoo_keys import INPUTS, yaml_text

__all__ = ["IGNORED_NOTES", "Ignored", "LOADER_KEYS", "LOSS_SCALE_KEYS", "ignored"]

LOADER_KEYS = ("num_workers", "prefetch_factor", "persistent_workers")
LOSS_SCALE_KEYS = ("loss_scaling_factor", "initial_loss_scale", "max_loss_scale",
                   "min_loss_scale", "steps_per_increase")  # fmt: skip
IGNORED_NOTES = {
    "loader": (
        "PyTorch DataLoader performance settings; no loader runs here (the corpus is read and "
        "tokenized once, before training): ignored"
    ),
    "scale": (
        "ModelZoo's loss scaling, for float16 gradients; there is no float16 here "
        "(model.dtype float32 or bfloat16, whose 8-bit exponent needs no scaling) and no loss "
        "scaling is applied: ignored"
    ),
    "dynamic": (
        "dynamic loss scaling; there is no float16 here (model.dtype float32 or bfloat16) and "
        "no scaling is applied: ignored, and a step whose loss or gradient norm is not finite "
        "stops the run instead of being skipped"
    ),
    "shuffle": (
        "what runs here: training batches are drawn in a seeded shuffle (a new permutation of "
        "the rows each epoch, by train_input.shuffle_seed), eval batches in the eval split's "
        "order: ignored"
    ),
    "drop_last": (
        "what runs here: an epoch's last partial batch is dropped (training batches are whole "
        "batches of a seeded permutation, an evaluation the eval split's whole batches): "
        "ignored"
    ),
    "vocab": (
        "ModelZoo's data processor vocabulary, model.vocab_size here (the run tokenizes both "
        "splits with its own tokenizer of that many tokens): ignored"
    ),
    "adam": "Adam's bias correction, which adam and adamw here always apply: ignored",
    "amsgrad": (
        "Adam's AMSGrad off (ModelZoo's default): adam and adamw here divide by the running "
        "second moment itself, not by its maximum so far: ignored"
    ),
    "accum": (
        "ModelZoo's gradient accumulation on GPUs (no effect on a CS system, as ModelZoo says), "
        "1: none; a step here accumulates over train_input.micro_batch_size: ignored"
    ),
    "summaries": (
        "ModelZoo's extra TensorBoard summaries (parameter and per-layer gradient norms), "
        "which change no step; each logged step's loss, lr and global grad_norm are recorded "
        "here (metrics.jsonl, train/): ignored"
    ),
    "lr_scale": "learning-rate multipliers by parameter name, at 1 (none): ignored",
    "losses": (
        "ModelZoo's loss files; each logged step's loss is recorded here (metrics.jsonl, "
        "train/, runconfig.log_steps) either way: ignored"
    ),
    "pol": (
        "the Cerebras compiler's precision/speed level of its kernels; the arithmetic here is "
        "model.dtype's (float32, or bfloat16 compute over fp32 master weights) at levels 0 "
        "and 1 alike: ignored"
    ),
    # ModelZoo's model.mixed_precision and fp16_type, read as model.dtype
    # (`modelzoo_model._precision`; hunt 81)
    "precision_bfloat16": (
        "ModelZoo's mixed precision in bfloat16, read as model.dtype bfloat16 (16-bit compute "
        "over fp32 master weights)"
    ),
    "precision_float32": "ModelZoo's mixed precision off, read as model.dtype float32",
    "loss_batch_size": (
        "ModelZoo's loss as the batch's token sum over its rows x loss_weight 1 / "
        "max_sequence_length: every row here holds max_sequence_length targets (packed, no "
        "padding), so it is the mean over the batch's tokens, the loss that runs (num_tokens)"
    ),
    "cbfloat16": (
        "ModelZoo's mixed precision in cbfloat16 (Cerebras' CB16: 6 exponent and 9 mantissa "
        "bits), which runs on a CS system only; read as model.dtype bfloat16 (8 exponent and 7 "
        "mantissa bits: a wider range, a coarser rounding), as ModelZoo itself runs cbfloat16 "
        "off a CS system"
    ),
    "fp16_unread": (
        "ModelZoo's 16-bit type, read only with model.mixed_precision true (its default is "
        "false); model.dtype sets the compute type here: ignored"
    ),
    "init": (
        "ModelZoo's initial weights at its default scale; a run here draws untruncated "
        "normals: the embeddings, attention and MLP matrices and an untied head N(0, 0.02), "
        "the residual output projections N(0, 0.02 / sqrt(2 x n_layers)), biases 0 and norm "
        "gains 1 (ModelZoo's defaults draw the same scales, all but the head's truncated at 2 "
        "std): ignored"
    ),
}


class Ignored(NamedTuple):
    """An ignored key's note (an `IGNORED_NOTES` key) or the line why its value cannot be."""

    note: str | None
    why: str | None


def _count(value: Any, least: int) -> bool:
    """null, or a whole number >= `least`: ModelZoo's pydantic int fields take a whole float
    (2.0 is 2; review 80: it was refused here), not a bool nor 2.5."""
    whole = type(value) is int or (type(value) is float and value.is_integer())
    return value is None or (whole and value >= least)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _boolean(note: str) -> Callable[[str, Any], Ignored]:
    """A key whose true, false and null change nothing here (`note`)."""

    def read(where: str, value: Any) -> Ignored:
        if value is None or isinstance(value, bool):
            return Ignored(note, None)
        return Ignored(None, f"{where} must be true or false, got {yaml_text(value)}")

    return read


def _loader(where: str, value: Any) -> Ignored:
    key = where.split(".")[1]
    ok = value is None or type(value) is bool
    if key != "persistent_workers":
        ok = _count(value, int(key == "prefetch_factor"))
    if ok:
        return Ignored("loader", None)
    want = {"num_workers": "a count >= 0", "prefetch_factor": "a count >= 1"}
    # review 80: "(ignored here: ...: ignored)" refused the key while saying it is dropped
    return Ignored(
        None,
        f"{where} must be {want.get(key, 'true or false')} as ModelZoo requires, got "
        f"{yaml_text(value)} (a PyTorch DataLoader setting: no loader runs here, so a valid "
        "one is read and dropped); fix it, or leave the key out",
    )


def _loss_scale(where: str, value: Any) -> Ignored:
    key, number = where.split(".")[1], _number(value)
    if key == "loss_scaling_factor":
        if isinstance(value, str) and value.casefold() == "dynamic":
            return Ignored("dynamic", None)
        if value is None or (number and value == 1):
            return Ignored("scale", None)
        if not (number and 0 < value < math.inf):  # review 80: -1, 0 and .nan were "scales"
            return Ignored(
                None, f'{where} must be a positive number or "dynamic", got {yaml_text(value)}'
            )
        return Ignored(
            None,
            f"{where} {yaml_text(value)} is a static loss scale, which ModelZoo applies to keep "
            "float16 gradients from underflowing; there is no float16 here (model.dtype float32 "
            "or bfloat16) and no loss scaling, so the run would not be the one asked for: give "
            '1.0 (none) or "dynamic", or leave the key out',
        )
    if key == "steps_per_increase" and _count(value, 1):
        return Ignored("scale", None)
    if key != "steps_per_increase" and (value is None or (number and 0 < value < math.inf)):
        return Ignored("scale", None)
    want = "a count >= 1" if key == "steps_per_increase" else "a positive number"
    return Ignored(None, f"{where} must be {want}, got {yaml_text(value)}")


def _flag(runs: bool, note: str, refusal: str) -> Callable[[str, Any], Ignored]:
    """A true/false key whose `runs` value (or null) is what runs here (`note`); the other
    value is refused with `refusal` (its `{where}` the key's place), a non-boolean with the
    type's line."""

    def read(where: str, value: Any) -> Ignored:
        if value is None or value is runs:
            return Ignored(note, None)
        if not isinstance(value, bool):
            return Ignored(None, f"{where} must be true or false, got {yaml_text(value)}")
        return Ignored(None, refusal.format(where=where))

    return read


# drop_last true (ModelZoo's default for training) or null is what runs; false would keep a
# last partial batch, which no run here makes (session 80: true was refused too)
_drop_last = _flag(
    True,
    "drop_last",
    "{where} false asks to keep an epoch's last partial batch; every batch here is whole "
    "(the rows past an epoch's last whole batch are left out of that epoch, the next "
    "epoch's permutation drawing its own, and out of an evaluation): give true, or "
    "leave the key out",
)
_SHUFFLE = {
    True: _flag(
        True,
        "shuffle",
        "train_input.shuffle false asks for the training rows in file order; a run here "
        "always draws its batches in a seeded shuffle (a new permutation of the rows each "
        "epoch, by train_input.shuffle_seed), the same batches every run of one seed: give "
        "true, or leave the key out",
    ),
    False: _flag(
        False,
        "shuffle",
        "eval_input.shuffle true asks for the eval batches in a shuffled order; each "
        "evaluation here reads the eval split's first eval_input.eval_steps batches (every one "
        "when unset) in the split's order: give false, or leave the key out",
    ),
}


def _shuffle(where: str, value: Any) -> Ignored:
    """train_input.shuffle true and eval_input.shuffle false (or null) are what runs."""
    return _SHUFFLE[where.startswith("train_input")](where, value)


def _vocab(where: str, value: Any) -> Ignored:
    """A count (checked against model.vocab_size by the reader), or null."""
    if _count(value, 1):
        return Ignored("vocab", None)
    return Ignored(
        None, f"{where} must be a count >= 1 (the data's vocabulary), got {yaml_text(value)}"
    )


_correct_bias = _flag(
    True,
    "adam",
    "optimizer.correct_bias false turns off Adam's bias correction of its moments "
    "(ModelZoo's AdamW option); adam and adamw here always apply it (optax's scale_by_adam), "
    "so the first steps would move by other amounts than asked: give true, or leave the key "
    "out",
)
# ModelZoo's Adam/AdamW `amsgrad` (false unless given): false is what runs. True is refused:
# ModelZoo (as torch) keeps the maximum of the raw second moment and applies the step's bias
# correction to it, optax's `amsgrad` the maximum of the bias-corrected moment, another
# denominator from the second step on (hunt 81; a moment that falls after step 1: sqrt(1 +
# beta2) apart)
_amsgrad = _flag(
    False,
    "amsgrad",
    "optimizer.amsgrad true asks for AMSGrad (ModelZoo's Adam and AdamW divide by the "
    "largest second moment so far); adam and adamw here do not run it (optax's amsgrad "
    "keeps the largest bias-corrected moment instead, another step size from the second "
    "step on), so the steps would move by other amounts than asked: give false, or leave "
    "the key out",
)


def _accumulation(where: str, value: Any) -> Ignored:
    """ModelZoo's `grad_accum_steps` (run_cstorch_flow: GPU only; "no effect when running on
    the CSX")."""
    if value is None or (_count(value, 1) and value == 1):
        return Ignored("accum", None)
    if not _count(value, 1):
        return Ignored(None, f"{where} must be a count >= 1, got {yaml_text(value)}")
    return Ignored(
        None,
        f"{where} {yaml_text(value)} is ModelZoo's gradient accumulation on GPUs (no effect on "
        f"a CS system): one optimizer step over {yaml_text(value)} batches; a step here is "
        "train_input.batch_size sequences, accumulated over micro-batches of "
        "train_input.micro_batch_size (MemoryX sums their gradients): give train_input."
        f"batch_size {yaml_text(value)} times larger and train_input.micro_batch_size the "
        "sequences to run at once, and leave the key out",
    )


def _lr_scale(where: str, value: Any) -> Ignored:
    """ModelZoo's `adjust_learning_rate` ({parameter name part: multiplier}, muP's)."""
    if value is None or (
        isinstance(value, Mapping) and all(_number(v) and v == 1 for v in value.values())
    ):
        return Ignored("lr_scale", None)
    if not isinstance(value, Mapping):
        return Ignored(
            None, f"{where} must be a mapping of parameter names to multipliers, got "
            f"{yaml_text(value)}"
        )  # fmt: skip
    return Ignored(
        None,
        f"{where} {yaml_text(value)}: ModelZoo's learning-rate multipliers by parameter name "
        "(muP's decoder_kernel); every weight here trains at optimizer.learning_rate's "
        "schedule, so the run would not be the one asked for: leave the key out",
    )


def _precision_level(where: str, value: Any) -> Ignored:
    """ModelZoo's precision_opt_level (0, 1 or 2; 1 unless given: run_cstorch_flow)."""
    if value is None or (type(value) is int and value in (0, 1)):
        return Ignored("pol", None)
    if type(value) is not int or value != 2:
        return Ignored(
            None, f"{where} must be 0, 1 or 2 (ModelZoo's levels), got {yaml_text(value)}"
        )
    return Ignored(
        None,
        f"{where} 2 asks the Cerebras compiler for its lower-precision kernels (ModelZoo: a "
        "bfloat16 attention softmax); they are not run here, where the arithmetic is "
        "model.dtype's: give 1 (ModelZoo's default) or 0, or leave the key out",
    )


_RULES: dict[tuple[str, str], Callable[[str, Any], Ignored]] = {
    **{(s, k): _loader for s in INPUTS for k in LOADER_KEYS},
    **{("optimizer", k): _loss_scale for k in LOSS_SCALE_KEYS},
    **{(s, "shuffle"): _shuffle for s in INPUTS},
    **{(s, "drop_last"): _drop_last for s in INPUTS},
    **{(s, "vocab_size"): _vocab for s in INPUTS},
    ("optimizer", "correct_bias"): _correct_bias,
    ("optimizer", "amsgrad"): _amsgrad,
    ("optimizer", "grad_accum_steps"): _accumulation,
    ("optimizer", "log_summaries"): _boolean("summaries"),
    ("optimizer", "adjust_learning_rate"): _lr_scale,
    ("runconfig", "save_losses"): _boolean("losses"),
    **{(s, "precision_opt_level"): _precision_level for s in ("runconfig", "model")},
}


def ignored(section: str, key: str, value: Any) -> Ignored | None:
    """Whether ModelZoo's `section.key` at `value` is read and dropped here (`Ignored` with its
    note), refused (`Ignored` with the line), or none of these keys (None)."""
    rule = _RULES.get((section, key))
    return None if rule is None else rule(f"{section}.{key}", value)
