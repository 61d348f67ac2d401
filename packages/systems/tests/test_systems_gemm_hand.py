"""WaferLLM's MeshGEMM (`wse_systems.meshgemm`; MeshInfra/WaferLLM at 2cd13b5c,
MeshGEMM/WSE-3/src and Prefill/WSE-2/src/prefill.csl) counted by hand, its relation to
MeshGEMV, and a prompt block under gemv "meshgemv" priced with it.

The constants are the spec's (`PerfModel(spec).rates`): hop_latency 1 cycle, links 4 B (one
32-bit wavelet) per cycle, SRAM 16 B/cycle read and 8 B/cycle written, fp16 FMAC and move 4
wide; d and t are the fitted DSD issue and task activation. fp16 values travel two per
wavelet."""

from __future__ import annotations

import pytest
from wse_core import PerfModel, preset
from wse_core.hw.sram import Region
from wse_systems.meshgemm import is_meshgemm, meshgemm_phases, meshgemm_tiles
from wse_systems.meshgemv import meshgemv_phases
from wse_systems.transformer import DecoderCounts

SPEC = preset("tiny")  # 8 x 8 PEs


def _consts() -> tuple[float, float]:
    rates = PerfModel(SPEC).rates
    assert (rates.hop_latency_cycles, rates.link_bytes_per_cycle) == (1.0, 4.0)
    assert rates.simd_width("fmac", "fp16", 1) == rates.simd_width("move", "fp16", 1) == 4
    assert (rates.sram_read_bytes_per_cycle, rates.sram_write_bytes_per_cycle) == (16.0, 8.0)
    return rates.dsd_issue_cycles, rates.task_activation_cycles


def _cycles(phases) -> dict[str, float]:
    t = PerfModel(SPEC).evaluate(phases)
    return {c.name: c.seconds * SPEC.clock_hz for c in t.children}


def test_meshgemm_counted_by_hand():
    """Y (8 x 12) = X (8 x 8) @ W (8 x 12) on 4 x 4 PEs: P = 4, each PE holds X's tile of
    Mt x Kt = 2 x 2, W's of Kt x Nt = 2 x 3 and Y's of 2 x 3."""
    d, t = _consts()
    region = Region("g", 0, 0, 4, 4)
    assert meshgemm_tiles(region, 8, 8, 12) == (4, 2, 2, 3)
    phases = meshgemm_phases(region, 8, 8, 12)
    assert [(p.name, p.repeat) for p in phases.parts] == [("skew", 2), ("zero", 1), ("step", 4)]
    got = _cycles(phases)
    # skew, P // 2 = 2 steps, each: X's tile (4 values) to the fabric, one @mov16 (4 wide: 1
    # cycle) and from it (fabric in, 2 values a cycle: 2 cycles), 2 DSDs; 2 wavelets each
    # way on the ramp and the row's link (2 cycles, under the core's 3); SRAM 8 B read, 8 B
    # written (1 cycle); 2 hops (the two-hop ring); one task (x_shift_finish)
    assert got["skew"] == pytest.approx(2 * (3 + 2 * d + t + 2))
    # zero: @fmovh(res, 0.0) of Mt Nt = 6 (2 cycles); 12 B written (1.5 cycles)
    assert got["zero"] == pytest.approx(2 + d)
    # step, 4 times: Kt Nt = 6 @fmach of Mt = 2 (1 cycle each), X's tile out (1 cycle) and
    # in (2), W's tile (6 values) out (2) and in (3): 10 DSDs, 14 cycles of elements; four
    # tasks; SRAM (2 x 12 + 10) x 2 = 68 B read (4.25 cycles), (12 + 10) x 2 = 44 B written
    # (5.5); 2 + 3 = 5 wavelets in on the ramp (5 cycles): the core's 14 + 10 d + 4 t sets
    # it; 2 hops
    assert got["step"] == pytest.approx(4 * (14 + 10 * d + 4 * t + 2))
    assert sum(got.values()) == pytest.approx(76 + 45 * d + 18 * t)
    work = phases.total_work()
    assert work.instructions == 2 * 2 + 1 + 4 * 10
    assert work.task_activations == 2 + 4 * 4
    # FMAC elements: 4 steps x 6 x 2 = 48 = 8 x 8 x 12 / 16 (each PE one sixteenth)
    assert work.ops_by_kind()["fmac.fp16"] == 48 == 8 * 8 * 12 / 16
    assert work.links["ramp"] == 2 * 2 + 4 * 5  # wavelets off (and onto) the ramp
    assert work.latency_hops == 2 * (2 + 4)  # 2 hops a step, 6 dependent steps


def test_one_token_pads_to_p_rows_and_p_tokens_match_p_meshgemvs():
    """At k = 1 the program pads X to P rows: P times MeshGEMV's FMAC elements, in P Kt Nt
    DSDs of length 1; from k = P on it does k MeshGEMVs' arithmetic. (The MeshGEMV on the
    same 4 x 4 PEs holds 8 / 4 inputs and 12 / 4 outputs: 6 FMAC elements in 2 DSDs.)"""
    region = Region("g", 0, 0, 4, 4)
    gemv = meshgemv_phases(region, (8, 12), reduce_axis="cols", spec=SPEC).total_work()
    assert gemv.ops_by_kind()["fmac.fp16"] == 6
    fmacs = [op for op in gemv.ops if op.kind == "fmac"]
    assert sum(op.count for op in fmacs) == 2 and {op.length for op in fmacs} == {3}
    for k in (1, 2, 4):  # Mt = 1: the same work whatever k <= P
        gemm = meshgemm_phases(region, k, 8, 12).total_work()
        assert gemm.ops_by_kind()["fmac.fp16"] == 4 * 6  # P x MeshGEMV's
        (fmac,) = [op for op in gemm.ops if op.kind == "fmac"]
        assert (fmac.count, fmac.length) == (4 * 2 * 3, 1)  # P Kt Nt DSDs of Mt = 1
    for k in (4, 8, 16):  # k a multiple of P: k MeshGEMVs' elements, P Kt Nt = 24 DSDs
        gemm = meshgemm_phases(region, k, 8, 12).total_work()
        assert gemm.ops_by_kind()["fmac.fp16"] == k * 6
        assert sum(op.count for op in gemm.ops if op.kind == "fmac") == 24
    # on a rectangle it runs on the largest square: 3 x 5 PEs -> P = 3
    assert meshgemm_tiles(Region("r", 0, 0, 3, 5), 6, 9, 12) == (3, 2, 3, 4)
    with pytest.raises(ValueError, match=">= 1"):
        meshgemm_tiles(region, 0, 8, 12)


TOY = DecoderCounts(name="t", arch="llama", n_layers=4, d_model=64, n_heads=4, n_kv_heads=2,
                    d_ff=128, vocab_size=100, max_seq_len=64)  # fmt: skip


def _plans():
    from wse_systems.pipeline import Regions, plan_pipeline

    return {
        g: plan_pipeline(
            TOY, preset("small"), context_len=64, regions=Regions(layout="compact", gemv=g)
        )
        for g in ("sdk", "meshgemv")
    }


def test_a_prompt_block_under_meshgemv_is_one_meshgemm_per_product():
    """Under "meshgemv" a block of k > 1 tokens holds each region for each product's cheaper
    program (hunt 68): its MeshGEMM (priced whole by `PerfModel`) or k MeshGEMVs one after
    another (the token's MeshGEMV streamed k times, its latency once: `block_phases`), plus
    the rest of its phases k times their streaming work and their latency once: the block's
    time less its products is affine in k. One token (k = 1) is the decode's MeshGEMV token,
    to the bit."""
    from wse_systems.decoder import decode_phases
    from wse_systems.serving.blocks import price_pipeline
    from wse_systems.serving.speculative import block_phases
    from wse_systems.token import price_token

    plan = _plans()["meshgemv"]
    model = PerfModel(plan.spec)
    pipe = price_pipeline(TOY, plan, kv_tokens=32, model=model)
    assert pipe.token_s == price_token(TOY, plan, kv_tokens=32, model=model).predicted_s
    assert min(pipe.gemm_tokens.values()) >= 16  # every MeshGEMM below fits its region
    token = decode_phases(TOY, plan, kv_tokens=32)

    def products(k: int) -> tuple[float, int]:
        """(every product of every layer and the head's, each its cheaper program; how
        many times the MeshGEMM was)."""
        pairs = []

        def walk(one, block, times=1.0):
            if is_meshgemm(block):
                gemvs = model.evaluate(block_phases(one, k)).seconds
                pairs.append((times * model.seconds(block), times * gemvs))
                return
            for a, b in zip(getattr(one, "parts", ()), getattr(block, "parts", ()), strict=True):
                walk(a, b, times * b.repeat)

        walk(token, decode_phases(TOY, plan, kv_tokens=32, block_tokens=k))
        assert len(pairs) == 4 * len(plan.stages) + 1  # 4 per stage's layer and the head's
        return sum(map(min, pairs)), sum(g < v for g, v in pairs)

    # the MeshGEMM wins none of 17 products at 2 tokens, some at 64, all at 512 (hand: its
    # P Kt Nt DSDs cost the same up to k = P, the MeshGEMVs' streaming grows with k). At 64
    # it wins 11 (8 until issue 41 counted each MeshGEMV's chain sends and its call's 25
    # control instructions, which k MeshGEMVs stream k times)
    for ks, wins in (((2, 4, 8, 16), (0, 0)), ((64, 128, 256, 512), (11, 17))):
        priced = {k: products(k) for k in ks}
        assert (priced[ks[0]][1], priced[ks[-1]][1]) == wins
        rest = {k: pipe.blocks_s(k, k) - priced[k][0] for k in ks}
        a, b, c, d = (rest[k] for k in ks)
        assert b - a == pytest.approx((c - b) / 2, rel=1e-9)
        assert d - c == pytest.approx(4 * (b - a), rel=1e-9)
        assert 0 < b - a < a  # the rest streams: each token adds to it
    # the block's tree: each product a MeshGEMM (4 per layer and the head's)
    tree = decode_phases(TOY, plan, kv_tokens=32, block_tokens=4)
    found = []

    def walk(node, layers=1.0):
        if is_meshgemm(node):
            found.append((node.name, layers))
        for p in getattr(node, "parts", ()):
            walk(p, layers * getattr(p, "repeat", 1.0))

    walk(tree)
    assert sorted({n for n, _ in found}) == ["down", "gemv", "o_proj", "qkv", "up_gate"]
    assert sum(r for _, r in found) == 4 * TOY.n_layers + 1


def test_the_sdk_block_is_untouched():
    """The default program prices a block as k tokens' streaming work and latency once,
    whatever k (no MeshGEMM anywhere in its trees)."""
    from wse_systems.decoder import decode_phases
    from wse_systems.serving.blocks import price_pipeline

    plan = _plans()["sdk"]
    pipe = price_pipeline(TOY, plan, kv_tokens=32)
    assert all(p.mode != "product" for _, _, p in pipe.elements)
    assert decode_phases(TOY, plan, kv_tokens=32, block_tokens=8) == decode_phases(
        TOY, plan, kv_tokens=32
    )
    diffs = [pipe.blocks_s(k, k) for k in (2, 4, 8)]
    assert diffs[1] - diffs[0] == pytest.approx((diffs[2] - diffs[1]) / 2, rel=1e-9)


def test_meshgemm_buffers_bound_the_block_by_hand():
    """On 4 x 6 PEs (P = 4: the square is 16 of the 24 PEs) holding 600 B a PE (900 B on the
    square), 48 kB of SRAM: a product of 64 -> 96 at 2 B has Kt 16, Nt 24, W's receive tile
    16 x 24 x 2 = 768 B, and each row per PE of the block costs (2 x 16 + 24) x 2 = 112 B:
    (49,152 - 900 - 768) // 112 = 423 rows a PE, 1,692 tokens; a second product 128 -> 8
    (Kt 32, Nt 2: 128 B, 132 B a row) allows (49,152 - 900 - 128) // 132 = 364 rows."""
    from wse_systems.meshgemm import meshgemm_max_tokens

    region = Region("g", 0, 0, 4, 6)
    kw = {"held_bytes_per_pe": 600, "sram_bytes_per_pe": 49152, "bytes_per_value": 2}
    assert meshgemm_max_tokens(region, ((64, 96),), **kw) == 423 * 4
    assert meshgemm_max_tokens(region, ((64, 96), (128, 8)), **kw) == 364 * 4
    full = {**kw, "held_bytes_per_pe": 49152}  # nothing left: not one row fits
    assert meshgemm_max_tokens(region, ((64, 96),), **full) == 0


def test_meshgemv_blocks_are_those_whose_buffers_fit():
    """The serving pipeline under "meshgemv" runs a block's MeshGEMMs only where they fit:
    region by region, the largest k for which the held bytes on the square plus W's tile and
    X's and Y's tiles of every product (q, k, v as one; up and gate as one; the head's) fit,
    found by trying k (`Pipeline.gemm_tokens`); a block itself is bounded by the plan's own
    limit, the activations' (hunt 68: k MeshGEMVs need no MeshGEMM buffer)."""
    import math

    from wse_systems.serving.blocks import max_block_tokens, price_pipeline
    from wse_systems.transformer import LLAMA31_8B, layer_products

    plan = _plans()["meshgemv"]
    hd, d, ff = TOY.d_model // TOY.n_heads, TOY.d_model, TOY.d_ff
    layer = [(d, (TOY.n_heads + 2 * TOY.n_kv_heads) * hd), (d, d), (d, 2 * ff), (ff, d)]
    # a PE's SRAM less its program's code and stack (hunt 81)
    b, sram = plan.bytes_per_param, plan.spec.sram_bytes_per_pe - plan.spec.code_stack_bytes_per_pe

    def fits(stage, products, k: int) -> bool:
        p = min(stage.region.rows, stage.region.cols)
        held = stage.bytes_per_pe * stage.region.num_pes / p**2
        need = []
        for n_in, n_out in products:
            mt, kt, nt = math.ceil(k / p), math.ceil(n_in / p), math.ceil(n_out / p)
            need.append(held + (kt * nt + 2 * mt * kt + mt * nt) * b)
        return max(need) <= sram

    regions = [(plan.head, [(d, TOY.vocab_size)])] + [(s, layer) for s in plan.stages]
    # the decode's products from the parameter list: q, k, v one; o alone (its input is the
    # attention's, even where it is as long as d); up and gate one; down
    assert tuple(layer_products(TOY).values()) == tuple(layer)
    assert layer_products(LLAMA31_8B) == {
        "qkv": (4096, 4096 + 2 * 8 * 128), "o_proj": (4096, 4096),
        "up_gate": (4096, 2 * 14336), "down": (14336, 4096),
    }  # fmt: skip
    pipe = price_pipeline(TOY, plan, kv_tokens=32)
    assert pipe.max_block_tokens == max_block_tokens(plan)
    for (stage, products), name in zip(regions, ["per_token", *(s.name for s in plan.stages)],
                                       strict=True):  # fmt: skip
        k = 0
        while fits(stage, products, k + 1):
            k += 1
        assert pipe.gemm_tokens[name] == k > 0
    sdk = _plans()["sdk"]
    assert price_pipeline(TOY, sdk, kv_tokens=32).max_block_tokens == max_block_tokens(sdk)
    assert price_pipeline(TOY, sdk, kv_tokens=32).gemm_tokens == {}
