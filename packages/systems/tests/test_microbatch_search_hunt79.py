"""Hunt 79: explore's micro-batch search priced a whole report for every divisor at every
search (`wse plan train -m gpt2-124m --systems 1680 --batch 720720`: 34 s of CPU). It now
prices each micro-batch's two parts once (`micro_batch.step_seconds`); the oracle here is the
exhaustive search as it ran before, a full `predict_step` report for every divisor and stride."""

import pytest
import wse_models
from wse_core import preset
from wse_systems.training import micro_batch as mb
from wse_systems.training import stride as st
from wse_systems.training.performance import StepLayout, predict_step
from wse_systems.training.plan import memory_plan, plan_activations

GPT2 = wse_models.preset_config("gpt2-124m", dtype="bfloat16")
TINY = wse_models.preset_config("tiny-gpt2")
L8B = wse_models.preset_config("llama3-8b", dtype="bfloat16")
WSE3 = preset("wse3")


def _fastest_stride_by_reports(model, micro, seq):
    """The stride the contract names, every placed stride priced by a whole report."""
    placed = {}
    for k in range(1, int(model.n_layers) + 1):
        try:
            placed[k] = plan_activations(model, WSE3, micro, seq, k, 0)
        except Exception:  # noqa: BLE001 - a stride the ledger does not place
            continue
    timed = {}
    for k, p in placed.items():
        plan = memory_plan(model, WSE3, micro, seq, 2, streaming=p)
        timed[k] = predict_step(model, WSE3, num_csx=1, batch_per_system=micro,
                                micro_batch=micro, seq_len=seq,
                                layout=StepLayout(plan)).predicted_s  # fmt: skip
    return min(timed, key=lambda k: (timed[k], k))


def _explore_by_reports(model, n, batch, seq, clip):
    """Explore exhaustively: a whole report at each divisor that fits, on its fastest stride
    found by whole reports too; the fastest, the larger on a tie."""
    speed = {}
    for d in mb.divisors(batch):
        if not mb.fits(model, WSE3, d, seq):
            continue
        stride = _fastest_stride_by_reports(model, d, seq)
        plan = st.run_plan(model, WSE3, d, seq, stride)
        r = predict_step(model, WSE3, num_csx=n, batch_per_system=batch, micro_batch=d,
                         seq_len=seq, layout=StepLayout(plan, clip_gradients=clip))  # fmt: skip
        speed[d] = r.extra["tokens_per_s"]
    return max(speed, key=lambda d: (speed[d], d)), speed


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    ("model", "n", "batch", "seq", "clip"),
    [(L8B, 4, 48, 8192, True),  # explore 8 (auto: 48)
     (GPT2, 1, 5040, 1024, False),  # explore 1008 (auto: 2520)
     (GPT2, 1680, 5040, 1024, True),
     (TINY, 4, 360, 128, False)],  # explore and auto: 360
)  # fmt: skip
def test_explore_chooses_what_the_exhaustive_search_of_reports_chooses(model, n, batch, seq, clip):
    want, speed = _explore_by_reports(model, n, batch, seq, clip)
    got = mb.plan_step(model, WSE3, num_csx=n, batch_per_system=batch, seq_len=seq,
                       micro_batch="explore", layout=StepLayout(clip_gradients=clip))  # fmt: skip
    assert got.extra["micro_batch"] == want
    assert got.extra["tokens_per_s"] == speed[want]  # the same float, not a near one
    assert got.extra["stride"] == _fastest_stride_by_reports(model, want, seq)


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("batch", "micro", "n", "clip"),
                         [(48, 48, 1, False), (48, 8, 1, False), (48, 6, 64, True),
                          (720, 12, 1680, False)])  # fmt: skip
def test_step_seconds_is_the_reports_float(batch, micro, n, clip):
    plan = st.run_plan(GPT2, WSE3, micro, 1024)
    lay = StepLayout(plan, clip_gradients=clip)
    r = predict_step(GPT2, WSE3, num_csx=n, batch_per_system=batch, micro_batch=micro,
                     seq_len=1024, layout=lay)  # fmt: skip
    got = mb.step_seconds(GPT2, WSE3, num_csx=n, batch_per_system=batch, seq_len=1024,
                          micro_batch=micro, layout=lay)  # fmt: skip
    assert got == r.predicted_s
