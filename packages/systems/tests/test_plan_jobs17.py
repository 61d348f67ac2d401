"""Hunt jobs17 (session 81), holes C, D and E. Broken before:

- C: the wafer's plan (`token.fastest_plan`, and the serving model's search,
  `serving.placements`) always tiled the whole wafer, where the same pricer gave a small model
  a faster token on fewer PE rows (GPT-2 124M: 70.42 us on the whole WSE-3, 52.44 us on 64 of
  its 762 rows), and `place_speculative` already put a draft on such a footprint: GPT-2 124M
  "speculating" with itself as its draft (acceptance 1, gamma 4) priced 63.54 us a token
  against plain decoding's 70.42. The plan now weighs the footprints the draft's placement
  weighs (`token.footprint_plans`, one code for both). Oracles: a brute force over the
  footprints and head sizes, each plan made by `plan_pipeline` and priced by `price_token`
  (the report's pricer, not the search's); a round of gamma + 1 tokens that cannot be
  shorter than gamma + 1 plain tokens; the whole-wafer search alone for the models that fill
  the wafer (the calibration's Llama 3.1 8B, 70B on 4 wafers), whose plans do not move.
- D: `wse plan infer` said the prompt pass computed every token's logits, where the engine
  and the price run the head once a prompt (session 80). Oracle: the head's product in the
  token's own report (`price_token`), against the prompt pass the serving model prices.
- E: wafer strong scaling took the N = 1 plan itself as its reference and one system at
  explore's micro-batch at N > 1: Llama 3 8B at a global batch of 1,024 read 1.00 on one
  system and 0.83 on 16 at the same pace a sequence. Oracle: the hand formula T_ref / (N T_N)
  with T_ref one system's explored step, and the micro-batch hint's saving at N = 1.
"""

from __future__ import annotations

import math

import pytest
import wse_models
from wse_core.cost.assumptions import assumed_spec
from wse_core.hw.spec import preset
from wse_systems import published, token
from wse_systems.pipeline import PipelinePlanError, Regions, plan_pipeline
from wse_systems.planning import infer as pi
from wse_systems.planning.choice import ModelChoice
from wse_systems.planning.train_step import wafer_train_step
from wse_systems.serving import Speculation, WaferServing, Workload
from wse_systems.training.micro_batch import plan_step
from wse_systems.transformer import LLAMA31_8B

pytestmark = pytest.mark.timeout(600)

WSE3 = preset("wse3")
GPT2 = wse_models.preset_config("gpt2-124m", dtype="bfloat16")
WORK = Workload(prompt_tokens=128, output_tokens=128)  # the hunter's request


# ---- C: the plan weighs the footprints ---------------------------------------------------------


def _serving(speculation: Speculation | None = None) -> WaferServing:
    return WaferServing(GPT2, WSE3, num_wafers=1, workload=WORK, speculation=speculation)


def test_a_self_draft_no_longer_beats_plain_decoding():
    plain = _serving().point(1)
    self_draft = _serving(Speculation(draft=GPT2, gamma=4, alpha=1.0)).point(1)
    # before: 14,201 tokens/s a user plain (70.42 us a token, the whole wafer) against
    # 15,739 speculating with itself; now plain runs on a footprint
    assert plain.user_tokens_per_s >= self_draft.user_tokens_per_s
    assert plain.layout["pe_rows"] < plain.layout["wafer_pe_rows"] == WSE3.pe_rows
    # the round: 4 drafts on the draft's rows, then a 5-token pass of the same model on the
    # rest; neither part is faster than a plain token on the plan's footprint, so a round of
    # gamma + 1 tokens is at least gamma + 1 plain tokens
    ws = _serving(Speculation(draft=GPT2, gamma=4, alpha=1.0))
    round_s, _, per_round = ws.round_s(1)
    assert per_round == 5.0
    assert round_s >= 5 * plain.layout["token_s"]


def _brute_force(config, spec, layout: str, kv: int) -> tuple[float, int, int]:
    """(seconds, PE rows, head rows) of the fastest token over every footprint below the
    wafer that the search tries (`token.footprint_rows`: `token.GRID_STEP`'s ladder and, since
    hunt 82, the compact layout's strip changes; head sizes on that ladder of its rows) and
    the whole wafer (head sizes on `HEAD_ROWS_STEP`'s), each plan `plan_pipeline`'s, priced by
    `price_token`; a tie keeps the whole wafer, then the fewer rows."""
    whole = token.head_rows_ladder(spec)
    rows = token.footprint_rows(config, spec, regions=Regions(layout=layout))
    assert set(token.head_rows_ladder(spec, step=token.GRID_STEP)[:-1]) <= set(rows)
    grid = [(r, token.head_rows_ladder(spec.replace(pe_rows=r), step=token.GRID_STEP))
            for r in rows]  # fmt: skip
    best = None
    for rows, heads in [(spec.pe_rows, whole), *grid]:
        for head in heads:
            try:
                plan = plan_pipeline(config, spec.replace(pe_rows=rows), context_len=256,
                                     regions=Regions(layout=layout, head_rows=head))  # fmt: skip
            except PipelinePlanError:
                continue
            s = token.price_token(config, plan, kv_tokens=kv).predicted_s
            if best is None or s < best[0] * (1 - 1e-12):
                best = (s, rows, head)
    assert best is not None
    return best


@pytest.mark.parametrize("layout", ["banded", "compact"])
def test_the_plan_is_the_brute_force_fastest_over_footprints(layout):
    kv = 192
    seconds = token.token_seconds_fn(GPT2, kv_tokens=kv)
    plan = token.fastest_plan(GPT2, WSE3, seconds, context_len=256,
                              regions=Regions(layout=layout))  # fmt: skip
    s, rows, head = _brute_force(GPT2, WSE3, layout, kv)
    assert (plan.spec.pe_rows, plan.head.region.rows) == (rows, head)
    assert token.price_token(GPT2, plan, kv_tokens=kv).predicted_s == pytest.approx(s, rel=1e-12)
    if layout == "compact":  # the hunter's: 52.44 us on 64 rows against 70.42 on 762 (hunt
        # 82: a strip change's footprint is faster still)
        whole = min(token.ladder_plans(GPT2, WSE3, context_len=256,
                                       regions=Regions(layout=layout)), key=seconds)  # fmt: skip
        assert rows < WSE3.pe_rows and s < 0.8 * seconds(whole)


def _whole_wafer_fastest(config, spec, kv, token_out, **kw):
    """The fastest plan of each layout on the whole wafer alone (the search before)."""
    seconds = token.token_seconds_fn(config, kv_tokens=kv, token_out=token_out)
    plans = [min(token.ladder_plans(config, spec, regions=Regions(layout=a, gemv="sdk"), **kw),
                 key=seconds) for a in ("banded", "compact")]  # fmt: skip
    return min(plans, key=seconds), seconds


def test_the_8b_calibration_row_is_never_slower_than_its_whole_wafer_plan():
    """Since jobs18 L4 (the compact layout's strip changes among the footprints, session 84)
    the check's plan (`wse plan infer --users 1`'s) is a footprint: 16 stages on 661 of the
    762 rows at CS-3's fitted hop and relay (8 on 523 at the sourced ones), regions wider
    than tall, which the whole wafer's strip count cannot give. The token-latency search
    alone kept the whole wafer until issue 41 (CS-3's DSD issue and control instruction
    fitted on the MeshGEMV rows): it now takes a footprint too, 690 rows, 373.9 us against
    the whole wafer's 374.8; the check's plan (474 rows since, 363.7 us) is never slower a
    token."""
    setup = published.PUBLISHED_SETUP
    kv, out = int(setup["kv_tokens"]), bool(setup["token_out"])
    spec = assumed_spec("wse3")
    plan, _ = token.choose_layout(LLAMA31_8B, spec, kv_tokens=kv, token_out=out,
                                  num_wafers=1, context_len=setup["context_len"],
                                  regions=Regions(gemv="sdk"))  # fmt: skip
    whole, seconds = _whole_wafer_fastest(LLAMA31_8B, spec, kv, out, num_wafers=1,
                                          context_len=setup["context_len"])  # fmt: skip
    assert plan.spec.pe_cols == spec.pe_cols and seconds(plan) <= seconds(whole)
    # the check row prices the serving planner's plan (hunt decode41), on its footprint
    check = published.check_case().plan
    assert check.spec.pe_rows < spec.pe_rows and check.spec.pe_cols == spec.pe_cols
    assert seconds(check) <= seconds(whole)


def test_70b_on_four_wafers_keeps_its_whole_wafer_plan():
    config = wse_models.preset_config("llama3-70b", dtype="bfloat16")
    spec = assumed_spec("wse3")
    kw = dict(num_wafers=4, context_len=8192)
    plan, _ = token.choose_layout(config, spec, kv_tokens=1500, token_out=True, **kw)
    whole, seconds = _whole_wafer_fastest(config, spec, 1500, True, **kw)
    assert plan.spec == spec and seconds(plan) == seconds(whole)


# ---- D: the printed assumption says what is priced ---------------------------------------------


def test_the_assumption_says_the_head_runs_once_a_prompt_as_priced():
    work = Workload(prompt_tokens=64, output_tokens=8)
    plan = pi.plan_infer(ModelChoice("gpt2-124m", GPT2), wafer=pi.WaferSetup(WSE3, 1),
                         workload=work, target=pi.Target(users=1))  # fmt: skip
    notes = " ".join(plan.assumptions)
    assert "every token's logits" not in notes  # before: "every token's logits computed"
    assert "the head's product and the argmax once a prompt, on its last block's last token" in (
        notes
    )
    # what is priced: the token's own report names the head's product and the argmax
    ws = WaferServing(GPT2, WSE3, num_wafers=1, workload=work)
    target_plan = ws.plans(1)[0]
    leaf = token.price_token(GPT2, target_plan, kv_tokens=work.prompt_kv_tokens).predicted
    once = leaf.leaf("lm_head").seconds + leaf.leaf("argmax").seconds
    prompt = ws.pipelines(1, prompt=True)[0]
    k = ws.point(1).layout["prompt_block_tokens"]
    held = prompt.prompt_occupancy_s(k)
    # a block holds the head's element for less than one token's head product: no block
    # runs it (every token's logits would hold it k times that)
    assert held["per_token"] < leaf.leaf("lm_head").seconds
    # the pass: the first block through every element, the rest one bottleneck apart, and
    # the head's product and argmax once (a block more adds the bottleneck, no head)
    blocks = math.ceil(work.prompt_tokens / k)
    fill = prompt.prompt_blocks_s(k, k) - once
    by_hand = fill + (blocks - 1) * max(held.values()) + once
    assert prompt.prompt_blocks_s(work.prompt_tokens, k) == pytest.approx(by_hand, rel=1e-12)
    assert ws.point(1).layout["prompt_pass_s"] == pytest.approx(by_hand, rel=1e-12)


# ---- E: one strong reference at every N --------------------------------------------------------


def test_strong_efficiency_takes_one_reference_at_every_n():
    config = wse_models.preset_config("llama3-8b", dtype="bfloat16")
    spec, seq, global_batch = assumed_spec("wse3"), 8192, 1024
    ref = plan_step(config, spec, num_csx=1, batch_per_system=global_batch, seq_len=seq,
                    micro_batch="explore").predicted_s  # fmt: skip
    got = {}
    for n in (1, 16):
        step_s, batch, f = wafer_train_step(config, spec, num_csx=n, batch=global_batch // n,
                                            seq_len=seq)  # fmt: skip
        assert batch * n == global_batch
        # by hand: speedup T_ref / T_N, efficiency T_ref / (N T_N)
        assert f["strong_speedup"] == pytest.approx(ref / step_s, rel=1e-9)
        assert f["strong_efficiency"] == pytest.approx(ref / (n * step_s), rel=1e-9)
        got[n] = (step_s, f)
    (one_s, one), (sixteen_s, sixteen) = got[1], got[16]
    # one system: the same job against itself is weak's 1; strong is below 1 by the saving
    # the micro-batch hint names (auto's 32 against explore's 8); before: 1.00
    assert one["weak_efficiency"] == 1.0
    assert one["strong_efficiency"] == pytest.approx(1 - one["explored"]["step_saving"])
    assert one["strong_efficiency"] < 0.9
    # 16 systems at one system's pace a sequence (10.175 s x 16 = 162.8 s) read the same
    # efficiency (before: 1.00 at one system, 0.83 at 16)
    assert 16 * sixteen_s == pytest.approx(one_s, rel=1e-4)
    assert sixteen["strong_efficiency"] == pytest.approx(one["strong_efficiency"], rel=1e-4)
