"""A GEMV on a compact region and on a band, and one attention on a small region, counted
by hand: broadcast, compute, reduce and the move back, each by its mechanisms
(`wse_systems.decoder.matvec_phases`, `wse_systems.attention.attention_phases`).

The constants are the spec's (`PerfModel(spec).rates`): hop_latency 1 cycle, a relay
2 T_R + 1 = 5 cycles, links 4 B (one 32-bit wavelet) per cycle, SRAM 16 B/cycle read and
8 B/cycle written; the SIMD widths are the spec's table; d and t are the fitted DSD issue
and task activation. fp16 values travel two per wavelet."""

from __future__ import annotations

import math

import pytest
from wse_core import PerfModel, preset
from wse_core.hw.sram import Region
from wse_systems.attention import attention_phases, attention_split
from wse_systems.decoder import matvec_phases
from wse_systems.transformer import DecoderCounts

SPEC = preset("tiny")  # 8 x 8 PEs; fp16 FMAC 4 wide
RELAY = 5.0  # 2 T_R + 1 with T_R = 2 cycles


def _cycles(phases) -> dict[str, float]:
    model = PerfModel(SPEC)
    t = model.evaluate(phases)
    return {c.name: c.seconds * SPEC.clock_hz for c in t.children}


def _consts() -> tuple[float, float]:
    rates = PerfModel(SPEC).rates
    assert (rates.hop_latency_cycles, rates.ramp_latency_cycles) == (1.0, 2.0)
    assert rates.link_bytes_per_cycle == 4.0 and rates.simd_width("fmac", "fp16", 1) == 4
    return rates.dsd_issue_cycles, rates.task_activation_cycles


def test_gemv_on_a_compact_region_by_hand():
    """y (16) = W^T x (16) on 4 x 4 PEs: each PE holds 4 outputs x 4 inputs."""
    d, t = _consts()
    got = _cycles(matvec_phases(Region("c", 0, 0, 4, 4), 16, 16, spec=SPEC))
    # x_in: each column's 4 inputs (2 words) down 4 rows: 2 words, 3 hops, 1 relay
    assert got["x_in"] == pytest.approx(2 + 3 + RELAY)
    # axpy: 4 FMAC DSDs of 4 (4 wide: 1 cycle each), their issue and one task; SRAM
    # (64 B read at 16 B/cycle, 32 B written at 8) takes 4 cycles, under the core's; and the
    # product's 15 control instructions (8 the kernel's call, 7 the reduce task's start into
    # the middle of a row of 4: `test_matvec_control`), 1 cycle each on this wafer (assumed)
    c = PerfModel(SPEC).rates.control_instruction_cycles
    assert c == 1.0
    assert got["axpy"] == pytest.approx(4 * 1 + 4 * d + t + 15 * c)
    # reduce: 4 partial outputs (2 words) to the middle of a row of 4: each half (2 PEs) by
    # a star (2 words, 1 hop, 1 relay; chain and tree tie, two-phase is slower), then 2 more
    # words, a hop and a relay to join the halves (PE 3 -> 2 -> 1): 4 words, 2 hops, 2 relays
    assert got["reduce"] == pytest.approx(4 + 2 + 2 * RELAY)
    # move: the middle PE's 4 outputs (2 words on its ramp; 1 word each way along the row,
    # 16 / 4 = 4 values = 2 words up each column), 2 hops along + 3 up, 1 relay
    assert got["move"] == pytest.approx(2 + (2 + 3) + RELAY)
    assert sum(got.values()) == pytest.approx(42 + 4 * d + t + 15 * c)  # 42 + 4 d + t: session 85


def test_gemv_on_a_band_by_hand():
    """The same product on a 2 x 8 band: each PE holds 8 outputs x 2 inputs; the row is
    twice as long, so the reduce and the move travel farther."""
    d, t = _consts()
    got = _cycles(matvec_phases(Region("b", 0, 0, 2, 8), 16, 16, spec=SPEC))
    # x_in: 2 inputs (1 word) down 2 rows: 1 word, 1 hop, 1 relay
    assert got["x_in"] == pytest.approx(1 + 1 + RELAY)
    # axpy: 2 FMAC DSDs of 8 (2 cycles each); SRAM again 4 cycles; the same 15 control
    # instructions (a row of 8: both halves reach its middle)
    c = PerfModel(SPEC).rates.control_instruction_cycles
    assert got["axpy"] == pytest.approx(2 * 2 + 2 * d + t + 15 * c)
    # reduce: 8 partials (4 words) to the middle of a row of 8; each half (4 PEs):
    # star 4 x 3 = 12 words + 3 hops + 1 relay = 20; chain 4 + 3 + 3 relays = 22;
    # tree 8 + 3 + 2 relays = 21; two-phase 8 + 3 + 2 relays = 21: the star; then 4 words
    # a hop and a relay to join (PE 7 -> 3): 16 words, 4 hops, 2 relays
    assert got["reduce"] == pytest.approx(16 + 4 + 2 * RELAY)
    # move: 8 outputs (4 words) on the middle PE's ramp, 4 hops along + 1 up, 1 relay
    assert got["move"] == pytest.approx(4 + (4 + 1) + RELAY)
    assert sum(got.values()) == pytest.approx(55 + 2 * d + t + 15 * c)  # 55 + 2 d + t: session 85


def test_attention_on_a_small_region_by_hand():
    """4 query heads of hd 8 sharing 2 KV heads (d 32), 8 cached tokens, on 4 x 4 PEs:
    16 KV dimensions over 4 columns (g = 4: a KV head spans s = 2 columns), 8 tokens over
    4 rows (t = 2), 2 query heads per PE."""
    d, _t = _consts()
    rates = PerfModel(SPEC).rates
    shape = DecoderCounts(name="a", arch="llama", n_layers=1, d_model=32, n_heads=4,
                          n_kv_heads=2, d_ff=64, vocab_size=64, max_seq_len=16)  # fmt: skip
    region = Region("r", 0, 0, 4, 4)
    sp = attention_split(shape, region, 8)
    assert (sp.g, sp.t, sp.qh, sp.s) == (4, 2, 2, 2)
    got = _cycles(attention_phases(shape, region, 8, 2, SPEC))
    # rope (session 86): 2 frequencies a column (g / 2) advanced by 2 multiplies and 2 FMACs
    # (1 cycle each), then 6 pairs ((2 + 1) heads x 4 dims / 2) rotated by 2 multiplies and
    # 2 FMACs at stride 2 (4 wide: 2 cycles each): 12 cycles, 8 DSDs
    assert got["rope"] == pytest.approx(4 * 1 + 4 * 2 + 8 * d)
    # q_in: 2 heads x 4 dims = 8 query values and the new token's 4 keys and 4 values
    # (16 values: 8 words) down 4 rows
    assert got["q_in"] == pytest.approx(8 + 3 + RELAY)
    # scores: 2 heads x 2 tokens over 4 dims: AXPYs (8 of length 2: 8 + 8 d) or dots
    # (4 of length 4, one element per cycle: 16 + 4 d): the dots, plus one task
    assert got["scores"] == pytest.approx(16 + 4 * d + rates.task_activation_cycles)
    # scores_sum: 4 scores (2 words) summed over the 2 columns of a KV head and back:
    # 2 words to join (1 hop, 1 relay), 2 back (1 hop, 1 relay)
    assert got["scores_sum"] == pytest.approx(4 + 2 + 2 * RELAY)
    # softmax: 4 scores: 6 FMACs (4 wide: 1 cycle each) and the subtract (1); each head's
    # max and sum over its 2 tokens into one accumulator (2 DSDs of 2 each: 4 cycles each)
    # (session 86; before, one 4-element max and add at the SIMD width: 4 + 1, 9 DSDs)
    assert got["softmax"] == pytest.approx(6 + 1 + 4 + 4 + 11 * d)
    # softmax_sums: a max and a sum per head (fp32: 4 words) down a column of 4 to its
    # middle (PE 1), then back: half (2 PEs) 4 words, 1 hop, 1 relay; join 4 words, 1 hop
    # (PE 3 -> 2 -> 1), 1 relay; back 4 words, 2 hops, 1 relay
    assert got["softmax_sums"] == pytest.approx(12 + 4 + 3 * RELAY)
    # values: 2 heads x 4 dims over 2 tokens: AXPYs (4 of length 4: 4 + 4 d) or dots
    # (8 of length 2: 16 + 8 d): the AXPYs
    assert got["values"] == pytest.approx(4 + 4 * d)
    # heads_reduce: 8 outputs (4 words) down 4 rows to the top: star 12 + 3 + 1 relay = 20
    # (chain 22, tree 21, two-phase 21)
    assert got["heads_reduce"] == pytest.approx(12 + 3 + RELAY)
    # normalise: 2 reciprocals (1 wide, 50 cycles each), 2 x 4 multiplies (1 cycle each)
    div = rates.div_cycles * math.ceil(2 / rates.simd_width("div", "fp16", 1))
    assert got["normalise"] == pytest.approx(div + 2 + 3 * d)


def test_both_layouts_pay_the_same_phases():
    """A band and a compact region run the same phases (broadcast, compute, reduce, move,
    the attention's dataflow, the handoff): only their counts differ."""
    from wse_systems.decoder import decode_phases
    from wse_systems.pipeline import Regions, plan_pipeline

    toy = DecoderCounts(name="t", arch="llama", n_layers=4, d_model=64, n_heads=4,
                        n_kv_heads=2, d_ff=128, vocab_size=100, max_seq_len=64)  # fmt: skip
    names = {}
    for layout in ("banded", "compact"):
        plan = plan_pipeline(toy, preset("small"), context_len=64, regions=Regions(layout=layout))
        stage = decode_phases(toy, plan).parts[0]
        names[layout] = [leaf.name for leaf, _ in stage.leaves()]
    assert names["banded"] == names["compact"]
    assert {"x_in", "axpy", "reduce", "move", "scores_sum", "heads_reduce", "to_next"} <= set(
        names["compact"]
    )


def test_meshgemv_counted_by_hand():
    """WaferLLM's MeshGEMV (`wse_systems.meshgemv`; MeshInfra/WaferLLM at 2cd13b5c,
    MeshGEMV/WSE-3 and Decode/WSE-3): y (16) = W^T x (12) on 4 x 6 PEs reducing along the
    6 columns in 2 groups of 3: each PE holds Kt = 12 / 6 = 2 inputs and Nt = 16 / 4 = 4
    outputs. The busiest PE is the allreduce's root (column 4 = 1 x 3 + 1)."""
    from wse_systems.meshgemv import best_groups, meshgemv_phases

    d, _t = _consts()
    s = PerfModel(SPEC).rates.control_instruction_cycles
    assert s == 1.0  # the tiny preset is no system's: the assumed 1, not the CS-3 fit
    region = Region("m", 0, 0, 4, 6)
    got = _cycles(meshgemv_phases(region, (12, 16), reduce_axis="cols", groups=2, spec=SPEC))
    # zero: @fmovh(out, 0.0), one 16-bit move DSD of 4 (4 wide; 8 B written at 8 B/cycle)
    assert got["zero"] == pytest.approx(1 + d)
    # gemv: @map over the 2 inputs, one @fmach of 4 each (4 wide: 1 cycle), no task; SRAM
    # (32 B read at 16 B/cycle, 16 B written at 8) takes 2 cycles, under the core's
    assert got["gemv"] == pytest.approx(2 * 1 + 2 * d)
    # reduce_group: a group of 3 to its root (index 1): the far end's send, @fmovh of 4 to
    # the fabric (4 wide: 1 cycle; issue 41), then one @faddh per side, 4 values each from
    # the fabric (2 per cycle: one 32-bit wavelet), 2 cycles each; 2 x 2 words off the ramp
    # (4 cycles, under the core's); the longer side 1 PE: 1 hop, 1 relay
    assert got["reduce_group"] == pytest.approx((1 + d) + 2 * 2 + 2 * d + 1 + RELAY)
    # reduce_groups: the 2 group roots (columns 1 and 4) to root index 1: the far group
    # root's send (1 + d), one side, one @faddh (2 cycles); 1 relay stage, 3 hops (the
    # groups' pitch)
    assert got["reduce_groups"] == pytest.approx((1 + d) + 2 + d + 3 + RELAY)
    # broadcast: @mov16 of 4 to the fabric (4 wide: 1 cycle; 2 words on the ramp, under
    # it), multicast to the far end (column 0: 4 hops), 1 relay
    assert got["broadcast"] == pytest.approx(1 + d + 4 + RELAY)
    # control: the call's 25 control instructions (meshgemv_rows.KERNEL_CONTROL: the call,
    # 4 DSR loads and a base address, the @map's set-up, the allreduce's call and return and
    # its role tests), 1 cycle each on this wafer (assumed), the `control` mechanism
    assert got["control"] == pytest.approx(25 * s)
    assert sum(got.values()) == pytest.approx(35 + 9 * d + 25 * s)  # 33 + 7 d before issue 41
    # nothing before or after: no flood of the input and no move back
    assert set(got) == {"zero", "gemv", "reduce_group", "reduce_groups", "broadcast", "control"}
    # The groups, unless given, are the divisor of 6 whose allreduce prices fastest: with d
    # = 11.5 cycles one group (32 + 4 d: a send of the chain of 6; 2 groups 32 + 6 d, 3
    # groups 30 + 6 d, 6 groups 32 + 4 d, a tie that takes fewer groups)
    assert d > 3 and best_groups(6, 4, 2, SPEC) == 1
    auto = _cycles(meshgemv_phases(region, (12, 16), reduce_axis="cols", spec=SPEC))
    assert sum(auto.values()) == pytest.approx((3 + 3 * d) + (32 + 4 * d) + 25 * s)


def test_decode_prices_the_gemv_program_the_plan_names():
    """The GEMV program is the plan's (`plan_pipeline(..., regions=Regions(gemv=))`), stated
    in every report: "sdk" (the default) floods, reduces and moves; "meshgemv" floods the
    residual once per region and moves nothing between products."""
    from wse_systems.decoder import decode_phases
    from wse_systems.pipeline import Regions, plan_pipeline
    from wse_systems.token import price_token

    toy = DecoderCounts(name="t", arch="llama", n_layers=4, d_model=64, n_heads=4,
                        n_kv_heads=2, d_ff=128, vocab_size=100, max_seq_len=64)  # fmt: skip
    sdk = plan_pipeline(toy, preset("small"), context_len=64, regions=Regions(layout="compact"))
    mesh = plan_pipeline(
        toy, preset("small"), context_len=64, regions=Regions(layout="compact", gemv="meshgemv")
    )
    assert sdk.gemv == "sdk" and mesh.gemv == "meshgemv" and sdk.stages == mesh.stages
    names = {p.gemv: [leaf.name for leaf, _ in decode_phases(toy, p).parts[0].leaves()]
             for p in (sdk, mesh)}  # fmt: skip
    assert {"axpy", "reduce", "move"} <= set(names["sdk"])
    assert not {"axpy", "reduce", "move"} & set(names["meshgemv"])
    assert names["meshgemv"].count("x_in") == 1 and names["meshgemv"].count("broadcast") == 4
    for plan in (sdk, mesh):
        report = price_token(toy, plan)
        assert report.assumptions["gemv program"].startswith(plan.gemv)
        assert report.extra["plan"]["gemv"] == plan.gemv
    with pytest.raises(ValueError, match="gemv"):
        plan_pipeline(toy, preset("small"), context_len=64, regions=Regions(gemv="cannon"))


def test_a_wse3_meshgemv_call_pays_the_cs3_control_constant():
    """Issue 41 (fix85-ctrl): on WSE-3 the call's 25 control instructions are priced at
    CS-3's fitted `control_instruction_cycles` (3.09, WaferLLM's MeshGEMV rows), none at
    `scalar_instruction_cycles` (assumed 1): the call at control 1 is 25 x (3.09 - 1)
    cycles faster, and the scalar constant moves nothing."""
    from wse_core.cost.assumptions import assume
    from wse_core.cost.calibration import current
    from wse_systems.meshgemv import meshgemv_phases

    wse3 = preset("wse3")
    c = current().by_system["CS-3"]["control_instruction_cycles"]

    def call(spec):
        phases = meshgemv_phases(Region("m", 0, 0, 80, 80), (80, 80), reduce_axis="rows",
                                 groups=8, spec=spec)  # fmt: skip
        t = PerfModel(spec).evaluate(phases)
        return t.seconds * spec.clock_hz, t.by_mechanism()

    fitted, mech = call(wse3)
    assert PerfModel(wse3).rates.control_instruction_cycles == c and 3.0 < c < 3.2
    assert mech["control"] == pytest.approx(25 * c) and mech.get("scalar", 0.0) == 0.0
    with assume(control_instruction_cycles=1.0):  # held over the fit (a spec's 1.0 is the preset's)
        at_one, _ = call(wse3)
    assert fitted - at_one == pytest.approx(25 * (c - 1.0))
    scalar_moved, _ = call(wse3.replace(scalar_instruction_cycles=4.0))
    assert scalar_moved == fitted


def test_gpt2_attention_has_no_rope():
    """GPT-2's positions are learned (added to the embedding): its attention rotates
    nothing; the same heads under Llama pay the rotation."""
    import dataclasses

    llama = DecoderCounts(name="a", arch="llama", n_layers=1, d_model=32, n_heads=4,
                          n_kv_heads=4, d_ff=64, vocab_size=64, max_seq_len=16)  # fmt: skip
    region = Region("r", 0, 0, 4, 4)
    gpt2 = _cycles(attention_phases(dataclasses.replace(llama, arch="gpt2"), region, 8, 2, SPEC))
    rope = _cycles(attention_phases(llama, region, 8, 2, SPEC))
    assert gpt2["rope"] == 0.0 < rope["rope"]
    assert {k: v for k, v in gpt2.items() if k != "rope"} == pytest.approx(
        {k: v for k, v in rope.items() if k != "rope"}
    )
