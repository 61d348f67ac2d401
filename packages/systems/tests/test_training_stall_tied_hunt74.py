"""The no-stall table's head row (`wse_systems.training.stall.stream_budget`) writes back the
gradient the trainer reduces: for a tied model the final norm's and the whole embedding
group's (tokens and positions), as the step's price has it since hunt 74 (the row still
wrote back the final norm's alone). Oracle: GPT-2 124M's parameters counted by hand from its
config (embedding 50,257 x 768 + 1,024 x 768, final norm 2 x 768), priced as one stream."""

import wse_models
from wse_core import PerfModel
from wse_core.cost.assumptions import assumed_spec
from wse_systems.training.placement import StepWorkload, place_step
from wse_systems.training.plan import memory_plan
from wse_systems.training.stall import stream_budget
from wse_systems.training.stream_cost import Streams

WSE3 = assumed_spec("wse3")


def test_a_tied_heads_row_writes_back_the_embedding_group_too():
    model = wse_models.preset_config("gpt2-124m")
    assert model.tie_embeddings
    plan = memory_plan(model, WSE3, 4, 1024)
    rows = {r.unit: r for r in stream_budget(model, WSE3, plan, num_csx=1, micro_batch=4,
                                            seq_len=1024)}  # fmt: skip
    embed, final = 50257 * 768 + 1024 * 768, 2 * 768
    pl = place_step(model, WSE3, plan, StepWorkload(micro_batch=4, seq_len=1024), num_csx=1)
    seconds = PerfModel(WSE3).seconds
    assert rows["head"].write_back_s == seconds(Streams(pl).gradients_out(embed + final))
    assert rows["head"].write_back_s > seconds(Streams(pl).gradients_out(final))
