"""Hunt 73, the labels of wse_inference's experiments. Broken before:

- `leviathan23-speculative` printed measured_speedup 2.654 above tokens_per_pass 2.629 as a
  result. The speedup is tokens per pass x plain step / round, and a round (gamma drafts and
  a gamma + 1-token verification) takes at least a plain step, so it can never exceed the
  tokens per pass: on the loaded machine the round timed 183.8 ms in the runs against a plain
  step of 186.2. Such a row is now flagged (`noisy`, with `noisy_note`), its timing unchanged.
- `hotchips24-inference`'s `per_token_cycles` (8,185 for 8B) read as a token's cycles, which
  are ~365k: it is the `per_token` group alone (lm_head, argmax, embed, token out; the
  final norm since session 86). Now
  `head_and_io_cycles`.

Oracles: the speedup's identity, from hand-made runs whose round and step times are chosen;
the decode report's own tree and the row's cycles (the clock over its tokens/s).
"""

from __future__ import annotations

import types

import numpy as np
import pytest
from wse_core.cost.assumptions import assumed_spec
from wse_inference.decoding import GenerationResult
from wse_inference.studies import hotchips24_inference as hc
from wse_inference.studies import leviathan23_speculative as lev

GAMMA, ROUNDS, ACCEPTED = 4, 20, 30  # 50 tokens in 20 rounds: 2.5 tokens per pass
STEP_S = 0.1  # a plain step, seconds


def _model(mb: float):
    return types.SimpleNamespace(params={"w": np.zeros(int(mb * 2**20), np.uint8)})


def _pair(round_s: float, alpha: float = 0.6):
    """One speculative run and one plain run of the same 50 decoded tokens, by hand."""
    tokens = list(range(ROUNDS + ACCEPTED + 1))  # the first token, then 50 decoded
    metrics = {"speculative": {"alpha": alpha, "rounds": ROUNDS, "accepted": ACCEPTED}}
    spec = GenerationResult(tokens, "", "length", 0.0, ROUNDS * round_s, metrics)
    plain = GenerationResult(tokens, "", "length", 0.0, (len(tokens) - 1) * STEP_S)
    return spec, plain


def _measured_row(round_s: float) -> dict:
    spec, plain = _pair(round_s)
    # verification one step: a round shorter than it is noisy on its own (hunt 77, c < 0)
    cost = {"target_step_ms": 1e3 * STEP_S, "draft_step_ms": 10.0, "verify_ms": 1e3 * STEP_S,
            "verify_forward_ms": 1e3 * STEP_S, "round_ms": 1e3 * round_s}  # fmt: skip
    ratio = spec.tokens_per_s / plain.tokens_per_s
    return lev._row(_model(8), _model(1), 1, GAMMA, [spec] * 3, [plain] * 3, [ratio] * 3,
                    [cost] * 3)  # fmt: skip


@pytest.mark.parametrize("round_steps", [0.98, 1.0, 1.5])
def test_a_speedup_above_the_tokens_per_pass_is_flagged_noisy(round_steps):
    row = _measured_row(round_steps * STEP_S)
    tpp = (ROUNDS + ACCEPTED) / ROUNDS
    assert row["tokens_per_pass"] == pytest.approx(tpp, rel=1e-12)
    # the identity: tokens per second over tokens per second = tpp x step / round
    assert row["measured_speedup"] == pytest.approx(tpp / round_steps, rel=1e-12)
    faster_than_a_step = round_steps < 1.0  # what no round can be
    assert row["noisy"] is faster_than_a_step
    if faster_than_a_step:
        note = row["noisy_note"]
        assert f"{tpp / round_steps:.3f} > tokens per pass {tpp:.3f}" in note
        assert f"({1e3 * round_steps * STEP_S:.1f} < {1e3 * STEP_S:.1f} ms in the runs)" in note
        assert "\n" not in note
    else:
        assert row["noisy_note"] == ""


def test_the_figure_rings_a_noisy_row():
    rows = [_measured_row(0.98 * STEP_S), {**_measured_row(1.5 * STEP_S), "gamma": 6}]
    fig = lev._figure(rows)
    labels = [line.get_label() for line in fig.axes[0].get_lines()]
    ringed = [line for line in fig.axes[0].get_lines() if line.get_label().startswith("noisy")]
    assert len(ringed) == 1 and list(ringed[0].get_xdata()) == [GAMMA], labels


def test_hotchips_head_and_io_cycles_are_the_token_s_part_outside_the_layers():
    rows = hc.run_predictions()
    spec = assumed_spec("wse3")
    for row, (_, preset, wafers, token_out) in zip(rows, hc.CASES, strict=True):
        assert "per_token_cycles" not in row.params
        head = row.params["head_and_io_cycles"]
        token_cycles = spec.clock_hz / row.value  # the row's cycles: the clock over tokens/s
        assert sum(row.mechanisms.values()) == pytest.approx(token_cycles, rel=1e-9)
        assert head < 0.05 * token_cycles  # a sliver of the token, not the token
        report, _ = hc.case_token(preset, wafers, token_out)  # the row's own pricer
        parts = {c.name: c.seconds * spec.clock_hz
                 for c in report.predicted.leaf("per_token").children}  # fmt: skip
        named = {"norm_final", "lm_head", "argmax", "embed", *(["token_out"] * token_out)}
        assert set(parts) == named
        assert head == pytest.approx(sum(parts.values()), rel=1e-12)
        if token_out:  # the trip to the host pays one system latency at least
            assert parts["token_out"] >= spec.system_latency_s * spec.clock_hz
