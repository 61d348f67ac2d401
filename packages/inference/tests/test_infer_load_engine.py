"""`load_engine`: the server's engines from a model dir; the speculative engine equals the
speculative decoder token for token (same seeds, same round keys)."""

import pytest
from wse_core import preset
from wse_inference.engine import Engine, SamplingParams
from wse_inference.load import load_engine
from wse_inference.pipeline.engine import PipelineEngine
from wse_inference.speculative.decoder import SpeculativeDecoder
from wse_inference.speculative.engine import SpeculativeEngine
from wse_inference.testing import save_tiny_model


@pytest.mark.slow
def test_speculative_engine_equals_decoder(tmp_path):
    target = save_tiny_model(tmp_path / "t", n_layers=2)
    save_tiny_model(tmp_path / "d", n_layers=1, seed=4)
    eng = load_engine(
        str(tmp_path / "t"),
        spec=preset("wse3"),
        max_slots=2,
        max_context=48,
        speculative_config={"model": str(tmp_path / "d"), "num_speculative_tokens": 3},
    )
    assert isinstance(eng, SpeculativeEngine) and isinstance(eng, Engine)
    prompts = [[1, 2, 3], [9, 8, 7, 6]]
    samplings = [
        SamplingParams(max_tokens=9, temperature=0.0),
        SamplingParams(max_tokens=8, temperature=1.0, seed=2),
    ]
    state = eng.init_decode_state()
    for slot, (p, s) in enumerate(zip(prompts, samplings, strict=True)):
        state = eng.insert(prefix=eng.prefill(prompt_ids=p, sampling=s), state=state, slot=slot)
    got = {i: [state.slots[i].tracker.tokens[0]] for i in range(2)}
    while not all(s.tracker.finish_reason for s in state.slots.values()):
        state, outs = eng.generate(state=state)
        for o in outs:
            got[o.slot] += list(o.tokens)
            assert len(o.tokens) <= 4
    ref = SpeculativeDecoder(eng.target, eng.draft, gamma=3, max_context=48)
    for i, (p, s) in enumerate(zip(prompts, samplings, strict=True)):
        assert got[i] == ref.generate(p, s).tokens
    m = eng.metrics()
    assert m["spec_draft_tokens"] > 0 and 0 <= m["spec_acceptance_rate"] <= 1
    assert m["spec_alpha"] == eng.stats.alpha and 0 <= m["spec_alpha"] <= 1
    assert target.config.n_layers == 2


def test_load_engine_pipelined(tmp_path):
    save_tiny_model(tmp_path / "m" / "hf", n_layers=2)
    eng = load_engine(str(tmp_path / "m"), spec=preset("wse3"), max_slots=4, max_context=32)
    assert isinstance(eng, PipelineEngine) and eng.max_slots == 2  # stages <= layers
