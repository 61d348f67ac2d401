"""Resume: a run stopped (or killed with SIGKILL, also during a save) and started again has
the per-step losses and final parameters of an uninterrupted run, bit for bit."""

import json
import os
import signal
import subprocess
import sys
import time

import jax
import numpy as np
import pytest
import wse_models
import yaml
from tokenizers import Tokenizer
from wse_core import preset
from wse_trainer.checkpoints import Checkpointer
from wse_trainer.metrics import read_metrics
from wse_trainer.run import TrainingDivergedError
from wse_trainer.session import predict, validate
from wse_trainer.testing import run_on_preset as run
from wse_trainer.testing import tiny_config, tiny_params, write_corpus


def _losses(model_dir):
    return {m["step"]: m["loss"] for m in read_metrics(model_dir) if m["mode"] == "train"}


def _final_params(model_dir):
    return jax.tree.leaves(wse_models.from_pretrained(model_dir / "hf").params())


def _assert_same_run(a, b):
    assert _losses(a) == _losses(b)
    for x, y in zip(_final_params(a), _final_params(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_stopped_and_resumed_run_is_bit_identical(tmp_path):
    full = run(tiny_config(tmp_path / "a"))
    assert full.global_step == 6 and len(full.losses) == 6
    part = run(tiny_config(tmp_path / "b", "runconfig.num_steps=3"))
    assert part.global_step == 3
    # A save the kill interrupted leaves only orbax's temporary folder: it is ignored.
    (tmp_path / "b/model_dir/checkpoints/6.orbax-checkpoint-tmp-0").mkdir()
    rest = run(tiny_config(tmp_path / "b"))
    assert min(rest.losses) == 4 and rest.global_step == 6
    _assert_same_run(tmp_path / "a/model_dir", tmp_path / "b/model_dir")
    assert Checkpointer(tmp_path / "b/model_dir/checkpoints", read_only=True).all_steps() == [3, 6]


def test_model_dir_holds_what_inference_loads(tmp_path):
    config = tiny_config(tmp_path, "runconfig.mode=train_and_eval", "runconfig.sample_tokens=8")
    result = run(config)
    d = result.model_dir
    for name in (
        "metrics.jsonl",
        "run.log",
        "tokenizer.json",
        "train/params_train.yaml",
        "hf/config.json",
        "hf/tokenizer.json",
    ):
        assert (d / name).exists(), name
    assert list((d / "train").glob("events.out.tfevents*"))
    log = (d / "run.log").read_text()
    assert "| Train Device=CSX, Step=6, Loss=" in log and "StallFraction=" in log
    assert "| Eval Device=CSX, GlobalStep=6" in log
    assert "emulator layout: " in log  # which layout this machine's cores ran (layout.describe)
    # The eval perplexity is exp(loss); the model beats the uniform guess over its vocab.
    assert result.eval_loss < np.log(320)
    tok = Tokenizer.from_file(str(d / "hf/tokenizer.json"))
    ids = tok.encode("def f1(a, b):").ids
    logits = wse_models.from_pretrained(d / "hf")(np.asarray([ids], np.int32))
    assert logits.shape == (1, len(ids), 320)
    assert result.samples and result.samples[0].startswith("def ")
    # the EOS that separated the documents, named where transformers and vLLM look for it
    eos = tok.token_to_id("<|endoftext|>")
    assert json.loads((d / "hf/generation_config.json").read_text())["eos_token_id"] == eos
    hf_config = json.loads((d / "hf/config.json").read_text())
    assert hf_config["eos_token_id"] == hf_config["bos_token_id"] == eos
    tok_config = json.loads((d / "hf/tokenizer_config.json").read_text())
    assert tok.token_to_id(tok_config["eos_token"]) == eos
    # The run's report: the predicted step on its plan, with the mean of the measured steps
    # that metrics.jsonl holds as its measured wall time (after the first, whose wall holds
    # the compile: hunt 70)
    steps = [m for m in read_metrics(d) if m["mode"] == "train"]
    rep = result.report
    assert rep.units == "step" and {m["predicted_step_s"] for m in steps} == {rep.predicted_s}
    assert rep.measured_wall_s == pytest.approx(np.mean([m["wall_s"] for m in steps][1:]))
    # ... and that plan is the config's own: its memory plan priced again from the config
    spec = preset(config.runconfig.wafer)
    again = predict(config, spec, *validate(config, spec))
    assert rep.predicted_s == again.predicted_s and rep.phases == again.phases
    assert rep.systems == config.runconfig.num_csx and rep.sram == again.sram


def test_nan_loss_stops_without_a_broken_checkpoint(tmp_path):
    cfg = tiny_config(
        tmp_path,
        "optimizer.learning_rate=1e30",
        "optimizer.optimizer_type=sgd",
        "runconfig.checkpoint_steps=1",
        "runconfig.max_steps=20",
    )
    with pytest.raises(TrainingDivergedError, match="loss is (nan|inf) at step"):
        run(cfg)
    ckpt = Checkpointer(tmp_path / "model_dir/checkpoints", read_only=True)
    steps = ckpt.all_steps()
    assert steps and all(np.isfinite(_losses(tmp_path / "model_dir")[s]) for s in steps)


def test_an_inf_gradient_under_a_finite_loss_stops_the_run(tmp_path, monkeypatch):
    """Step 2's summed gradient turns Inf while its loss (computed before the update) stays
    finite: the run stops at step 2 naming step 1's checkpoint, which holds finite weights,
    and nothing is exported."""
    import jax.numpy as jnp
    from wse_trainer.stream import StreamedTrainer
    from wse_trainer.swarmx import SwarmX

    steps: list = []
    real_step, real_reduce = StreamedTrainer.step, SwarmX.reduce

    def counted_step(self, *args, **kwargs):
        steps.append(None)
        # the host loop (on a GPU `choose_layout` picks the device loop, whose program is
        # traced once, at step 1: the reduce below would never break in it)
        self._device_loop = None
        st = real_step(self, *args, **kwargs)
        steps[-1] = st
        return st

    def broken_reduce(self, grads):
        total = real_reduce(self, grads)
        if len(steps) < 2:
            return total
        return jax.tree.map(lambda g: g.at[(0,) * g.ndim].set(jnp.inf), total)

    monkeypatch.setattr(StreamedTrainer, "step", counted_step)
    monkeypatch.setattr(SwarmX, "reduce", broken_reduce)
    cfg = tiny_config(tmp_path, "runconfig.checkpoint_steps=1", "runconfig.max_steps=4")
    with pytest.raises(TrainingDivergedError) as e:
        run(cfg)
    text = str(e.value)
    assert "\n" not in text and e.value.exit_code == 1
    assert "gradient norm is inf at step 2" in text and "last good checkpoint: step 1" in text
    assert len(steps) == 2 and np.isfinite(steps[1].loss) and not np.isfinite(steps[1].grad_norm)
    assert np.isfinite(steps[0].grad_norm) and steps[0].grad_norm > 0
    model_dir = tmp_path / "model_dir"
    assert not (model_dir / "hf").exists()
    ckpt = Checkpointer(model_dir / "checkpoints", read_only=True)
    try:
        assert ckpt.all_steps() == [1]
    finally:
        ckpt.close()
    assert all(np.isfinite(m["grad_norm"]) for m in read_metrics(model_dir) if m["mode"] == "train")


def _cli(args, env):
    code = "from wse_cli.app import main; main()"
    return [sys.executable, "-c", code, "train", *args], env


@pytest.mark.slow
def test_sigkill_during_training_and_saves_then_resume(tmp_path):
    corpus = write_corpus(tmp_path / "data")
    env = {**os.environ, "WSE_DEVICES": "1"}

    def params(name, steps=10):
        p = tiny_params(corpus, tmp_path / name)
        p["runconfig"].update(max_steps=steps, checkpoint_steps=1)
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(p))
        return str(path)

    cmd, env = _cli([params("full")], env)
    subprocess.run(cmd, env=env, check=True, capture_output=True, timeout=300)
    killed = tmp_path / "killed"
    cmd, env = _cli([params("killed")], env)
    kills = 0
    for target in (3, 7):  # kill twice, the first time as soon as a save is in flight
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 240
        while proc.poll() is None and time.time() < deadline:
            tmp = list((killed / "checkpoints").glob("*tmp*")) if killed.exists() else []
            if (tmp and target == 3) or max(_losses(killed) or [0]) >= target:
                proc.send_signal(signal.SIGKILL)
                kills += 1
                break
            time.sleep(0.01)
        proc.wait(timeout=60)
    assert kills == 2
    subprocess.run(cmd, env=env, check=True, capture_output=True, timeout=300)
    _assert_same_run(tmp_path / "full", killed)
    assert json.loads((killed / "metrics.jsonl").read_text().splitlines()[-1])["step"] == 10
