"""Hunt 68, the GPU step's kernel cost as an assumption. Broken before: `KERNEL_S`, the
assumed per-kernel cost of a GPU forward pass (swept 0.5-5 us), was no `--assume` key, while
every assumed constant of the wafer was one: `assume(**{"gpu.kernel_s": 2e-6})` was "unknown
assumption", and nothing moved the GPU figures short of editing the module. Now
`gpu.kernel_s` is registered with `wse_core.cost.assumptions` by `gpu_step` (wse_core imports
no wse_systems), checked against `KERNEL.limits`, and a `GpuFractions` built without a
kernel cost inside an `assume` block takes it, as do `floor_s`, `floor_note` and `step`.

Oracles: `GpuFractions(kernel_s=2e-6)` given explicitly (the model priced at that value by
hand), and the figures outside any `assume` block (the default, unchanged)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from wse_core.cost.assumptions import assume, constant_of, parse_assumptions
from wse_core.errors import SpecError
from wse_core.hw.spec import preset
from wse_models import preset_config
from wse_systems import gpu as gpum
from wse_systems.serving import GpuServing, Workload, frontier
from wse_systems.serving import gpu_step as gs
from wse_systems.serving import trtllm_h100 as tr

TINY = preset_config("tiny-llama")
WORK = Workload(prompt_tokens=64, output_tokens=32)
KEY = {"gpu.kernel_s": 2e-6}


def _serving(fractions=None) -> GpuServing:
    if fractions is None:  # the fitted fractions, the kernel cost in force
        fractions = gs.GpuFractions(gs.FITTED_HBM_FRACTION, gs.FITTED_MFU)
    return GpuServing(TINY, gpum.H100, num_gpus=8, workload=WORK, fractions=fractions)


def _figures(serve: GpuServing) -> list[tuple[float, float, float]]:
    return [(p.user_tokens_per_s, p.aggregate_tokens_per_s, p.ttft_s)
            for p in frontier(serve).points]  # fmt: skip


def test_the_key_moves_every_gpu_figure_as_the_explicit_value_does():
    explicit = gs.GpuFractions(gs.FITTED_HBM_FRACTION, gs.FITTED_MFU, kernel_s=2e-6)
    oracle = _figures(_serving(explicit))
    with assume(**KEY):
        assert gs.kernel_s_in_force() == 2e-6
        assumed = _serving()
        assert _figures(assumed) == oracle and assumed.kernel_s == 2e-6
        assert gs.floor_s(TINY) == gs.floor_s(TINY, 2e-6) == (8 * 2 + 4) * 2e-6
        assert "kernel_s = 2 us" in gs.floor_note(TINY) and "fitted at 1 us" in gs.floor_note(TINY)
        batch = gs.StepBatch(users=3, kv_tokens=80)
        priced = gs.step(TINY, gpum.H100, gs.GpuLayout(1, 1), batch)
        assert priced == gs.step(TINY, gpum.H100, gs.GpuLayout(1, 1), batch,
                                 fractions=gs.GpuFractions(kernel_s=2e-6))  # fmt: skip
    default = _serving()  # outside the block: the default, unchanged
    assert default.kernel_s == gs.KERNEL_S == 1e-6 and _figures(default) != oracle
    assert _figures(default) == _figures(_serving(gs.GpuFractions(0.842, 0.330, 1e-6)))
    note = gs.floor_note(TINY)
    assert "--assume gpu.kernel_s=S" in note and "fitted at" not in note


def test_an_explicit_kernel_cost_wins_over_the_assumption():
    with assume(**KEY):
        assert gs.GpuFractions(kernel_s=0.0).kernel_s == 0.0
        row = tr.ROWS[0]
        at = tr.predict(row, mfu=0.3, hbm_fraction=0.7)
        assert at == tr.predict(row, mfu=0.3, hbm_fraction=0.7, kernel_s=2e-6)
        assert at != tr.predict(row, mfu=0.3, hbm_fraction=0.7, kernel_s=1e-6)


BAD = [
    ("gpu.kernel_s=2e-3", "assumption gpu.kernel_s must be in [0, 0.001] s/kernel, got '2e-3'"),
    ("gpu.kernel_s=-1e-6", "assumption gpu.kernel_s must be in [0, 0.001] s/kernel"),
    ("gpu.kernel_s=inf", "assumption gpu.kernel_s must be a finite number, got 'inf'"),
    ("gpu.kernel_s=nan", "assumption gpu.kernel_s must be a finite number, got 'nan'"),
    ("gpu.kernel_s=1us", "assumption gpu.kernel_s must be a number, got '1us'"),
    ("gpu.kernel=1e-6", "did you mean 'gpu.kernel_s'?"),
]


@pytest.mark.parametrize("item,message", BAD)
def test_a_value_outside_its_limits_is_refused(item, message):
    with pytest.raises(SpecError) as e:
        parse_assumptions([item])
    assert message in str(e.value) and "\n" not in str(e.value)


def test_the_key_is_a_gpus_and_moves_no_wafer():
    assert constant_of("gpu.kernel_s") is gs.KERNEL and gs.KERNEL_KEY == "gpu.kernel_s"
    from wse_core.cost.assumptions import applied, for_calibration

    assert applied(preset("wse3"), KEY) == preset("wse3")
    assert for_calibration(KEY) == {}  # the calibration is not refitted under it


def test_wse_core_still_imports_no_wse_systems():
    code = ("import sys, wse_core, wse_core.cost.assumptions, wse_core.studies.sweeps; "
            "print(sorted(m for m in sys.modules if m.startswith('wse_systems')))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
