"""Hunt 74: a `WaferSpec` is a value. Its mapping fields were `MappingProxyType`s, so a spec
(and a `PerfModel` over it) could not be hashed, pickled or deep-copied, nor be a `jax.jit`
static argument. The oracles: round trips (pickle, deepcopy) equal to the original, Python's
hash contract (equal specs hash equal), jit's cache (an equal spec is a cache hit, a changed
one traces again) and the read-only mapping behaviour of `types.MappingProxyType`."""

from __future__ import annotations

import copy
import pickle
from types import MappingProxyType

import jax
import numpy as np
import pytest
from wse_core import Op, PerfModel, Phase, RunReport, Work, fabric, preset, serial
from wse_core.hw.frozen_mapping import FrozenMapping
from wse_core.hw.wafer import build_wafer


@pytest.mark.parametrize("name", ["tiny", "wse2", "wse3"])
def test_spec_round_trips_and_hashes_by_value(name: str) -> None:
    spec = preset(name)
    for twin in (pickle.loads(pickle.dumps(spec)), copy.deepcopy(spec), spec.replace(name=name)):
        assert twin == spec and twin is not spec
        assert hash(twin) == hash(spec)
        assert twin.key() == spec.key()
    assert spec.replace(pe_rows=spec.pe_rows + 1) != spec
    # the same table given in another order is the same spec
    widths = dict(reversed(list(spec.simd_widths.items())))
    assert spec.replace(simd_widths=widths) == spec
    assert hash(spec.replace(simd_widths=widths)) == hash(spec)


def test_mapping_fields_stay_read_only_mappings() -> None:
    spec = preset("wse3")
    proxy = MappingProxyType(dict(spec.flops_per_cycle))
    assert spec.flops_per_cycle == proxy == dict(proxy)
    assert dict(proxy) == spec.flops_per_cycle  # reflected
    assert spec.flops_per_cycle["fp32"] == proxy["fp32"]
    assert list(spec.simd_widths) == list(dict(spec.simd_widths))
    with pytest.raises(TypeError):
        spec.flops_per_cycle["fp32"] = 1.0  # type: ignore[index]
    with pytest.raises(AttributeError):
        spec.simd_widths.update({})  # type: ignore[attr-defined]
    with pytest.raises(AttributeError):
        spec.simd_widths._items = {}  # type: ignore[attr-defined]
    given = {"fp32": 2.0}
    frozen = FrozenMapping(given)
    given["fp32"] = 3.0  # a copy: the caller's dict may change after
    assert frozen["fp32"] == 2.0


def test_spec_is_a_jit_static_argument() -> None:
    traces = []

    def scaled(spec, x):
        traces.append(spec.name)
        return x * spec.pe_rows

    fn = jax.jit(scaled, static_argnums=0)
    tiny = preset("tiny")
    assert float(fn(tiny, 2.0)) == 2.0 * tiny.pe_rows
    assert float(fn(tiny.replace(name="tiny"), 3.0)) == 3.0 * tiny.pe_rows  # equal: no trace
    assert len(traces) == 1
    wider = tiny.replace(pe_rows=tiny.pe_rows + 1)
    assert float(fn(wider, 2.0)) == 2.0 * wider.pe_rows
    assert len(traces) == 2


def test_perf_model_pickles_and_prices_the_same() -> None:
    work = Work(ops=(Op("add", "fp32", 64, count=10),), task_activations=5)
    model = PerfModel(preset("wse3"))
    before = model.cost(work).cycles  # its rates built and kept
    for twin in (pickle.loads(pickle.dumps(model)), copy.deepcopy(model)):
        assert twin == model
        assert twin.cost(work).cycles == before


def _report() -> RunReport:
    """A run's report: one traced east shift on the tiny wafer, priced."""
    spec = preset("tiny")
    wafer = build_wafer(spec, defect_seed=1)
    field = wafer.place(np.ones((spec.pe_rows, spec.pe_cols, 2), np.float32))
    traffic = fabric.count(wafer, lambda a: fabric.shift(wafer, a, "E"), field)
    work = Work.from_traffic(traffic, ops=(Op("add", "fp32", 2),))
    return RunReport.build("shift", spec, serial(Phase("shift", work)), traffic=traffic)


def test_run_report_pickles() -> None:
    report = _report()
    twin = pickle.loads(pickle.dumps(report))
    assert twin.predicted.seconds == report.predicted.seconds
    assert twin.to_dict() == report.to_dict()
