"""Hunt 70 (`runs`): a run's prediction prices what the run does, and lists what moves it.
Before:
- `wse train --mode eval` (one forward pass over the eval batches) printed the training
  step's prediction (forward + backward, gradients out, MemoryX's update, at train_input's
  shape), and so did a resume with nothing left to train; no eval pass of `train_and_eval`
  was priced, and no line said so;
- the run's "predicted wafer step" line (console and run.log) listed no calibration and no
  constant, while `--validate-only` listed 15 for the same step (clock x2 moved it -49.8%);
- `experiments run weight-streaming` listed the whole run's constants beside every row: the
  GPU rows wafer constants that do not move them and not the MFU 0.4 that does (no
  registered constant), the wse3 rows `clock_hz = 8.5e+08, 1.1e+09` (the measured part's
  850 MHz wafer beside their own).
"""

from __future__ import annotations

import pytest
from wse_core import Work, preset
from wse_core.cost.assumptions import assume, assumed_spec, system_constant
from wse_core.cost.reads import recording
from wse_core.studies.experiment import ExperimentResult
from wse_systems import gpu as gpum
from wse_systems.gpu_links import LATENCY_KEYS
from wse_systems.training.forward import predict_eval
from wse_systems.training.performance import StepLayout, step_phases
from wse_systems.training.placement import StepWorkload, place_step
from wse_trainer.predicted import NOTHING, prediction_basis
from wse_trainer.predicted import predict_eval as run_eval
from wse_trainer.session import predict, validate
from wse_trainer.testing import run_on_preset, tiny_config


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny train_and_eval run of 2 steps (its lines, result and config)."""
    config = tiny_config(tmp_path_factory.mktemp("priced"), "runconfig.max_steps=2",
                         "runconfig.checkpoint_steps=2", "runconfig.mode=train_and_eval",
                         "runconfig.sample_tokens=0")  # fmt: skip
    lines: list[str] = []
    return lines, run_on_preset(config, echo=lines.append), config


def _rerun(config, mode: str) -> tuple[list[str], object]:
    """The same run folder run again in `mode` (step 2 is max_steps: nothing to train)."""
    data = config.to_dict()
    data["runconfig"]["mode"] = mode
    from wse_trainer.config import config_from_dict

    lines: list[str] = []
    return lines, run_on_preset(config_from_dict(data), echo=lines.append)


def _starting(lines: list[str], head: str) -> list[str]:
    return [line for line in lines if line.startswith(head)]


def test_train_and_eval_prices_the_step_and_the_eval_pass(trained):
    lines, result, config = trained
    spec = preset(config.runconfig.wafer)
    model, plan = validate(config, spec)
    step = predict(config, spec, model, plan)
    (line,) = _starting(lines, "predicted wafer step")
    # the step's line stands on what --validate-only's does: one text (`prediction_basis`)
    assert line.endswith(f"; {prediction_basis(step)}") and "assumed: clock_hz" in line
    assert result.report.predicted_s == step.predicted_s
    (evals,) = _starting(lines, "predicted eval pass")
    again = run_eval(config, spec, model, config.eval_input.eval_steps)
    assert result.eval_report.predicted_s == again.predicted_s
    assert f"{again.predicted_s:.4g} s for 2 batch(es) of 4 x 32 tokens" in evals
    assert "each evaluation at the end" in evals and evals.endswith(prediction_basis(again))


def test_eval_mode_prices_a_forward_pass_and_no_step(trained):
    _, _, config = trained
    lines, result = _rerun(config, "eval")
    assert not _starting(lines, "predicted wafer step") and result.report is None
    (line,) = _starting(lines, "predicted eval pass")
    r = result.eval_report
    assert f"{r.predicted_s:.4g} s" in line and "forward only" in line
    # what it priced: weights streamed in and forward products only, nothing of a backward
    priced = {leaf.name for leaf, _ in r.phases.leaves() if leaf.work != Work()}
    assert "weights_in" in priced and {"qkv", "mlp_down", "logits", "softmax_loss"} <= priced
    assert not {n for n in priced if n.endswith(("_dx", "_dw"))}
    assert not priced & {"gradients_out", "memoryx_update", "memoryx_accumulate"}


def test_eval_pass_is_the_steps_forward_once_per_batch(tmp_path):
    """Oracle: the training step's own forward nodes, and n batches = n x one batch."""
    config = tiny_config(tmp_path)
    spec = preset(config.runconfig.wafer)
    model, plan = validate(config, spec)
    micro, seq = 4, config.train_input.max_sequence_length
    one = predict_eval(model, spec, num_csx=1, batch_per_system=4, seq_len=seq,
                       micro_batch=micro, batches=1, layout=StepLayout(plan))  # fmt: skip
    three = predict_eval(model, spec, num_csx=1, batch_per_system=4, seq_len=seq,
                         micro_batch=micro, batches=3, layout=StepLayout(plan))  # fmt: skip
    assert three.predicted_s == pytest.approx(3 * one.predicted_s, rel=1e-12)
    pl = place_step(model, spec, plan, StepWorkload(micro_batch=micro, seq_len=seq), num_csx=1)
    step_forward = [n for n in step_phases(model, pl).parts if n.name == "forward"]
    eval_forward = [n for n in one.phases.parts[0].parts if n.name == "forward"]
    assert eval_forward == step_forward  # the same layers, streamed the same way
    assert one.predicted_s < predict(config, spec, model, plan).predicted_s


def test_nothing_to_train_prints_no_prediction(trained):
    _, _, config = trained
    lines, result = _rerun(config, "train")
    assert lines.count(NOTHING) == 1
    assert not _starting(lines, "predicted ") and result.report is result.eval_report is None


def _listed_keys(line: str) -> list[str]:
    listed = line.split("assumed: ", 1)[1].split(" (ranges", 1)[0]
    return [part.split(" ")[0].rstrip("*") for part in listed.split(", ")]


def test_a_listed_constant_moves_the_printed_step(trained):
    lines, result, config = trained
    keys = _listed_keys(_starting(lines, "predicted wafer step")[0])
    assert {"clock_hz", "memoryx_bytes_per_s", "dsd_issue_cycles"} <= set(keys)
    base = result.report.predicted_s
    clock = preset(config.runconfig.wafer).clock_hz
    with assume(clock_hz=2 * clock):
        spec = assumed_spec(config.runconfig.wafer)
        moved = predict(config, spec, *validate(config, spec)).predicted_s
    assert moved < 0.75 * base  # the compute-bound step at twice the clock


# -- hole 6: each weight-streaming row lists what its own pricing read --------------------


def _rows():
    from wse_trainer.studies import weight_streaming as ws

    with recording() as whole:
        rows, _ = ws._predictions()
    result = ExperimentResult(ws.NAME, 0, {}, [], rows, assumed=whole)
    return rows, result.to_dict()["predictions"]


def test_weight_streaming_rows_list_their_own_constants():
    rows, dicts = _rows()
    wse3 = preset("wse3").clock_hz
    for r, row in zip(rows, dicts, strict=True):
        names = {e["name"]: e["value"] for e in row["assumed"]}
        if row["name"].startswith("gpu_min"):
            assert names == {}  # memory alone: no assumption moves the count
        elif row["name"].startswith("gpu_"):
            # the MFU, and the link latency of a data-parallel ring (review 81: its last
            # gradient bucket runs after the backward, its latency in the step) or of the
            # pipeline's sends between stages; one data-parallel rank on one stage has none
            latencies = set(names) - {gpum.TRAIN_MFU_KEY}
            assert names[gpum.TRAIN_MFU_KEY] == gpum.TRAIN_MFU
            assert latencies <= set(LATENCY_KEYS)
            lay = r.params["layout"]
            assert bool(latencies) == (lay["dp"] > 1 or lay["pp"] > 1)
        else:
            assert names["clock_hz"] == wse3 and gpum.TRAIN_MFU_KEY not in names
    # the listed constants move what they are listed beside, and nothing else
    with assume(**{gpum.TRAIN_MFU_KEY: 0.5}):
        mfu, _ = _rows()
    with assume(clock_hz=1e9):
        clock, _ = _rows()
    scaled = 0
    for r, m, c in zip(rows, mfu, clock, strict=True):
        # no data-parallel ring, nothing but compute (review 81: GPT-2 124M's 8 GPUs, dp 4 x
        # tp 2, expose their last gradient bucket, which the MFU does not move; Llama 3 8B's
        # run dp 1 x tp 8)
        lay = r.params.get("layout", {})
        alone = lay.get("dp") == 1 == lay.get("pp") and m.params["layout"] == lay
        if r.name == "gpu_tokens_per_s" and alone:
            assert m.value == pytest.approx(r.value * 0.5 / gpum.TRAIN_MFU, rel=1e-12)
            scaled += 1
        if r.name.startswith("gpu_"):
            assert c.value == r.value  # the wafer's clock moves no GPU row
        else:
            assert m.value == r.value  # nor the GPU's MFU a wafer row
            assert c.value != r.value or r.name == "no_stall_batch"
    assert scaled
    # a listed latency moves its row, an unlisted one none (the listing is exact)
    for key in LATENCY_KEYS:
        with assume(**{key: 2 * system_constant(key)}):
            moved, _ = _rows()
        for r, row, x in zip(rows, dicts, moved, strict=True):
            listed = key in {e["name"] for e in row["assumed"]}
            assert (x.value != r.value) == listed or r.name.startswith("gpu_scaling"), r.name
