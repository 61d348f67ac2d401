"""Hunt 81: `wse experiments run NAME --seed 5` of an experiment that draws nothing wrote
`"seed": 5` into results.json and changed nothing. Now such a --seed is refused in one line,
as `wse hpc md` refuses a --seed that draws nothing.

Oracles: the experiments themselves, run at two seeds: each one listed as drawing nothing
predicts exactly alike (the cheap ones here), and one that draws (fabric-collectives' defect
maps) does not.
"""

import pytest
import typer
from wse_cli.app import app
from wse_cli.commands.experiments import DRAWS_NOTHING, EXPERIMENTS, load
from wse_cli.testing import refused_in_one_line
from wse_core.studies import fabric_collectives

ROOT = typer.main.get_command(app)


def test_a_seed_that_draws_nothing_is_refused(tmp_path):
    for name in ("tco-training", "netl-rayleigh-benard"):
        refused_in_one_line(
            ROOT,
            ["experiments", "run", name, "--seed", "5", "--out", tmp_path],
            f"--seed 5: {name} draws nothing at random",
        )
    assert not list(tmp_path.iterdir())  # refused before anything is written
    assert DRAWS_NOTHING <= set(EXPERIMENTS)


@pytest.mark.parametrize("name", ["tco-training", "trillion-scaling", "trtllm-h100"])
def test_the_listed_experiments_predict_alike_at_any_seed(name):
    fn = load(name)
    a, b = fn(quick=True, seed=0), fn(quick=True, seed=7)
    assert [p.to_dict() for p in a.predictions] == [p.to_dict() for p in b.predictions]
    assert a.measurements == b.measurements


def test_an_experiment_that_draws_is_not_listed(monkeypatch):
    monkeypatch.setattr(fabric_collectives, "GRIDS", ((64, 96),))
    monkeypatch.setattr(fabric_collectives, "_measure", lambda *a, **k: {})
    a, b = fabric_collectives.run(quick=True, seed=0), fabric_collectives.run(quick=True, seed=3)
    assert [p.value for p in a.predictions] != [p.value for p in b.predictions]  # its maps
    assert "fabric-collectives" not in DRAWS_NOTHING
