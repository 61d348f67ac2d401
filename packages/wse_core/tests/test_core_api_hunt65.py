"""Hunt 65 (surface `api`, holes 4 and 8): the cost API and the wafer refuse nonsense.

Broken before:
- `Phase(repeat=-1)` priced -1.8e-8 s and `Work(latency_hops=-100)` -1.2e-7 s; `Op(length=nan)`
  gave a NaN prediction; `Work(links={"E": nan})` priced 0 s (`max` skips NaN); `Op("add",
  "fp64", 8)` was accepted and a KeyError at pricing; `Op(stride=2.5)`, `mem_reads=-5`,
  `mem_writes=nan` were accepted.
- `RunReport.build(measured_wall_s=nan)` wrote `NaN` into `to_dict()` (no JSON);
  `measured_wall_s="1"` stayed a string; `systems=-2` or 0 was accepted.
- `Wafer.place` of int64 2**40 + 7 placed 7 (a silent downcast), float64 1e300 inf.
- `build_wafer(grid=(4.5, 4))` built a wafer of 4.5 rows; `defect_rate` without
  `defect_seed` drew no dead PEs, silently; `defect_seed=-1` was NumPy's "expected
  non-negative integer", `mesh_shape=(1.0, 1)` a slicing TypeError and `full((-1,))` a JAX
  broadcast error.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from wse_core import Op, PerfModel, Phase, RunReport, Work, preset, serial
from wse_core.cost.pricing import Phases
from wse_core.cost.work import _COUNTS
from wse_core.errors import DefectError, PlacementError, WseError
from wse_core.hw.wafer import build_wafer

NAN, INF = float("nan"), float("inf")
SPEC = preset("tiny")
ADD = Work(ops=(Op("add", "fp32", 8),))


def _refused(error: type[Exception], fn, *args, **kwargs) -> str:
    with pytest.raises(error) as e:
        fn(*args, **kwargs)
    return str(e.value)


# The cost API -------------------------------------------------------------------------


@pytest.mark.parametrize("repeat", [-1, NAN, INF, "2"])
def test_phase_repeat_must_be_a_count(repeat):
    why = _refused(WseError, Phase, "p", ADD, repeat=repeat)
    assert why.startswith("Phase 'p': repeat must be a finite number >= 0, got ")
    why = _refused(WseError, serial, Phase("p", ADD), name="s", repeat=repeat)
    assert why.startswith("Phases 's': repeat must be a finite number >= 0, got ")


def test_negative_repeat_names_the_value():
    assert _refused(WseError, Phase, "p", ADD, repeat=-1) == (
        "Phase 'p': repeat must be a finite number >= 0, got -1"
    )
    assert _refused(WseError, Phases, "seriall", ()) == (
        "Phases mode must be 'serial' or 'overlap', got 'seriall'"
    )


@pytest.mark.parametrize("field", _COUNTS)
@pytest.mark.parametrize("value", [-100, NAN, INF])
def test_every_work_count_must_be_a_count(field, value):
    why = _refused(WseError, Work, **{field: value})
    assert why == f"Work {field} must be a finite number >= 0, got {value}"


@pytest.mark.parametrize("words", [NAN, -4.0, INF])
def test_link_words_must_be_a_count(words):
    why = _refused(WseError, Work, links={"W": 1.0, "E": words})
    assert why == f"Work links['E'] must be a finite number >= 0, got {words}"


def test_a_huge_or_non_number_count_is_named():
    why = _refused(WseError, Work, host_io_bytes=10**400)
    assert why == "Work host_io_bytes must be a finite number >= 0, got a 401-digit integer"
    why = _refused(WseError, Op, "add", "fp32", [1, 2])
    assert why == "Op length must be a finite number >= 0, got [1, 2] (list)"


@pytest.mark.parametrize(
    ("kwargs", "why"),
    [
        ({"length": NAN}, "Op length must be a finite number >= 0, got nan"),
        ({"length": 8, "count": -1}, "Op count must be a finite number >= 0, got -1"),
        ({"length": 8, "mem_reads": -5}, "Op mem_reads must be a finite number >= 0, got -5"),
        ({"length": 8, "mem_writes": NAN}, "Op mem_writes must be a finite number >= 0, got nan"),
        ({"length": 8, "stride": 2.5}, "Op stride must be an integer, got 2.5"),
    ],
)
def test_op_fields_are_checked_at_construction(kwargs, why):
    assert _refused(WseError, Op, "add", "fp32", **kwargs) == why


def test_unknown_op_dtype_is_refused_at_construction():
    assert _refused(WseError, Op, "add", "fp64", 8) == (
        "unknown Op dtype 'fp64'; use one of fp16, bf16, fp32"
    )
    assert _refused(WseError, Op, "add", "float32", 8) == (
        "unknown Op dtype 'float32' (did you mean 'fp32'?); use one of fp16, bf16, fp32"
    )


def test_valid_ops_still_price_as_the_model_says():
    """Stride 0 (one element repeated) and a negative stride stay valid, and NumPy counts
    price as Python ones: the cycles against the hand formula count * ceil(length / width)
    + issue (tiny's fp32 add: 2 per cycle at strides 0, 1 and 3)."""
    s = SPEC
    width = s.simd_width("add", "fp32")
    want = 3 * math.ceil(10 / width) + 3 * s.dsd_issue_cycles
    for stride in (0, 1, -3, np.int64(3)):
        op = Op("add", "fp32", np.int64(10), count=np.float64(3.0), stride=stride)
        assert op.cycles(s) == pytest.approx(want, rel=1e-12)
    zero = PerfModel(s).cost(Work(ops=(Op("add", "fp32", 0),), latency_hops=0))
    assert zero.seconds == 0.0


@pytest.mark.parametrize(
    ("kwargs", "why"),
    [
        ({"measured_wall_s": NAN}, "measured_wall_s must be a finite number >= 0, got nan"),
        ({"measured_wall_s": -1.0}, "measured_wall_s must be a finite number >= 0, got -1.0"),
        ({"measured_wall_s": "1"}, "measured_wall_s must be a finite number >= 0, got '1' (str)"),
        ({"systems": -2}, "systems must be a positive integer, got -2"),
        ({"systems": 0}, "systems must be a positive integer, got 0"),
        ({"systems": 1.5}, "systems must be a positive integer, got 1.5"),
    ],
)
def test_report_build_refuses_bad_run_figures(kwargs, why):
    assert _refused(WseError, RunReport.build, "k", SPEC, Phase("p", ADD), **kwargs) == why


def test_a_valid_report_is_strict_json():
    rep = RunReport.build("k", SPEC, Phase("p", ADD), measured_wall_s=0.25, systems=np.int64(2))
    d = json.loads(json.dumps(rep.to_dict(), allow_nan=False))
    assert d["measured_wall_s"] == 0.25 and d["systems"] == 2
    assert d["predicted_s"] == PerfModel(SPEC).cost(ADD).seconds


# The wafer -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def wafer():
    return build_wafer(SPEC, grid=(4, 4))


def test_place_refuses_integers_int32_cannot_hold(wafer):
    why = _refused(PlacementError, wafer.place, np.full((4, 4), 2**40 + 7, np.int64))
    assert why == (
        "the field holds 1099511627783, outside int32's range -2147483648..2147483647 "
        "(JAX keeps 64-bit values in 32 bits unless jax_enable_x64 is on)"
    )
    x = np.arange(16, dtype=np.int64).reshape(4, 4) - 2**31 + 3  # int32's range: kept exactly
    got = wafer.gather(wafer.place(x))
    assert got.dtype == np.int32 and np.array_equal(got, x)


def test_place_refuses_floats_past_fp32_and_keeps_the_rest(wafer):
    why = _refused(PlacementError, wafer.place, np.full((4, 4), 1e300))
    assert why.startswith("the field holds 1e+300, past float32's largest 3.403e+38")
    x = np.random.default_rng(0).standard_normal((4, 4)) * 1e30
    x[0, :3] = [INF, NAN, -INF]  # representable in fp32: kept
    got = wafer.gather(wafer.place(x))
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, x.astype(np.float32))


@pytest.mark.parametrize(
    ("kwargs", "why"),
    [
        ({"grid": (4.5, 4)}, "grid must be two positive integers (rows, cols), got (4.5, 4)"),
        ({"grid": (4,)}, "grid must be two positive integers (rows, cols), got (4,)"),
        ({"grid": (0, 4)}, "grid must be two positive integers, got 0 x 4"),
        (
            {"grid": (4, 4), "mesh_shape": (1.0, 1)},
            "mesh_shape must be two positive integers (rows, cols), got (1.0, 1)",
        ),
        (
            {"grid": (4, 4), "mesh_shape": (0, 1)},
            "mesh_shape must be two positive integers, got 0 x 1",
        ),
    ],
)
def test_build_wafer_needs_whole_grids(kwargs, why):
    assert _refused(PlacementError, build_wafer, SPEC, **kwargs) == why


@pytest.mark.parametrize(
    ("kwargs", "why"),
    [
        (
            {"defect_rate": 0.5},
            "defect_rate=0.5 needs a defect_seed to draw dead PEs from; give defect_seed=0 "
            "(or any integer >= 0) too",
        ),
        ({"defect_seed": -1}, "defect_seed must be an integer >= 0, got -1"),
        ({"defect_seed": 1.5}, "defect_seed must be an integer >= 0, got 1.5"),
    ],
)
def test_build_wafer_defect_arguments(kwargs, why):
    assert _refused(DefectError, build_wafer, SPEC, **kwargs) == why


def test_a_seeded_defect_rate_still_draws_dead_pes():
    w = build_wafer(SPEC, defect_seed=np.int64(3), defect_rate=0.05)
    assert w.describe()["dead_pes"] == w.defects.num_dead > 0
    assert w.describe()["grid"] == [SPEC.pe_rows, SPEC.pe_cols]


@pytest.mark.parametrize("shape", [(-1,), (2.5,), (2, -3)])
def test_full_names_per_pe_shape(wafer, shape):
    why = _refused(PlacementError, wafer.full, shape)
    assert why == f"per_pe_shape must be integers >= 0, got {shape}"
