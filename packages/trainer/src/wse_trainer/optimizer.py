"""The optax transform of a run, split the way MemoryX applies it.

`base_transform(cfg, max_steps)` is the per-element part (the schedule and adam/sgd moments,
Adam's eps placed as ModelZoo's AdamBase places it unless `eps_placement` asks for optax's
(`adam_base`), weight decay: decoupled for adamw, an L2 term added to the gradient for adam,
sgd and momentum, as torch's and ModelZoo's `Adam` and `SGD` apply `weight_decay`): MemoryX
keeps one optax state of it per weight group (the embedding, each layer, the final norm), so
applying it group by group as gradients arrive is the same arithmetic as applying it to the
whole model; clipping by value (`optimizer.max_gradient_value`, ModelZoo's) is per element
too, and is its first step. Global-norm clipping is the one non-local part: MemoryX applies
`optax.clip_by_global_norm` itself once every group's gradient has arrived (the norm is over
all groups). `full_transform` is the equivalent whole-model transform (clipping chained in
front), used by the plain `jax.grad` reference.

Weight decay skips biases and the LayerNorm / RMSNorm gains and biases (`decays`), as
ModelZoo's param groups (`common/optim_utils.py`: no decay for names holding "bias" nor for
norm modules, its RMSNorm among them since 2.8.0; 1.9.1 to 2.7.1 listed torch's norm classes
alone and decayed a Llama's RMSNorm gains, hunt 82) and HF Trainer's
(`get_decay_parameter_names`) do, for every optimizer; the
embeddings, the head and every weight matrix decay (hunt 72: adamw shrank the norm gains and
biases too). The rule reads a leaf's path, so it holds for any tree MemoryX updates: a group
(`{"attn_norm": {"scale"}, "attn": {"wq", "bq"}, ...}`), the whole stacked model, a test's.

`step_rate(cfg, max_steps)(step)` is the learning rate optax applies at 1-based `step` (its
count is the updates before it), which metrics.jsonl records as `lr`. A resumed run keeps
its checkpoint's decay where max_steps would stretch it (`kept_decay`, said by `kept_note`);
a run started from another's checkpoint runs its own schedule, said where a step's rate
changes (`started_rate_note`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from wse_trainer.config import ConfigError, OptimizerConfig
from wse_trainer.memoryx import elementwise

__all__ = ["schedule", "step_rate", "base_transform", "full_transform", "adam_base", "kept_decay",
           "kept_note", "started_rate_note", "SCHEDULE_KEYS", "decays"]  # fmt: skip


def schedule(cfg: OptimizerConfig, max_steps: int) -> optax.Schedule:
    """Learning rate by step: linear warm-up, then constant, cosine or linear decay."""
    decay = max(1, (cfg.decay_steps or max_steps) - cfg.warmup_steps)
    if cfg.lr_schedule == "constant":
        tail = optax.constant_schedule(cfg.learning_rate)
    elif cfg.lr_schedule == "cosine":
        tail = _cosine(cfg.learning_rate, cfg.min_learning_rate, decay)
    else:
        tail = optax.linear_schedule(cfg.learning_rate, cfg.min_learning_rate, decay)
    if cfg.warmup_steps <= 0:
        return tail
    warm = optax.linear_schedule(0.0, cfg.learning_rate, cfg.warmup_steps)
    return optax.join_schedules([warm, tail], [cfg.warmup_steps])


def _cosine(peak: float, end: float, decay_steps: int) -> optax.Schedule:
    """Cosine from `peak` to `end` over `decay_steps`: optax's, whose end is `alpha` x its
    start; from a peak of 0 (which no alpha scales to `end`; hunt 78: 0 / 0 raised) the same
    curve as `end` + the cosine of `peak - end`, a constant 0 when `end` is 0 too, as optax's
    `cosine_decay_schedule(0.0, ...)`."""
    if peak:
        return optax.cosine_decay_schedule(peak, decay_steps, alpha=end / peak)
    rise = optax.cosine_decay_schedule(peak - end, decay_steps)
    return lambda count: rise(count) + end


@functools.lru_cache(maxsize=16)
def step_rate(cfg: OptimizerConfig, max_steps: int) -> Callable[[int], float]:
    """The learning rate of 1-based `step`: `schedule` at optax's count, the updates applied
    before it (one a step, micro-batches summed first), in float32 as the update reads it;
    one jitted call a step (cached per config)."""
    rate = jax.jit(schedule(cfg, max_steps))
    return lambda step: float(rate(jnp.asarray(step - 1, jnp.int32)))


def decays(path: tuple[Any, ...]) -> bool:
    """Whether the leaf at `path` (keys from `jax.tree_util.tree_map_with_path`) takes weight
    decay: not a bias (a leaf named "b..." : `wse_models.params` names biases bq, bk, bv, bo,
    b_up, b_down and a norm's "bias") and not in a norm (a key ending in "norm": attn_norm,
    mlp_norm, the final norm)."""
    names = [str(getattr(k, "key", getattr(k, "name", k))) for k in path]
    leaf_bias = bool(names) and names[-1].startswith("b")
    return not (leaf_bias or any(n.endswith("norm") for n in names))


def _decayed(updates: Any, params: Any, weight_decay: float) -> Any:
    """`updates` plus `weight_decay` x the parameters where `decays`, as optax's
    `add_decayed_weights` adds it."""
    return jax.tree_util.tree_map_with_path(
        lambda path, u, p: u + weight_decay * p if decays(path) else u, updates, params
    )


def _masked_decay(weight_decay: float) -> optax.GradientTransformation:
    """`optax.add_decayed_weights(weight_decay)` with the `decays` mask, its state the
    unmasked one's (an `EmptyState`). Not `mask=`: optax wraps that state in a `MaskedState`,
    and orbax refuses to restore a run saved before hunt 72 into it ("tree structures do not
    match"); the arithmetic is the same."""
    plain = optax.add_decayed_weights(weight_decay)

    def update(updates, state, params=None):
        if params is None:
            raise ValueError("weight_decay needs the parameters: update(grads, state, params)")
        if not weight_decay:  # as optax skips a zero decay: nothing added
            return updates, state
        return _decayed(updates, params, weight_decay), state

    return optax.GradientTransformation(plain.init, update)


def kept_decay(
    cfg: OptimizerConfig, max_steps: int, step: int, saved: dict[str, Any] | None, where: str
) -> int | None:
    """The decay length a run resumed at `step` keeps from `saved` (the config its checkpoint
    was trained with, `where` naming it) when `cfg` leaves optimizer.decay_steps out and
    `max_steps` would stretch it, as ModelZoo's schedules, whose length is their own, keep
    it (hunt 70: the lr of step 4 jumped from 0.00165 to 0.0026, unsaid); None when nothing
    changes (a constant schedule, nothing left to train). A decay_steps naming another
    length is a ConfigError: the steps to come would take another learning rate."""
    opt, run = (
        saved.get(k) if isinstance(saved, dict) else None for k in ("optimizer", "runconfig")
    )
    if not (isinstance(opt, dict) and isinstance(run, dict)) or cfg.lr_schedule == "constant":
        return None
    was = opt.get("decay_steps") or run.get("max_steps")
    if not isinstance(was, int) or was == (cfg.decay_steps or max_steps) or max_steps <= step:
        return None
    if cfg.decay_steps is None:
        return was
    raise ConfigError(
        f"{where} was trained on a {cfg.lr_schedule} decay over {was} steps "
        f"(optimizer.decay_steps={json.dumps(opt.get('decay_steps'))}, runconfig.max_steps="
        f"{json.dumps(run.get('max_steps'))}); optimizer.decay_steps={cfg.decay_steps} here "
        f"would change the learning rate of the steps to come; leave it out or give "
        f"optimizer.decay_steps={was} (the run keeps its decay), or give a new model_dir (-o)"
    )


def kept_note(cfg: OptimizerConfig, max_steps: int, step: Any, started: bool) -> str:
    """The line of a run that keeps the decay `cfg.decay_steps` its checkpoint `step` (a
    step folder, a `Path` named by its step) was trained on (`kept_decay`); `started`: a
    new run from it (`--checkpoint-path`), which may give another decay. Steps to come past
    the decay train at optimizer.min_learning_rate, said with how to decay longer (hunt 80:
    steps 6-7 of a run extended to 7 trained at lr 0, the note silent about it)."""
    decay = cfg.decay_steps
    said = (
        f"note: the run keeps the {cfg.lr_schedule} decay over {decay} steps "
        f"{'its checkpoint' if started else 'it'} was trained on (optimizer.decay_steps="
        f"{decay}); runconfig.max_steps={max_steps} only says where it stops"
    )
    first = max(decay or max_steps, int(step.name)) + 1  # the first step to come past it
    if first > max_steps:
        more = f"; give optimizer.decay_steps={max_steps} to decay over this run's steps"
        return said + (more if started else "")
    steps = f"step {first}" if max_steps == first else f"steps {first}-{max_steps}"
    floor = cfg.min_learning_rate
    rate = f"optimizer.min_learning_rate={floor}" + ("" if floor else " (lr 0: no update)")
    how = (
        f"give optimizer.decay_steps={max_steps}"
        if started
        else f"start a new model_dir (-o) from --checkpoint-path {step} with "
        f"optimizer.decay_steps={max_steps}"
    )
    return f"{said}; {steps} train at {rate}; for a decay over {max_steps} steps {how}"


# The settings that give a step its learning rate besides the decay's length (`schedule`)
SCHEDULE_KEYS = ("lr_schedule", "learning_rate", "warmup_steps", "min_learning_rate")
# Two schedules' rates of a step are one where they agree to float32's round-off of the
# schedule's arithmetic (a few ulp, 2**-23 = 1.2e-7 each): a changed setting moves them more
RATE_RTOL = 1e-6


def started_rate_note(
    cfg: OptimizerConfig, max_steps: int, step: int, saved: dict[str, Any] | None, where: str
) -> str | None:
    """The line of a run started at `step` from a checkpoint (`--checkpoint-path`; `where`
    names it, `saved` the config it was trained with) one of whose steps to come takes
    another learning rate under this run's schedule than under the checkpoint's, or None.
    The optimizer state (its step count) is restored and the schedule is this config's, as
    ModelZoo's; the line names the first such step with both rates (hunt 80: step 4 trained
    at 0.002325, not 0.0026046, unsaid)."""
    theirs = _saved_schedule(saved)
    if theirs is None or max_steps <= step:
        return None
    old_cfg, old_max = theirs
    counts = jnp.arange(step, max_steps, dtype=jnp.int32)  # optax's counts of steps to come
    try:
        olds = np.asarray(jax.jit(schedule(old_cfg, old_max))(counts))
    except (TypeError, ValueError):  # a meta's settings no schedule takes: nothing to compare
        return None
    news = np.asarray(jax.jit(schedule(cfg, max_steps))(counts))
    moved = np.flatnonzero(~np.isclose(olds, news, rtol=RATE_RTOL, atol=0.0))
    if not moved.size:
        return None
    first = step + 1 + int(moved[0])  # the first step whose rate changes
    was, now = step_rate(old_cfg, old_max)(first), step_rate(cfg, max_steps)(first)
    their_len, our_len = old_cfg.decay_steps or old_max, cfg.decay_steps or max_steps
    changed = [f"{k} {getattr(old_cfg, k)} there, {getattr(cfg, k)} here"
               for k in SCHEDULE_KEYS if getattr(old_cfg, k) != getattr(cfg, k)]  # fmt: skip
    keep = ""
    if their_len != our_len:
        changed.append(f"a decay over {their_len} steps there, {our_len} here")
        keep = f"; give optimizer.decay_steps={their_len} to keep its decay"
    return (
        f"note: {where} was trained on another learning-rate schedule ({'; '.join(changed)}): "
        f"step {first} trains at lr {now:.5g}, not {was:.5g}; the checkpoint's optimizer "
        f"state (its step count) is restored, the schedule is this run's{keep}"
    )


def _saved_schedule(saved: dict[str, Any] | None) -> tuple[OptimizerConfig, int] | None:
    """(the optimizer settings, runconfig.max_steps) of a checkpoint's saved config, or None
    where it holds none that reads."""
    opt, run = (
        saved.get(k) if isinstance(saved, dict) else None for k in ("optimizer", "runconfig")
    )
    if not (isinstance(opt, dict) and isinstance(run, dict)):
        return None
    max_steps = run.get("max_steps")
    names = {f.name for f in dataclasses.fields(OptimizerConfig)}
    try:
        cfg = OptimizerConfig(**{k: v for k, v in opt.items() if k in names})
        hash(cfg)  # `step_rate` caches by it
    except (TypeError, ValueError):
        return None
    if not isinstance(max_steps, int) or isinstance(max_steps, bool) or max_steps < 1:
        return None
    return cfg, max_steps


@functools.lru_cache(maxsize=16)
def base_transform(cfg: OptimizerConfig, max_steps: int) -> optax.GradientTransformation:
    """The per-element transform (cached: equal configs share one object and its jits),
    marked `memoryx.elementwise`: MemoryX applies it group by group without a probe."""
    return elementwise(_base_transform(cfg, max_steps))


def _base_transform(cfg: OptimizerConfig, max_steps: int) -> optax.GradientTransformation:
    tx = _optimizer(cfg, max_steps)
    return tx if cfg.max_gradient_value is None else _clipped(tx, cfg.max_gradient_value)


def _clipped(tx: optax.GradientTransformation, value: float) -> optax.GradientTransformation:
    """`tx` applied to the gradient clipped element by element into [-value, value]
    (`optax.clip`, torch's `clip_grad_value_` as ModelZoo's max_gradient_value applies it,
    before the weight decay an L2 optimizer adds), with `tx`'s state: a per-element step, so
    MemoryX applies it group by group as it does `tx`."""
    clip = optax.clip(value)

    def update(grads, state, params=None):
        return tx.update(clip.update(grads, clip.init(grads))[0], state, params)

    return optax.GradientTransformation(tx.init, update)


def adam_base(b1: float, b2: float, eps: float) -> optax.GradientTransformation:
    """Adam's scaling as ModelZoo's `AdamBase.step` computes it (Cerebras/modelzoo 1.9.1,
    modelzoo/common/pytorch/optim/AdamBase.py, and cerebras.pytorch 2.x's optim/AdamBase.py,
    the same lines): `m / (sqrt(v) + eps) * sqrt(1 - b2^t) / (1 - b1^t)`, eps added to the
    raw sqrt(v) before the bias correction, which is `m_hat / (sqrt(v_hat) + eps /
    sqrt(1 - b2^t))`: at step 1 with b2 0.999 an eps 31.6x optax's `scale_by_adam`'s, which
    adds it to sqrt(v_hat) (torch.optim.Adam's form; hunt 82: weights of |g| near eps moved a
    whole lr here, 0.15 lr under ModelZoo). The moments and the state are
    `optax.scale_by_adam`'s (`ScaleByAdamState`: count, mu, nu), so a step saved under either
    form restores under the other; t is the update's 1-based count."""
    base = optax.scale_by_adam(b1=b1, b2=b2, eps=eps)

    def update(updates, state, params=None):
        del params
        mu = optax.tree_utils.tree_update_moment(updates, state.mu, b1, 1)
        nu = optax.tree_utils.tree_update_moment_per_elem_norm(updates, state.nu, b2, 2)
        count = optax.safe_int32_increment(state.count)
        t = count.astype(jnp.float32)
        step_size = jnp.sqrt(1.0 - b2**t) / (1.0 - b1**t)  # AdamBase's bias corrections
        scaled = jax.tree.map(lambda m, v: m / (jnp.sqrt(v) + eps) * step_size, mu, nu)
        return scaled, optax.ScaleByAdamState(count=count, mu=mu, nu=nu)

    return optax.GradientTransformation(base.init, update)


def _adam_scaling(cfg: OptimizerConfig) -> optax.GradientTransformation:
    """Adam's per-element scaling in the form `cfg.eps_placement` names: ModelZoo's AdamBase
    (`adam_base`), or optax's `scale_by_adam` ("optax", torch's form)."""
    if cfg.eps_placement == "optax":
        return optax.scale_by_adam(b1=cfg.beta1, b2=cfg.beta2, eps=cfg.eps)
    return adam_base(cfg.beta1, cfg.beta2, cfg.eps)


def _optimizer(cfg: OptimizerConfig, max_steps: int) -> optax.GradientTransformation:
    lr = schedule(cfg, max_steps)
    kind = cfg.optimizer_type
    if kind == "adamw":  # optax.adamw's chain, its decay masked (`_masked_decay`)
        return optax.chain(
            _adam_scaling(cfg),
            _masked_decay(cfg.weight_decay),
            optax.scale_by_learning_rate(lr),
        )
    if kind == "adam":  # optax.adam's chain (its state's shape), weight_decay as L2 (`_l2`)
        adam = optax.chain(_adam_scaling(cfg), optax.scale_by_learning_rate(lr))
        return _l2(adam, cfg.weight_decay)
    # momentum 0 is plain SGD, as optax builds it without momentum (no trace to keep)
    momentum = cfg.momentum or None
    return _l2(optax.sgd(lr, momentum=momentum, nesterov=cfg.nesterov), cfg.weight_decay)


def _l2(tx: optax.GradientTransformation, weight_decay: float) -> optax.GradientTransformation:
    """`tx` applied to the gradient plus `weight_decay` x the parameters where `decays`
    (torch's `Adam` and `SGD` weight_decay, an L2 penalty, on ModelZoo's groups). Not
    `optax.chain(optax.add_decayed_weights(...), tx)`: that state has another shape, and
    steps saved before hunt 69 (whose weight_decay was ignored) would not restore into it."""
    if not weight_decay:
        return tx

    def update(grads, state, params=None):
        if params is None:
            raise ValueError("weight_decay needs the parameters: update(grads, state, params)")
        return tx.update(_decayed(grads, params, weight_decay), state, params)

    return optax.GradientTransformation(tx.init, update)


def full_transform(cfg: OptimizerConfig, max_steps: int) -> optax.GradientTransformation:
    base = base_transform(cfg, max_steps)
    if cfg.max_gradient_norm is None:
        return base
    return optax.chain(optax.clip_by_global_norm(cfg.max_gradient_norm), base)
