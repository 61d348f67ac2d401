"""One `wse train` run's setup: the config's model, plan and prediction, and its live objects.

Contract. `model_config(config)` (the `model` section's `wse_models.ModelConfig`),
`validate(config, spec)` (config checks, one replica's memory plan, MemoryX's capacity),
`predict(config, spec, model, plan, pairs)` (the wafer's predicted step on that plan,
`wse_systems.training.performance.predict_step`, packed rows at their measured attention
`pairs`; its eval pass and the lines a run prints of them: `wse_trainer.predicted`) and
`stream_rows(config, spec, model, plan)` (each streamed unit's no-stall condition,
`wse_systems.training.stall`) allocate nothing; `wse_trainer.run` re-exports them. `spec`
is the `WaferSpec` the caller resolved once (the CLI: `runconfig.wafer` or `--spec FILE`).
`checked_resume(config, model)` checks the step a run starts from and resolves what it
runs (max_steps, a kept decay), with the notes, cheaply: `Session` and `--validate-only` ask
it (hunt 82). `Session(config, spec, echo)` builds what a run holds while it steps: the tokenizer
(`<model_dir>/tokenizer.json` if there, else a BPE trained on the train split, saved by
process 0), the packed data iterator and (unless `mode: train`) the eval split's rows, each
split checked against its batch size before anything compiles (a ConfigError; the CPU
attention kernels' compile started before them in a helper process,
`wse_models.sdpa_cpu.compile_early`), the `StreamedTrainer` from `init_params(seed)` and
the prediction on the plan it runs; `Session.state` / `meta` are what a checkpoint saves
(`wse_trainer.resume.open_checkpoints` restores them). A model_dir that cannot be a
writable folder is a ConfigError before any work; what a refused Session made (the folder,
its tokenizer.json) its caller removes (`run_folder.undone_on_error`).
Each split is read once (`data.corpus_texts`): its documents train the tokenizer, pack into
rows and are counted against the other split's (`overlap.overlap_note`). `evaluate(s)` (the
eval loss and next-token accuracy, `EvalMetrics`) is `wse_trainer.evaluation`'s, re-exported:
the eval split's batches are `eval_input.eval_steps`, or the whole split when it is left
out, the Session's config holding it resolved once the split is read, and the cadences as
the loop reads them (`wse_trainer.cadence`); `Session.given` and `Session.settings()` are
the config as given.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from wse_core.errors import quoted_number
from wse_core.host.distributed import barrier, is_primary
from wse_core.hw.spec import WaferSpec

from wse_trainer.config import (
    ConfigError,
    TrainConfig,
    number_text,
    split_lengths,
    unknown_model_key,
)
from wse_trainer.config_check import check_config
from wse_trainer.evaluation import EvalMetrics, eval_rows, evaluate, packed_rows
from wse_trainer.modelzoo_model import model_values

__all__ = ["model_config", "validate", "predict", "stream_rows", "Session", "check_inputs",
           "checked_resume", "fitting_tokenizer", "evaluate", "EvalMetrics"]  # fmt: skip


def model_config(config: TrainConfig):
    """The `wse_models.ModelConfig` of the `model` section (preset plus field overrides); a
    model whose `arch` is not its preset's is named by its arch (hunt 80: a llama was called
    "tiny-gpt2", the preset a ModelZoo file, which names none, is read over)."""
    import wse_models

    fields = dict(config.model)
    name = str(fields.pop("preset"))
    lens = split_lengths(config.train_input, config.eval_input, config.runconfig.mode)
    fields, why = model_values(  # ModelZoo's keys read by the model (hunts 76, 80, 82)
        fields, lambda: wse_models.preset_config(name), lens
    )
    if why:
        raise ConfigError(why)
    types = {f.name: str(f.type) for f in dataclasses.fields(wse_models.ModelConfig)}
    types.pop("name")
    for key, value in fields.items():
        if key not in types:
            raise ConfigError(unknown_model_key(key))
        number = "int" in types[key] or "float" in types[key]
        if number and isinstance(value, str) and number_text(value):  # hunt 56: as spec files
            raise ConfigError(quoted_number(f"model.{key}", key, value))
    try:
        arch, named = fields.get("arch"), {}
        if arch is not None and arch != wse_models.preset_config(name).arch:
            named["name"] = f"{arch} (preset {name}'s other settings)"
        return wse_models.preset_config(name, **fields, **named)
    except wse_models.ModelConfigError as e:
        names = {key: f"model.{key}" for key in fields}
        raise wse_models.ModelConfigError(wse_models.renamed_fields(str(e), names)) from None


def batch_per_system(config: TrainConfig) -> int:
    """Sequences per system per step: the global `train_input.batch_size` over `num_csx`."""
    return config.train_input.batch_size // config.runconfig.num_csx


def micro_batch(config: TrainConfig, spec: WaferSpec, model: Any) -> int:
    """Sequences per system at once: `train_input.micro_batch_size` resolved
    (`wse_systems.training.micro_batch`; unset: "auto", ModelZoo's default; "none" or None:
    the per-system batch; "explore": the micro-batch `plan_step` finds fastest)."""
    from wse_systems.training.micro_batch import plan_step, resolve_micro_batch
    from wse_systems.training.performance import StepLayout
    from wse_systems.training.plan import slots_of

    run, seq = config.runconfig, config.train_input.max_sequence_length
    setting = config.train_input.micro_batch_size
    where = dict(batch_per_system=batch_per_system(config), seq_len=seq,
                 stride=run.activation_stride, chunks=run.weight_chunks)  # fmt: skip
    if setting == "explore":
        step = plan_step(model, spec, num_csx=run.num_csx, micro_batch=setting, **where,
                         layout=StepLayout(clip_gradients=clips(config)),
                         optimizer_slots=slots_of(config.optimizer))  # fmt: skip
        return int(step.extra["micro_batch"])
    return resolve_micro_batch(setting, model, spec, **where)


def validate(config: TrainConfig, spec: WaferSpec):
    """Config checks and the memory plan of one replica's micro-batch on `spec` (nothing
    allocated)."""
    from wse_systems.training.plan import check_memoryx, slots_of
    from wse_systems.training.stride import run_plan

    model = model_config(config)
    check_config(config, model.max_seq_len, model.vocab_size)
    run = config.runconfig  # hunt 74: the fastest stride that fits, the optimizer's own state
    plan = run_plan(model, spec, micro_batch(config, spec, model),
                    config.train_input.max_sequence_length, run.activation_stride,
                    run.weight_chunks, slots_of(config.optimizer))  # fmt: skip
    check_memoryx(plan)  # before anything is printed or built
    return model, plan


def clips(config: TrainConfig) -> bool:
    """Whether the run clips the global gradient norm (`optimizer.max_gradient_norm` set):
    MemoryX then holds every update to the step's end, as the step is priced (hunt 74)."""
    return config.optimizer.max_gradient_norm is not None


def predict(
    config: TrainConfig, spec: WaferSpec, model: Any, plan: Any, pairs: float | None = None
):
    """The predicted wafer step (`RunReport`) of `config` on `spec`: each system's batch as
    micro-batches placed as `plan` (a `MemoryPlan` of one micro-batch) says; `pairs`: a row's
    causal attention pairs (packed rows: `predicted.attention_pairs`; None: full causal)."""
    from wse_systems.training.performance import Sparsity, StepLayout, predict_step

    return predict_step(
        model,
        spec,
        num_csx=config.runconfig.num_csx,
        batch_per_system=batch_per_system(config),
        micro_batch=micro_batch(config, spec, model),
        seq_len=config.train_input.max_sequence_length,
        layout=StepLayout(plan, clip_gradients=clips(config)),
        sparsity=Sparsity(attention_pairs_per_row=pairs),
    )


def stream_rows(config: TrainConfig, spec: WaferSpec, model: Any, plan: Any):
    """Each streamed unit's no-stall condition on `plan` (`wse_systems.training.stall`)."""
    from wse_systems.training.stall import stream_budget

    return stream_budget(
        model, spec, plan, num_csx=config.runconfig.num_csx,
        micro_batch=micro_batch(config, spec, model),
        seq_len=config.train_input.max_sequence_length,
    )  # fmt: skip


def _tokenizer(model_dir: Path, vocab_size: int, texts: list[str]):
    """Process 0 loads or trains (and saves) the tokenizer, on the train split's `texts`;
    the others then load its file."""
    from wse_trainer.data import read_tokenizer

    path = model_dir / "tokenizer.json"
    tok = _own_tokenizer(path, vocab_size, texts) if is_primary() else None
    barrier("wse_trainer: tokenizer saved")
    return tok if tok is not None else read_tokenizer(path)


def _own_tokenizer(path: Path, vocab_size: int, texts: list[str]):
    from wse_trainer.data import train_tokenizer

    if path.exists():
        return fitting_tokenizer(path, vocab_size)
    tok = train_tokenizer(texts, vocab_size)
    if tok.get_vocab_size() > vocab_size:
        raise ConfigError(
            f"the tokenizer has {tok.get_vocab_size()} tokens but model."
            f"vocab_size={vocab_size}; raise model.vocab_size"
        )
    tok.save(str(path))
    return tok


def fitting_tokenizer(path: Path, vocab_size: int) -> Any:
    """`read_tokenizer(path)`, or ConfigError when one of its token ids is past the model's
    embedding (hunt 67: a tokenizer.json of 300 tokens reused for a vocab_size=260 run trained
    to a NaN loss after 30 s, blamed on the learning rate). A vocab_size above the
    tokenizer's size is padding, as HF models have."""
    from wse_trainer.data import read_tokenizer

    tok = read_tokenizer(path)
    size = max(tok.get_vocab(with_added_tokens=True).values(), default=-1) + 1  # ids 0..size-1
    if size > vocab_size:
        held = f"{size} tokens" if size == tok.get_vocab_size() else f"token ids up to {size - 1}"
        raise ConfigError(
            f"{path} has {held} but model.vocab_size={vocab_size}; raise model.vocab_size to "
            f"at least {size} or remove tokenizer.json to train one"
        )
    return tok


def check_inputs(config: TrainConfig) -> None:
    """ConfigError for the config's values (`check_config`), a local data_dir that is not
    there, a --checkpoint-path with no step to start from (`checkpoint_steps`), or a
    model_dir that is no run folder or lies inside a data_dir, or whose tokenizer.json
    cannot be a run's (`read_tokenizer`) or holds more tokens than model.vocab_size
    (`fitting_tokenizer`); cheap (no JAX, no orbax): the CLI asks before importing them,
    `Session` again."""
    from wse_trainer.data_files import check_data_dir
    from wse_trainer.modelzoo_runconfig import (
        autoload_problem,
        eval_all_problem,
        states_problem,
        steps_problem,
    )
    from wse_trainer.run_folder import check_model_dir, checkpoint_steps

    model = model_config(config)
    check_config(config, model.max_seq_len, model.vocab_size)  # hunt 59: was after JAX's import
    run_cfg = config.runconfig
    if why := steps_problem(run_cfg):  # hunt 81: a hidden max_steps=100 trained
        raise ConfigError(why)
    if run_cfg.checkpoint_path and not checkpoint_steps(run_cfg.checkpoint_path):
        # hunt 67: /dev/zero, a folder of no steps passed here, the run refused them 17 s in
        raise ConfigError(
            f"no committed checkpoint at {str(run_cfg.checkpoint_path)!r}; give a model_dir, "
            "its checkpoints folder or one step folder"
        )
    check_model_dir(Path(run_cfg.model_dir))  # a folder of someone's files is no run folder
    steps = [int(p.name) for p in checkpoint_steps(Path(run_cfg.model_dir) / "checkpoints")]
    if run_cfg.mode == "eval_all":  # every step: none there, or one named, refused
        if why := eval_all_problem(run_cfg, steps):
            raise ConfigError(why)
    elif why := autoload_problem(run_cfg, steps):  # hunt 79: refused at read, even in a new dir
        raise ConfigError(why)
    if why := states_problem(run_cfg):  # a fine-tune start names its checkpoint (hunt 81)
        raise ConfigError(why)
    if (tokenizer := Path(run_cfg.model_dir) / "tokenizer.json").is_file():
        fitting_tokenizer(tokenizer, model.vocab_size)  # hunts 64, 67: after 18 s, 30 s of work
    splits = ("train_input",) if run_cfg.mode == "train" else ("train_input", "eval_input")
    for name in splits:
        _check_apart(Path(run_cfg.model_dir), name, getattr(config, name).data_dir)
    check_data_dir(config.train_input, "train_input")  # it may train the tokenizer in any mode
    if run_cfg.mode != "train":
        check_data_dir(config.eval_input, "eval_input")


def checked_resume(config: TrainConfig, model: Any) -> tuple[TrainConfig, list[str]]:
    """(`config` as the run runs it, the notes saying how) from the checks of the step it
    starts from (`run_folder.resumed_step`: the one `resume.open_checkpoints` resumes, a
    corrupt newer one left out, hunt 82): max_steps left out is num_steps past that step
    (hunt 81; a fine-tune start, load_checkpoint_states without the training state, starts
    from step 0), then the step of another model, optimizer or settings is refused, never
    moved aside (`run_folder.check_resume`; fields that shape no parameter said, where a start
    or an eval may change them), and the decay it was trained on kept (`keep_decay`, hunt 70).
    Cheap (meta JSON and seals, no orbax; JAX imported only where a step's decay is kept):
    `Session` asks it, and `--validate-only` (hunt 82: it passed a checkpoint the run
    refused). `model`: the run's `wse_models.ModelConfig`."""
    from wse_trainer.modelzoo_runconfig import loads_training_state, run_steps, steps_note
    from wse_trainer.run_folder import check_resume, keep_decay, resumed_step

    step = resumed_step(config)
    resumes = loads_training_state(config.runconfig.load_checkpoint_states)
    start, given = step if step is not None and resumes else 0, config.runconfig
    config = run_steps(config, start)
    said = check_resume(config, model)
    config, notes = keep_decay(config)
    steps = steps_note(given, config, start)  # the decay it runs: review 82
    return config, [*([steps] if steps else []), *said, *notes]


def _check_apart(model_dir: Path, name: str, data_dir: str | list[str]) -> None:
    """ConfigError for a model_dir inside a local data folder: the run's files (tokenizer.json,
    metrics.jsonl, hf/) would be read as data (hunt 62: the next run was refused as a
    data_dir that "mixes file kinds ['json', 'text']")."""
    try:
        run = model_dir.resolve()
    except (OSError, RuntimeError):  # a link loop: make_model_dir says what it is
        return
    for entry in [data_dir] if isinstance(data_dir, str) else data_dir:
        folder = Path(entry)
        if entry != "stdlib" and folder.is_dir() and folder.resolve() in (run, *run.parents):
            raise ConfigError(
                f"model_dir {str(model_dir)!r} is inside {name}.data_dir {entry!r}: the run's "
                "own files would be read as its data; give a model_dir outside the data folder"
            )


class Session:
    """One run's live objects (the shell's state), built by `run`."""

    def __init__(self, config: TrainConfig, spec: WaferSpec, echo: Callable[[str], None] | None):
        import jax
        import wse_models
        from wse_models import sdpa_cpu
        from wse_systems.training.plan import plan_activations

        from wse_trainer.cadence import keep_note, loop_config
        from wse_trainer.data import EOS, BatchIterator, corpus_texts, tokenizer_identity
        from wse_trainer.layout import choose_layout
        from wse_trainer.optimizer import base_transform
        from wse_trainer.overlap import overlap_note
        from wse_trainer.predicted import attention_pairs
        from wse_trainer.run_folder import make_model_dir
        from wse_trainer.stream import StreamedTrainer
        from wse_trainer.swarmx import check_split

        self.config, run_cfg, inp = config, config.runconfig, config.train_input
        self.spec = spec
        self.model, memory = validate(config, spec)  # the one memory plan of the run
        check_split(run_cfg.num_csx)  # before the tokenizer or anything compiles
        check_inputs(config)  # nothing on disk until the inputs hold
        if run_cfg.checkpoint_path:  # a path without a committed step, too
            from wse_trainer.checkpoints import resolve_checkpoint

            resolve_checkpoint(run_cfg.checkpoint_path)
        config, notes = checked_resume(config, self.model)  # max_steps, the kept decay
        run_cfg = config.runconfig
        self.given = config  # saved as given (`settings`), run with its cadences resolved
        config = loop_config(config)  # ModelZoo's 0 and null (`wse_trainer.cadence`)
        self.config, self.notes = config, notes  # said once the log is open
        # the CPU attention's numba kernels compile in a helper meanwhile (`sdpa_cpu`)
        sdpa_cpu.compile_early(self.model.hd, self.model.dtype, backward=run_cfg.mode != "eval")
        # a refusal from here on is undone by the caller (`wse_trainer.run`: `undone_on_error`)
        self.dir, seq = make_model_dir(Path(run_cfg.model_dir)), inp.max_sequence_length
        texts = corpus_texts(inp)  # read once: the tokenizer, the rows, the overlap's count
        self.tok = _tokenizer(self.dir, self.model.vocab_size, texts)
        rows = packed_rows(self.tok, texts, seq)
        self.eos_id = self.tok.token_to_id(EOS)  # packed rows: their attention pairs, priced
        self.attention_pairs = attention_pairs(rows, self.eos_id) if inp.packing else None
        self.notes += filter(None, [keep_note(self.given, self.dir)])  # the steps it deletes
        self.iterator = BatchIterator(rows, inp.batch_size, inp.shuffle_seed)
        self.eval_rows: Any = None  # both splits checked against their batch sizes here
        self.eval_steps_given = config.eval_input.eval_steps  # None: the whole split
        if run_cfg.mode != "train":
            docs = corpus_texts(ev := config.eval_input)
            self.eval_rows = eval_rows(self.tok, ev, docs)
            self.notes += filter(None, [overlap_note(inp, ev, texts, docs)])  # hunts 71, 80
            if ev.eval_steps is None:  # the whole split: what each eval runs, `predicted` prices
                whole = dataclasses.replace(ev, eval_steps=len(self.eval_rows) // ev.batch_size)
                self.config = config = dataclasses.replace(config, eval_input=whole)
        del texts  # the documents: their rows are what the run keeps
        self.tok_id = tokenizer_identity(self.tok)
        micro = micro_batch(config, spec, self.model)
        plan = memory.streaming
        if plan is None:  # the planner's SramBudgetError, raised where the run places
            plan = plan_activations(
                self.model, spec, micro, seq,
                run_cfg.activation_stride, run_cfg.weight_chunks,
            )  # fmt: skip
        self.key = jax.random.key(run_cfg.seed)
        params = wse_models.init_params(self.model, jax.random.fold_in(self.key, 0))
        tx = base_transform(config.optimizer, run_cfg.max_steps)
        self.layout = choose_layout(
            self.model, plan, micro_batch=micro, seq_len=seq,
            local_replicas=run_cfg.num_csx // jax.process_count(), shards=run_cfg.cpu_shards,
        )  # fmt: skip
        self.trainer = StreamedTrainer(
            self.model,
            params,
            tx,
            num_csx=run_cfg.num_csx,
            global_batch=inp.batch_size,
            seq_len=seq,
            plan=plan,
            max_gradient_norm=config.optimizer.max_gradient_norm,
            layout=self.layout,
            micro_batch=micro,
        )
        self.plan, self.echo, self.micro_batch = plan, echo, micro
        self.read_from: Path | None = None  # the step folder restored (`resume`'s)
        self.prediction = predict(config, spec, self.model, memory, self.attention_pairs)

    def segments(self, batch: Any, packing: bool) -> Any:
        """The packed documents of a batch's inputs (`data.segments`), or None."""
        from wse_trainer.data import segments

        return segments(batch[:, :-1], self.eos_id) if packing else None

    def state(self) -> dict[str, Any]:
        import jax

        return {"memx": self.trainer.memx.state_tree(), "rng": jax.random.key_data(self.key)}

    def settings(self) -> dict[str, Any]:
        """The config as saved (params_<mode>.yaml, each checkpoint's meta): eval_steps and
        the cadences as given, so a run whose eval split grows evaluates all of it again."""
        from wse_trainer.cadence import given_settings

        return given_settings(self.config, self.given)

    def meta(self, step: int) -> dict[str, Any]:
        return {
            "step": step,
            "data": self.iterator.state(),
            "config": self.settings(),
            "tokenizer_sha256": self.tok_id,
            "model": dataclasses.asdict(self.model),
        }
