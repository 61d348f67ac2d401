"""The `wse train` shell: data, model, streamed steps, checkpoints, logs, eval, export.

`run(config)` trains (or evaluates) as the config says and returns a `RunResult`:

1. checks what can be known before compiling (`check_config`, the replica's SRAM plan);
2. the tokenizer: `<model_dir>/tokenizer.json` when present (a resumed run), else a
   byte-level BPE trained on the train split; the data packed and iterated with its seed;
3. MemoryX / SwarmX / replicas from `init_params(seed)`, then the latest committed
   checkpoint (or `--checkpoint_path`) restored: weights, optimizer state, data position;
4. steps until `max_steps` (counted from the global step) or `num_steps` more; a NaN or Inf
   loss stops the run with `TrainingDivergedError` before anything is saved; with
   `train_input.packing` each batch carries its documents' segment ids and positions
   (`data.segments`); a ReLU-like model's per-layer MLP zero fraction goes to metrics.jsonl
   (`mlp_zero_fraction`, one value per layer, and `mlp_zero_fraction_mean`);
5. checkpoints every `checkpoint_steps` and at the end; eval loss and perplexity;
6. `<model_dir>/hf/` (HF format via `wse_models.save_pretrained`, plus `tokenizer.json`, and
   `tokenizer_config.json` and `generation_config.json` naming EOS) and samples from the
   trained model.

`model_config(config)` and `validate(config)` (the `--validate_only` memory plan) allocate
nothing; `predict(config, model, plan)` is the wafer's predicted step on that plan
(`wse_trainer.performance.predict_step`, a `RunReport`), which the run logs next to the
measured step (`predicted_step_s` in metrics.jsonl, a line in run.log, `RunResult`).

Multi-process runs (`jax.distributed` joined before `run`): every process runs the same
program on the same data stream and computes its block of the `num_csx` replicas (SwarmX
gathers their gradients across processes); each keeps its own copy of MemoryX and applies
the same updates. Process 0 alone writes what people read: the tokenizer, metrics.jsonl,
TensorBoard, the run log, the resolved params, echoed lines, eval, the HF export and
samples. Every process takes part in orbax's saves and restores.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from wse_core import WseError
from wse_core.distributed import barrier, is_primary
from wse_core.errors import suggest

from wse_trainer.config import ConfigError, TrainConfig, check_config

__all__ = ["RunResult", "TrainingDivergedError", "model_config", "validate", "predict", "run"]


class TrainingDivergedError(WseError):
    """The loss became NaN or Inf."""


@dataclasses.dataclass
class RunResult:
    model_dir: Path
    global_step: int
    losses: dict[int, float]
    eval_loss: float | None = None
    samples: list[str] = dataclasses.field(default_factory=list)
    tokens_per_s: float = 0.0
    stall_fraction: float = 0.0
    hf_dir: Path | None = None
    step_s: float = 0.0  # measured mean step on this machine
    predicted_step_s: float = 0.0  # the wafer's, from the run's plan (`predict`)


def model_config(config: TrainConfig):
    """The `wse_models.ModelConfig` of the `model` section (preset plus field overrides)."""
    import wse_models

    fields = dict(config.model)
    name = str(fields.pop("preset"))
    known = {f.name for f in dataclasses.fields(wse_models.ModelConfig)} - {"name"}
    for key in fields:
        if key not in known:
            raise ConfigError(
                f"unknown key model.{key}{suggest(key, known)}; valid keys: "
                f"preset, {', '.join(sorted(known))}"
            )
    return wse_models.preset_config(name, **fields)


def _micro_batch(config: TrainConfig) -> int:
    return config.train_input.batch_size // config.runconfig.num_csx


def validate(config: TrainConfig):
    """Config checks and the memory plan of one replica (nothing allocated)."""
    from wse_core import preset

    from wse_trainer.plan import memory_plan

    model = model_config(config)
    check_config(config, model.max_seq_len)
    spec = preset(config.runconfig.wafer)
    return model, memory_plan(
        model,
        spec,
        _micro_batch(config),
        config.train_input.max_sequence_length,
        stride=config.runconfig.activation_stride,
    )


def predict(config: TrainConfig, model: Any, plan: Any):
    """The predicted wafer step (`RunReport`) of `config` placed as `plan` (a `MemoryPlan`)."""
    from wse_core import preset

    from wse_trainer.performance import predict_step

    return predict_step(
        model,
        preset(config.runconfig.wafer),
        num_csx=config.runconfig.num_csx,
        micro_batch=_micro_batch(config),
        seq_len=config.train_input.max_sequence_length,
        plan=plan,
    )


def _tokenizer(config: TrainConfig, model_dir: Path, vocab_size: int):
    """Process 0 loads or trains (and saves) the tokenizer; the others then load its file."""
    from tokenizers import Tokenizer

    path = model_dir / "tokenizer.json"
    tok = _own_tokenizer(config, path, vocab_size) if is_primary() else None
    barrier("wse_trainer: tokenizer saved")
    return tok if tok is not None else Tokenizer.from_file(str(path))


def _own_tokenizer(config: TrainConfig, path: Path, vocab_size: int):
    from tokenizers import Tokenizer

    from wse_trainer.data import corpus_texts, train_tokenizer

    if path.exists():
        return Tokenizer.from_file(str(path))
    tok = train_tokenizer(corpus_texts(config.train_input), vocab_size)
    if tok.get_vocab_size() > vocab_size:
        raise ConfigError(
            f"the tokenizer has {tok.get_vocab_size()} tokens but model."
            f"vocab_size={vocab_size}; raise model.vocab_size"
        )
    tok.save(str(path))
    return tok


def _rows(tok, cfg, seq_len: int):
    from wse_trainer.data import EOS, corpus_texts, pack

    texts = corpus_texts(cfg)
    ids = [e.ids for e in tok.encode_batch(texts)]
    return pack(ids, seq_len, tok.token_to_id(EOS))


class _Session:
    """One run's live objects (the shell's state), built by `run`."""

    def __init__(self, config: TrainConfig, echo: Callable[[str], None] | None):
        import jax
        import wse_models
        from wse_core import preset

        from wse_trainer.data import EOS, BatchIterator, tokenizer_identity
        from wse_trainer.optimizer import base_transform
        from wse_trainer.plan import memory_plan, plan_activations
        from wse_trainer.stream import StreamedTrainer
        from wse_trainer.swarmx import check_split

        self.config, run_cfg, inp = config, config.runconfig, config.train_input
        self.model, _ = validate(config)
        check_split(run_cfg.num_csx)  # before the tokenizer or anything compiles
        self.dir = Path(run_cfg.model_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.tok = _tokenizer(config, self.dir, self.model.vocab_size)
        self.tok_id = tokenizer_identity(self.tok)
        seq = inp.max_sequence_length
        self.iterator = BatchIterator(_rows(self.tok, inp, seq), inp.batch_size, inp.shuffle_seed)
        plan = plan_activations(
            self.model, preset(run_cfg.wafer), _micro_batch(config), seq, run_cfg.activation_stride
        )
        self.key = jax.random.key(run_cfg.seed)
        params = wse_models.init_params(self.model, jax.random.fold_in(self.key, 0))
        tx = base_transform(config.optimizer, run_cfg.max_steps)
        self.trainer = StreamedTrainer(
            self.model,
            params,
            tx,
            num_csx=run_cfg.num_csx,
            global_batch=inp.batch_size,
            seq_len=seq,
            plan=plan,
            max_gradient_norm=config.optimizer.max_gradient_norm,
        )
        self.plan, self.echo = plan, echo
        memory = memory_plan(
            self.model, preset(run_cfg.wafer), _micro_batch(config), seq, streaming=plan
        )
        self.prediction = predict(config, self.model, memory)  # the plan the trainer runs
        self.eval_rows: Any = None
        self.eos_id = self.tok.token_to_id(EOS)

    def segments(self, batch: Any, packing: bool) -> Any:
        """The packed documents of a batch's inputs (`data.segments`), or None."""
        from wse_trainer.data import segments

        return segments(batch[:, :-1], self.eos_id) if packing else None

    def state(self) -> dict[str, Any]:
        import jax

        return {"memx": self.trainer.memx.state_tree(), "rng": jax.random.key_data(self.key)}

    def meta(self, step: int) -> dict[str, Any]:
        return {
            "step": step,
            "data": self.iterator.state(),
            "config": self.config.to_dict(),
            "tokenizer_sha256": self.tok_id,
            "model": dataclasses.asdict(self.model),
        }

    def restore(self, ckpt, step: int) -> None:
        import jax

        state, meta = ckpt.restore(step, self.state())
        if meta.get("tokenizer_sha256") != self.tok_id:
            raise ConfigError(
                "the checkpoint was trained with another tokenizer than "
                f"{self.dir / 'tokenizer.json'}; use its model_dir"
            )
        self.trainer.memx.load_state_tree(state["memx"])
        self.key = jax.random.wrap_key_data(state["rng"])
        self.iterator.restore(meta["data"])


def _open_checkpoints(s: _Session):
    from wse_trainer.checkpoints import Checkpointer, resolve_checkpoint

    run_cfg = s.config.runconfig
    ckpt = Checkpointer(s.dir / "checkpoints", keep=run_cfg.keep_checkpoint_max)
    if run_cfg.checkpoint_path:
        folder, step = resolve_checkpoint(run_cfg.checkpoint_path)
        s.restore(ckpt if folder == ckpt.directory else Checkpointer(folder, read_only=True), step)
        return ckpt, step
    step = ckpt.latest_step()
    if step is not None:
        s.restore(ckpt, step)
    return ckpt, step or 0


@functools.lru_cache(maxsize=8)
def _eval_fn(model: Any):
    import jax

    from wse_trainer.reference import loss_fn

    return jax.jit(lambda p, b, seg: loss_fn(model, p, b, seg))


def evaluate(s: _Session, steps: int | None = None) -> float:
    """Mean loss over the first `eval_steps` batches of the eval split (fixed order)."""
    import numpy as np

    cfg = s.config.eval_input
    if s.eval_rows is None:
        s.eval_rows = _rows(s.tok, cfg, cfg.max_sequence_length)
    rows = s.eval_rows
    n = min(steps or cfg.eval_steps, len(rows) // cfg.batch_size)
    if n < 1:
        raise ConfigError(
            f"the eval split has {len(rows)} sequences, fewer than eval_input."
            f"batch_size={cfg.batch_size}"
        )
    params = s.trainer.memx.params_tree()
    f = _eval_fn(s.model)
    batches = [rows[i * cfg.batch_size : (i + 1) * cfg.batch_size] for i in range(n)]
    losses = [float(f(params, b, s.segments(b, cfg.packing))) for b in batches]
    return float(np.mean(losses))


def _train_loop(s: _Session, ckpt, log, start: int, end: int, result: RunResult) -> None:
    from wse_trainer.metrics import eval_line, train_line

    run_cfg, bsz = s.config.runconfig, s.config.train_input.batch_size
    wall = stall = tokens = 0.0
    window: list[Any] = []
    with _progress(end - start) as advance:
        for step in range(start + 1, end + 1):
            batch = next(s.iterator)
            st = s.trainer.step(batch, s.segments(batch, s.config.train_input.packing))
            if not math.isfinite(st.loss):
                ckpt.wait()
                raise TrainingDivergedError(
                    f"loss is {st.loss} at step {step}; the run stopped without saving "
                    f"(last good checkpoint: step {ckpt.latest_step()}); lower "
                    "optimizer.learning_rate or set optimizer.max_gradient_norm"
                )
            wall, stall, tokens = wall + st.wall_s, stall + st.stall_s, tokens + st.tokens
            window.append(st)
            result.losses[step] = st.loss
            log.record(
                step,
                "train",
                {
                    "loss": st.loss,
                    "wall_s": st.wall_s,
                    "stall_s": st.stall_s,
                    "compute_s": st.compute_s,
                    "tokens": st.tokens,
                    "broadcast_bytes": st.broadcast_bytes,
                    "reduce_bytes": st.reduce_bytes,
                    "predicted_step_s": s.prediction.predicted_s,
                    **_sparsity_record(st.mlp_zero_fraction),
                },
            )
            if step % run_cfg.log_steps == 0 or step == end:
                recent = sum(w.wall_s for w in window)
                log.line(
                    train_line(
                        step,
                        st.loss,
                        bsz * len(window) / recent,
                        bsz * (step - start) / wall,
                        tokens / wall,
                        stall / wall,
                    )
                )
                window = []
            if step % run_cfg.checkpoint_steps == 0 or step == end:
                ckpt.save(step, s.state(), s.meta(step))
            if (
                run_cfg.mode == "train_and_eval"
                and run_cfg.eval_frequency
                and step % run_cfg.eval_frequency == 0
                and step != end
                and is_primary()
            ):
                log.line(eval_line(step, evaluate(s)))
            advance()
    result.tokens_per_s = tokens / wall if wall else 0.0
    result.step_s = wall / (end - start) if end > start else 0.0
    result.stall_fraction = stall / wall if wall else 0.0


def _prediction_line(report: Any, wafer: str) -> str:
    x = report.extra
    return (
        f"predicted wafer step ({report.systems} x {wafer}, {x['precision']}): "
        f"{report.predicted_s:.4g} s, {x['tokens_per_s']:,.0f} tokens/s, "
        f"{report.bound}-bound, streams stall {100 * x['stall_fraction']:.1f}%"
    )


def _sparsity_record(fraction: tuple[float, ...] | None) -> dict[str, Any]:
    """metrics.jsonl's sparsity keys: per-layer MLP zero fractions and their mean."""
    if fraction is None:
        return {}
    return {
        "mlp_zero_fraction": list(fraction),
        "mlp_zero_fraction_mean": sum(fraction) / len(fraction),
    }


def _progress(total: int):
    """A rich progress bar on a terminal; a no-op elsewhere."""
    import contextlib

    if not sys.stdout.isatty() or total <= 0 or not is_primary():
        return contextlib.nullcontext(lambda: None)
    from rich.progress import Progress

    @contextlib.contextmanager
    def bar():
        with Progress(transient=True) as p:
            task = p.add_task("training", total=total)
            yield lambda: p.advance(task)

    return bar()


def export_hf(s: _Session) -> Path:
    """`<model_dir>/hf/`: the model in HF format and its tokenizer (the inference contract),
    with tokenizer_config.json and generation_config.json naming the EOS token that separates
    the training documents, so generation stops there as transformers and vLLM stop.
    config.json names it as bos_token_id and eos_token_id (GPT-2's convention: one document
    separator); without them transformers takes GPT-2's 50256, outside this vocabulary."""
    import json

    import wse_models

    from wse_trainer.data import EOS

    out = s.dir / "hf"
    model = wse_models.Transformer(s.model, params=s.trainer.memx.params_tree())
    wse_models.save_pretrained(model, out)
    eos = s.tok.token_to_id(EOS)
    config = json.loads((out / "config.json").read_text())
    config.update(bos_token_id=eos, eos_token_id=eos)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    s.tok.save(str(out / "tokenizer.json"))
    tok_config = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": EOS}
    (out / "tokenizer_config.json").write_text(json.dumps(tok_config, indent=2) + "\n")
    gen_config = {"eos_token_id": eos}
    (out / "generation_config.json").write_text(json.dumps(gen_config, indent=2) + "\n")
    return out


def _samples(s: _Session) -> list[str]:
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


def run(config: TrainConfig, *, echo: Callable[[str], None] | None = None) -> RunResult:
    """Train and/or evaluate as `config.runconfig.mode` says (see the module docstring)."""
    from wse_trainer.metrics import MetricsLog, NullLog, eval_line

    s = _Session(config, echo)
    ckpt, start = _open_checkpoints(s)
    run_cfg = config.runconfig
    end = (
        run_cfg.max_steps
        if run_cfg.num_steps is None
        else min(run_cfg.max_steps, start + run_cfg.num_steps)
    )
    primary = is_primary()
    log = MetricsLog(s.dir, resume_step=start, echo=echo) if primary else NullLog()
    if primary:
        (s.dir / "train").mkdir(exist_ok=True)
        (s.dir / "train" / "params_train.yaml").write_text(yaml.safe_dump(config.to_dict()))
    result = RunResult(s.dir, start, {})
    try:
        if start:
            log.line(f"resumed from checkpoint step {start}")
        result.predicted_step_s = s.prediction.predicted_s
        log.line(_prediction_line(s.prediction, run_cfg.wafer))
        if run_cfg.mode != "eval" and end > start:
            if start == 0 and run_cfg.save_initial_checkpoint:
                ckpt.save(0, s.state(), s.meta(0))
            _train_loop(s, ckpt, log, start, end, result)
            result.global_step = end
        if run_cfg.mode != "train" and primary:
            result.eval_loss = evaluate(s)
            log.record(
                result.global_step,
                "eval",
                {"loss": result.eval_loss, "perplexity": math.exp(result.eval_loss)},
            )
            log.line(eval_line(result.global_step, result.eval_loss))
        ckpt.wait()
        if run_cfg.mode != "eval" and primary:
            result.hf_dir = export_hf(s)
            result.samples = _samples(s)
    finally:
        ckpt.close()
        log.close()
    return result
