"""TensorRT-LLM's H100 rows (`wse_systems.serving.trtllm_h100`) and the experiment
`trtllm-h100`: the rows as published, the fit only on input <= output rows, the model at a
row computed by hand from `step`, and the experiment's files."""

import json
import math

import pytest
from wse_systems import gpu as gpum
from wse_systems.serving import gpu_step as gs
from wse_systems.serving import trtllm_h100 as tr
from wse_systems.serving.frontier import Workload
from wse_systems.transformer import kv_values_per_token, num_params


def test_the_rows_as_published():
    assert len(tr.ROWS) == 63 and sum(map(tr.fitted, tr.ROWS)) == 46
    by = {(r.model, r.tp, r.input_tokens, r.output_tokens): r for r in tr.ROWS}
    # three cells read back from the source table (v0.19.0, H100 80GB HBM3 columns)
    assert by["llama3.1-70b", 8, 128, 128].output_tokens_per_s == 14686.01
    assert by["llama3.1-70b", 8, 2048, 128].output_tokens_per_s == 1840.12
    assert by["llama3.1-8b", 1, 20000, 2000].output_tokens_per_s == 1340.92
    assert ("llama3.1-70b", 1, 128, 4096) not in by  # a blank cell
    assert all(r.pp == 1 and r.gpus == r.tp for r in tr.ROWS)
    assert {r.model for r in tr.ROWS} == set(tr.SHAPES)
    assert num_params(tr.SHAPES["llama3.1-70b"]) == pytest.approx(70.6e9, rel=2e-3)
    assert num_params(tr.SHAPES["llama3.1-405b"]) == pytest.approx(405.9e9, rel=2e-3)


def test_a_row_is_the_serving_model_at_its_layout_and_most_users():
    row = next(r for r in tr.ROWS if (r.model, r.tp, r.input_tokens) == ("llama3.1-8b", 1, 2048))
    shape, w = tr.SHAPES[row.model], Workload(prompt_tokens=2048, output_tokens=128)
    # by hand: the most users decoding at once in a full system, 8192 users' decode tokens and
    # the others' prompts spread over the round under way and the 127 rounds after the first
    # token, m + (m - 1) 2048 / 128 <= 8192: 482 (hunt 75: 128 rounds after it, 485; hunt 69:
    # 8192 / (1 + 2048 / 128) = 481 before), and the memory holds (fp8: a byte a weight and a
    # KV value)
    q = 2048 / 128
    usable = 0.9 * gpum.H100.memory_bytes - num_params(shape)
    memory_users = int(usable // (kv_values_per_token(shape) * w.held_tokens))
    users = min(int((8192 + q) // (1 + q)), memory_users)
    assert users == 482

    def step(users: int, prefill: int) -> float:
        batch = gs.StepBatch(users=users, kv_tokens=w.kv_tokens, prefill_tokens=prefill,
                             prompt_tokens=2048)  # fmt: skip
        return gs.step(shape, gpum.H100, gs.GpuLayout(1, 1), batch, precision="fp8",
                       fractions=gs.GpuFractions(hbm_fraction=0.7, mfu=0.3)).seconds  # fmt: skip

    # a request (hunt 66): the round under way and its prompt in one chunk beside the others'
    # decode tokens, then 127 rounds carrying the others' prompts (hunt 69: the others'
    # (users - 1) 2048 over the 128 rounds); the period at least the full rounds of 8192 that
    # carry every user's 2048 + 127 tokens (the last output token is never fed back)
    others = (users - 1) * q
    first = step(users - 1, others) + step(users - 1, 2048)
    full = users * (2048 + 127) / 8192 * step(users, 8192 - users)
    period = max(first + 127 * step(users, others), full)
    assert 8192 - (users - 1) >= 2048  # one chunk
    assert tr.predict(row, mfu=0.3, hbm_fraction=0.7) == pytest.approx(users * 128 / period)


@pytest.mark.slow
def test_the_fit_uses_only_rows_with_input_at_most_output_and_gives_the_constants():
    mfu, hbm, rms = tr.fit()
    assert mfu == pytest.approx(gs.FITTED_MFU, abs=2e-3)
    assert hbm == pytest.approx(gs.FITTED_HBM_FRACTION, abs=2e-3)
    fitted = [r for r in tr.ROWS if tr.fitted(r)]
    logs = [math.log(tr.predict(r, mfu=mfu, hbm_fraction=hbm) / r.output_tokens_per_s)
            for r in fitted]  # fmt: skip
    assert rms == pytest.approx(math.sqrt(sum(v * v for v in logs) / len(logs)))
    for step in (0.02, -0.02):  # a minimum: moving either fraction makes it worse
        assert tr._loss((mfu + step, hbm), fitted) >= rms**2 * len(fitted)
        assert tr._loss((mfu, hbm + step), fitted) >= rms**2 * len(fitted)


@pytest.mark.slow
def test_the_experiment_writes_every_row_with_its_role(tmp_path):
    from wse_core import write_experiment
    from wse_systems.studies.trtllm_h100 import FITS, run

    result = run(quick=True, seed=0)
    folder = write_experiment(result, tmp_path)
    data = json.loads((folder / "results.json").read_text())
    rows = data["predictions"]
    assert len(rows) == 63 and sum(r["params"]["role"] == FITS for r in rows) == 46
    for r in rows:
        assert r["published"] > 0 and r["source"].startswith("NVIDIA TensorRT-LLM v0.19.0")
        assert (r["params"]["role"] == FITS) == (
            r["params"]["input_tokens"] <= r["params"]["output_tokens"])  # fmt: skip
    checks = [r["value"] / r["published"] for r in rows if r["params"]["role"] == "check"]
    assert all(0.5 < c < 2.0 for c in checks)  # prompts priced: within 2x where they dominate
    assert (folder / "figure.png").exists() and (folder / "table.csv").exists()
