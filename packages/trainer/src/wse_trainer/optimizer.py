"""The optax transform of a run, split the way MemoryX applies it.

`base_transform(cfg, max_steps)` is the per-element part (the schedule and adam/sgd
moments, weight decay): MemoryX keeps one optax state of it per weight group (the embedding,
each layer, the final norm), so applying it group by group as gradients arrive is the same
arithmetic as applying it to the whole model. Global-norm clipping is the one non-local part:
MemoryX applies `optax.clip_by_global_norm` itself once every group's gradient has arrived
(the norm is over all groups). `full_transform` is the equivalent whole-model transform
(clipping chained in front), used by the plain `jax.grad` reference.
"""

from __future__ import annotations

import functools

import optax

from wse_trainer.config import OptimizerConfig

__all__ = ["schedule", "base_transform", "full_transform"]


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
        return optax.adam(lr, b1=cfg.beta1, b2=cfg.beta2, eps=cfg.eps)
    if kind == "momentum":
        return optax.sgd(lr, momentum=cfg.momentum)
    return optax.sgd(lr)


def full_transform(cfg: OptimizerConfig, max_steps: int) -> optax.GradientTransformation:
    base = base_transform(cfg, max_steps)
    if cfg.max_gradient_norm is None:
        return base
    return optax.chain(optax.clip_by_global_norm(cfg.max_gradient_norm), base)
