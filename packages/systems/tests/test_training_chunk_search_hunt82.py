"""Hunt 82 (jobs18 H1, L2): the weight streaming a training plan runs is searched as its
stride is, so less SRAM never makes the planned step faster.

Before: below the layer, `plan._auto_chunks` gave the column chunk all the SRAM the
activations left (the largest chunk that fits) and only the stride was searched, so the
token passes starved: `trillion-scaling`'s one-system step was 1,223.8 s at a 0 B program
reserve, 1,107.9 s at 2 KiB and 1,090.8 s at 4 KiB (faster with less SRAM), 12.4% above a
placement the same pricer prices at 0 B. And with one stride placing, the plan said nothing
of why the smaller strides do not (`stride_reason` "").

Oracles: brute force, pricing every stride 1..L and every chunk budget P from the floor chunk
to the largest matrix (one `within(model, P)` each, every integer P) and whole layers with
`predict_step`'s report (not the search's `step_seconds`), on a small model and wafer where
the search is exhaustive; for `chunks.choices`, the distinct cuts of that same scan; a hand
count of the bytes a stride that does not fit asks for.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np
import pytest
import wse_models
from wse_core import SramBudgetError, preset
from wse_core.cost.assumptions import assumed_spec
from wse_systems.training.chunks import (
    CHOICE_LADDER,
    CHOICES_EXHAUSTIVE,
    choices,
    floor_params,
    whole,
    within,
)
from wse_systems.training.micro_batch import plan_step
from wse_systems.training.performance import StepLayout, predict_step
from wse_systems.training.plan import _place, memory_plan, place
from wse_systems.training.stride import run_plan

SMALL = wse_models.ModelConfig(
    name="small", arch="llama", vocab_size=512, d_model=256, n_layers=6, n_heads=4,
    n_kv_heads=2, d_ff=768, max_seq_len=128, dtype="bfloat16",
)  # fmt: skip
MICRO, SEQ = 4, 128


def _small(data_bytes: int):
    """The `small` test wafer (32 x 32 PEs) with `data_bytes` of each PE's SRAM for data."""
    spec = preset("small")
    return dataclasses.replace(spec, code_stack_bytes_per_pe=spec.sram_bytes_per_pe - data_bytes)


@functools.cache
def _every_cut(model, pe_rows: int) -> dict[tuple[int, ...], object]:
    """Every integer chunk budget P from the floor to the largest matrix, one cut each: each
    matrix's count at every P as `within` defines it (ceil(n_out / max(1, min(n_out,
    P // n_in))), NumPy over the whole range), `within` at each distinct one's first P."""
    mats = choices(model, pe_rows)[0].matrices
    p = np.arange(floor_params(model, pe_rows), max(m.n_in * m.n_out for m in mats) + 1)
    counts = np.stack([-(-m.n_out // np.clip(p // m.n_in, 1, m.n_out)) for m in mats], axis=1)
    _, first = np.unique(counts, axis=0, return_index=True)
    out: dict[tuple[int, ...], object] = {}
    for i in sorted(first):
        ck = within(model, int(p[i]))
        assert ck.counts == tuple(int(c) for c in counts[i])  # the formula is within's
        out[ck.counts] = ck
    return out


@pytest.mark.parametrize(
    ("model", "rows"), [(SMALL, 32), (SMALL, 48), (wse_models.preset_config("gpt2-124m"), 762)]
)
def test_choices_are_every_distinct_cut_between_the_floor_and_a_matrix(model, rows):
    got = choices(model, rows)
    assert got[0].whole and not any(ck.whole for ck in got[1:])
    want = _every_cut(model, rows)
    assert len(want) <= CHOICES_EXHAUSTIVE  # the exhaustive branch
    assert {ck.counts for ck in got[1:]} == set(want) and len(got) == len(want) + 1
    sizes = [ck.largest_params for ck in got[1:]]
    assert sizes == sorted(sizes, reverse=True)  # the largest chunks first


def test_past_the_bound_the_choices_are_a_ladder_of_the_cuts():
    """SMALL on 8 PE rows has 46 distinct cuts: budgets CHOICE_LADDER apart from the
    largest matrix down to the floor, each one of them."""
    every = _every_cut(SMALL, 8)
    assert len(every) > CHOICES_EXHAUSTIVE
    got = choices(SMALL, 8)[1:]
    top, least = max(m.n_in * m.n_out for m in got[0].matrices), floor_params(SMALL, 8)
    assert {ck.counts for ck in got} <= set(every)
    assert len(got) <= math.floor(math.log(top / least, CHOICE_LADDER)) + 2
    assert got[0].counts == within(SMALL, top).counts
    assert got[-1].counts == within(SMALL, least).counts


def _brute_force(model, spec, micro: int, seq: int) -> tuple[float, int, object]:
    """(step, stride, cut) of the fastest of every stride and every chunk budget (and whole
    layers) that place, ties to the smaller weight buffers, then the smaller stride."""
    cuts = [whole(model), *_every_cut(model, spec.pe_rows).values()]
    best = None
    for k in range(1, int(model.n_layers) + 1):
        for ck in cuts:
            try:
                plan = _place(model, spec, micro, seq, k, ck)
            except SramBudgetError:
                continue
            mp = memory_plan(model, spec, micro, seq, streaming=plan)
            s = predict_step(model, spec, num_csx=1, batch_per_system=micro, micro_batch=micro,
                             seq_len=seq, layout=StepLayout(mp)).predicted_s  # fmt: skip
            size = model.layer_params() if ck.whole else ck.largest_params + ck.vector_params
            key = (s, size, k)
            if best is None or key < best[0]:
                best = (key, ck)
    (s, _, k), ck = best
    return s, k, ck


@pytest.mark.parametrize("data_bytes", [3000, 5500, 9000])
def test_the_search_is_brute_force_over_strides_and_chunk_sizes(data_bytes):
    spec = _small(data_bytes)
    s, k, ck = _brute_force(SMALL, spec, MICRO, SEQ)
    plan = run_plan(SMALL, spec, MICRO, SEQ)
    got = plan.streaming
    assert got.stride == k and got.chunks.whole == ck.whole
    assert ck.whole or got.chunks.counts == ck.counts
    step = plan_step(SMALL, spec, num_csx=1, batch_per_system=MICRO, seq_len=SEQ,
                     micro_batch="none")  # fmt: skip
    assert step.predicted_s == pytest.approx(s, rel=1e-12)


def _step(model, spec, batch: int, seq: int) -> float:
    return plan_step(model, spec, num_csx=1, batch_per_system=batch, seq_len=seq).predicted_s


def test_less_sram_never_makes_the_planned_step_faster_small():
    steps = [_step(SMALL, _small(b), 8, SEQ) for b in (2500, 3500, 4500, 6000, 9000)]
    assert all(a >= b for a, b in zip(steps, steps[1:], strict=False))


@pytest.mark.parametrize(("preset_name", "batch", "seq"), [("llama_1t", 64, 4096)])
def test_less_sram_never_makes_the_trillion_step_faster(preset_name, batch, seq):
    """The hunt's case: one system's step at program reserves of 0, 2 and 4 KiB (before:
    1,223.8, 1,107.9, 1,090.8 s)."""
    from wse_trainer.config import load_config
    from wse_trainer.session import model_config

    model = model_config(load_config(preset_name))
    base = assumed_spec("wse3")
    steps = [_step(model, dataclasses.replace(base, code_stack_bytes_per_pe=r), batch, seq)
             for r in (0, 2048, 4096)]  # fmt: skip
    assert steps[0] <= steps[1] <= steps[2]


def test_one_stride_that_places_says_why_the_smaller_do_not():
    """Llama 3 8B, 48 x 8,192 tokens at once on wse3 (2 KiB program reserve): only stride 4
    places; stride 3's 13 layer inputs need more than the PE's data budget even with the
    floor chunk's buffers (hand count below)."""
    model = wse_models.preset_config("llama3-8b", dtype="bfloat16")
    spec = assumed_spec("wse3")
    plan = run_plan(model, spec, 48, 8192).streaming
    assert plan.stride == 4
    pes, b = spec.num_pes, 2
    act = math.ceil(48 * 8192 * 4096 * b / pes)  # one layer input a PE
    work = math.ceil((8192 * (3 * 4096 + 2 * 14336) + 8192**2) * b / pes)
    floor = choices(model, spec.pe_rows)[-1]
    chunk = math.ceil(floor.largest_params * b / pes)
    vectors = math.ceil(3 * floor.vector_params * b / pes)
    need = 13 * act + work + 3 * chunk + vectors  # inputs_held(32, 3) = 11 + 2 = 13
    assert need > spec.data_bytes_per_pe
    with pytest.raises(SramBudgetError):
        place(model, spec, 48, 8192, 3, floor)
    assert (f"strides 1 to 3 do not fit: stride 3 holds 13 layer inputs and needs {need:,} B "
            f"per PE") in plan.stride_reason  # fmt: skip
    assert f"against {spec.data_bytes_per_pe:,} B for data" in plan.stride_reason
