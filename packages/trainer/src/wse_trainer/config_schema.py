"""The five sections of a params file as frozen types: `InputConfig` (`train_input`,
`eval_input`), `OptimizerConfig` (`optimizer`), `RunConfig` (`runconfig`), the `model`
section as a mapping, and `TrainConfig` holding them.

Contract: this module owns the settings' names, types and defaults, `SECTIONS` (each
section's type), `SHIPPED` (the configs shipped with the package) and `ConfigError`, the one
error of reading a params file. It reads nothing: `wse_trainer.config_read` turns a mapping
into these types, `wse_trainer.config` a file. An `OptimizerConfig` built without
`lr_schedule` runs `optimizer_names.default_schedule`'s (hunt 81), and its names are taken in
any case (ModelZoo's `AdamW`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from wse_core.errors import WseError

from wse_trainer.optimizer_names import (
    EPS_PLACEMENTS,
    OPTIMIZER_NAMES,
    READ_BY,
    SCHEDULE_NAMES,
    default_schedule,
)

__all__ = ["ConfigError", "InputConfig", "OptimizerConfig", "RunConfig", "TrainConfig",
           "SECTIONS", "SHIPPED"]  # fmt: skip


class ConfigError(WseError):
    """A params file, section, key or value is invalid."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class InputConfig:
    """One data split. `data_dir`: "stdlib" (the Python standard library's source), local
    .txt/.jsonl/.json/.parquet files or folders, or a `datasets` name."""

    data_dir: str | list[str] = "stdlib"
    text_key: str = "text"
    batch_size: int = 16  # global, over all num_csx replicas (each gets batch_size / num_csx)
    # per system, as ModelZoo's: sequences a replica runs at once, gradients accumulated over
    # batch_size / num_csx / micro_batch_size; "auto" (the key left out, as ModelZoo's): the
    # largest the SRAM ledger fits; "explore": the fastest predicted; "none", or a file's null
    # (ModelZoo's "disable micro batch tiling", read as "none"): the whole per-system batch
    micro_batch_size: int | str | None = "auto"
    max_sequence_length: int = 128
    shuffle_seed: int = 0
    split: str = "train"  # "train" | "eval" | "all" (`splits.default_splits`): 1/20 held out
    max_corpus_bytes: int = 3_000_000  # cap on the text read (stdlib corpus and files)
    eval_steps: int | None = None  # eval batches; None: the whole split, as ModelZoo (hunt 72)
    # documents packed without padding: attention kept within each document (segment ids),
    # positions restarting per document (`data.segments`); False: rows attend across them
    packing: bool = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class OptimizerConfig:
    """The optax transform (`wse_trainer.optimizer`); names in any case, as ModelZoo's `AdamW`."""

    optimizer_type: str = "adamw"  # adamw | adam | sgd | momentum
    learning_rate: float = 3e-3
    # constant | cosine | linear; None (left out): `optimizer_names.default_schedule`,
    # constant as ModelZoo runs a number learning_rate, cosine beside our decay settings
    lr_schedule: str | None = None
    warmup_steps: int = 0
    min_learning_rate: float = 0.0
    decay_steps: int | None = None  # default: runconfig.max_steps
    weight_decay: float = 0.0
    beta1: float = 0.9  # adam, adamw: ModelZoo's defaults (hunt 70: beta2 was 0.95, eps 1e-8)
    beta2: float = 0.999
    eps: float = 1e-6
    # adam, adamw: where eps meets the second moment (`optimizer.adam_base`): "modelzoo",
    # ModelZoo's AdamBase (eps on sqrt(v) before the bias correction), or "optax" (optax's
    # and torch.optim.Adam(W)'s: on sqrt(v_hat) after it; "torch" reads as it)
    eps_placement: str = "modelzoo"
    momentum: float | None = None  # None: 0 for sgd (as ModelZoo's SGD), else 0.9
    nesterov: bool = False  # sgd / momentum: Nesterov momentum (ModelZoo's SGD nesterov)
    max_gradient_norm: float | None = None  # global-norm clipping
    # ModelZoo's clipping by value (torch's clip_grad_value_): each gradient element into
    # [-v, v], before the optimizer; one of the two clippings, as ModelZoo allows
    max_gradient_value: float | None = None

    def __post_init__(self) -> None:  # adamw's and adam's unread 0.9: as runs saved it before
        if self.lr_schedule is None:  # hunt 81: a ModelZoo file's number decayed to 0 unsaid
            object.__setattr__(self, "lr_schedule", default_schedule(self))
        for field, names in (("optimizer_type", OPTIMIZER_NAMES), ("lr_schedule", SCHEDULE_NAMES),
                             ("eps_placement", EPS_PLACEMENTS)):  # fmt: skip
            value = getattr(self, field)
            if isinstance(value, str) and value.casefold() in names:
                object.__setattr__(self, field, names[value.casefold()])
        if self.momentum is None:
            object.__setattr__(self, "momentum", 0.0 if self.optimizer_type == "sgd" else 0.9)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunConfig:
    # total, counted from step 0; None (left out): as ModelZoo, num_steps past the step the
    # run starts from (`modelzoo_runconfig.run_steps`), and a training run needs one of the two
    # (hunt 81: a hidden 100 set where a run stopped and how long its decay was)
    max_steps: int | None = None
    num_steps: int | None = None  # steps of this invocation
    mode: str = "train"  # train | eval | train_and_eval | eval_all (`run.run_eval_all`)
    model_dir: str = "model_dir"
    checkpoint_path: str | None = None
    checkpoint_steps: int | None = 50  # 0, null: no periodic save (ModelZoo's), the last still
    keep_checkpoint_max: int | None = None  # ModelZoo's max_checkpoints: None or 0 keeps all
    log_steps: int = 10  # 0: the last step's line only (ModelZoo's)
    eval_frequency: int | None = None  # train_and_eval: evaluate every this many steps
    seed: int = 0
    num_csx: int = 1
    wafer: str = "small"  # wse_core preset of each replica (SRAM ledger for activations)
    activation_stride: int = 0  # 0: the fastest predicted stride that fits; k: every k-th input
    # 0: whole layers when they fit, else column chunks as the SRAM ledger allows; k: stream
    # every weight matrix in k column chunks (weight streaming below the layer)
    weight_chunks: int = 0
    cpu_shards: int = 0  # emulator only: CPU devices per replica (0: choose; wse_trainer.layout)
    sample_tokens: int = 0  # tokens sampled after training (0: none)
    sample_prompt: str = "def "
    sample_temperature: float = 0.0  # 0: greedy
    save_initial_checkpoint: bool = False
    validate_only: bool = False
    # ModelZoo's; false: no resume from model_dir's newest step, refused only where there is
    # one and no checkpoint_path (`modelzoo_runconfig.autoload_problem`)
    autoload_checkpoint: bool = True
    # ModelZoo's: the components of checkpoint_path's step loaded (comma-separated); None or
    # "all": every one; "model": its weights alone, from step 0 (`modelzoo_runconfig`)
    load_checkpoint_states: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainConfig:
    train_input: InputConfig
    eval_input: InputConfig
    model: Mapping[str, Any]  # {"preset": name, <ModelConfig field>: value, ...}
    optimizer: OptimizerConfig
    runconfig: RunConfig
    # ModelZoo's keys read and dropped, as changing nothing here: the lines a run says of them
    # (`modelzoo_ignored.ignored`; not saved with the run: they are no setting)
    notes: tuple[str, ...] = dataclasses.field(default=(), compare=False)

    def to_dict(self) -> dict[str, Any]:
        sections = {k: v for k, v in vars(self).items() if k != "notes"}
        out = {k: dict(v) if k == "model" else dataclasses.asdict(v) for k, v in sections.items()}
        opt, kind = out["optimizer"], self.optimizer.optimizer_type  # what it reads: reruns as is
        out["optimizer"] = {k: v for k, v in opt.items() if kind in READ_BY.get(k, (kind,))}
        return out


SECTIONS: dict[str, type | None] = {"train_input": InputConfig, "eval_input": InputConfig,
    "model": None, "optimizer": OptimizerConfig, "runconfig": RunConfig}  # fmt: skip
SHIPPED = ("tiny", "gpt2_124m", "llama3_8b", "llama3_70b", "llama_1t", "llama_24t")
