"""What a `wse train` run predicts for the wafer, and the lines that say it.

Contract. A run prices what it runs, from its own plan (hunt 70: an eval, and a resume with
nothing left to train, printed the training step's prediction): `run_lines(s, trains=,
evals=)` is (the run log's prediction lines, the eval pass's `RunReport` or None): the
training step's line (`Session.prediction`, `wse_trainer.session.predict`) where the run
trains, the eval pass's (`eval_line`: `predict_eval`, `wse_systems.training.forward`) where it
evaluates, else one line saying that nothing it runs is predicted. `wse train
--validate-only` prints the same eval line (hunt 71: it printed a training step for an eval
run and no eval pass for train_and_eval), at `eval_steps` batches: the split's own count is
known once it is tokenized, and a run evaluating fewer says so (`evaluation.eval_note`). Every line
that prints a predicted figure ends with `prediction_basis(report)`: the calibration in force
and the constants that move it (`wse_core.cost.listing`), the same text `--validate-only`
prints (hunt 70: the run's line listed neither); a step's line names before it what the
run does and the step does not price (`saves_note`: checkpoint saves; hunt 71) and, with
`train_input.packing`, the attention it prices: a run prices its packed rows' attention
within each document, (query, key) pairs counted on the rows it trains on
(`attention_pairs`, `Sparsity.attention_pairs_per_row`, as the `varlen-packing` experiment
prices them); `--validate-only`, before the data is read, prices full causal rows and says
so (hunt 76: packing moved no figure, unsaid).
"""

from __future__ import annotations

from typing import Any

from wse_core.hw.spec import WaferSpec

from wse_trainer.config import TrainConfig

__all__ = ["NOTHING", "attention_pairs", "eval_line", "prediction_basis", "predict_eval",
           "run_lines", "saves_note", "step_line"]  # fmt: skip

NOTHING = "no prediction: this run trains no step and evaluates nothing"


def prediction_basis(report: Any) -> str:
    """What a predicted figure (a `RunReport`) stands on (module contract)."""
    listed = report.assumed_compact()
    return report.calibration.describe() + (f"; {listed}" if listed else "")


def saves_note(config: TrainConfig, pairs: float | None = None) -> str:
    """What a training step's line says its figure leaves out or assumes: the checkpoint
    saves, as given (`cadence.saves_text`; nothing sourced gives the rate at which MemoryX
    writes its masters and optimizer state; hunt 71: said nowhere, `llama3_8b` writes ~96 GB
    20 times) and a count kept, and with packing the attention priced (`pairs`: the run's measured
    `attention_pairs`; None: not yet known, full causal rows priced)."""
    from wse_trainer.cadence import saves_text

    run = config.runconfig
    text = (
        f"not priced: checkpoint saves ({saves_text(run)}, MemoryX's masters and optimizer "
        "state; no sourced write rate)"
    )
    if run.keep_checkpoint_max:  # every one kept (ModelZoo's default) goes unsaid
        text += (
            f"; the newest {run.keep_checkpoint_max:,} kept (runconfig.keep_checkpoint_max), "
            "older ones deleted"
        )
    if not config.train_input.packing:
        return text
    seq = config.train_input.max_sequence_length
    full = seq * (seq + 1) // 2
    if pairs is None:
        return (
            f"{text}; train_input.packing: attention priced over full causal rows of {seq:,} "
            f"tokens ({full:,} (query, key) pairs a row), an upper bound: the documents' "
            "lengths are known once the data is read, and a run prices its packed rows' pairs"
        )
    return (
        f"{text}; train_input.packing: attention priced within each packed document, "
        f"{pairs:,.0f} (query, key) pairs a row as measured on the run's rows ({full:,} full "
        "causal)"
    )


def attention_pairs(rows: Any, eos_id: int) -> float:
    """The mean causal (query, key) pairs per row of packed `rows` (n, seq_len + 1) whose
    inputs attend within each document only (`data.segments`: an EOS opens one): the sum over
    a row's document pieces of n (n + 1) / 2, i.e. of each input token's position + 1."""
    import numpy as np

    from wse_trainer.data import segments

    total = 0
    for a in range(0, len(rows), 4096):  # blocks: a large corpus's positions never whole
        total += int((segments(rows[a : a + 4096, :-1], eos_id).positions + 1).sum(dtype=np.int64))
    return total / len(rows)


def predict_eval(config: TrainConfig, spec: WaferSpec, model: Any, batches: int):
    """The predicted wafer eval pass (`RunReport`) of `batches` eval batches: each system its
    share of `eval_input.batch_size` (the busiest, ceil(batch / num_csx)) at
    `eval_input.max_sequence_length`, as micro-batches of `eval_input.micro_batch_size`
    (hunt 71: it was checked, then never read; unset: "auto", the largest the training
    ledger places, since the train's `micro_batch_size` need not divide the eval batch;
    "explore": the fastest eval pass; "none" or None: the whole batch); the ledger's
    SramBudgetError where not one sequence fits."""
    from wse_systems.training.forward import predict_eval as priced
    from wse_systems.training.micro_batch import resolve_micro_batch
    from wse_systems.training.performance import StepLayout
    from wse_systems.training.plan import memory_plan

    run, seq = config.runconfig, config.eval_input.max_sequence_length
    per = -(-config.eval_input.batch_size // run.num_csx)
    where = dict(seq_len=seq, stride=run.activation_stride, chunks=run.weight_chunks)
    setting = config.eval_input.micro_batch_size

    def eval_pass(micro: int) -> Any:  # each micro-batch its own memory plan, as the step's
        plan = memory_plan(model, spec, micro, **where)
        return priced(model, spec, num_csx=run.num_csx, batch_per_system=per, seq_len=seq,
                      micro_batch=micro, batches=batches, layout=StepLayout(plan))  # fmt: skip

    micro = resolve_micro_batch(
        setting, model, spec, batch_per_system=per,
        speed=lambda m: eval_pass(m).extra["tokens_per_s"], **where,
    )  # fmt: skip
    return eval_pass(micro)


def step_line(report: Any, spec: WaferSpec, unpriced: str) -> str:
    """The predicted training step's line (`unpriced`: what the run does beside its steps
    that the figure leaves out, `saves_note`)."""
    x = report.extra
    return (
        f"predicted wafer step ({report.systems} x {spec.name}, {x['precision']}): "
        f"{report.predicted_s:.4g} s, {x['tokens_per_s']:,.0f} tokens/s, "
        f"{x['micro_batches']} micro-batch(es) of {x['micro_batch']} per system, set by "
        f"{x['step_bound']}, streams add {100 * x['stall_fraction']:.1f}%; {unpriced}; "
        f"{prediction_basis(report)}"
    )


def run_lines(s: Any, *, trains: bool, evals: bool) -> tuple[list[str], Any]:
    """(the lines, the eval pass's report or None) of a `Session` (module contract)."""
    unpriced = saves_note(s.given, s.attention_pairs)  # the cadences as given
    lines = [step_line(s.prediction, s.spec, unpriced)] if trains else []
    report = None
    if evals:  # every evaluation runs the same batches: the first `eval_steps` the split
        cfg = s.config.eval_input  # holds, as `session.evaluate` does
        batches = min(cfg.eval_steps, len(s.eval_rows) // cfg.batch_size)
        line, report = eval_line(s.config, s.spec, s.model, batches)
        lines.append(line)
    return lines or [NOTHING], report


def eval_line(config: TrainConfig, spec: WaferSpec, model: Any, batches: int) -> tuple[str, Any]:
    """One evaluation's predicted eval pass of `batches` batches: (its line, its report or
    None where it cannot be priced)."""
    from wse_core import WseError

    run = config.runconfig
    try:
        r = predict_eval(config, spec, model, batches)
    except WseError as e:  # an eval shape the training ledger cannot place
        return f"no prediction of the eval pass: {e}", None
    x, when = r.extra, "" if run.mode == "eval" else " at the end"
    if when and run.eval_frequency:
        every = run.eval_frequency
        when = f" every {every:,} step{'s' * (every != 1)} and at the end"
    line = (
        f"predicted eval pass ({r.systems} x {spec.name}, {x['precision']}), each "
        f"evaluation{when}: {r.predicted_s:.4g} s for {x['batches']} batch(es) of "
        f"{x['batch_per_system']} x {x['seq_len']} tokens per system (forward only, "
        f"{x['micro_batches']} micro-batch(es) of {x['micro_batch']}), {x['tokens_per_s']:,.0f} "
        f"tokens/s, streams add {100 * x['stall_fraction']:.1f}%; {prediction_basis(r)}"
    )
    return line, r
