"""ModelZoo's micro_batch_size, resolved against the SRAM ledger: `auto` is the largest
divisor of the per-system batch that one replica's memory plan places, and the 1T params.yaml
of issue 40 (batch_size 64 at 4,096 tokens), refused before micro-batches, plans on 1 and 16
CS-3.

Oracle for `auto`: the largest micro-batch the ledger places at all, found by bisection over
every integer (SRAM use grows with the micro-batch), then its largest divisor of the batch
at most that: a different search from the resolver's walk down the divisors."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from wse_core import preset
from wse_systems.training.micro_batch import divisors, fits, resolve_micro_batch
from wse_trainer.config import config_from_dict
from wse_trainer.run import model_config, validate

WSE3 = preset("wse3")
# issue 40's 1T llama params.yaml (ModelZoo form; num_csx 1 unless overridden)
ISSUE_1T = {
    "train_input": {"batch_size": 64, "max_sequence_length": 4096},
    "model": {"preset": "llama3-70b", "d_model": 25600, "n_layers": 128, "d_ff": 102400,
              "n_heads": 160, "n_kv_heads": 16, "dtype": "bfloat16", "max_seq_len": 4096},
    "runconfig": {"num_csx": 1, "wafer": "wse3"},
}  # fmt: skip


def _config(num_csx=1, **inp):
    data = {**ISSUE_1T, "runconfig": {**ISSUE_1T["runconfig"], "num_csx": num_csx}}
    data["train_input"] = {**ISSUE_1T["train_input"], **inp}
    return config_from_dict(data)


MODEL = model_config(_config())


def _largest_placed(seq: int) -> int:
    """Bisection over integers: the largest micro-batch one replica's ledger places."""
    lo, hi = 0, 1
    while fits(MODEL, WSE3, hi, seq):
        lo, hi = hi, 2 * hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(MODEL, WSE3, mid, seq) else (lo, mid)
    return lo


@settings(max_examples=25, deadline=None)
@given(batch=st.integers(1, 200))
def test_auto_is_the_largest_divisor_the_ledger_places(batch):
    most = _largest_placed(4096)
    got = resolve_micro_batch("auto", MODEL, WSE3, batch_per_system=batch, seq_len=4096)
    assert got == max(d for d in divisors(batch) if d <= most)
    assert batch % got == 0
    assert resolve_micro_batch("none", MODEL, WSE3, batch_per_system=batch, seq_len=4096) == batch
    assert resolve_micro_batch(None, MODEL, WSE3, batch_per_system=batch, seq_len=4096) == batch


def test_divisors_are_every_divisor():
    for n in (1, 12, 64, 97, 360):
        assert divisors(n) == [d for d in range(1, n + 1) if n % d == 0]


@pytest.mark.parametrize(("num_csx", "per_system", "micro"), [(1, 64, 8), (16, 4, 4)])
def test_the_issue_1t_params_plan_with_micro_batches(num_csx, per_system, micro):
    """Before micro-batches: 'activations: 22 layer inputs (stride 10) needs 329,516 B per
    PE' on one CS-3. Now each replica runs micro-batches of 8 (one system) or its whole 4
    (16 systems), streamed below the layer."""
    _, whole = validate(_config(num_csx, micro_batch_size="none"), WSE3)
    if num_csx == 1:  # the issue's refusal; 16 sequences do not fit either
        assert whole.streaming is None
        assert "activations: 22 layer inputs (stride 10)' needs 329516 B" in whole.streaming_error
        _, sixteen = validate(_config(micro_batch_size=16), WSE3)
        assert sixteen.streaming is None and "activations" in sixteen.streaming_error
    model, plan = validate(_config(num_csx), WSE3)
    assert model.num_params() == pytest.approx(1.198e12, rel=1e-3)
    s = plan.streaming
    assert s is not None and s.chunked
    assert s.sram["used_bytes_per_pe"] <= WSE3.sram_bytes_per_pe
    assert s.activation_bytes_per_pe == -(-micro * 4096 * 25600 * 2 // WSE3.num_pes)
    assert (
        resolve_micro_batch("auto", model, WSE3, batch_per_system=per_system, seq_len=4096) == micro
    )
