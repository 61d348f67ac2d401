"""Review 82, hole 4: a run resumed with `num_steps` alone (max_steps left out) said "the
cosine decay (optimizer.decay_steps unset) ends at it" of the new max_steps, and in the next
note that it kept the decay over the steps it was trained on; the second was what ran. The
steps note now reads the decay the run runs (after `keep_decay`).

Oracles: the learning rate the optimizer applies, read from optax itself (the restored SGD
state's update of a gradient of ones is -lr at its count, momentum and weight decay 0), and
the one metrics.jsonl logs, against the cosine by hand, lr (1 + cos(pi t / T)) / 2 at optax's
count t = step - 1 over T steps."""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest
from wse_core import preset
from wse_trainer.metrics import read_metrics
from wse_trainer.resume import open_checkpoints
from wse_trainer.run_lock import release
from wse_trainer.session import Session
from wse_trainer.testing import run_on_preset, tiny_config

LR = 0.05
SGD = ("optimizer.optimizer_type=sgd", f"optimizer.learning_rate={LR}", "optimizer.warmup_steps=0",
       "optimizer.lr_schedule=cosine", "runconfig.mode=train", "runconfig.log_steps=1",
       "runconfig.checkpoint_steps=4")  # fmt: skip


def _cosine(step: int, total: int) -> float:
    return LR * (1 + math.cos(math.pi * (step - 1) / total)) / 2


@pytest.fixture(scope="module")
def trained_to_4(tmp_path_factory):
    """A run of a cosine over max_steps 8 stopped at step 4 (num_steps 4), saved there."""
    where = tmp_path_factory.mktemp("cos8")
    done = run_on_preset(tiny_config(where, *SGD, "runconfig.max_steps=8", "runconfig.num_steps=4"))
    assert done.global_step == 4
    return where


def _applied(where, num_steps: int) -> tuple[list[float], list[str]]:
    """The rates the optimizer applies in the steps a resume with num_steps alone trains
    (from the restored optax state), and the session's notes."""
    steps = f"runconfig.num_steps={num_steps}"
    config = tiny_config(where, *SGD, "runconfig.max_steps=null", steps)
    s = Session(config, preset("small"), None)
    try:
        ckpt, start, notes = open_checkpoints(s)
        ckpt.close()
    finally:
        release(s.dir)
    assert start == 4
    memx = s.trainer.memx
    params, state = memx.params["embed"], memx.opt_state["embed"]
    ones = jax.tree.map(np.ones_like, params)
    rates = []
    for _ in range(num_steps):
        update, state = memx.tx.update(ones, state, params)
        leaves = [np.asarray(u) for u in jax.tree.leaves(update)]
        assert all(np.allclose(u, u.flat[0]) for u in leaves)  # one rate for every weight
        rates.append(-float(leaves[0].flat[0]))
    return rates, notes


def test_a_resume_that_keeps_its_decay_says_so_once(trained_to_4):
    rates, notes = _applied(trained_to_4, 2)
    assert rates == pytest.approx([_cosine(5, 8), _cosine(6, 8)], rel=1e-6)
    assert rates != pytest.approx([_cosine(5, 6), _cosine(6, 6)], rel=1e-3)  # not "ends at 6"
    steps = [n for n in notes if "runconfig.max_steps unset" in n]
    assert steps == ["note: runconfig.max_steps unset: runconfig.num_steps=2 from checkpoint "
                     "step 4, so the run trains to step 6 (max_steps 6)"]  # fmt: skip
    assert any("keeps the cosine decay over 8 steps" in n for n in notes)


def test_a_resume_whose_total_is_the_decay_trained_on_says_it_ends_there(trained_to_4):
    rates, notes = _applied(trained_to_4, 4)
    assert rates == pytest.approx([_cosine(s, 8) for s in (5, 6, 7, 8)], rel=1e-5)  # float32 cosine
    assert ("note: runconfig.max_steps unset: runconfig.num_steps=4 from checkpoint step 4, so "
            "the run trains to step 8 (max_steps 8); the cosine decay (optimizer.decay_steps "
            "unset) ends at it") in notes  # fmt: skip
    assert not any("keeps the cosine decay" in n for n in notes)


def test_the_resumed_run_logs_the_rates_it_applies(trained_to_4, tmp_path):
    import shutil

    where = tmp_path / "run"
    shutil.copytree(trained_to_4, where)
    done = run_on_preset(tiny_config(where, *SGD, "runconfig.max_steps=null",
                                     "runconfig.num_steps=2"))  # fmt: skip
    assert done.global_step == 6
    assert not any("ends at it" in n for n in done.notes)
    logged = {r["step"]: r["lr"] for r in read_metrics(where / "model_dir") if "lr" in r}
    assert [logged[s] for s in range(1, 7)] == pytest.approx(
        [_cosine(s, 8) for s in range(1, 7)], rel=1e-6
    )
