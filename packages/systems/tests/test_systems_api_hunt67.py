"""Hunt 67's holes in the planners' Python API (hole 7 of hunt67_api2). Before:
- `predict_step(seq_len=4096)` priced GPT-2 (1,024 positions) at 682k tokens/s, `seq_len=0`
  as a 5 ms step of 0 tokens, `batch_per_system=2.5` as a global batch of 2.5;
- `plan_pipeline` planned context 1,000 on a model of 128 positions, bytes_per_param 0 (no
  weights) or 1.5, context 2.5 and slots 1.5; context NaN and num_wafers 1.0 were a
  ValueError / TypeError from deep inside;
- `GpuServing.point(2.5)` was an operating point of 2.5 users, and a 10**6-token prompt on a
  model of 128 positions was priced (0.65 s to first token).
The CLI refused these earlier (`check_context`, `check_request`) and keeps its lines
(apps/cli/tests/test_cli_hostile_hunt63_plan.py checks them).
"""

from __future__ import annotations

import pytest
from wse_core import WseError, preset
from wse_models import preset_config
from wse_systems import gpu as gpum
from wse_systems.pipeline import PipelinePlanError, Regions, plan_pipeline
from wse_systems.serving import GpuServing, ServingError, Speculation, Workload
from wse_systems.training.performance import no_stall_batch, predict_step
from wse_systems.transformer import layer_params

GPT2 = preset_config("gpt2-124m", dtype="bfloat16")  # 1,024 positions
TINY = preset_config("tiny-gpt2")  # 128 positions
WSE3, SMALL = preset("wse3"), preset("small")
SEQ = "seq_len must be an integer in 1..1024 (the model's max_seq_len), got {}"


def _step(**kw):
    return predict_step(GPT2, WSE3, **{"num_csx": 1, "batch_per_system": 1, "seq_len": 512, **kw})


@pytest.mark.parametrize(
    ("kw", "line"),
    [
        (dict(seq_len=4096), SEQ.format(4096)),
        (dict(seq_len=1025), SEQ.format(1025)),
        (dict(seq_len=0), SEQ.format(0)),
        (dict(seq_len=512.0), SEQ.format(512.0)),
        (dict(seq_len=True), SEQ.format(True)),
        (dict(batch_per_system=2.5), "batch_per_system must be an integer >= 1, got 2.5"),
        (dict(batch_per_system=2, micro_batch=0.5), "micro_batch must be an integer >= 1, got 0.5"),
    ],
)
def test_predict_step_refuses_a_step_no_run_has(kw, line):
    with pytest.raises(WseError) as e:
        _step(**kw)
    assert str(e.value) == line


def test_predict_step_at_the_models_length_still_prices_its_tokens():
    r = _step(batch_per_system=2, seq_len=1024)
    assert r.extra["tokens_per_s"] == pytest.approx(2 * 1024 / r.predicted_s)
    assert r.extra["global_batch"] == 2


def test_no_stall_batch_names_the_sequence_instead_of_finding_no_batch():
    with pytest.raises(WseError, match=r"seq_len must be an integer in 1\.\.1024"):
        no_stall_batch(GPT2, WSE3, num_csx=1, seq_len=4096)


CONTEXT = "context_len must be an integer in 1..128 (the model's max_seq_len), got {}"
BPP = "bytes_per_param must be one of 1, 2, 4, 8 (bytes of a parameter's dtype), got {}"


@pytest.mark.parametrize(
    ("kw", "line"),
    [
        (dict(context_len=1000), CONTEXT.format(1000)),
        (dict(context_len=129), CONTEXT.format(129)),
        (dict(context_len=2.5), CONTEXT.format(2.5)),
        (dict(context_len=float("nan")), CONTEXT.format("nan")),
        (dict(context_len=0), CONTEXT.format(0)),
        (dict(bytes_per_param=0), BPP.format(0)),
        (dict(bytes_per_param=1.5), BPP.format(1.5)),
        (dict(bytes_per_param=3), BPP.format(3)),
        (dict(bytes_per_param=True), BPP.format(True)),
        (dict(slots=1.5), "slots must be an integer >= 1, got 1.5"),
        (dict(slots=0), "slots must be an integer >= 1, got 0"),
        (dict(num_wafers=1.0), "num_wafers must be an integer >= 1, got 1.0"),
        (dict(regions=Regions(stages=2.5)), "stages must be an integer >= 1, got 2.5"),
    ],
)
def test_plan_pipeline_refuses_what_no_model_serves(kw, line):
    with pytest.raises(PipelinePlanError) as e:
        plan_pipeline(TINY, SMALL, **{"context_len": 32, **kw})
    assert str(e.value) == line


@pytest.mark.parametrize("bpp", [1, 2, 4])
def test_plan_pipeline_at_the_models_context_still_plans(bpp):
    plan = plan_pipeline(TINY, SMALL, context_len=128, bytes_per_param=bpp)
    assert plan.context_len == 128
    weights = sum(s.weight_bytes for s in plan.stages)
    assert weights == TINY.n_layers * layer_params(TINY) * bpp  # every layer once


def _serving(prompt: int, output: int, **kw) -> GpuServing:
    work = Workload(prompt_tokens=prompt, output_tokens=output, **kw)
    return GpuServing(TINY, gpum.H100, num_gpus=1, workload=work)


@pytest.mark.parametrize("users", [2.5, True, 0, "2"])
def test_gpu_serving_refuses_users_that_are_no_whole_number(users):
    with pytest.raises(ServingError) as e:
        _serving(16, 16).point(users)
    assert str(e.value) == f"users must be an integer >= 1, got {users!r}"


@pytest.mark.parametrize(
    ("kw", "line"),
    [
        (dict(prompt=10**6, output=16),
         "the workload holds 1,000,016 tokens per user (prompt_tokens 1,000,000 + output_tokens "
         "16), past the model's max_seq_len=128; use at most 128"),
        (dict(prompt=100, output=29),
         "the workload holds 129 tokens per user (prompt_tokens 100 + output_tokens 29), past "
         "the model's max_seq_len=128; use at most 128"),
        (dict(prompt=16, output=16, context_len=200),
         "the workload holds 200 tokens per user (context_len 200), past the model's "
         "max_seq_len=128; use at most 128"),
    ],
)  # fmt: skip
def test_gpu_serving_refuses_a_request_past_the_models_positions(kw, line):
    with pytest.raises(ServingError) as e:
        _serving(**kw)
    assert str(e.value) == line


def test_gpu_serving_at_the_models_positions_still_serves():
    assert _serving(100, 28).point(1).users == 1


def test_a_draft_shorter_than_the_request_is_refused():
    draft = preset_config("tiny-gpt2", n_layers=1, max_seq_len=64)
    work = Workload(prompt_tokens=64, output_tokens=16)
    with pytest.raises(ServingError, match="past the draft's max_seq_len=64"):
        GpuServing(TINY, gpum.H100, num_gpus=1, workload=work,
                   speculation=Speculation(draft=draft, gamma=2, alpha=0.5))  # fmt: skip
