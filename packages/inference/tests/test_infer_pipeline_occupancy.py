"""The pipelined engine's schedule as run against the serving model's occupancy, the engine's
own prediction against the serving model at one user, and the scheduler keeping the
pipeline full when requests arrive together."""

from __future__ import annotations

import queue

import numpy as np
import pytest
from wse_core import preset
from wse_inference.engine import SamplingParams
from wse_inference.pipeline.engine import PipelineEngine
from wse_inference.serve.scheduler import Scheduler
from wse_inference.serve.testing import events_until_finished
from wse_inference.testing import tiny_model
from wse_systems.pipeline import Regions
from wse_systems.serving import Workload
from wse_systems.serving.wafer import WaferServing, occupancy

pytestmark = pytest.mark.timeout(300)
# the engine's tick compiles in ~10-40 s on 2 cores: the tests that run it are `slow`
STAGES = 4
PROMPTS = [[1, 2, 3], [4, 5], [6, 7, 8, 9], [10]]
GREEDY = SamplingParams(max_tokens=9, temperature=0.0, ignore_eos=True)


@pytest.fixture(scope="module")
def engine():
    return PipelineEngine(
        tiny_model(n_layers=STAGES), spec=preset("wse3"), stages=STAGES, max_context=32
    )


def _run(engine, users: int):
    state = engine.init_decode_state()
    for slot in range(users):
        prefix = engine.prefill(prompt_ids=PROMPTS[slot], sampling=GREEDY)
        state = engine.insert(prefix=prefix, state=state, slot=slot)
    for _ in range(8):  # `generate`, as the scheduler runs it (one compiled cycle for both)
        state, _ = engine.generate(state=state)
    return state


@pytest.mark.slow
def test_emulated_stage_occupancy_is_the_models(engine):
    for users in range(1, STAGES + 1):
        got = engine.stage_occupancy(_run(engine, users))
        # the model at equal stage times: each stage held 1 tick per user, a round S ticks
        ticks = {f"stage{j}": 1.0 for j in range(STAGES)}
        want = occupancy(ticks, STAGES, users)
        np.testing.assert_allclose(got, list(want.values()))
        np.testing.assert_allclose(got, users / STAGES)


def test_the_serving_model_on_the_engines_plan(engine):
    plan = engine.plan
    work = Workload(prompt_tokens=8, output_tokens=16, context_len=32)  # a KV read of 16
    # the engine's head rows: the serving model on the engine's regions
    serve = WaferServing(
        engine.config, plan.spec, num_wafers=plan.num_wafers, workload=work,
        bytes_per_param=plan.bytes_per_param,
        regions=Regions(stages=STAGES, layout=plan.layout, head_rows=plan.head.region.rows),
    )  # fmt: skip
    ours = serve.plans(STAGES)[0]
    assert [s.layers for s in ours.stages] == [s.layers for s in plan.stages]
    assert [s.region for s in ours.stages] == [s.region for s in plan.stages]
    one = engine.report(kv_tokens=16).predicted_s  # the engine's own batch-1 prediction
    pipe = serve.pipelines(STAGES)[0]
    assert pipe.token_s == pytest.approx(one)
    occ = serve.occupancy(1)
    assert sum(occ.values()) == pytest.approx(1.0)  # one user: one element at a time
    full = serve.occupancy(serve.max_users)
    assert max(full.values()) == pytest.approx(1.0)  # the bottleneck region never rests


@pytest.mark.slow
def test_scheduler_keeps_concurrent_requests_in_flight_together(engine):
    sched = Scheduler(engine, max_queued=8)
    sinks = []
    for ids in PROMPTS:  # all four arrive before the engine thread takes any
        q: queue.Queue = queue.Queue()
        sched.submit(prompt_ids=ids, sampling=GREEDY, sink=q.put)
        sinks.append(q)
    before = engine.metrics()
    sched.start()
    try:
        for q in sinks:
            assert events_until_finished(q, timeout_s=120)[-1].completion_tokens == 9
    finally:
        sched.stop(timeout_s=10)
    after = engine.metrics()
    busy = after["stage_busy_ticks"] - before["stage_busy_ticks"]
    ticks = after["stage_ticks"] - before["stage_ticks"]
    assert ticks > 0 and busy / ticks == pytest.approx(1.0)  # every stage busy every tick
