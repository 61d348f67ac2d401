"""The `wse train` shell: data, model, streamed steps, checkpoints, logs, eval, export.

`run(config, spec)` trains (or evaluates) as the config says on a wafer of `spec` (the
`WaferSpec` its caller resolved once: the CLI from `runconfig.wafer` or `--spec FILE`) and
returns a `RunResult`:

1. checks what can be known before compiling (`config_check`, the replica's SRAM plan);
2. the tokenizer: `<model_dir>/tokenizer.json` when present (a resumed run), else a
   byte-level BPE trained on the train split; the data packed and iterated with its seed;
3. MemoryX / SwarmX / replicas from `init_params(seed)`, then the latest committed
   checkpoint (or `--checkpoint-path`) restored: weights, optimizer state, data position
   (or what `runconfig.load_checkpoint_states` names: `model`, the weights alone from step 0,
   a fine-tune's start; `wse_trainer.resume`);
   the emulator's layout over this machine's cores (`wse_trainer.layout`: the fastest unless
   `runconfig.cpu_shards` fixes it) is a line of the run log;
4. steps until `max_steps` (counted from the global step) or `num_steps` more; a NaN or Inf
   loss or gradient norm (`StepStats.grad_norm`, fetched with the loss) stops the run with
   `TrainingDivergedError` naming the step and the last good checkpoint, before anything
   is saved or exported; with `train_input.packing` each batch carries its documents'
   segment ids and positions (`data.segments`); each step's record (metrics.jsonl and
   TensorBoard's train/) holds its `lr` (the rate optax applied, `optimizer.step_rate`),
   `samples_per_s` and a ReLU-like model's MLP zero fraction per layer (and `_mean`);
5. checkpoints every `checkpoint_steps` and at the end; eval loss, perplexity and next-token
   accuracy (ModelZoo's `eval/accuracy`; `wse_trainer.evaluation`), each evaluation (every
   `eval_frequency` steps and at the end) in metrics.jsonl and eval/, over
   `eval_input.eval_steps` batches or, left out, every whole batch of the eval split (a line
   says how many, and how many of its sequences);
   an eval with no checkpoint to read evaluates the initial weights and says so; a rerun
   that trains nothing and finds its step's eval in metrics.jsonl, run with the eval settings
   saved, says so, evaluating none (other settings: it evaluates, replacing that record; a
   `mode: eval` of a step on record replaces it too, hunt 80);
6. `<model_dir>/hf/` (`wse_trainer.export`: HF format, the tokenizer, EOS named, the step it
   holds; replaced whole, a full disk is one line) and samples from the trained model. A
   resume whose `max_steps` is at or below the checkpoint's step trains nothing and says so
   (as TF's Estimator, "Skipping training since max_steps has already saved"); it exports
   that step, which is how a stopped run's newest checkpoint is exported.

`run_eval_all(config, spec, each=...)` is ModelZoo's mode eval_all: every committed step of
the model_dir, in step order, evaluated by `run` as `mode: eval` with `--checkpoint-path
<model_dir>/checkpoints/<step>` (`as_eval`), each recorded at its step as that run records it
(hunt 80: it was refused); `each` is called with each step's `RunResult` as it ends. A
model_dir with no committed step, or a checkpoint_path, is a ConfigError (`check_inputs`);
`run` itself refuses mode eval_all, whose result is a list.

The run's notes (the config's, `config_check.config_notes`, then the session's and the
checkpoints': a kept decay, another corpus, steps moved aside) open its log, and are
`RunResult.notes` for a Python caller (hunt 80: the config's were the CLI's alone).

Steps 1-3 are `wse_trainer.session`'s (`Session`) and `wse_trainer.resume`'s
(`open_checkpoints`), eval `wse_trainer.evaluation`'s. `model_config(config)` and `validate(config,
spec)` (the `--validate-only` memory plan) allocate nothing; `predict(config, spec, model,
plan)` is the wafer's predicted step on it (`wse_systems.training.performance.predict_step`,
a `RunReport`), which the run logs next to the measured step (`predicted_step_s` in
metrics.jsonl, a line in run.log, and `RunResult.report`: that `RunReport` with the measured
mean step as its `measured_wall_s`: the steps after the first, whose compile is said apart,
`metrics.Throughput`); the three live in `wse_trainer.session` and are re-exported here. A
run prices what it runs (`wse_trainer.predicted`): an eval its eval pass, a run that trains
no step no step.

The model_dir is locked for the run (`wse_trainer.run_lock`, taken by `make_model_dir`,
released at the end); a run whose folder is deleted or replaced meanwhile stops at its next
log or checkpoint write with `RunFolderGone` (exit 1), never reporting success.

Multi-process runs (`jax.distributed` joined before `run`): every process runs the same
program on the same data stream and computes its block of the `num_csx` replicas (SwarmX
gathers their gradients across processes); each keeps its own copy of MemoryX and applies
the same updates. Process 0 alone writes what people read: the tokenizer, metrics.jsonl,
TensorBoard, the run log, the resolved params, echoed lines, eval, the HF export and
samples. Every process takes part in orbax's saves and restores.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import yaml
from wse_core import RunReport, WaferSpec
from wse_core.errors import RunFault
from wse_core.host.distributed import is_primary

from wse_trainer import interrupt
from wse_trainer.config import TrainConfig
from wse_trainer.config_check import config_notes
from wse_trainer.evaluation import eval_note, evaluate, held_accuracy, log_eval, replaced
from wse_trainer.export import export_hf
from wse_trainer.layout import describe
from wse_trainer.predicted import run_lines
from wse_trainer.resume import (
    eval_on_record,
    evaluating,
    nothing_to_train,
    open_checkpoints,
    params_on_file,
)
from wse_trainer.run_folder import undone_on_error
from wse_trainer.run_lock import release
from wse_trainer.save_faults import save_failed
from wse_trainer.session import (
    Session,
    model_config,
    predict,
    stream_rows,
    validate,
)

__all__ = ["RunResult", "TrainingDivergedError", "model_config", "validate", "predict",
           "stream_rows", "run", "run_eval_all", "as_eval"]  # fmt: skip


class TrainingDivergedError(RunFault):
    """The loss or the gradient norm became NaN or Inf (a fault mid-run: exit 1)."""


@dataclasses.dataclass
class RunResult:
    model_dir: Path
    global_step: int
    losses: dict[int, float]
    eval_loss: float | None = None
    # the next-token accuracy of that eval (None: no eval, or one on record without it)
    eval_accuracy: float | None = None
    samples: list[str] = dataclasses.field(default_factory=list)
    tokens_per_s: float = 0.0
    stall_fraction: float = 0.0
    hf_dir: Path | None = None
    # measured mean step on this machine, and tokens_per_s and stall_fraction, over the steps
    # after this invocation's first, whose wall (the compile in it) is first_step_s; over
    # that one step when it ran alone (compile_included)
    step_s: float = 0.0
    first_step_s: float = 0.0
    compile_included: bool = False
    # the wafer's predicted step on the run's plan (`predict`), with the measured mean step
    # as its measured_wall_s once steps ran; None when the run trained no step (hunt 70)
    report: RunReport | None = None
    # the wafer's predicted eval pass (`predict_eval`), when the run evaluated
    eval_report: RunReport | None = None
    restored: bool = False  # weights read from a checkpoint (False: initial, random ones)
    # the run's notes, as its log says them: the config's (`config_check.config_notes`: a
    # warm-up past the run, an unused eval_frequency, ModelZoo's keys ignored), then the
    # session's and the checkpoints' (a kept decay, another corpus, steps moved aside)
    notes: list[str] = dataclasses.field(default_factory=list)

    @property
    def timed(self) -> str:
        """What step_s and tokens_per_s are over, for the lines that show them (the run
        log's "timing:" line has the first step's seconds)."""
        if self.compile_included:
            return "over one step, its compile included"
        return "after the first step"

    @property
    def predicted_step_s(self) -> float:
        """The wafer's predicted step (s) on the run's plan (0 before the run set it)."""
        return self.report.predicted_s if self.report is not None else 0.0


def _train_loop(s: Session, ckpt, log, start: int, end: int, result: RunResult) -> None:
    from wse_trainer.metrics import Throughput, train_line
    from wse_trainer.optimizer import step_rate

    run_cfg, bsz = s.config.runconfig, s.config.train_input.batch_size
    lr_at = step_rate(s.config.optimizer, run_cfg.max_steps)  # the Session's transform's
    rates = Throughput()  # the first step (the compile) apart: hunt 70
    window: list[Any] = []
    from wse_core.host.progress import progress

    with progress(end - start, "training", quiet=not is_primary()) as done:
        for step in range(start + 1, end + 1):
            if interrupt.requested():  # a Ctrl-C that landed in a finalizer (lost there)
                raise KeyboardInterrupt
            ckpt.check()  # a save that failed in the background stops the run here
            batch = next(s.iterator)
            st = s.trainer.step(batch, s.segments(batch, s.config.train_input.packing))
            if not math.isfinite(st.loss):
                raise _diverged(f"loss is {st.loss}", step, ckpt)
            if not math.isfinite(st.grad_norm):  # a finite loss over a broken gradient
                raise _diverged(f"gradient norm is {st.grad_norm}", step, ckpt)
            rates.add(st)
            window.append(st)
            result.losses[step] = st.loss
            log.record(step, "train", _train_record(st, s.prediction.predicted_s, lr_at(step), bsz))
            if step % run_cfg.log_steps == 0 or step == end:
                recent, recent_s = rates.window_s(window)
                log.line(
                    train_line(
                        step,
                        st.loss,
                        bsz * recent / recent_s,
                        bsz / rates.step_s(),
                        rates.tokens_per_s(),
                        rates.stall_fraction(),
                    )
                )
                window = []
            if step % run_cfg.checkpoint_steps == 0 or step == end:
                _check_weights(s, step, ckpt)  # never save (or export) NaN weights
                log.check()  # never save into a folder that replaced the run's
                ckpt.save(step, s.state(), s.meta(step))
            if (
                run_cfg.mode == "train_and_eval"
                and run_cfg.eval_frequency
                and step % run_cfg.eval_frequency == 0
                and step != end
                and is_primary()
            ):
                log_eval(log, step, evaluate(s))  # hunt 70: each eval recorded, not only the last
            done(step - start)
    log.line(rates.summary(start))
    result.tokens_per_s, result.step_s = rates.tokens_per_s(), rates.step_s()
    result.stall_fraction, result.compile_included = rates.stall_fraction(), rates.compile_included
    result.first_step_s = rates.first.wall_s if rates.first is not None else 0.0
    if result.step_s:
        result.report = dataclasses.replace(s.prediction, measured_wall_s=result.step_s)


def _diverged(what: str, step: int, ckpt: Any) -> TrainingDivergedError:
    ckpt.wait()
    return TrainingDivergedError(
        f"{what} at step {step}; the run stopped without saving (last good checkpoint: "
        f"{ckpt.last_good()}); lower optimizer.learning_rate or set "
        "optimizer.max_gradient_norm"
    )


def _check_weights(s: Session, step: int, ckpt: Any) -> None:
    """Stop the run when an update left a non-finite master weight (the last step's update
    is not seen by any loss before it is saved)."""
    import numpy as np

    for leaf in jax.tree.leaves(s.trainer.memx.params):
        if not np.isfinite(np.asarray(leaf)).all():
            raise _diverged("a weight is not finite after the update", step, ckpt)


def _train_record(st: Any, predicted_step_s: float, lr: float, batch: int) -> dict[str, Any]:
    """metrics.jsonl's fields of one train step (a `StepStats`) next to the predicted one:
    its learning rate and samples/s (ModelZoo's `local_samples_per_sec`) among them."""
    return {
        "loss": st.loss,
        "grad_norm": st.grad_norm,
        "lr": lr,
        "samples_per_s": batch / st.wall_s if st.wall_s > 0 else 0.0,
        "wall_s": st.wall_s,
        "stall_s": st.stall_s,
        "compute_s": st.compute_s,
        "tokens": st.tokens,
        "broadcast_bytes": st.broadcast_bytes,
        "reduce_bytes": st.reduce_bytes,
        "predicted_step_s": predicted_step_s,
        **_sparsity_record(st.mlp_zero_fraction),
    }


def _sparsity_record(fraction: tuple[float, ...] | None) -> dict[str, Any]:
    """metrics.jsonl's sparsity keys: per-layer MLP zero fractions and their mean."""
    if fraction is None:
        return {}
    mean = sum(fraction) / len(fraction)
    return {"mlp_zero_fraction": list(fraction), "mlp_zero_fraction_mean": mean}


def _samples(s: Session) -> list[str]:
    from wse_trainer.sample import generate

    r = s.config.runconfig
    if r.sample_tokens <= 0:
        return []
    prompt = s.tok.encode(r.sample_prompt).ids
    ids = generate(
        s.model,
        s.trainer.memx.params_tree(),
        prompt,
        r.sample_tokens,
        temperature=r.sample_temperature,
        seed=r.seed,
    )
    return [r.sample_prompt + s.tok.decode(ids)]


def run(
    config: TrainConfig, spec: WaferSpec, *, echo: Callable[[str], None] | None = None
) -> RunResult:
    """Train and/or evaluate as `config.runconfig.mode` says on a wafer of `spec` (see the
    module docstring)."""
    with interrupt.caught():
        return _run(config, spec, echo)


def as_eval(config: TrainConfig, step: int | None = None) -> TrainConfig:
    """`config` as mode eval: of checkpoint `step` of its model_dir (`--checkpoint-path
    <model_dir>/checkpoints/<step>`), or as it names (None): what mode eval_all runs once a
    step, and what `--validate-only` of it plans and prices."""
    run_cfg = dataclasses.replace(config.runconfig, mode="eval")
    if step is not None:
        path = Path(run_cfg.model_dir) / "checkpoints" / str(step)
        run_cfg = dataclasses.replace(run_cfg, checkpoint_path=str(path))
    return dataclasses.replace(config, runconfig=run_cfg)


def run_eval_all(
    config: TrainConfig, spec: WaferSpec, *, each: Callable[[RunResult], None] | None = None
) -> list[RunResult]:
    """Mode eval_all (ModelZoo's): `run` of `as_eval(config, step)` for each committed step of
    the model_dir, in step order, each recorded at its step; `each(result)` as each ends."""
    from wse_trainer.checkpoints import committed_steps
    from wse_trainer.session import check_inputs

    check_inputs(config)  # no committed step, or a checkpoint_path: a ConfigError
    steps = committed_steps(Path(config.runconfig.model_dir) / "checkpoints")
    results = []
    for step in steps:
        results.append(run(as_eval(config, step), spec))
        if each is not None:
            each(results[-1])
    return results


def _run(config: TrainConfig, spec: WaferSpec, echo: Callable[[str], None] | None) -> RunResult:
    from wse_trainer.config import ConfigError
    from wse_trainer.metrics import NullLog, RunFolderGone

    if config.runconfig.mode == "eval_all":  # a list of runs, one a step
        raise ConfigError("runconfig.mode eval_all evaluates each checkpoint: call run_eval_all")

    # hunt 62: a checkpoint refused on restore (another tokenizer, a truncated file, an
    # unsealed step) left the new run folder and its tokenizer.json behind
    folder = Path(config.runconfig.model_dir)
    with undone_on_error(folder):
        s = Session(config, spec, echo)
        initial = s.trainer.memx.params  # a restore replaces it (`MemoryX.load_state_tree`)
        ckpt, start, notes = open_checkpoints(s)
    log: Any = NullLog()
    gone: RunFolderGone | None = None
    try:
        run_cfg = s.config.runconfig  # its max_steps resolved (`modelzoo_runconfig.run_steps`)
        end = run_cfg.max_steps if run_cfg.num_steps is None else start + run_cfg.num_steps
        end = min(end, run_cfg.max_steps)
        trains = run_cfg.mode != "eval" and end > start
        # hunt 78: a rerun that trains nothing evaluates no step whose eval is on record
        rerun = not trains and run_cfg.mode == "train_and_eval"
        primary, on_file = is_primary(), []
        if primary:
            log = _open_log(s, start, echo)
            on_file = params_on_file(s.dir) if rerun else []  # what the evals on record ran
            _save_params(s)  # with, read before this run's replace them
        result = RunResult(s.dir, start, {}, restored=s.trainer.memx.params is not initial)
        # hunt 80: the config's notes were the CLI's alone (stderr), never in run.log nor
        # said to a Python caller; one list, logged, echoed and returned
        result.notes = [*config_notes(s.given), *notes]  # its max_steps resolved
        for note in result.notes:
            log.line(note)
        if run_cfg.mode == "eval" and result.restored:  # hunt 80: it resumes nothing
            log.line(evaluating(s, start) + replaced(log, start))
        elif start:
            log.line(f"resumed from checkpoint step {start}")
        held = eval_on_record(log, start, s, on_file) if rerun else None
        result.report = s.prediction if trains else None  # hunt 70: priced what never ran
        evals = run_cfg.mode != "train" and held is None
        if evals and (note := eval_note(s)):  # none where none runs
            log.line(note)
        lines, result.eval_report = run_lines(s, trains=trains, evals=evals)
        for line in lines:  # what the run runs, priced (`wse_trainer.predicted`)
            log.line(line)
        log.line(describe(s.layout, s.micro_batch))
        if trains:
            # a resume from the saved step 0 saves it no more (hunt 70: StepAlreadyExistsError)
            if start == 0 and run_cfg.save_initial_checkpoint and 0 not in ckpt.all_steps():
                ckpt.save(0, s.state(), s.meta(0))
            _train_loop(s, ckpt, log, start, end, result)
            result.global_step = end
        elif run_cfg.mode != "eval":  # hunt 68: max_steps at or below the step, said nowhere
            log.line(nothing_to_train(start, run_cfg.max_steps))
        if run_cfg.mode != "train" and primary and held is None:
            metrics = evaluate(s)
            result.eval_loss, result.eval_accuracy = metrics
            log_eval(log, result.global_step, metrics)
        elif held is not None:  # its accuracy as on record (none before hunt 80)
            result.eval_loss, result.eval_accuracy = held, held_accuracy(log, start)
        ckpt.wait()
        log.check()  # the last save went into the run's own folder
        if run_cfg.mode != "eval" and primary:
            result.hf_dir = export_hf(s, result.global_step)
            result.samples = _samples(s)
        log.check()  # and so did the export: never report a run whose folder went
    except Exception as e:
        # a save, or TensorBoard's writer, failing because the run folder went is said as
        # that (hunt 64: an `rm -rf` of it mid-run was "Directory not empty" at best)
        gone = e if isinstance(e, RunFolderGone) else _folder_gone(log)
        if gone is None:
            raise
        save_failed()  # orbax's errors of the save in flight are echoes of it now
        raise gone from None
    finally:
        try:
            ckpt.close()
        except Exception:
            if gone is None:
                raise
        finally:
            log.close()
            release(folder)
    return result


def _folder_gone(log: Any) -> Any:
    """The `RunFolderGone` of a log whose folder went, or None."""
    from wse_trainer.metrics import RunFolderGone

    try:
        log.check()
    except RunFolderGone as e:
        return e
    return None


def _open_log(s: Session, start: int, echo: Callable[[str], None] | None) -> Any:
    """Process 0's `MetricsLog`: a train drops the records past its start step; an eval
    keeps them all (hunt 64: it truncated metrics.jsonl to its step)."""
    from wse_trainer.metrics import MetricsLog

    evaluates = s.config.runconfig.mode == "eval"
    return MetricsLog(s.dir, resume_step=None if evaluates else start, echo=echo)


def _save_params(s: Session) -> None:
    """The resolved params as ModelZoo keeps them, `<mode>/params_<mode>.yaml`: an eval
    writes eval/, never the train's file; written whole, never through a link (hunt 78)."""
    from wse_trainer.run_entries import write_entry

    mode = "eval" if s.config.runconfig.mode == "eval" else "train"
    write_entry(s.dir / mode / f"params_{mode}.yaml", yaml.safe_dump(s.settings()))
