"""Hunt 75: a report's parts are values, and `FrozenMapping` reads as `MappingProxyType`.

- `Traffic` (its `links` a dict) and `Cost` / `Timing` (`Cost.mechanisms` a dict) raised in
  `hash`, so neither could be a `jax.jit` static argument: their mappings are now
  `FrozenMapping`s. The oracles: Python's hash contract (equal values hash equal), pickle and
  deepcopy round trips, and jit's cache (an equal value is a cache hit).
- `FrozenMapping` lacked `|`, `reversed` and `.copy()`, and `dataclasses.asdict` of a
  `WaferSpec` could not be JSON: the oracle for each operation is `types.MappingProxyType`
  over the same dict, and for the JSON the spec rebuilt from it."""

from __future__ import annotations

import copy
import dataclasses
import json
import pickle
from types import MappingProxyType

import jax
import numpy as np
import pytest
from wse_core import Op, PerfModel, Work, fabric, preset
from wse_core.cost.pricing import Phase, serial
from wse_core.hw.description import WaferSpec
from wse_core.hw.frozen_mapping import FrozenMapping
from wse_core.hw.traffic import Traffic
from wse_core.hw.wafer import build_wafer


def _traffic() -> Traffic:
    wafer = build_wafer(preset("tiny"), grid=(8, 8), mesh_shape=(2, 2))
    field = wafer.place(np.ones((8, 8, 4), np.float32))
    return fabric.count(
        wafer, lambda a: fabric.allreduce(wafer, fabric.shift(wafer, a, "E")), field
    )


def _round_trips(value: object) -> None:
    for twin in (pickle.loads(pickle.dumps(value)), copy.deepcopy(value)):
        assert twin == value and twin is not value
        assert hash(twin) == hash(value)


def test_traffic_and_timing_hash_by_value() -> None:
    traffic = _traffic()
    _round_trips(traffic)
    same = Traffic(
        **{**dataclasses.asdict(traffic), "links": dict(reversed(traffic.links.items()))}
    )
    assert same == traffic and hash(same) == hash(traffic)
    assert traffic + Traffic() == traffic  # a sum builds its links anew
    assert hash(traffic.scaled(2)) == hash(traffic + traffic)
    work = Work.from_traffic(traffic, ops=(Op("add", "fp32", 4),))
    timing = PerfModel(preset("tiny")).evaluate(serial(Phase("step", work), repeat=3))
    _round_trips(timing)
    assert timing.to_dict() == pickle.loads(pickle.dumps(timing)).to_dict()
    json.dumps(traffic.to_dict())
    json.dumps(timing.to_dict())


def test_traffic_and_timing_are_jit_static_arguments() -> None:
    traced = []

    def words(t, x):
        traced.append(1)
        return x * t.words

    fn = jax.jit(words, static_argnums=0)
    traffic = _traffic()
    assert float(fn(traffic, 1.0)) == traffic.words
    assert float(fn(pickle.loads(pickle.dumps(traffic)), 2.0)) == 2 * traffic.words
    assert len(traced) == 1  # the equal twin is a cache hit


@pytest.mark.parametrize(
    "op",
    [
        lambda m: m | {"c": 3.0},
        lambda m: {"c": 3.0, "a": 0.0} | m,
        lambda m: list(reversed(m)),
        lambda m: m.copy(),
        lambda m: dict(m),
        lambda m: (m["a"], m.get("z"), len(m), "b" in m, list(m.items())),
    ],
)
def test_frozen_mapping_reads_as_a_mapping_proxy(op) -> None:
    items = {"a": 1.0, "b": 2.0}
    got, want = op(FrozenMapping(items)), op(MappingProxyType(dict(items)))
    assert got == want and type(got) is type(want)


def test_frozen_mapping_refuses_what_a_mapping_proxy_refuses() -> None:
    items = {"a": 1.0}
    for m in (FrozenMapping(items), MappingProxyType(dict(items))):
        with pytest.raises(TypeError):
            m["a"] = 2.0  # type: ignore[index]
        with pytest.raises(TypeError):
            del m["a"]  # type: ignore[attr-defined]
        with pytest.raises(TypeError):
            m |= {"b": 1.0}  # type: ignore[misc]
        for name in ("update", "pop", "popitem", "clear", "setdefault"):
            with pytest.raises(AttributeError):
                getattr(m, name)("a")
        assert dict(m) == items


@pytest.mark.parametrize("name", ["tiny", "wse2", "wse3"])
def test_spec_asdict_is_json(name: str) -> None:
    spec = preset(name)
    loaded = json.loads(json.dumps(dataclasses.asdict(spec)))
    assert loaded == spec.to_dict()
    assert WaferSpec(**loaded) == spec
