"""Hunt 74: `DefectMap == DefectMap` and `Remap == Remap` raised "truth value of an array is
ambiguous" (dataclass equality over ndarray fields). They compare by value now; the oracle is
NumPy's `array_equal` over the arrays and `==` over the other fields, and a pickle round trip
(equal to the original)."""

from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pytest
from wse_core import defect_map, preset
from wse_core.hw.defects import DefectMap, Remap, identity_remap, remap


def _same(a, b) -> bool:
    """The oracle: every field equal, arrays by NumPy."""
    return all(
        np.array_equal(x, y) if isinstance(x, np.ndarray) else x == y
        for x, y in zip(dataclasses.astuple(a), dataclasses.astuple(b), strict=True)
    )


@pytest.mark.parametrize("seeds", [(1, 1), (1, 2), (3, 4)])
def test_defect_maps_and_remaps_compare_by_value(seeds) -> None:
    spec = preset("tiny").replace(defect_rate=0.05)
    a, b = (defect_map(spec, s) for s in seeds)
    assert (a == b) is _same(a, b)
    assert (a != b) is not _same(a, b)
    ra, rb = remap(spec, a), remap(spec, b)
    assert (ra == rb) is _same(ra, rb)
    if seeds[0] == seeds[1]:
        assert a == b and ra == rb and a is not b


def test_fields_each_make_a_difference() -> None:
    spec = preset("tiny")
    a = defect_map(spec, 1, 0.05)
    flipped = a.dead.copy()
    flipped[0, 0] = not flipped[0, 0]
    assert a != DefectMap(flipped, a.seed, a.rate)
    assert a != DefectMap(a.dead.copy(), a.seed, a.rate + 0.01)
    assert a == DefectMap(a.dead.copy(), a.seed, a.rate)
    ident = identity_remap(spec)
    assert ident == remap(spec, None)
    assert ident == Remap(  # the identity's broadcast views equal full arrays of the same values
        np.arange(spec.pe_rows),
        np.tile(np.arange(spec.pe_cols), (spec.pe_rows, 1)),
        ident.retired_rows,
        ident.spare_rows_used,
        ident.spare_cols_used,
    )
    assert a != "a defect map" and ident != 0


def test_round_trips_equal_and_unhashable() -> None:
    spec = preset("tiny")
    a = defect_map(spec, 2, 0.05)
    r = remap(spec, a)
    r.link_hops(0)  # its cache filled: not part of its value
    assert pickle.loads(pickle.dumps(a)) == a
    assert pickle.loads(pickle.dumps(r)) == r
    for value in (a, r):
        with pytest.raises(TypeError):
            hash(value)
