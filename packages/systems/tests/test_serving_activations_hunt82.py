"""Hunt 82 (jobs18 H3): the activations a wafer serving plan holds.

Before: `pipeline._region_bytes` reserved a whole token's activations (residual, q/k/v/o,
MLP hidden) for every user in flight in every region, and the head an fp32 hidden and logits
row per user (Llama 3 8B: 90,112 B a user a region, 529 KB a user in the head). At 16 prompt
and 8 output tokens 5,000 users were forced from 32 stages onto 8 (13,435 output tokens/s
against 36,997 at 2,048 users) and nothing printed said why; at most 5,902 users fitted.

What the pipelined engine holds (`wse_inference.pipeline`): one activation a stage row (a
region works on one item at a time), every slot's KV cache for the row's layers, and each
slot's sampling state with the head; a user's item waits at the head between its passes.

Oracles: hand counts from the model's card (d_model 4,096, d_ff 14,336, vocabulary 128,256,
bf16); the planner itself at the users a note names (those fit, one more does not).
"""

from __future__ import annotations

import wse_models
from wse_core.cost.assumptions import assumed_spec
from wse_systems.pipeline import SLOT_STATE_BYTES, PipelinePlanError, Regions, plan_pipeline
from wse_systems.serving import WaferServing, Workload
from wse_systems.serving.placements import OUTPUT_TIE

LLAMA8B = wse_models.preset_config("llama3-8b", dtype="bfloat16")
WSE3 = assumed_spec("wse3")
SHORT = Workload(prompt_tokens=16, output_tokens=8)  # the hunt-69 test's requests
D, FF, V = 4096, 14336, 128256  # Llama 3 8B's card


def test_a_region_holds_one_items_activations_and_the_head_each_users_state():
    asked = Regions(stages=32, layout="compact")
    one, many = (plan_pipeline(LLAMA8B, WSE3, context_len=24, slots=u, regions=asked)
                 for u in (1, 5000))  # fmt: skip
    for plan in (one, many):
        for s in plan.stages:  # the residual, q/k/v/o and MLP hidden of one token, bf16
            assert s.act_bytes == s.item_act_bytes == (4 * D + 2 * FF) * 2 == 90_112
        # the head: one item's fp32 hidden and logits, each user's hidden (bf16) and the
        # engine's 50 B of sampling scalars
        head = plan.head
        assert head.item_act_bytes == (D + V) * 4
        assert head.act_bytes == (D + V) * 4 + plan.slots * (D * 2 + 50)
    assert SLOT_STATE_BYTES == 50


def test_short_requests_at_many_users_keep_the_placement_of_fewer():
    """5,000 users fit the 32-stage placement that 2,048 take: every request holds its
    bottleneck as long, so the output rate is the same, the bottleneck's (before: 8 stages,
    36%) within a tie (`OUTPUT_TIE`): a request's own path (its prompt's pass, then its
    window with the other prompts that catch its items, session 85) outlasts every user's
    request through the bottleneck by 1.56 ms at either load, 0.29% of the period at 2,048
    users, 0.12% at 5,000 (runs of the policy on it, 300 and 600 users evenly spaced, served
    1.3% and 0.3% below the bottleneck's rate)."""
    ws = WaferServing(LLAMA8B, WSE3, num_wafers=1, workload=SHORT, search_stages=True)
    few, many = ws.point(2048), ws.point(5000)
    for key in ("layout", "stages", "head_rows", "pe_rows", "bottleneck_s_per_request"):
        assert many.layout[key] == few.layout[key]
    rate = SHORT.output_tokens / few.layout["bottleneck_s_per_request"]
    for p in (few, many):
        assert (1 - OUTPUT_TIE) * rate <= p.aggregate_tokens_per_s <= rate * (1 + 1e-12)
    assert many.aggregate_tokens_per_s >= few.aggregate_tokens_per_s
    assert many.layout["not_held"] == "" and ws.max_users > 5000


def test_a_load_forced_onto_fewer_stages_says_why():
    ws = WaferServing(LLAMA8B, WSE3, num_wafers=1, workload=SHORT, search_stages=True)
    users = ws.max_users
    p = ws.point(users)
    note = p.layout["not_held"]
    assert note, "the most users fit one arrangement only"
    for part in note.split("; "):  # "banded, 32 stages: at most 7,890 users"
        layout, rest = part.split(", ", 1)
        stages = int(rest.split(" stages")[0])
        most = int(rest.split("at most ")[1].split(" users")[0].replace(",", ""))
        assert most < users and (layout, stages) != (p.layout["layout"], p.layout["stages"])

        def holds(u, layout=layout, stages=stages):
            try:
                plan_pipeline(LLAMA8B, WSE3, context_len=SHORT.held_tokens, slots=u,
                              regions=Regions(stages=stages, layout=layout))  # fmt: skip
            except PipelinePlanError:
                return False
            return True

        assert holds(most) and not holds(most + 1)
