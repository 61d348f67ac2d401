"""Hunt 74 (train10): the memory plan and MemoryX's capacity sized Adam's two fp32 slots per
parameter whatever the optimizer (`memory_plan(optimizer_slots=2)` always): sgd keeps none,
momentum one.

Oracle: optax. Each optimizer's state, as optax builds it on a real parameter tree
(`optax.adamw`, `optax.adam`, `optax.sgd(momentum=0.9)`, `optax.sgd()`), counted leaf by leaf:
its values per parameter are the slots the plan must size (the step counters are scalars).
The trainer's own transform (`base_transform`) is counted the same way, so the plan sizes
what the run holds.
"""

from __future__ import annotations

import jax
import optax
import pytest
import wse_models
from wse_core.cost.assumptions import assumed_spec
from wse_systems.training.plan import MASTER_BYTES, memory_plan, slots_of
from wse_trainer.config import OptimizerConfig
from wse_trainer.optimizer import base_transform

WSE3 = assumed_spec("wse3")
MODEL = wse_models.preset_config("tiny-gpt2")
PARAMS = wse_models.init_params(MODEL, jax.random.key(0))
N = sum(x.size for x in jax.tree.leaves(PARAMS))

OPTAX = {  # (optimizer_type, momentum) -> optax's own optimizer
    ("adamw", 0.9): optax.adamw(1e-3),
    ("adam", 0.9): optax.adam(1e-3),
    ("momentum", 0.9): optax.sgd(1e-3, momentum=0.9),
    ("sgd", 0.9): optax.sgd(1e-3, momentum=0.9),
    ("sgd", 0.0): optax.sgd(1e-3),
    ("momentum", 0.0): optax.sgd(1e-3),
}


def _slots(tx: optax.GradientTransformation) -> int:
    """Values per parameter in tx's state on PARAMS (scalars, the counters, left out)."""
    state = jax.eval_shape(tx.init, PARAMS)
    values = sum(x.size for x in jax.tree.leaves(state) if x.ndim)
    assert values % N == 0
    return values // N


@pytest.mark.parametrize(("kind", "momentum"), list(OPTAX))
def test_the_plan_sizes_the_optimizers_own_state(kind, momentum):
    cfg = OptimizerConfig(optimizer_type=kind, momentum=momentum)
    slots = _slots(OPTAX[kind, momentum])
    assert slots_of(cfg) == slots == _slots(base_transform(cfg, max_steps=10))
    plan = memory_plan(MODEL, WSE3, 1, 64, slots_of(cfg))
    n = MODEL.num_params()
    rows = {r["item"]: r["bytes"] for r in plan.rows}
    assert rows["optimizer state (fp32)"] == MASTER_BYTES * slots * n
    assert plan.memoryx_bytes == MASTER_BYTES * (1 + slots) * n


def test_sgd_fits_a_memoryx_that_adam_does_not():
    """MemoryX's capacity check reads the optimizer's state: masters and a momentum trace fit
    a MemoryX of 8 bytes per parameter, Adam's two slots do not."""
    import dataclasses

    from wse_core import WseError
    from wse_systems.training.plan import check_memoryx

    model = wse_models.preset_config("llama3-8b", dtype="bfloat16")  # a capacity >= 1 GB
    n = model.num_params()
    small = dataclasses.replace(WSE3, memoryx_capacity_bytes=MASTER_BYTES * 2 * n)
    check_memoryx(
        memory_plan(model, small, 1, 64, slots_of(OptimizerConfig(optimizer_type="momentum")))
    )
    with pytest.raises(WseError, match="does not fit in MemoryX"):
        check_memoryx(
            memory_plan(model, small, 1, 64, slots_of(OptimizerConfig(optimizer_type="adamw")))
        )


def test_the_planned_step_takes_the_slots():
    """`plan_step(optimizer_slots=)` (what `wse plan train` prices) sizes the same state."""
    import dataclasses

    from wse_core import WseError
    from wse_systems.training.micro_batch import plan_step

    model = wse_models.preset_config("llama3-8b", dtype="bfloat16")
    small = dataclasses.replace(WSE3, memoryx_capacity_bytes=MASTER_BYTES * 2 * model.num_params())
    kw = dict(num_csx=1, batch_per_system=1, seq_len=64)
    assert plan_step(model, small, optimizer_slots=1, **kw).predicted_s > 0
    with pytest.raises(WseError, match="does not fit in MemoryX"):
        plan_step(model, small, optimizer_slots=2, **kw)
