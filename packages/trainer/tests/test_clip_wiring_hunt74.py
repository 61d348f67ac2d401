"""A run that clips the global gradient norm is priced as MemoryX runs it (hunt 74): the
predictor prices the held update (`wse_systems.training.update`), and this file holds that
`wse train`'s own prediction and `wse plan train -m params.yaml` both tell it a file's
`optimizer.max_gradient_norm` and optimizer (they priced per-group updates and Adam's two
slots for every file). Oracles: the config's own setting, the same step priced with the
predictor's layout flag set by hand, and `plan.slots_of`'s rule."""

from __future__ import annotations

import pytest
import yaml
from wse_cli.model_choice import resolve_model
from wse_core.cost.assumptions import assumed_spec
from wse_systems.training.performance import StepLayout, predict_step
from wse_trainer.config import load_config
from wse_trainer.session import batch_per_system, micro_batch, predict, validate

WSE3 = assumed_spec("wse3")


@pytest.mark.parametrize("norm", [1.0, None])
def test_the_runs_prediction_takes_its_clipping(norm):
    given = "null" if norm is None else norm
    config = load_config("gpt2_124m", [f"optimizer.max_gradient_norm={given}"])
    model, plan = validate(config, WSE3)
    got = predict(config, WSE3, model, plan)
    by_hand = predict_step(
        model, WSE3, num_csx=config.runconfig.num_csx,
        batch_per_system=batch_per_system(config), micro_batch=micro_batch(config, WSE3, model),
        seq_len=config.train_input.max_sequence_length,
        layout=StepLayout(plan, clip_gradients=norm is not None),
    )  # fmt: skip
    assert got.predicted_s == by_hand.predicted_s
    line = got.assumptions["MemoryX update"]
    assert ("MemoryX holds every gradient" in line) == (norm is not None)
    assert ("max_gradient_norm unset" in line) == (norm is None)


def test_clipping_costs_the_held_update():
    clipped = load_config("gpt2_124m")
    assert clipped.optimizer.max_gradient_norm is not None  # the shipped config clips
    free = load_config("gpt2_124m", ["optimizer.max_gradient_norm=null"])
    times = [predict(c, WSE3, *validate(c, WSE3)).predicted_s for c in (clipped, free)]
    assert times[0] > times[1]


@pytest.mark.parametrize(
    "optimizer,slots,clip",
    [({"optimizer_type": "adamw", "max_gradient_norm": 1.0}, 2, True),
     ({"optimizer_type": "sgd", "momentum": None}, 0, False),
     ({"optimizer_type": "sgd", "momentum": 0.9}, 1, False)],
)  # fmt: skip
def test_a_params_files_optimizer_reaches_the_plan(tmp_path, optimizer, slots, clip):
    data = yaml.safe_load(open(str(_shipped("tiny"))).read())
    data["optimizer"] = {**{k: v for k, v in data.get("optimizer", {}).items()
                            if k in ("learning_rate",)}, **optimizer}  # fmt: skip
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    choice = resolve_model(str(path))
    assert (choice.optimizer_slots, choice.clip_gradients) == (slots, clip)


def _shipped(name: str):
    from importlib import resources

    return resources.files("wse_trainer") / "configs" / f"{name}.yaml"
