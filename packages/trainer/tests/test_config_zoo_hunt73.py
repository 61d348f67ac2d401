"""hunt 73 (zoo): ModelZoo's spellings in a params file against the command line's overrides.

- A file's `optimizer.betas: [0.9, 0.95]` with `optimizer.beta2=0.99` on the command line
  was "optimizer.betas gives optimizer.beta2 0.95, and optimizer.beta2 is 0.99; give it
  once" (and `runconfig.eval_steps` in the file against `eval_input.eval_steps=`): the
  ModelZoo keys were moved after the overrides applied. Oracle: the same file spelled our
  way with the same overrides, whose precedence is every override's.
- With sgd, a file's betas gave the hint "drop it (optimizer.beta2=null)", which the betas
  set again (the same line after following it); `betas=[0.9, 1.5]` was refused as
  `optimizer.beta2`, a key never written. Oracles: the hint followed loads; torch's Adam
  names the same index of betas out of [0, 1).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer
import yaml
from wse_cli.app import app
from wse_cli.testing import refused_in_one_line
from wse_trainer.config import ConfigError, apply_overrides, config_from_dict, load_config

ROOT = typer.main.get_command(app)


def _file(tmp: Path, optimizer: dict, runconfig: dict | None = None, name: str = "p") -> Path:
    data = {"model": {"vocab_size": 300}, "optimizer": optimizer,
            "runconfig": {"max_steps": 6, **(runconfig or {})}}  # fmt: skip
    (path := tmp / f"{name}.yaml").write_text(yaml.safe_dump(data))
    return path


# (ModelZoo's file, ours, the overrides): ours is the zoo file spelled our way by hand
CASES = [
    ({"betas": [0.9, 0.95]}, {"beta1": 0.9, "beta2": 0.95}, ["optimizer.beta2=0.99"]),
    ({"betas": [0.9, 0.95]}, {"beta1": 0.9, "beta2": 0.95}, ["optimizer.beta1=0.5"]),
    ({"betas": [0.9, 0.95]}, {"beta1": 0.9, "beta2": 0.95}, ["optimizer.betas=[0.8, 0.99]"]),
    ({"beta2": 0.95}, {"beta2": 0.95}, ["optimizer.betas=[0.8, 0.99]"]),
    ({"betas": [0.9, 0.95]}, {"beta1": 0.9, "beta2": 0.95}, ["optimizer.beta2=null"]),
    ({"betas": [0.9, 0.95]}, {"beta1": 0.9, "beta2": 0.95}, ["optimizer.betas=null"]),
    ({"betas": [0.9, 0.95]}, {"beta1": 0.9, "beta2": 0.95},
     ["optimizer.betas=[0.8, 0.99]", "optimizer.beta2=0.99"]),  # both ways, the same value
    ({"betas": [0.9, 1.5]}, {"beta1": 0.9, "beta2": 1.5}, ["optimizer.beta2=0.99"]),
]  # fmt: skip
EVAL = [(3, ["eval_input.eval_steps=5"]), (3, ["runconfig.eval_steps=5"]),
        (3, ["runconfig.eval_steps=null"]), (3, ["eval_input.eval_steps=null"]),
        (None, ["runconfig.eval_steps=4"])]  # fmt: skip


def _ours_overrides(overrides: list[str]) -> list[str]:
    """The overrides spelled our way by hand (betas=[a, b] is beta1=a beta2=b)."""
    out = []
    for item in overrides:
        path, raw = item.split("=", 1)
        if path == "optimizer.betas":
            b = yaml.safe_load(raw) or [None, None]
            out += [f"optimizer.beta1={_y(b[0])}", f"optimizer.beta2={_y(b[1])}"]
        else:
            out.append(item.replace("runconfig.eval_steps", "eval_input.eval_steps"))
    return list(dict.fromkeys(out))  # one override given twice the same way is one


def _y(v) -> str:
    return "null" if v is None else str(v)


@pytest.mark.parametrize(("zoo", "ours", "overrides"), CASES)
def test_an_override_replaces_a_files_betas_as_it_replaces_our_spelling(
    tmp_path, zoo, ours, overrides
):
    got = load_config(_file(tmp_path, zoo, name="zoo"), overrides)  # before: "give it once"
    want = load_config(_file(tmp_path, ours, name="ours"), _ours_overrides(overrides))
    assert got == want


def test_the_override_is_the_value_run():
    """By hand: the file's beta1 kept, the command line's beta2 taken."""
    data = {"optimizer": {"betas": [0.9, 0.95]}, "runconfig": {"eval_steps": 3}}
    out = apply_overrides(data, ["optimizer.beta2=0.99", "eval_input.eval_steps=5"])
    cfg = config_from_dict(out)
    assert (cfg.optimizer.beta1, cfg.optimizer.beta2, cfg.eval_input.eval_steps) == (0.9, 0.99, 5)


@pytest.mark.parametrize(("steps", "overrides"), EVAL)
def test_an_override_replaces_a_files_runconfig_eval_steps(tmp_path, steps, overrides):
    run = {} if steps is None else {"eval_steps": steps}
    got = load_config(_file(tmp_path, {}, run, name="zoo"), overrides)
    ours = _file(tmp_path, {}, name="ours")
    if steps is not None:
        data = yaml.safe_load(ours.read_text())
        data["eval_input"] = {"eval_steps": steps}
        ours.write_text(yaml.safe_dump(data))
    assert got == load_config(ours, _ours_overrides(overrides))


@pytest.mark.parametrize(
    ("optimizer", "runconfig", "overrides", "message"),
    [({"betas": [0.9, 0.95], "beta2": 0.99}, {}, [],
      "optimizer.betas gives optimizer.beta2 0.95, and optimizer.beta2 is 0.99; give it once"),
     ({}, {}, ["optimizer.betas=[0.9, 0.99]", "optimizer.beta2=0.9"],
      "optimizer.betas gives optimizer.beta2 0.99, and optimizer.beta2 is 0.9; give it once"),
     ({}, {"eval_steps": 3}, ["runconfig.eval_steps=4", "eval_input.eval_steps=5"],
      "runconfig.eval_steps gives eval_input.eval_steps 4, and eval_input.eval_steps is 5; "
      "give it once"),
     ({"betas": [0.9, 0.95], "beta2": 0.99}, {}, ["optimizer.beta2=0.95"],  # the file's own
      "optimizer.betas gives optimizer.beta2 0.95, and optimizer.beta2 is 0.99; give it once"),
     ({}, {}, ["optimizer.betas=0.9"], "optimizer.betas must be a list [beta1, beta2], got 0.9")],
)  # fmt: skip
def test_both_spellings_in_one_place_differently_stay_refused(
    tmp_path, optimizer, runconfig, overrides, message
):
    with pytest.raises(ConfigError) as e:
        load_config(_file(tmp_path, optimizer, runconfig), overrides)
    assert str(e.value) == message


def _hint(line: str) -> list[str]:
    """The overrides a line's "drop it (KEY=null ...)" gives."""
    (drops,) = re.findall(r"drop (?:it|them) \(([^)]*)\)", line)
    return drops.split()


@pytest.mark.parametrize(
    ("optimizer", "overrides", "said"),
    [({"betas": [0.9, 0.95]}, [], "optimizer.betas=[0.9, 0.95] has no effect"),
     ({"betas": [0.9, 0.95]}, ["optimizer.beta2=null"], "optimizer.betas=[0.9, 0.95] has no"),
     ({"betas": [0.9, 0.95]}, ["optimizer.beta2=0.99"],
      "optimizer.betas=[0.9, 0.95] and optimizer.beta2=0.99 have no effect"),
     ({"beta1": 0.9, "eps": 1e-8}, [], "optimizer.beta1=0.9 and optimizer.eps=1e-08 have"),
     ({}, ["optimizer.betas=[0.8, 0.9]"], "optimizer.betas=[0.8, 0.9] has no effect")],
)  # fmt: skip
def test_the_sgd_hint_names_what_was_written_and_following_it_loads(
    tmp_path, optimizer, overrides, said
):
    path = _file(tmp_path, {"optimizer_type": "adamw", **optimizer})
    args = ["optimizer.optimizer_type=sgd", *overrides]
    line = refused_in_one_line(ROOT, ["train", path, *args, "--validate-only"], said)
    keys = [d.split("=")[0] for d in _hint(line)]
    assert keys == [k.split("=")[0] for k in said.split(" have")[0].split(" has")[0].split(" and ")]
    fixed = [a for a in args if a.split("=")[0] not in keys] + _hint(line)
    cfg = load_config(path, fixed)  # before: the same line again after following it
    defaults = config_from_dict({"optimizer": {"optimizer_type": "sgd"}}).optimizer
    assert (cfg.optimizer.beta1, cfg.optimizer.beta2) == (defaults.beta1, defaults.beta2)


@pytest.mark.parametrize("betas", [[0.9, 1.5], [1.0, 0.95], [-0.1, 0.95], [0.9, 1.0]])
@pytest.mark.parametrize("where", ["file", "override"])
def test_betas_out_of_range_are_named_as_written_at_torchs_index(tmp_path, betas, where):
    torch = pytest.importorskip("torch")  # not in the Python 3.12+ lane (.ci/newest_python)
    with pytest.raises(ValueError, match=r"Invalid beta parameter at index (\d)") as torch_says:
        torch.optim.Adam([torch.zeros(1, requires_grad=True)], betas=tuple(betas))
    index = re.search(r"index (\d)", str(torch_says.value)).group(1)
    bad = betas[int(index)]
    line = f"optimizer.betas[{index}] must be in [0, 1), got {float(bad)}"
    if where == "file":
        path, overrides = _file(tmp_path, {"betas": betas}), []
    else:
        path, overrides = _file(tmp_path, {}), [f"optimizer.betas=[{betas[0]}, {betas[1]}]"]
    args = ["train", path, *overrides, "--validate-only"]
    assert refused_in_one_line(ROOT, args, line) == f"Error: {line}"  # before: optimizer.beta2


@pytest.mark.parametrize(
    ("override", "message"),
    [("optimizer.betas=[0.9, x]", "optimizer.betas[1] must be float, got 'x'"),
     ("optimizer.betas=[0.9, .inf]", "optimizer.betas[1] must be a finite number, got inf"),
     ("runconfig.eval_steps=2.5", "runconfig.eval_steps must be int or NoneType, got 2.5")],
)  # fmt: skip
def test_a_wrong_type_given_modelzoos_way_is_named_as_written(tmp_path, override, message):
    with pytest.raises(ConfigError) as e:
        load_config(_file(tmp_path, {}), [override])
    assert str(e.value) == message


def test_our_spelling_keeps_its_own_names(tmp_path):
    """The same checks on our keys name ours (hunt 70's lines are unchanged)."""
    with pytest.raises(ConfigError, match=r"^optimizer.beta2 must be float, got 'x'$"):
        load_config(_file(tmp_path, {}), ["optimizer.beta2=x"])
    with pytest.raises(ConfigError) as e:
        load_config(_file(tmp_path, {"beta2": 0.95}), ["optimizer.optimizer_type=sgd"])
    assert "optimizer.beta2=0.95 has no effect" in str(e.value)
    assert "drop it (optimizer.beta2=null)" in str(e.value)
