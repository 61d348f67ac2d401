"""The pipelined engine equals the plain single-device KV-cache decoder, token for token."""

import pytest
from wse_core import preset
from wse_inference.decoding import PlainDecoder
from wse_inference.engine import Engine, SamplingParams
from wse_inference.pipeline.engine import PipelineEngine
from wse_inference.testing import tiny_model

PROMPTS = [[1, 2, 3, 4, 5], [7, 8, 9], [10, 11, 12, 13, 14, 15, 16, 17, 18]]
SAMPLINGS = [
    SamplingParams(max_tokens=7, temperature=0.0),
    SamplingParams(max_tokens=6, temperature=1.0, seed=3),
    SamplingParams(max_tokens=5, temperature=0.8, top_k=20, top_p=0.9, seed=5),
]


def _plain(model, prompt, sampling, max_context=48):
    dec = PlainDecoder(model.config, model.params, max_context=max_context, prefill_chunk=4)
    return dec.generate(prompt, sampling).tokens


@pytest.mark.parametrize("users", [1, 2])
@pytest.mark.parametrize("mesh_rows", [1, 2])
def test_pipeline_equals_plain_two_stages(users, mesh_rows):
    """Greedy and seeded sampling, 1 and 2 users, 2 stages: both rows on one device (each
    stage runs only for an occupied slot) and on a 2 x 1 device mesh (vmapped rows)."""
    model = tiny_model("llama", n_layers=2)
    eng = PipelineEngine(
        model, spec=preset("wse3"), stages=2, max_context=48, prefill_chunk=4, mesh_rows=mesh_rows
    )
    assert isinstance(eng, Engine)
    order = [1, 0] if users == 2 else [1]  # user 0 greedy when alone is covered by 2 users
    prompts, samplings = [PROMPTS[i] for i in order], [SAMPLINGS[i] for i in order]
    got = eng.generate_all(prompts, samplings, steps_per_call=users + 1)  # fused steps
    for p, s, g in zip(prompts, samplings, got, strict=True):
        assert g == _plain(model, p, s)
        assert len(g) == s.max_tokens


@pytest.mark.slow
@pytest.mark.parametrize("mesh_rows", [1, 2])
def test_pipeline_uneven_stages_on_padded_grid(mesh_rows):
    """3 stages over 4 layers (2 + 1 + 1 with a masked layer) on one device, and on a
    2-device mesh that does not divide the 3-row grid; GPT-2 arch; three users with
    different settings."""
    model = tiny_model("gpt2", n_layers=4, seed=1)
    eng = PipelineEngine(
        model, spec=preset("wse3"), stages=3, max_context=48, prefill_chunk=4, mesh_rows=mesh_rows
    )
    assert eng.wafer.padded_shape[0] == (4 if mesh_rows == 2 else 3)
    got = eng.generate_all(PROMPTS, SAMPLINGS)
    for p, s, g in zip(PROMPTS, SAMPLINGS, got, strict=True):
        assert g == _plain(model, p, s)


@pytest.mark.cpu_devices
def test_engine_slots_finish_release_and_reuse():
    """max_tokens=1 finishes with no new token; a stop token finishes 'stop'; a released
    slot takes a new user mid-flight and that user still equals the plain decoder."""
    model = tiny_model("llama", n_layers=2)
    eng = PipelineEngine(
        model, spec=preset("wse3"), stages=2, max_context=48, prefill_chunk=4, mesh_rows=2
    )
    greedy = SAMPLINGS[0]
    ref = _plain(model, PROMPTS[0], greedy)
    state = eng.init_decode_state()
    one = SamplingParams(max_tokens=1, temperature=0.0)
    state = eng.insert(prefix=eng.prefill(prompt_ids=PROMPTS[1], sampling=one), state=state, slot=1)
    stop = SamplingParams(max_tokens=7, temperature=0.0, stop_token_ids=(ref[2],))
    state = eng.insert(
        prefix=eng.prefill(prompt_ids=PROMPTS[0], sampling=stop), state=state, slot=0
    )
    state, outs = eng.generate(state=state)
    by_slot = {o.slot: o for o in outs}
    assert by_slot[1].tokens == () and by_slot[1].finish_reason == "length"
    assert by_slot[0].tokens == (ref[1],) and not by_slot[0].finished
    state = eng.release(state=state, slot=1)
    state = eng.insert(
        prefix=eng.prefill(prompt_ids=PROMPTS[2], sampling=SAMPLINGS[2]), state=state, slot=1
    )
    got = []
    while 1 in state.seqs and state.seqs[1].finish_reason is None:
        state, outs = eng.generate(state=state)
        got += [t for o in outs if o.slot == 1 for t in o.tokens]
        if state.seqs[0].finish_reason == "stop":
            assert state.seqs[0].tokens == ref[:3]
    assert [state.seqs[1].tokens[0], *got] == _plain(model, PROMPTS[2], SAMPLINGS[2])
    with pytest.raises(ValueError):
        eng.insert(prefix=eng.prefill(prompt_ids=[1], sampling=greedy), state=state, slot=0)
