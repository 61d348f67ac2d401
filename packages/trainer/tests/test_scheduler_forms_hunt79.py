"""Hunt 79: ModelZoo's `SequentialLR: {schedulers: [...]}` and 2.x `- LinearLR: {...}` /
`- CosineDecayLR: {...}` scheduler lists got the generic example, which has no decay_steps:
copied, its decay ran over max_steps, not over the list's total_iters.

Oracle: ModelZoo's scheduler formulas (LinearLR: initial + (end - initial) x min(t, T) / T;
CosineDecayLR: end + (initial - end) x (1 + cos(pi x min(t, T) / T)) / 2; ConstantLR: its
rate; SequentialLR: each from its milestone), at 0-based step t, against the example's
settings fed back through `load_config` and `optimizer.schedule` (optax count t)."""

from __future__ import annotations

import math

import pytest
from wse_trainer.config import ConfigError, load_config
from wse_trainer.optimizer import schedule

WARM = {"LinearLR": {"initial_learning_rate": 0.0, "end_learning_rate": 1e-3, "total_iters": 10}}
COS = {"CosineDecayLR": {"initial_learning_rate": 1e-3, "end_learning_rate": 1e-4,
                         "total_iters": 90}}  # fmt: skip
LIN = {"LinearLR": {"initial_learning_rate": 1e-3, "end_learning_rate": 0.0, "total_iters": 150}}
FLAT = {"ConstantLR": {"learning_rate": 1e-4}}
FORMS = {
    "sequential": {"SequentialLR": {"schedulers": [WARM, COS]}},
    "list_2x": [WARM, COS],
    "list_2x_linear": [WARM, LIN],
    "with_constant_tail": [WARM, COS, FLAT],
    "sequential_no_warmup": {"SequentialLR": {"schedulers": [COS]}},
}


def _zoo(parts: list[dict], t: int) -> float:
    """ModelZoo's rate at 0-based step t of a sequential list of {Name: settings}."""
    for i, part in enumerate(parts):
        ((name, p),) = part.items()
        total = p.get("total_iters")
        if i < len(parts) - 1 and t >= total:
            t -= total
            continue
        if name == "ConstantLR":
            return p["learning_rate"]
        a, b, x = p["initial_learning_rate"], p["end_learning_rate"], min(t, total) / total
        if name == "LinearLR":
            return a + (b - a) * x
        return b + (a - b) * (1 + math.cos(math.pi * x)) / 2
    raise AssertionError


@pytest.mark.parametrize("form", FORMS)
def test_the_example_fed_back_is_modelzoos_schedule(form):
    value = FORMS[form]
    with pytest.raises(ConfigError) as e:
        load_config("tiny", [f"optimizer.learning_rate={value!r}".replace("'", '"')])
    line = str(e.value)
    assert "for this list, " in line and "decay_steps: " in line, line
    settings = dict(kv.split(": ") for kv in line.split("for this list, ")[1].split(", "))
    overrides = [f"optimizer.{k}={v}" for k, v in settings.items()]
    cfg = load_config("tiny", [*overrides, "runconfig.max_steps=400"]).optimizer
    parts = value["SequentialLR"]["schedulers"] if isinstance(value, dict) else value
    lr = schedule(cfg, 400)  # max_steps far past the list: the decay is the list's
    for t in (0, 1, 5, 9, 10, 11, 40, 99, 100, 159, 160, 300):
        assert float(lr(t)) == pytest.approx(_zoo(parts, t), rel=1e-5, abs=1e-10), t


def test_an_untranslated_list_s_example_carries_its_decay_steps():
    """A warm-up from a non-zero start has no translation; its example's decay_steps is the
    list's total_iters (10 + 90), not left to max_steps."""
    warm = {"LinearLR": {**WARM["LinearLR"], "initial_learning_rate": 1e-5}}
    with pytest.raises(ConfigError, match=r"e\.g\. .*decay_steps: 100,"):
        load_config("tiny", [f"optimizer.learning_rate={[warm, COS]!r}".replace("'", '"')])
