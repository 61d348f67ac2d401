"""Hunt 69: a plan lists exactly the swept constants that move its figures; the GPU's default
fractions are the fitted ones; the wafer's exponential is a registered assumption.

Broken before:
- `wse plan infer|train` listed no wafer constant: `clock_hz` moved the 8B's tokens/s per
  user 23%, `hop_latency_cycles` (sourced, not "assumed") as much, and neither was named;
  `--assume memoryx_bytes_per_s=...` was listed beside a serving plan it did not move;
- `GpuFractions()` priced at a bare 0.8 / 0.4, not the fitted 0.727 / 0.273 (an API caller's
  8 x H100 served 7% faster than the CLI's);
- `EXP_FMACS = 6` moved the wafer's tokens/s 4% and was in no registry: no plan listed it and
  no `--assume` reached it.

Oracle: the plan repriced with each constant at an end of its sweep, inside the `assume`
block the CLI runs in (`wse plan ... --assume KEY=VALUE`): the keys that move a figure are
exactly those listed. The default run checks the keys the hunt named at the end that moves
them; the slow run every registered key at both ends.
"""

import math

import pytest
import wse_models
from wse_core.cost.assumptions import (
    applied,
    assume,
    constant_of,
    system_constant,
    system_keys,
    value_of,
)
from wse_core.cost.listing import listed
from wse_core.cost.mechanisms import CONSTANTS
from wse_core.cost.reads import recording
from wse_core.hw.spec import preset
from wse_systems import attention, decoder
from wse_systems.gpu import H100
from wse_systems.planning import infer as pi
from wse_systems.planning.choice import ModelChoice
from wse_systems.planning.train import plan_train
from wse_systems.serving import GpuServing, Workload, frontier
from wse_systems.serving import gpu_step as gs
from wse_systems.training import layer_cost

WSE3 = preset("wse3")
# the end of a sweep that makes the system slower: the low end of a rate, else the high end
RATES = {"clock_hz", "sram_read_bytes_per_cycle", "sram_write_bytes_per_cycle", "fp32_mul_width",
         "memoryx_bytes_per_s", "swarmx_bytes_per_s", "swarmx_fanout", "overlap"}  # fmt: skip


def _choice(name: str) -> ModelChoice:
    return ModelChoice(name, wse_models.preset_config(name, dtype="bfloat16"))


def _figures(value, path: str = "") -> dict[str, float]:
    """Every number of a plan's JSON by its path (its notes and inputs left out, and the GPU
    step's floor: the bound its kernels set at gpu.kernel_s, shown beside the step and named
    in its note; the constant is listed where it moves the step, hunt 76)."""
    if isinstance(value, dict):
        skip = ("assumptions", "inputs") if not path else ("floor",)
        return {k: x for key, v in value.items() if key not in skip
                for k, x in _figures(v, f"{path}.{key}").items()}  # fmt: skip
    if isinstance(value, list | tuple):
        return {k: x for i, v in enumerate(value) for k, x in _figures(v, f"{path}[{i}]").items()}
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    return {path: float(value)} if ok else {}


def _plan(kind: str, changes: dict[str, float]):
    """(figures, listed keys) of the plan under `changes`, as `wse plan KIND --assume` runs."""
    with assume(**changes), recording() as got:
        spec = applied(WSE3, changes)
        if kind == "train":
            plan = plan_train(_choice("llama3-8b"), tokens=1e12, spec=spec, systems=4)
        else:
            plan = pi.plan_infer(_choice("llama3-1b"), wafer=pi.WaferSetup(spec, None),
                                 gpu=pi.GpuSetup(gpus=8))  # fmt: skip
        return _figures(plan.to_dict()), {e.key for e in listed(got)}


def _base(key: str) -> float:
    return system_constant(key) if key in system_keys() else value_of(WSE3, key)


def _ends(key: str, both: bool) -> list[float]:
    lo, hi = min(constant_of(key).sweep), max(constant_of(key).sweep)
    if both:
        return [v for v in (lo, hi) if v != _base(key)]
    slow = lo if key in RATES else hi
    return [slow if slow != _base(key) else (hi if slow == lo else lo)]


def _check_exact(kind: str, keys, both: bool) -> None:
    base, shown = _plan(kind, {})
    for key in keys:
        moved = False
        for v in _ends(key, both):
            figures, _ = _plan(kind, {key: v})
            moved |= any(not math.isclose(figures.get(p, math.nan), x, rel_tol=1e-12)
                         for p, x in base.items())  # fmt: skip
        assert moved == (key in shown), (key, moved, sorted(shown))


def test_plan_train_lists_the_constants_that_move_it_and_no_other():
    # movers: the clock, the SwarmX tree (4 systems), the exponential; idle: the rest
    keys = ("clock_hz", "swarmx_fanout", attention.EXP_KEY, "ramp_latency_cycles",
            "scalar_instruction_cycles", "control_instruction_cycles")  # fmt: skip
    _check_exact("train", keys, both=False)


def test_plan_infer_lists_the_constants_that_move_it_and_no_other():
    # the hunt's: clock and the (sourced) hop move tokens/s per user 23%; the exponential
    # 4%; MemoryX, fp32 multiplies and the system latency price nothing a serving plan has
    keys = ("clock_hz", "hop_latency_cycles", attention.EXP_KEY, "memoryx_bytes_per_s",
            "fp32_mul_width", "system_latency_s")  # fmt: skip
    _check_exact("infer", keys, both=False)


def _all_keys() -> list[str]:
    return [k for k in [*CONSTANTS, *system_keys()] if constant_of(k).sweep]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["train", "infer"])
def test_every_key_at_both_ends_moves_a_plan_exactly_when_listed(kind):
    _check_exact(kind, _all_keys(), both=True)


def test_the_gpu_fractions_left_out_are_the_fitted_ones():
    assert gs.GpuFractions() == (gs.FITTED_HBM_FRACTION, gs.FITTED_MFU, gs.KERNEL_S)
    work = Workload(prompt_tokens=64, output_tokens=32)
    config = wse_models.preset_config("tiny-llama")
    fitted = gs.GpuFractions(gs.FITTED_HBM_FRACTION, gs.FITTED_MFU)
    bare = GpuServing(config, H100, num_gpus=8, workload=work)
    explicit = GpuServing(config, H100, num_gpus=8, workload=work, fractions=fitted)
    assert [p.user_tokens_per_s for p in frontier(bare).points] == [
        p.user_tokens_per_s for p in frontier(explicit).points
    ]


def test_the_exponential_is_an_assumption_with_a_source_and_a_sweep(monkeypatch):
    c = constant_of(attention.EXP_KEY)
    assert c is attention.EXP and c.basis == "assumed" and "Eigen" in c.source
    assert min(c.sweep) < attention.EXP_FMACS < max(c.sweep)
    assert attention.exp_fmacs() == attention.EXP_FMACS

    def ttft(**changes):
        with assume(**changes):
            plan = pi.plan_infer(_choice("tiny-llama"), wafer=pi.WaferSetup(WSE3, None),
                                 target=pi.Target(users=1))  # fmt: skip
        return plan.wafer_point.ttft_s, plan.wafer_point.user_tokens_per_s

    base, assumed = ttft(), ttft(**{attention.EXP_KEY: 12.0})
    # the oracle: the constant itself at 12 where the pricers read it (as the hunt set it)
    for module in (attention, decoder, layer_cost):
        monkeypatch.setattr(module, "exp_fmacs", lambda: 12.0)
    assert assumed == ttft() and assumed[1] < base[1]
