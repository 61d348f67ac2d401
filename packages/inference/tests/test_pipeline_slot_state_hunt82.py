"""Hunt 82 (jobs18 H3): what the serving plan counts for each user at the head is what the
pipelined engine's decode state keeps per slot.

`wse_systems.pipeline.SLOT_STATE_BYTES` (50 B) is the engine's per-slot scalars; its
per-vocabulary penalty rows are left out of the plan (a request priced carries no penalty):
the oracle is the engine's own empty decode state, its arrays' bytes per slot."""

from __future__ import annotations

import jax
import numpy as np
from wse_core import preset
from wse_inference.pipeline.engine import PipelineEngine
from wse_inference.testing import tiny_model
from wse_systems.pipeline import SLOT_STATE_BYTES, item_bytes

STAGES = 4


def test_the_heads_state_per_user_is_the_engines_per_slot_scalars():
    engine = PipelineEngine(tiny_model(n_layers=STAGES), spec=preset("wse3"), stages=STAGES,
                            max_context=32)  # fmt: skip
    config = engine.config
    st = engine.init_decode_state().device
    pen = st.sampling.penalties
    vocab_rows = {id(pen.counts), id(pen.prompt), id(pen.held)}
    per_slot = [
        st.tokens,
        st.pos,
        st.count,
        st.keys,
        st.active,
        *(x for x in jax.tree.leaves(st.sampling) if id(x) not in vocab_rows),
    ]
    for x in per_slot:
        assert x.shape[0] == STAGES  # one row a slot
    assert sum(np.asarray(x).nbytes for x in per_slot) / STAGES == SLOT_STATE_BYTES
    # one activation a stage row, d_model wide, as the plan's one item a region holds
    assert st.h.shape[0] >= STAGES and st.h.shape[1:] == (1, config.d_model)
    plan = engine.plan
    for s in plan.stages:
        assert (
            s.act_bytes
            == s.item_act_bytes
            == item_bytes(config, s.num_layers, plan.bytes_per_param)
        )
