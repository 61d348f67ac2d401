"""One `wse train` run's setup: the config's model, plan and prediction, and its live objects.

Contract. `model_config(config)` (the `model` section's `wse_models.ModelConfig`),
`validate(config)` (config checks and one replica's memory plan) and `predict(config, model,
plan)` (the wafer's predicted step on that plan, `wse_trainer.performance.predict_step`)
allocate nothing; `wse_trainer.run` re-exports them. `Session(config, echo)` builds what a run
holds while it steps: the tokenizer (`<model_dir>/tokenizer.json` when present, else a
byte-level BPE trained on the train split, saved by process 0), the packed data iterator,
the `StreamedTrainer` from `init_params(seed)` and the prediction on the plan it runs.
`open_checkpoints(s)` restores the latest committed checkpoint (or `--checkpoint_path`):
weights, optimizer state, RNG and data position (`Session.state` / `meta` / `restore`).
`evaluate(s)` is the mean eval loss over the first `eval_steps` batches.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from wse_core.distributed import barrier, is_primary
from wse_core.errors import suggest

from wse_trainer.config import ConfigError, TrainConfig, check_config

__all__ = ["model_config", "validate", "predict", "Session", "open_checkpoints", "evaluate"]


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


class Session:
    """One run's live objects (the shell's state), built by `run`."""

    def __init__(self, config: TrainConfig, echo: Callable[[str], None] | None):
        import jax
        import wse_models
        from wse_core import preset

        from wse_trainer.data import EOS, BatchIterator, tokenizer_identity
        from wse_trainer.layout import choose_layout
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
        self.layout = choose_layout(
            self.model,
            plan,
            micro_batch=_micro_batch(config),
            seq_len=seq,
            local_replicas=run_cfg.num_csx // jax.process_count(),
            shards=run_cfg.cpu_shards,
        )
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


def open_checkpoints(s: Session):
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


def evaluate(s: Session, steps: int | None = None) -> float:
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
