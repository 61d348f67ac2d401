"""Hunt 81 (train81, holes 1, 4, 7): a ModelZoo file's schedule and steps, as ModelZoo runs them.

1: a number `optimizer.learning_rate` (ModelZoo: a constant rate, no scheduler) trained under
   a cosine decay to 0, unsaid (lr 0.001, 0.0008536, 0.0005, 0.0001464 over 4 steps).
4: `runconfig.num_steps` without `max_steps`, or neither, ran under a hidden max_steps=100
   (its decay over 100 steps); `num_steps: 150` was refused naming that 100.
7: the generic scheduler-list example was refused when copied (warmup_steps 10, decay_steps
   8); ModelZoo's Polynomial of power 1 and CosineAnnealing got no translation; a key of a
   translated item was dropped unsaid.

Oracles: ModelZoo's own sources (Cerebras/modelzoo 1.9: `PyTorchBaseModel._configure_
optimizer`, a float learning_rate is the optimizer's constant rate; `PyTorchBaseRunner`'s
total steps min(num_steps, max_steps - global step), one of them required; `lr_scheduler.py`'s
PolynomialLR and CosineAnnealingLR formulas, transcribed below and evaluated by hand per
step), hand counts of steps, and the run's metrics.jsonl.
"""

from __future__ import annotations

import math

import pytest
import typer
import yaml
from wse_cli.app import app
from wse_cli.testing import invoke, refused_in_one_line
from wse_trainer.config import ConfigError, config_from_dict, load_config
from wse_trainer.config_check import config_notes
from wse_trainer.metrics import read_metrics
from wse_trainer.optimizer import schedule, step_rate
from wse_trainer.session import check_inputs
from wse_trainer.testing import run_on_preset, tiny_params, write_corpus

ROOT = typer.main.get_command(app)

# A ModelZoo optimizer section (its GPT-2 configs' keys): a number learning_rate, no scheduler
ZOO_OPTIMIZER = {"optimizer_type": "AdamW", "learning_rate": 1.0e-3, "weight_decay": 0.1,
                 "max_gradient_norm": 1.0}  # fmt: skip


def _file(tmp_path, optimizer=None, runconfig=None, **sections) -> str:
    """A params file of the tiny model on a local corpus, its optimizer and runconfig given."""
    data = tiny_params(write_corpus(tmp_path / "data"), tmp_path / "run")
    data["optimizer"] = dict(ZOO_OPTIMIZER if optimizer is None else optimizer)
    run = {k: v for k, v in data["runconfig"].items() if k != "max_steps"}
    data["runconfig"] = {**run, "mode": "train", **(runconfig or {})}
    for name, values in sections.items():
        data[name] = {**data.get(name, {}), **values}
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


# 1: a number learning_rate is a constant rate ----------------------------------------------


def test_a_modelzoo_number_learning_rate_is_a_constant_rate(tmp_path):
    config = load_config(_file(tmp_path, runconfig={"max_steps": 4}))
    opt = config.optimizer
    assert opt.lr_schedule == "constant"
    rate = step_rate(opt, 4)
    # ModelZoo: learning_rate = float(learning_rate), no scheduler: every step at 1e-3
    assert [rate(s) for s in (1, 2, 3, 4)] == pytest.approx([1e-3] * 4, rel=1e-7)
    [note] = [n for n in config_notes(config) if "lr_schedule" in n]
    assert note.startswith("note: optimizer.lr_schedule unset: the learning rate is constant at "
                           "0.001, as ModelZoo runs a number learning_rate")  # fmt: skip


def test_the_projects_own_decay_settings_keep_its_cosine_default(tmp_path):
    """A section giving warmup_steps (ours: no ModelZoo section holds it) decays as before:
    warm-up from 0, then 1e-3 * (1 + cos(pi t / T)) / 2 to 0 over the rest of max_steps."""
    given = {"learning_rate": 1e-3, "warmup_steps": 2}
    config = load_config(_file(tmp_path, given, {"max_steps": 6}))
    assert config.optimizer.lr_schedule == "cosine"
    lr = schedule(config.optimizer, 6)
    for t in range(6):
        want = 1e-3 * t / 2 if t < 2 else 1e-3 * (1 + math.cos(math.pi * (t - 2) / 4)) / 2
        assert float(lr(t)) == pytest.approx(want, rel=1e-6, abs=1e-12), t
    [note] = [n for n in config_notes(config) if "lr_schedule" in n]
    assert "a linear warm-up of 2 steps, then a cosine decay from 0.001 to optimizer." in note


def test_a_given_schedule_is_no_default_and_says_nothing(tmp_path):
    config = load_config(_file(tmp_path, {**ZOO_OPTIMIZER, "lr_schedule": "cosine"},
                               {"max_steps": 4}))  # fmt: skip
    assert config.optimizer.lr_schedule == "cosine"
    assert not [n for n in config_notes(config) if "lr_schedule" in n]


# 1 + 4: a ModelZoo run with num_steps alone ----------------------------------------------


def test_num_steps_alone_trains_that_many_steps_at_the_constant_rate_and_resumes(tmp_path):
    """Hand count: num_steps 3 from step 0 trains steps 1-3; the same file again trains 4-6
    (ModelZoo: min(num_steps, max_steps - global step), max_steps left out); each at 1e-3."""
    path = _file(tmp_path, runconfig={"num_steps": 3, "checkpoint_steps": 3, "log_steps": 1})
    first = run_on_preset(load_config(path))
    assert first.global_step == 3
    assert ("note: runconfig.max_steps unset: runconfig.num_steps=3 from step 0, so the run "
            "trains to step 3 (max_steps 3)") in first.notes  # fmt: skip
    second = run_on_preset(load_config(path))
    assert second.global_step == 6
    assert ("note: runconfig.max_steps unset: runconfig.num_steps=3 from checkpoint step 3, so "
            "the run trains to step 6 (max_steps 6)") in second.notes  # fmt: skip
    steps = [(r["step"], r["lr"]) for r in read_metrics(tmp_path / "run") if "lr" in r]
    assert [s for s, _ in steps] == [1, 2, 3, 4, 5, 6]
    assert [lr for _, lr in steps] == pytest.approx([1e-3] * 6, rel=1e-7)
    saved = yaml.safe_load((tmp_path / "run" / "train" / "params_train.yaml").read_text())
    assert saved["runconfig"]["max_steps"] == 6 and saved["optimizer"]["lr_schedule"] == "constant"


def test_num_steps_past_the_old_hidden_100_is_taken(tmp_path):
    config = load_config(_file(tmp_path, runconfig={"num_steps": 150}))
    check_inputs(config)  # hunt 81: "num_steps=150 ... is more than runconfig.max_steps=100"
    assert config.runconfig.max_steps is None


def test_neither_step_count_is_refused_in_one_line_naming_max_steps(tmp_path):
    path = _file(tmp_path)
    with pytest.raises(ConfigError, match=r"^runconfig\.max_steps is not given: runconfig\.mode "
                       r"train trains to runconfig\.max_steps"):  # fmt: skip
        check_inputs(load_config(path))
    line = "runconfig.max_steps is not given"
    refused_in_one_line(ROOT, ["train", path, "--validate-only"], line)


def test_an_eval_needs_no_step_count(tmp_path):
    check_inputs(load_config(_file(tmp_path, runconfig={"mode": "eval"})))


# 7: the scheduler-list example and its translations ----------------------------------------


def _refusal(value) -> str:
    with pytest.raises(ConfigError) as e:
        config_from_dict({"optimizer": {"learning_rate": value}})
    return str(e.value)


def _example(line: str, head: str) -> dict[str, str]:
    """The settings a line offers after `head`, as `key: value` pairs (before any "; ")."""
    return dict(kv.split(": ") for kv in line.split(head)[1].split("; ")[0].split(", "))


@pytest.mark.parametrize("iters", [1, 2, 8, 10, 11, 100])
def test_the_generic_example_runs_as_printed(tmp_path, iters):
    """hunt 81: `warmup_steps: 10, decay_steps: 8` was refused when copied."""
    squared = {"scheduler": "Polynomial", "initial_learning_rate": 1e-3,
               "end_learning_rate": 0.0, "total_iters": iters, "power": 2.0}  # fmt: skip
    settings = _example(_refusal([squared]), "e.g. ")
    assert int(settings["decay_steps"]) == iters
    overrides = [f"optimizer.{k}={v}" for k, v in settings.items()]
    path = _file(tmp_path, runconfig={"max_steps": 10})
    code, output = invoke(ROOT, ["train", path, *overrides, "--validate-only"])
    assert code == 0 and "config is valid" in output, output[-1500:]


def _polynomial(p: dict, t: int) -> float:
    """ModelZoo's PolynomialLR._lr_function (cycle false) at 0-based step t."""
    a, b, n = p["initial_learning_rate"], p["end_learning_rate"], p["total_iters"]
    return b if t >= n else (1 - t / n) ** p.get("power", 1.0) * (a - b) + b


def _annealing(p: dict, t: int) -> float:
    """ModelZoo's CosineAnnealingLR._lr_function at 0-based step t (no clip at T_max)."""
    a, eta = p["initial_learning_rate"], p.get("eta_min", 0.0)
    return eta + (a - eta) * (math.cos(math.pi * t / p["T_max"]) + 1) / 2


def _fed_back(line: str, max_steps: int):
    settings = _example(line, "for this list, ")
    overrides = [f"optimizer.{k}={v}" for k, v in settings.items()]
    cfg = load_config("tiny", [*overrides, f"runconfig.max_steps={max_steps}"]).optimizer
    return schedule(cfg, max_steps)


@pytest.mark.parametrize("warm", [0, 3])
def test_polynomial_of_power_one_translates_to_its_linear_decay(warm):
    poly = {"scheduler": "PolynomialLR", "initial_learning_rate": 1e-3,
            "end_learning_rate": 1e-4, "total_iters": 8, "power": 1.0}  # fmt: skip
    ramp = {"scheduler": "LinearLR", "initial_learning_rate": 0.0, "end_learning_rate": 1e-3,
            "total_iters": warm}  # fmt: skip
    line = _refusal([ramp, poly] if warm else [poly])
    assert "lr_schedule: linear" in line, line
    lr = _fed_back(line, 20)
    for t in range(20):  # past the decay: its end rate, in both
        want = 1e-3 * t / warm if t < warm else _polynomial(poly, t - warm)
        assert float(lr(t)) == pytest.approx(want, rel=1e-6, abs=1e-12), t


@pytest.mark.parametrize("warm", [0, 3])
def test_cosine_annealing_translates_to_the_cosine_through_t_max(warm):
    anneal = {"scheduler": "CosineAnnealingLR", "initial_learning_rate": 1e-3, "T_max": 8,
              "eta_min": 1e-4}  # fmt: skip
    ramp = {"scheduler": "LinearLR", "initial_learning_rate": 0.0, "end_learning_rate": 1e-3,
            "total_iters": warm}  # fmt: skip
    line = _refusal([ramp, anneal] if warm else [anneal])
    last = warm + 8 + 1  # the last step of the same rate: count warm + T_max, eta_min in both
    assert f"the rates are the same for runconfig.max_steps up to {last}" in line, line
    lr = _fed_back(line, 30)
    for step in range(1, last + 1):  # optax count step - 1, ModelZoo's step t = step - 1
        t = step - 1
        want = 1e-3 * t / warm if t < warm else _annealing(anneal, t - warm)
        assert float(lr(t)) == pytest.approx(want, rel=1e-6, abs=1e-12), step
    t = last  # the next step: ModelZoo's cosine rises again, the decay here stays at eta_min
    assert _annealing(anneal, t - warm) > 1e-4 * 1.01 and float(lr(t)) == pytest.approx(1e-4)


def test_modelzoo_1x_decay_steps_spelling_is_its_total_iters():
    """ModelZoo 1.x's factory reads `decay_steps` (or `steps`) where 2.x reads total_iters."""
    items = [{"scheduler": "Linear", "initial_learning_rate": 0.0, "end_learning_rate": 1e-3,
              "decay_steps": 2},
             {"scheduler": "CosineDecay", "initial_learning_rate": 1e-3,
              "end_learning_rate": 1e-4, "decay_steps": 8}]  # fmt: skip
    settings = _example(_refusal(items), "for this list, ")
    assert settings["warmup_steps"] == "2" and settings["decay_steps"] == "10"


@pytest.mark.parametrize(
    ("item", "why"),
    [({"main_scheduler": "x"}, "CosineDecay's main_scheduler has no setting here"),
     ({"scheduler": "Polynomial", "power": 2.0}, None), ({"scheduler": "Polynomial",
      "cycle": True}, None)],
)  # fmt: skip
def test_an_item_the_translation_would_change_is_not_translated(item, why):
    cos = {"scheduler": "CosineDecay", "initial_learning_rate": 1e-3, "end_learning_rate": 0.0,
           "total_iters": 8, **item}  # fmt: skip
    line = _refusal([cos])
    assert "for this list" not in line and "e.g. " in line
    if why:
        assert f"no translation ({why}); e.g. " in line
