"""The optax transform of a run, split the way MemoryX applies it.

`base_transform(cfg, max_steps)` is the per-element part (the schedule and adam/sgd
moments, weight decay: decoupled for adamw, an L2 term added to the gradient for adam, sgd
and momentum, as torch's and ModelZoo's `Adam` and `SGD` apply `weight_decay`): MemoryX
keeps one optax state of it per weight group (the embedding, each layer, the final norm), so
applying it group by group as gradients arrive is the same arithmetic as applying it to the
whole model. Global-norm clipping is the one non-local part: MemoryX applies
`optax.clip_by_global_norm` itself once every group's gradient has arrived (the norm is over
all groups). `full_transform` is the equivalent whole-model transform (clipping chained in
front), used by the plain `jax.grad` reference.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import jax
import optax

from wse_trainer.config import ConfigError, OptimizerConfig

__all__ = ["schedule", "base_transform", "full_transform", "kept_decay"]


def schedule(cfg: OptimizerConfig, max_steps: int) -> optax.Schedule:
    """Learning rate by step: linear warm-up, then constant, cosine or linear decay."""
    decay = max(1, (cfg.decay_steps or max_steps) - cfg.warmup_steps)
    if cfg.lr_schedule == "constant":
        tail = optax.constant_schedule(cfg.learning_rate)
    elif cfg.lr_schedule == "cosine":
        alpha = cfg.min_learning_rate / cfg.learning_rate
        tail = optax.cosine_decay_schedule(cfg.learning_rate, decay, alpha=alpha)
    else:
        tail = optax.linear_schedule(cfg.learning_rate, cfg.min_learning_rate, decay)
    if cfg.warmup_steps <= 0:
        return tail
    warm = optax.linear_schedule(0.0, cfg.learning_rate, cfg.warmup_steps)
    return optax.join_schedules([warm, tail], [cfg.warmup_steps])


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


@functools.lru_cache(maxsize=16)
def base_transform(cfg: OptimizerConfig, max_steps: int) -> optax.GradientTransformation:
    """The per-element transform (cached: equal configs share one object and its jits)."""
    lr = schedule(cfg, max_steps)
    kind = cfg.optimizer_type
    if kind == "adamw":
        return optax.adamw(
            lr, b1=cfg.beta1, b2=cfg.beta2, eps=cfg.eps, weight_decay=cfg.weight_decay
        )
    if kind == "adam":
        return _l2(optax.adam(lr, b1=cfg.beta1, b2=cfg.beta2, eps=cfg.eps), cfg.weight_decay)
    # momentum 0 is plain SGD, as optax builds it without momentum (no trace to keep)
    momentum = cfg.momentum or None
    return _l2(optax.sgd(lr, momentum=momentum, nesterov=cfg.nesterov), cfg.weight_decay)


def _l2(tx: optax.GradientTransformation, weight_decay: float) -> optax.GradientTransformation:
    """`tx` applied to the gradient plus `weight_decay` x the parameters (torch's `Adam` and
    `SGD` weight_decay, an L2 penalty). Not `optax.chain(optax.add_decayed_weights(...), tx)`:
    that state has another shape, and steps saved before hunt 69 (whose weight_decay was
    ignored) would not restore into it."""
    if not weight_decay:
        return tx

    def update(grads, state, params=None):
        if params is None:
            raise ValueError("weight_decay needs the parameters: update(grads, state, params)")
        grads = jax.tree.map(lambda g, p: g + weight_decay * p, grads, params)
        return tx.update(grads, state, params)

    return optax.GradientTransformation(tx.init, update)


def full_transform(cfg: OptimizerConfig, max_steps: int) -> optax.GradientTransformation:
    base = base_transform(cfg, max_steps)
    if cfg.max_gradient_norm is None:
        return base
    return optax.chain(optax.clip_by_global_norm(cfg.max_gradient_norm), base)
