"""The checks of a params file that can be known before anything compiles.

`check_config(config, model_max_seq_len, model_vocab_size)` takes a `TrainConfig`, read
from a file or built in Python, checks its types and finiteness as the file reader does
(`check_types`, with `wse_trainer.config.checked_value`'s messages) and raises a `ConfigError`
naming the key for what its values cannot run: counts that must be positive (0 and null
mean what ModelZoo's do for checkpoint_steps, log_steps and keep_checkpoint_max),
ranges (`optimizer.beta1` in [0, 1), `runconfig.seed` a 64-bit integer), choices
(`runconfig.mode`, `optimizer.lr_schedule`), limits (`batch_size` and `num_csx` within the
limits `batch_size` and `systems` of `wse_core.host.limits`) and the settings that must
agree with each other (`batch_size % num_csx`, `num_steps` at most `max_steps`,
`micro_batch_size` dividing the per-system batch, `cpu_shards` dividing the micro-batch, a
decaying schedule's `min_learning_rate` at most its `learning_rate`, the sequence length
against the model's, a vocabulary that holds the run's tokenizer, a decay past the warm-up),
settings the optimizer does not read (`refuse_unused`), one of the two clippings (ModelZoo's
rule), a `train_input.eval_steps` (read by nothing: an evaluation's batches are eval_input's),
empty run paths (mode `eval_all`'s own refusals are `modelzoo_runconfig.eval_all_problem`'s), with a
value to use instead where there is one. `config_notes` are the lines a run says beside its
output (an eval_frequency outside train_and_eval among them: one params file serves every
mode, as in ModelZoo, so it is said, not refused; hunt 71; and an eval_input.shuffle_seed,
which orders nothing: eval batches are read in order); `scheduler_list` explains ModelZoo's
`learning_rate:` list in this form.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence

from wse_core.errors import not_utf8, shown, shown_value, suggest
from wse_core.host.limits import lift, limit
from wse_systems.training.micro_batch import MODES

from wse_trainer.config import (
    SECTIONS,
    ConfigError,
    InputConfig,
    OptimizerConfig,
    RunConfig,
    TrainConfig,
    checked_value,
    refuse_unused,
)
from wse_trainer.modelzoo_keys import eval_steps_problem, keep_problem
from wse_trainer.optimizer_names import (
    IN_UNIT,
    eps_note,
    outside_unit,
    schedule_note,
    scheduler_list,
)

__all__ = [
    "MIN_VOCAB_SIZE",
    "SEED_MIN",
    "SEED_MAX",
    "check_config",
    "config_notes",
    "check_types",
    "refuse_unused",
    "scheduler_list",
]

# The smallest vocabulary a run can train: its tokenizer (`wse_trainer.data.train_tokenizer`,
# a byte-level BPE) holds the 256 byte tokens and EOS before any merge.
MIN_VOCAB_SIZE = 257
# runconfig.seed's range: `jax.random.key` takes a 64-bit signed integer (2**63 is its
# OverflowError), as the CLI's --seed options and the server's seeds do
SEED_MIN, SEED_MAX = -(2**63), 2**63 - 1


def _positive(where: str, value: int | float | None) -> None:
    if value is not None and not value > 0:  # NaN is not positive either
        raise ConfigError(f"{where} must be positive, got {value}")


def _check_schedule(opt: OptimizerConfig) -> None:
    """hunt 69: decay_steps at or below warmup_steps made the decay one step long (the
    rate fell 10x from one step to the next)."""
    warm, decay = opt.warmup_steps, opt.decay_steps
    if decay is not None and opt.lr_schedule != "constant" and decay <= warm:
        raise ConfigError(
            f"optimizer.decay_steps={decay} is not past optimizer.warmup_steps={warm} "
            f"(decay_steps counts from step 0, warmup included); use more than {warm}"
        )
    if opt.nesterov and not opt.momentum > 0:  # torch's SGD refuses it too
        raise ConfigError(
            f"optimizer.nesterov needs optimizer.momentum above 0 (got {opt.momentum}); "
            "set momentum, e.g. 0.9, or drop nesterov"
        )


def _check_optimizer(opt: OptimizerConfig) -> None:
    """Ranges of the optimizer's settings (types and finiteness: `check_types`), the
    settings its optimizer does not read, and the schedule's steps."""
    for name in IN_UNIT:
        if why := outside_unit(f"optimizer.{name}", getattr(opt, name)):
            raise ConfigError(why)
    _positive("optimizer.eps", opt.eps)  # 0 divides by a zero second moment
    _positive("optimizer.max_gradient_norm", opt.max_gradient_norm)  # None: no clipping
    _positive("optimizer.max_gradient_value", opt.max_gradient_value)  # as ModelZoo's
    if opt.max_gradient_norm is not None and opt.max_gradient_value is not None:
        raise ConfigError(  # ModelZoo refuses both too (run_cstorch_flow)
            f"optimizer.max_gradient_norm={opt.max_gradient_norm} and optimizer."
            f"max_gradient_value={opt.max_gradient_value} both clip the gradient (by its "
            "global norm; each element by value), and ModelZoo takes one: give one of them"
        )
    _positive("optimizer.decay_steps", opt.decay_steps)
    for name in ("warmup_steps", "weight_decay", "min_learning_rate"):
        if not getattr(opt, name) >= 0:
            raise ConfigError(f"optimizer.{name} must be >= 0, got {getattr(opt, name)}")
    low, lr = opt.min_learning_rate, opt.learning_rate
    if low > lr and opt.lr_schedule != "constant":  # hunt 64: the cosine "decay" rose 333x
        raise ConfigError(  # (ModelZoo's decays, too, end below where they start)
            f"optimizer.min_learning_rate={low} exceeds optimizer.learning_rate={lr}: the "
            f"{opt.lr_schedule} schedule would rise to it, not decay; use at most {lr}"
        )
    _check_schedule(opt)
    refuse_unused(opt)


def check_types(config: TrainConfig) -> None:
    """The file reader's type and finiteness checks, with its messages, on a `TrainConfig`
    built or changed in Python. hunt 67: `dataclasses.replace` skipped them, so a NaN
    weight_decay trained 11.5 s to a NaN loss blamed on the learning rate and max_steps 2.5
    ran. A whole float in an int field (`max_steps: 1e3` in a file) is refused here: the
    reader converts it, but nothing converts a frozen config's value."""
    for name, cls in SECTIONS.items():
        section = getattr(config, name)
        if cls is None:
            continue
        if not isinstance(section, cls):
            raise ConfigError(
                f"{name} must be a {cls.__name__}, got {shown(repr(section), quote=False)}"
            )
        for field in dataclasses.fields(cls):
            where, value = f"{name}.{field.name}", getattr(section, field.name)
            read = checked_value(where, value, (cls, field.name))
            if type(read) is int and type(value) is not int:  # as the reader says a wrong type
                raise ConfigError(f"{where} must be int, got {shown_value(value)}")


def check_config(
    config: TrainConfig, model_max_seq_len: int | None = None, model_vocab_size: int | None = None
) -> None:
    """The problems that can be known before compiling; raises ConfigError."""
    check_types(config)  # first: the range checks below compare numbers
    run, opt = config.runconfig, config.optimizer
    if model_vocab_size is not None and model_vocab_size < MIN_VOCAB_SIZE:  # hunt 59: 1 ran
        whose = "" if "vocab_size" in config.model else f" (preset {config.model['preset']}'s)"
        raise ConfigError(  # until the tokenizer, trained first, did not fit
            f"model.vocab_size is {model_vocab_size:,}{whose}; the run's byte-level tokenizer "
            f"has {MIN_VOCAB_SIZE} tokens at least (256 bytes and the end of text), so set "
            f"model.vocab_size to at least {MIN_VOCAB_SIZE}"
        )
    if (where := not_utf8(run.sample_prompt)) is not None:  # hunt 60: a traceback after training
        raise ConfigError(
            f"runconfig.sample_prompt {shown(run.sample_prompt)} is not UTF-8 text ({where}); "
            "give UTF-8 text"
        )
    for name in ("max_steps", "num_csx"):
        _positive(f"runconfig.{name}", getattr(run, name))
    _check_cadence(run)
    _check_run_extras(config)
    _positive("runconfig.num_steps", run.num_steps)
    if run.num_steps is not None and run.max_steps is not None and run.num_steps > run.max_steps:
        raise ConfigError(  # hunt 59: was taken
            f"runconfig.num_steps={run.num_steps:,} (--num-steps: steps of this invocation) is "
            f"more than runconfig.max_steps={run.max_steps:,} (--max-steps: the total, counted "
            f"from step 0), so the run would stop at step {run.max_steps:,} first; raise "
            "max_steps or lower num_steps"
        )
    if run.num_csx > limit("systems"):  # hunt 56: 10^9 was refused only by a batch not dividing
        raise ConfigError(
            f"runconfig.num_csx must be at most {limit('systems'):,} systems, got "
            f"{run.num_csx:,}; {lift('systems')}"
        )
    zero = {  # what 0 asks for (hunt 75: the stride is the fastest that fits since hunt 74)
        "activation_stride": "the fastest predicted stride that fits",
        "weight_chunks": "whole layers when they fit, else column chunks as the SRAM ledger allows",
    }
    for name, meaning in zero.items():
        if getattr(run, name) < 0:
            raise ConfigError(
                f"runconfig.{name} must be >= 0 (0: {meaning}), got {getattr(run, name)}"
            )
    if run.cpu_shards < 0:
        raise ConfigError(
            f"runconfig.cpu_shards must be 0 (choose) or positive, got {run.cpu_shards}"
        )
    _positive("optimizer.learning_rate", opt.learning_rate)
    _check_optimizer(opt)
    _choice("runconfig.mode", run.mode, tuple(RUN_SECTIONS))
    _choice("optimizer.optimizer_type", opt.optimizer_type, ("adamw", "adam", "sgd", "momentum"))
    _choice("optimizer.lr_schedule", opt.lr_schedule, ("constant", "cosine", "linear"))
    _choice("optimizer.eps_placement", opt.eps_placement, ("modelzoo", "optax", "torch"))
    for name in ("train_input", "eval_input"):
        inp: InputConfig = getattr(config, name)
        _check_input_values(name, inp)
        if name in RUN_SECTIONS[run.mode]:  # hunt 74: a train run refused its unread eval_input
            _check_input_run(name, inp, run, model_max_seq_len)


# The input sections each mode reads, as ModelZoo's modes: train builds only the training
# dataloader, eval only the evaluation one; the other's values are checked, never its fit to
# the run (its batch against num_csx, its micro-batch, its sequence against the model's)
RUN_SECTIONS = {"train": ("train_input",), "eval": ("eval_input",),
                "train_and_eval": ("train_input", "eval_input"),
                "eval_all": ("eval_input",)}  # fmt: skip


def _check_input_values(name: str, inp: InputConfig) -> None:
    """An input section's own values, whatever the mode."""
    _positive(f"{name}.batch_size", inp.batch_size)
    if inp.batch_size > limit("batch_size"):  # hunt 55: 2**63 ran past a minute
        raise ConfigError(
            f"{name}.batch_size must be at most {limit('batch_size'):,} sequences, got "
            f"{inp.batch_size:,}; {lift('batch_size')}"
        )
    _positive(f"{name}.max_sequence_length", inp.max_sequence_length)
    _positive(f"{name}.max_corpus_bytes", inp.max_corpus_bytes)  # hunt 57: 0 a traceback
    if name == "train_input" and inp.shuffle_seed < 0:  # NumPy's generators take seeds >= 0
        # (eval batches are read in order: eval_input's seed is said to order nothing)
        raise ConfigError(f"{name}.shuffle_seed must be >= 0, got {inp.shuffle_seed}")
    _choice(f"{name}.split", inp.split, ("train", "eval", "all"))
    _check_micro_batch(name, inp, None)


def _check_input_run(name: str, inp: InputConfig, run: RunConfig, max_seq_len: int | None) -> None:
    """A section the mode reads, against the run: num_csx, the micro-batch, the model."""
    if inp.batch_size % run.num_csx:
        lo = inp.batch_size - inp.batch_size % run.num_csx
        raise ConfigError(
            f"{name}.batch_size={inp.batch_size} is not divisible by num_csx={run.num_csx}; "
            f"use a multiple such as {max(lo, run.num_csx)} or {lo + run.num_csx}"
        )
    _check_micro_batch(name, inp, run.num_csx)
    micro = inp.batch_size // run.num_csx
    if isinstance(inp.micro_batch_size, int):
        micro = inp.micro_batch_size
    if name == "train_input" and run.cpu_shards and micro % run.cpu_shards:
        raise ConfigError(
            f"runconfig.cpu_shards={run.cpu_shards} does not divide each replica's "
            f"micro-batch of {micro} (train_input.micro_batch_size, else batch_size / "
            "num_csx); use 0 (choose) or a divisor"
        )
    if max_seq_len is not None and inp.max_sequence_length > max_seq_len:
        raise ConfigError(
            f"{name}.max_sequence_length={inp.max_sequence_length} exceeds the model's "
            f"max_seq_len={max_seq_len}; use at most {max_seq_len}"
        )


# What 0 asks of a cadence, as ModelZoo reads it (hunt 76: refused, "must be positive"):
# cstorch saves no checkpoint at checkpoint_steps None or 0, and logs the final step alone at
# log_steps 0 (`run_cstorch_flow.is_log_step`); ours saves the final step still (what a
# resume, an eval or an export reads: `wse_trainer.cadence`)
ZERO_CADENCE = {"checkpoint_steps": "no periodic checkpoint, the last step's alone",
                "log_steps": "the last step's line alone"}  # fmt: skip


def _check_cadence(run: RunConfig) -> None:
    """checkpoint_steps and log_steps: 0 (null: checkpoint_steps) or a positive count;
    keep_checkpoint_max: null, 0 (both: every checkpoint kept) or a positive count."""
    for name, zero in ZERO_CADENCE.items():
        value = getattr(run, name)
        if value is not None and value < 0:
            raise ConfigError(f"runconfig.{name} must be >= 0 (0: {zero}), got {value}")
    if why := keep_problem("runconfig.keep_checkpoint_max", run.keep_checkpoint_max):
        raise ConfigError(why)


def _check_run_extras(config: TrainConfig) -> None:
    """hunt 62: eval_steps 0 evaluated nothing (a NaN loss, exit 0), a negative eval_frequency
    evaluated every |n| steps, a negative sample_tokens passed, and a seed past 64 bits was
    jax.random.key's OverflowError traceback after the run folder was made; hunt 67: a
    negative sample_temperature sampled greedily, as vLLM's SamplingParams refuses it."""
    run = config.runconfig
    if why := eval_steps_problem("eval_input.eval_steps", config.eval_input.eval_steps):
        raise ConfigError(why)
    if (steps := config.train_input.eval_steps) is not None:  # hunt 80: read by nothing
        raise ConfigError(
            f"train_input.eval_steps={shown(steps, quote=False)} is read by nothing: the "
            "batches each evaluation runs are eval_input.eval_steps (ModelZoo's "
            "runconfig.eval_steps); give it there, or leave it out"
        )
    if run.eval_frequency is not None and run.eval_frequency <= 0:
        raise ConfigError(
            f"runconfig.eval_frequency must be positive (steps between evaluations in "
            f"train_and_eval), got {run.eval_frequency}; leave it unset to evaluate at the end "
            "only"
        )
    if run.sample_tokens < 0:
        raise ConfigError(
            f"runconfig.sample_tokens must be >= 0 (tokens sampled after training; 0: none), "
            f"got {run.sample_tokens}"
        )
    if not run.sample_temperature >= 0:  # hunt 67: -1 (and NaN) sampled greedily unsaid
        raise ConfigError(
            f"runconfig.sample_temperature must be a finite number >= 0 (0 is greedy), got "
            f"{shown(run.sample_temperature, quote=False)}"
        )
    for key, what in (
        ("model_dir", "a folder name, e.g. model_dir/run1"),
        ("checkpoint_path", "a run folder or one of its steps, or leave it out"),
    ):
        value = getattr(run, key)  # hunt 69: '' trained into the current folder, or was unset
        if isinstance(value, str) and not value.strip():
            blank = f" ({value!r})" if value else ""
            raise ConfigError(f"runconfig.{key} is empty{blank}; give {what}")
    if not SEED_MIN <= run.seed <= SEED_MAX:
        raise ConfigError(
            f"runconfig.seed must be a 64-bit integer in [{SEED_MIN}, {SEED_MAX}], got "
            f"{shown(run.seed, quote=False)}"
        )


def _check_micro_batch(name: str, inp: InputConfig, num_csx: int | None) -> None:
    """micro_batch_size: a mode, or a positive int dividing the per-system batch (`num_csx`
    None: the value only)."""
    mb = inp.micro_batch_size
    if mb is None:
        return
    if isinstance(mb, str):
        _choice(f"{name}.micro_batch_size", mb, MODES)
        return
    _positive(f"{name}.micro_batch_size", mb)
    if num_csx is None:
        return
    per_system = inp.batch_size // num_csx
    if per_system % mb:
        near = " or ".join(str(d) for d in _divisors_near(per_system, mb))
        raise ConfigError(
            f"{name}.micro_batch_size={mb} does not divide the per-system batch of "
            f"{per_system} ({name}.batch_size={inp.batch_size} over num_csx={num_csx}); "
            f"use a divisor such as {near}, or auto"
        )


def _divisors_near(n: int, x: int) -> list[int]:
    """The divisors of n just below and above x (found in O(sqrt n); n capped for speed)."""
    if n > 10**12:
        return [1]
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    every = sorted({*small, *(n // d for d in small)})
    below = [d for d in every if d < x][-1:]
    above = [d for d in every if d > x][:1]
    return below + above


def _choice(where: str, value: str, choices: Sequence[str]) -> None:
    if value not in choices:
        near = suggest(value.casefold(), choices)  # hunt 69: 'AdamW' was "did you mean 'adam'?"
        raise ConfigError(
            f"{where}={shown(value)} is not valid{near}; choose one of: {', '.join(choices)}"
        )


def config_notes(config: TrainConfig) -> list[str]:
    """Lines a run of `config` says beside its output ("note: ..."): a warm-up as long as
    the run (hunt 69: the rate never reached learning_rate, unsaid; refusing it would refuse
    `--max-steps 2` of a shipped config), an eval_frequency its mode does not use, a data
    file listed twice (read once), ModelZoo's keys read and ignored (`TrainConfig.notes`), and
    adam's eps placed as optax places it (`optimizer_names.eps_note`). An eval trains nothing:
    it says no optimizer line (hunt 82: mode eval said the schedule's default, a constant
    rate, of a checkpoint trained on a cosine)."""
    from wse_trainer.data_files import repeated_entries

    opt, run = config.optimizer, config.runconfig
    notes = list(config.notes)  # ModelZoo's keys that change nothing here (hunt 79)
    if run.mode in ("eval", "eval_all"):
        notes = [n for n in notes if n != schedule_note(opt)]
    elif eps := eps_note(opt):
        notes.append(eps)
    if run.mode != "eval" and run.max_steps is not None and opt.warmup_steps >= run.max_steps > 0:
        last = opt.learning_rate * (run.max_steps - 1) / opt.warmup_steps
        notes.append(
            f"note: optimizer.warmup_steps={opt.warmup_steps:,} is not below "
            f"runconfig.max_steps={run.max_steps:,}: the learning rate ramps up from 0 and "
            f"reaches {last:.3g} at the last step, not optimizer.learning_rate="
            f"{opt.learning_rate}; use fewer warm-up steps to train at it"
        )
    if run.eval_frequency is not None and run.mode != "train_and_eval":  # hunt 71: unsaid
        does = "never evaluates" if run.mode == "train" else "evaluates once, training nothing"
        notes.append(
            f"note: runconfig.eval_frequency={run.eval_frequency} has no effect with mode "
            f"{run.mode}, which {does}; it applies to mode train_and_eval"
        )
    seed = config.eval_input.shuffle_seed
    if run.mode != "train" and seed != InputConfig.shuffle_seed:  # hunt 80: unread, unsaid
        notes.append(
            f"note: eval_input.shuffle_seed={seed} orders nothing: each evaluation reads the "
            "eval split's batches in its order (ModelZoo's eval_input shuffle false)"
        )
    splits = ("train_input",) if run.mode == "train" else ("train_input", "eval_input")
    for name in splits:
        for earlier, entry in repeated_entries(getattr(config, name).data_dir):
            same = os.path.realpath(earlier) == os.path.realpath(entry)
            notes.append(
                f"note: {name}.data_dir lists {entry!r}, {'the same as' if same else 'inside'} "
                f"{earlier!r}; each file is read once"
            )
    return notes
