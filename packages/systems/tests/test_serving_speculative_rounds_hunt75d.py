"""Hunt 75d: a speculative request runs whole draft-and-verify rounds.

Before: (O - 1) / E rounds, continuous, so at O = 2 and E = 5 (alpha 1, gamma 4) a request's
decode was a fifth of a round, faster than one plain target pass (Llama 3 8B + 3.2 1B, 1,024
+ 2 tokens, one user: 0.198 ms on a CS-3 against 0.323 ms plain; 0.956 ms on 8 x H100
against 1.94 ms). Now ceil((O - 1) / E) rounds, the last emitting fewer than E. Oracles: the
round's time by hand, from the GPU step priced here (gamma draft steps and the target's
verification of gamma + 1 tokens) and the wafer round as its `speculative_round` prices it.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
from wse_core import preset
from wse_systems import gpu as gpum
from wse_systems.serving import GpuServing, Speculation, WaferServing, Workload, decode_steps
from wse_systems.serving import gpu_step as gs
from wse_systems.transformer import DecoderCounts

MID = DecoderCounts(name="mid", arch="llama", vocab_size=32000, d_model=1024, n_layers=8,
                    n_heads=8, n_kv_heads=2, d_ff=4096, max_seq_len=32768)  # fmt: skip
TOY = DecoderCounts(name="toy", arch="llama", n_layers=4, d_model=256, n_heads=4, n_kv_heads=2,
                    d_ff=512, vocab_size=1000, max_seq_len=2048)  # fmt: skip
FRACTIONS = gs.GpuFractions(hbm_fraction=0.7, mfu=0.5)
GAMMA = 4
SPEC = Speculation(draft=dataclasses.replace(MID, name="d", n_layers=1), gamma=GAMMA, alpha=1.0)


@pytest.mark.parametrize(("o", "e", "rounds"),
                         [(1, 5, 0), (2, 5, 1), (6, 5, 1), (7, 5, 2), (33, 4, 8), (32, 4, 8),
                          (2, 1, 1), (64, 1, 63)])  # fmt: skip
def test_whole_rounds(o, e, rounds):
    assert decode_steps(Workload(prompt_tokens=8, output_tokens=o), float(e)) == rounds


@pytest.mark.parametrize("o", [2, 5, 6, 7, 12])
def test_gpu_one_user_decode_is_whole_rounds_by_hand(o):
    w = Workload(prompt_tokens=1000, output_tokens=o)
    serve = GpuServing(MID, gpum.H100, num_gpus=1, workload=w, speculation=SPEC,
                       fractions=FRACTIONS)  # fmt: skip
    p = serve.point(1)
    lay = gs.GpuLayout(p.layout["tp"], p.layout["pp"])

    def step(model, tokens):
        batch = gs.StepBatch(users=1, tokens_per_user=tokens, kv_tokens=w.kv_tokens,
                             prompt_tokens=1000)  # fmt: skip
        return gs.step(model, gpum.H100, lay, batch, fractions=FRACTIONS).seconds

    round_s = GAMMA * step(SPEC.draft, 1) + step(MID, GAMMA + 1)  # by hand
    rounds = math.ceil((o - 1) / (GAMMA + 1))
    assert p.layout["decode_s"] == pytest.approx(rounds * round_s, rel=1e-12)
    plain = GpuServing(MID, gpum.H100, num_gpus=1, workload=w, fractions=FRACTIONS).point(1)
    if o == 2:  # one token after the first: a whole round, never less than a plain pass
        assert p.layout["decode_s"] >= plain.layout["decode_s"]


@pytest.mark.parametrize("o", [2, 6, 7])
def test_wafer_one_user_decode_is_whole_rounds(o):
    w = Workload(prompt_tokens=64, output_tokens=o)
    spec = Speculation(draft=dataclasses.replace(TOY, name="d", n_layers=1), gamma=GAMMA,
                       alpha=1.0)  # fmt: skip
    serve = WaferServing(TOY, preset("small"), num_wafers=1, workload=w, speculation=spec)
    p = serve.point(1)
    round_s = serve.round_s(1)[0]  # the placement's round (`speculative_round`)
    assert p.layout["decode_s"] == pytest.approx(math.ceil((o - 1) / 5) * round_s, rel=1e-9)
    if o == 2:
        plain = WaferServing(TOY, preset("small"), num_wafers=1, workload=w).point(1)
        assert p.layout["decode_s"] >= round_s >= plain.layout["token_s"]
