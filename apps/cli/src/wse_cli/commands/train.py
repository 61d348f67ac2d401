"""`wse train`: weight-streaming training with Cerebras ModelZoo conventions.

    wse train params.yaml [section.key=value ...] --mode train|eval|train_and_eval|eval_all
        [--model-dir/-o DIR] [--num-csx N] [--max-steps N] [--num-steps N] [--eval-steps N]
        [--checkpoint-path PATH [--load-checkpoint-states model | --is-pretrained-checkpoint]]
        [--validate-only] [--num-processes N --process-id I --coordinator HOST:PORT]

ModelZoo's run.py flags are read as it reads them (hunt 81: refused as "No such option", one
pointing `--eval_steps` at --max-steps): `-p`/`--params`, `-m`/`--mode`, `--eval_steps`
(`eval_input.eval_steps`, ModelZoo's runconfig.eval_steps), `--load_checkpoint_states`
(`runconfig.load_checkpoint_states`: `model` loads the checkpoint's weights alone, from step 0,
a fresh optimizer of any type) and `--is_pretrained_checkpoint` (the same as `model`, with a
`--checkpoint_path`), `--logging INFO` (what runs); `--compile_only`, `-c/--compile_dir` and
another `--logging` level are refused with what runs instead (exit 2).

`params.yaml` may also be given with `--params`, or be a shipped config name (`tiny`,
`gpt2_124m`, `llama3_8b`, `llama3_70b`, `llama_1t`, `llama_24t`). Flags override the
file's `runconfig` with their values as typed (`-o 'run #1'` is that folder); dotted
overrides change any key, their values read as YAML; one key given two values (two overrides,
or an override and its flag) is refused, as an option given twice is. `--weight-chunks K`
streams every weight matrix in K column chunks (`runconfig.weight_chunks`; 0: whole layers
when they fit, else as the SRAM ledger allows). `--validate-only` checks the config, and the
checkpoint the run would start from as the run checks it (another model, optimizer or
settings refused with the run's line; hunt 82), and prints the memory plan (with the weight
chunks and why), the predicted wafer step and tokens/s on num_csx systems, and each streamed
unit's no-stall condition, without allocating anything; it prices what the run will for its
mode (hunt 71): the step where it trains, the run's own eval-pass line where it evaluates.
Heavy packages are imported inside the command.

`--mode eval_all` (ModelZoo's) evaluates every committed checkpoint of the model_dir in step
order, each as `--mode eval --checkpoint-path <model_dir>/checkpoints/<step>` does and recorded
at its step (metrics.jsonl, TensorBoard's eval/, run.log), one line a step on the terminal; a
model_dir with no checkpoint, or a --checkpoint-path, is refused (exit 2).

Multi-process: `--num-processes/--process-id/--coordinator` (or the WSE_* variables that
`wse launch` sets, or SLURM's environment) join one run; the `num_csx` replicas are split
over the processes and only process 0 prints and writes logs. The model_dir must be on a
filesystem every process sees.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import typer

from wse_cli import multiprocess
from wse_cli.commands import train_modelzoo
from wse_cli.errors import fail, note
from wse_cli.options import number
from wse_cli.outputs import output_dir, output_file
from wse_cli.wafer_choice import SPEC_FILE, names_spec_file, wafer_spec


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return str(n)


def _print_plan(console, model, plan, config, spec) -> None:
    from rich.markup import escape
    from rich.table import Table
    from wse_trainer.session import batch_per_system, micro_batch

    r, per = config.runconfig, batch_per_system(config)
    micro = micro_batch(config, spec, model)
    console.print(
        f"model [bold]{escape(str(model.name or config.model['preset']))}[/]: "
        f"{model.num_params():,} parameters, {model.n_layers} layers; wafer "
        f"[bold]{escape(spec.name)}[/], num_csx={r.num_csx}; global batch "
        f"{config.train_input.batch_size} (train_input.batch_size) = {per} per replica, as "
        f"{per // micro} micro-batch(es) of {micro} (micro_batch_size "
        f"{config.train_input.micro_batch_size or 'auto'}) x "
        f"{config.train_input.max_sequence_length} tokens"
    )
    table = Table(title="memory plan (one replica's micro-batch)")
    for col in ("item", "where", "total", "per PE"):
        table.add_column(col, justify="left" if col in ("item", "where") else "right")
    for row in plan.rows:
        table.add_row(
            row["item"],
            row["where"],
            _human(row["bytes"]),
            _human(row["bytes_per_pe"]) if row["bytes_per_pe"] else "-",
        )
    console.print(table)
    verdict = (
        "fits: the model could stay resident"
        if plan.resident
        else "does not fit: weights must stream from MemoryX"
    )
    console.print(
        f"resident training state {_human(plan.resident_bytes)} vs wafer SRAM for data "
        f"{_human(plan.sram_total_bytes)} -> {verdict}"
    )
    console.print(
        f"MemoryX: {_human(plan.memoryx_bytes)} of masters and optimizer state, capacity "
        f"{_human(plan.memoryx_capacity_bytes)}"
    )
    from wse_core.hw.sram import describe_use

    if plan.streaming is not None:
        s = plan.streaming
        console.print(
            f"streaming: activations kept every {s.stride} layer(s), at most "
            f"{s.held_layers} layer inputs held; SRAM per PE in use "
            f"{describe_use(s.sram)}"  # data against data (hunt 82)
        )
        console.print(f"weight chunks: {s.chunks.describe()}", highlight=False)
        console.print(f"  why: {s.chunks.reason}", highlight=False)
    else:
        console.print(f"[red]streaming does not fit either:[/] {escape(plan.streaming_error)}")


def _seconds(s: float) -> str:
    for unit, size in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if s >= size:
            return f"{s / size:.3g} {unit}"
    return f"{s * 1e9:.3g} ns"


def _print_streams(console, rows) -> None:
    """Each streamed unit's no-stall condition (`wse_systems.training.stall.stream_budget`)."""
    from rich.table import Table

    table = Table(title="streams: no stall when weights in <= the compute they hide under")
    for col in ("unit", "uses", "weights", "in", "fwd", "bwd", "grad out", "ok"):
        table.add_column(col, justify="left" if col == "unit" else "right")
    for r in rows:
        table.add_row(r.unit, f"{r.per_step:,}", _human(r.weight_bytes), _seconds(r.stream_in_s),
                      _seconds(r.forward_s), _seconds(r.backward_s), _seconds(r.write_back_s),
                      "yes" if r.no_stall else "no")  # fmt: skip
    console.print(table)


def _print_prediction(console, report, config) -> None:
    """The predicted wafer step of the plan (a wse_core RunReport) and its tokens/s."""
    from wse_trainer.predicted import prediction_basis, saves_note

    x = report.extra
    console.print(
        f"predicted on {report.systems} x {report.wafer} ({x['precision']}): step "
        f"{report.predicted_s:.4g} s, {x['tokens_per_s']:,.0f} tokens/s; "
        f"{report.bound}-bound (critical: {report.predicted.critical().name}); streams "
        # hunt 69: only the calibration stood beside it; 850 MHz moved it 29%; hunt 70: the
        # run's own line listed neither: one text for both (`prediction_basis`)
        f"stall {100 * x['stall_fraction']:.1f}%; {saves_note(config)}; "
        f"{prediction_basis(report)}",
        highlight=False,
    )


def _print_run_prediction(console, config, spec, model, plan) -> None:
    """What the run prices for its mode (hunt 71: an eval run was shown a training step and
    train_and_eval no eval pass): the step where it trains, the run's own eval line
    (`wse_trainer.predicted.eval_line`) at `eval_steps` batches where it evaluates (left
    out: the whole split, its batches known once it is tokenized; one priced, said so)."""
    from wse_trainer.predicted import eval_line
    from wse_trainer.session import predict, stream_rows

    mode, evals = config.runconfig.mode, config.eval_input.eval_steps
    if mode != "eval":
        _print_prediction(console, predict(config, spec, model, plan), config)
        _print_streams(console, stream_rows(config, spec, model, plan))
    if mode != "train":
        line = eval_line(config, spec, model, evals or 1)[0]  # one line, as the run's echo
        console.print(line, highlight=False, markup=False, soft_wrap=True)
        said = (f"eval_input.eval_steps={evals:,}; a run whose eval split holds fewer evaluates "
                "those and says so") if evals else ("every whole batch of the eval split "
                "(eval_input.eval_steps unset; a last partial batch is dropped, as ModelZoo's "
                "drop_last), priced above for one batch: a run says how many batches and "
                "sequences it evaluates")  # fmt: skip
        console.print(f"  eval batches: {said}", highlight=False)


def train(
    args: list[str] = typer.Argument(
        None, help="params.yaml (or a shipped config name), then section.key=value overrides."
    ),
    params: Path = typer.Option(None, "--params", "-p", help="The params YAML file."),
    mode: str = typer.Option(
        None,
        "--mode",
        "-m",
        help="train | eval | train_and_eval | eval_all (each checkpoint of the model_dir, in "
        "step order, evaluated as --mode eval and recorded at its step).",
    ),
    model_dir: Path = output_dir(None, "--model-dir", "-o", help="Run folder."),
    num_csx: int = number(  # the limit runconfig.num_csx meets (hunt 67: the help showed none)
        None, "--num-csx", help="Data-parallel wafer replicas.", kind=int, ge=1, limit="systems"
    ),
    weight_chunks: int = number(
        None,
        "--weight-chunks",
        help="Column chunks per weight matrix (0: as SRAM allows).",
        kind=int,
        ge=0,
    ),  # fmt: skip
    max_steps: int = number(None, "--max-steps", help="Total steps (global).", kind=int, ge=1),
    num_steps: int = number(None, "--num-steps", help="Steps of this invocation.", kind=int, ge=1),
    eval_steps: int = number(
        None, "--eval-steps", help="Eval batches (eval_input.eval_steps).", kind=int, ge=1
    ),
    checkpoint_path: Path = typer.Option(
        None, "--checkpoint-path", help="Checkpoint to start from."
    ),
    load_checkpoint_states: str = typer.Option(
        None,
        "--load-checkpoint-states",
        help="What to load from --checkpoint-path (ModelZoo's): all, or components such as "
        "model (its weights alone: a fine-tune from step 0 with a fresh optimizer).",
    ),
    is_pretrained_checkpoint: bool = typer.Option(
        False,
        "--is-pretrained-checkpoint",
        help="--load-checkpoint-states model (ModelZoo's older flag): the weights alone, step 0.",
    ),
    compile_only: bool = typer.Option(False, "--compile-only", hidden=True),
    compile_dir: str = typer.Option(None, "--compile-dir", "-c", hidden=True),
    log_level: str = typer.Option(None, "--logging", hidden=True),
    validate_only: bool = typer.Option(
        False,
        "--validate-only",
        help="Check the config, print the memory plan and the predicted step, stop.",
    ),
    trace: Path = output_file(
        None, "--trace", help="With --validate-only: write the step's per-PE trace (wse view)."
    ),
    spec_file: Path = SPEC_FILE,  # instead of the config's runconfig.wafer preset
    num_processes: int = multiprocess.NUM_PROCESSES,
    process_id: int = multiprocess.PROCESS_ID,
    coordinator: str = multiprocess.COORDINATOR,
) -> None:
    """Train a model with weight streaming (MemoryX / SwarmX / wafer replicas).

    The run folder's hf/ (what `wse infer --model-dir` loads) is exported at the end of a
    run; to export a stopped run's newest checkpoint N, rerun its command with
    runconfig.max_steps=N (or --max-steps N): nothing is trained, step N is exported.

    --mode eval_all (ModelZoo's) evaluates every committed checkpoint of the model_dir in step
    order, each as --mode eval --checkpoint-path <model_dir>/checkpoints/<step> does: recorded
    at its step in metrics.jsonl, TensorBoard's eval/ and run.log (an eval of that step on
    record replaced), one line a step here. A model_dir with no checkpoint is refused."""
    multiprocess.join(num_processes, process_id, coordinator)
    from rich.console import Console
    from wse_trainer.config import SHIPPED, load_config

    train_modelzoo.refuse_unrun(compile_only, compile_dir, log_level)

    args = list(args or [])
    if params is None:
        if not args or "=" in args[0]:
            fail(
                "give a params file: `wse train params.yaml` or `--params params.yaml` "
                f"(shipped: {', '.join(SHIPPED)})"
            )
        params = args.pop(0)  # text: Path('') would be '.' (hunt 61), load_config says so
    flags = {
        "mode": mode,
        "model_dir": model_dir,
        "num_csx": num_csx,
        "weight_chunks": weight_chunks,
        "max_steps": max_steps,
        "num_steps": num_steps,
        "checkpoint_path": checkpoint_path,
        "load_checkpoint_states": train_modelzoo.states_flag(
            load_checkpoint_states, is_pretrained_checkpoint
        ),
    }
    _set_twice(args, flags)
    config = _with_flags(load_config(params, args), flags)
    train_modelzoo.check_pretrained(config, is_pretrained_checkpoint)
    config = train_modelzoo.with_eval_steps(config, args, eval_steps)
    validate_only = validate_only or config.runconfig.validate_only  # ModelZoo's key (hunt 65)
    if validate_only:  # a run says them itself, in its log (`wse_trainer.run`, hunt 80)
        _notes(config)
    spec, config = _run_wafer(config, args, spec_file)
    console = Console(quiet=not multiprocess.is_primary())
    if trace is not None and not validate_only:
        fail("--trace writes the predicted step's per-PE trace: use it with --validate-only")
    if trace is not None and config.runconfig.mode in ("eval", "eval_all"):
        fail("--trace writes the predicted training step's per-PE trace; --mode eval trains no "
             "step: use --mode train or train_and_eval")  # fmt: skip
    if validate_only:
        from wse_trainer.session import (
            check_inputs,
            checked_resume,
            model_config,
            predict,
            validate,
        )

        check_inputs(config)  # what the run refuses up front, validation refuses (hunt 65)
        if config.runconfig.mode == "eval_all":  # each step's run is an eval: planned as one
            from wse_trainer.run import as_eval

            config = as_eval(config)
        # hunt 82: a step of another model or optimizer passed here, refused by the run
        for line in checked_resume(config, model_config(config))[1]:
            if multiprocess.is_primary():
                note(line)

        model, plan = validate(config, spec)
        _print_plan(console, model, plan, config, spec)
        if plan.streaming is None:
            fail(
                f"the config cannot train: {plan.streaming_error}; raise num_csx or lower "
                "train_input.batch_size or max_sequence_length"
            )
        _print_run_prediction(console, config, spec, model, plan)
        if trace is not None:
            from wse_systems.training.performance import step_trace

            report = predict(config, spec, model, plan)
            report = report.with_trace(step_trace(spec, report))
            console.print(f"per-PE trace: {report.trace.save(trace)} (wse view FILE)", markup=False)
        console.print("[green]config is valid[/]")
        return
    _train(console, config, spec)


def _run_wafer(config, args: list[str], spec_file: Path | None):
    """(the run's `WaferSpec`, `config` naming it). `runconfig.wafer` names a preset or a
    spec file (a path: a '/' or a .yaml/.yml suffix, which no preset name has); `--spec FILE`
    goes into it as the file's absolute path (hunt 69: the run folder's params_train.yaml
    and checkpoints said `wafer: small` of a run on the file's wafer, and a rerun from them
    ran on small)."""
    wafer = config.runconfig.wafer
    if spec_file is None and names_spec_file(wafer):
        return wafer_spec(None, Path(wafer), wafer), config
    named = [o.partition("=")[2] for o in args if o.startswith("runconfig.wafer=")]
    spec = wafer_spec(named[-1] if named else None, spec_file, wafer)
    if spec_file is not None:
        config = _with_flags(config, {"wafer": spec_file.resolve()})
    return spec, config


def _with_flags(config, flags: dict):
    """`config` with the given flags' values in its `runconfig`, as typed: a flag is a value,
    not YAML text (hunt 67: read as `runconfig.model_dir=run #1`, `-o 'run #1'` trained into
    `run/` and `--checkpoint-path null` was no checkpoint, the run starting at step 0; a path
    is kept as ModelZoo's --model_dir keeps it). The dotted overrides stay YAML: that is
    their syntax. The sections are checked again as a params file is (`config_from_dict`)."""
    from wse_trainer.config import config_from_dict

    given = {k: str(v) if isinstance(v, Path) else v for k, v in flags.items() if v is not None}
    if not given:
        return config
    data = config.to_dict()
    data["runconfig"].update(given)
    return dataclasses.replace(config_from_dict(data), notes=config.notes)  # no setting


def _notes(config) -> None:
    """The config's notes (a warm-up as long as the run, a data file listed twice) of a
    `--validate-only`, said once the command has run; a refused command says only its one
    line (hunt 69). A run says them in its log (`wse_trainer.run`: run.log and the echo)."""
    from wse_trainer.config_check import config_notes

    if multiprocess.is_primary():
        for line in config_notes(config):
            note(line)


def _set_twice(args: list[str], flags: dict) -> None:
    """Refuse a runconfig key given as an override and as its flag with another value
    (hunt 60: `runconfig.max_steps=2 --max-steps 5` ran 5), as `wse_cli.option_repeats`
    refuses `--max-steps 2 --max-steps 5`; two overrides are `apply_overrides`' to refuse."""
    from wse_core.errors import shown

    for key, value in flags.items():
        said = [a.partition("=")[2] for a in args if a.partition("=")[0] == f"runconfig.{key}"]
        if value is not None and said and said[-1] != str(value):
            fail(
                f"runconfig.{key} is given twice ({shown(said[-1])}, then "
                f"--{key.replace('_', '-')} {shown(str(value))}); give it once"
            )


def _check_host_memory(config) -> None:
    """Refuse a run whose host arrays (wse_systems.training.plan.host_bytes) exceed the host's
    memory, before the tokenizer, the data or the model is made; name what would fit."""
    import jax
    from wse_core.host.memory import largest, require
    from wse_systems.training.plan import host_bytes, slots_of
    from wse_trainer.config_check import check_config
    from wse_trainer.run import model_config

    model = model_config(config)
    check_config(config, model.max_seq_len, model.vocab_size)
    csx = config.runconfig.num_csx
    replicas, slots = max(1, csx // max(1, jax.process_count())), slots_of(config.optimizer)
    batch, seq = config.train_input.batch_size, config.train_input.max_sequence_length
    need = lambda b, s: sum(host_bytes(model, max(1, b // csx), s, replicas, slots).values())  # noqa: E731

    def fits(budget: int) -> str:
        b = largest(lambda k: need(k * csx, seq), budget, hi=max(1, batch // csx)) * csx
        s = largest(lambda k: need(batch, k), budget, hi=seq)
        options = [f"train_input.batch_size={b} at max_sequence_length={seq}"] if b else []
        options += [f"max_sequence_length={s} at batch_size={batch}"] if s else []
        if not options:  # a suggestion is always a config that passes this check
            return f"not even train_input.batch_size={csx} fits"
        return "at most " + ", or ".join(options)

    require(f"training batch {batch} x {seq} tokens", need(batch, seq), fits=fits)


def _train(console, config, spec) -> None:
    from wse_core.host.runtime import keep_freed_memory, train_arenas
    from wse_trainer.session import check_inputs

    check_inputs(config)  # a missing data_dir or checkpoint is refused before JAX is imported
    from wse_trainer.run import run

    _check_host_memory(config)
    # each step's XLA temporaries reuse mapped pages; arenas by cores (train_arenas)
    keep_freed_memory(arenas=train_arenas())

    def echo(line: str) -> None:  # one line each, never wrapped at the console's width
        console.print(line, highlight=False, markup=False, soft_wrap=True)

    try:
        if config.runconfig.mode == "eval_all":
            _eval_all(config, spec, echo)
            return
        result = run(config, spec, echo=echo)
    except KeyboardInterrupt:
        if multiprocess.is_primary():
            typer.echo(_interrupted_line(Path(config.runconfig.model_dir)), err=True)
        raise typer.Exit(130) from None  # 128 + SIGINT, as a shell reports Ctrl-C
    timed = f" {result.timed}" if result.step_s else ""  # hunt 70: the compile apart
    stall = f"{result.tokens_per_s:,.0f} tokens/s{timed}; stalled {100 * result.stall_fraction:.1f}"
    said = f"{stall}% of the time" if result.step_s else "no step trained"  # hunt 72: "0 tokens/s"
    if config.runconfig.mode == "eval" and not result.restored:  # ModelZoo's note, at the end
        said += "; evaluated randomly initialised weights (no checkpoint found)"
    echo(f"global step {result.global_step}; {said}; model_dir {result.model_dir}")
    if result.step_s and result.report is not None:  # the predicted step, measured beside
        echo(
            f"step: measured {result.report.measured_wall_s:.4g} s (emulator, this machine,"
            f"{timed}), predicted {result.report.predicted_s:.4g} s on the wafer"
        )
    if result.hf_dir is not None:
        console.print(f"HF-format model for inference: {result.hf_dir}", markup=False)
    for text in result.samples:
        console.rule("sample")
        console.print(text, highlight=False, markup=False)


def _eval_all(config, spec, echo) -> None:
    """Mode eval_all: each step's run (`run_eval_all`) says its eval line, its notes once
    (its whole log is run.log's), then where the records are."""
    from wse_trainer.metrics import eval_line
    from wse_trainer.run import run_eval_all

    said: set[str] = set()

    def each(result) -> None:
        for line in result.notes:
            if line not in said:
                said.add(line)
                echo(line)
        echo(eval_line(result.global_step, result.eval_loss, result.eval_accuracy))

    results = run_eval_all(config, spec, each=each)
    steps = ", ".join(str(r.global_step) for r in results)
    n, folder = len(results), config.runconfig.model_dir
    echo(f"evaluated {n} checkpoint{'s' * (n != 1)} (steps {steps}); model_dir {folder}")


def _interrupted_line(model_dir: Path) -> str:
    """Ctrl-C's one line: where the run resumes from when the same command is run again (a
    terminal user would otherwise have to list the checkpoints to know what was kept), and
    an hf/ export older than that step (hunt 68: `wse infer` then ran the older weights)."""
    from wse_trainer.export import export_lag
    from wse_trainer.seals import newest_sealed

    step = newest_sealed(model_dir / "checkpoints")
    if step is None:
        return (
            "interrupted (Ctrl-C) before the first checkpoint; the same command starts again "
            "at step 0"
        )
    return (
        f"interrupted (Ctrl-C); last good checkpoint: {step} (step {step.name}); the same "
        "command resumes from it" + export_lag(model_dir, int(step.name))
    )


def register(app: typer.Typer) -> None:
    """Add `wse train` to the root app."""
    app.command("train")(train)
