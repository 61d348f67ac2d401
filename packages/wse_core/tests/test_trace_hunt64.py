"""`wse_core.trace.load` and the page against hunt 64's traces: what the page or the PNG
cannot show is refused with one line naming the field. Broken before:
- NaN / Infinity in the header (meta.clock_hz, any field) and layers of 1e308 (their totals
  summed to inf) were accepted; the page's JSON held NaN / Infinity, JSON.parse failed and
  the page was blank (hole 4);
- a missing layer, a rect or critical PE of 10^400 or off the grid, rows / cols / block of
  10^30 were accepted, and the PNG was a traceback (hole 5);
- meta.bound had no length limit: 2,000,000 characters took minutes in the PNG's title
  (hole 6);
- layers of any cell count were read: 2,800 x 2,800 became a 460 MB page and 3 GB of memory
  (hole 7); and trace_from's square blocks overshot MAX_CELLS (725 x 723 PEs: 131,406 cells);
- a lone surrogate in the header's name was a UnicodeEncodeError writing the page (hole 9).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re

import numpy as np
import pytest
from wse_core import Phase, RunReport, Work, preset, serial
from wse_core.testing import tiny_trace
from wse_core.trace import MAX_CELLS, TraceError, load, trace_from
from wse_core.trace.page import page_html
from wse_core.trace.schema import MAX_VALUE


def _strict_json(text: str):
    """json.loads as JSON.parse reads: NaN / Infinity are no JSON."""

    def refuse(word):
        raise ValueError(f"{word} is no JSON")

    return json.loads(text, parse_constant=refuse)


def _page_data(page: str):
    return _strict_json(re.search(r'application/json">(.*?)</script>', page, re.S)[1])


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A valid 8 x 8 trace (tiny_trace) with one region, saved: (header, arrays)."""
    trace = dataclasses.replace(tiny_trace()[0], regions=[{"name": "r", "rect": [0, 0, 2, 2]}])
    path = trace.save(tmp_path_factory.mktemp("t") / "t.npz")
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    return json.loads(bytes(arrays.pop("header"))), arrays


def _variant(saved, folder, change):
    head, arrays = json.loads(json.dumps(saved[0])), {k: v.copy() for k, v in saved[1].items()}
    change(head, arrays)
    out = folder / "bad.npz"
    np.savez_compressed(out, header=np.frombuffer(json.dumps(head).encode(), np.uint8), **arrays)
    return out


def _ones(shape):  # every layer replaced by ones of `shape`
    return lambda h, a: a.update({k: np.ones(shape) for k in a if k != "dead"})


def _meta(**kv):
    return lambda h, a: h["meta"].update(kv)


def _both(*changes):
    return lambda h, a: [c(h, a) for c in changes]


def _drop(*keys):
    def change(h, a):
        h["layers"] = [x for x in h["layers"] if x["key"] not in keys]
        for k in keys:
            del a[k]

    return change


CASES = [
    (_meta(clock_hz=float("nan")), "meta.clock_hz is NaN; a trace holds finite numbers"),
    (_meta(critical_cycles=float("inf")), "meta.critical_cycles is Infinity; a trace holds"),
    (lambda h, a: h["phases"][0].update(extra=[1, -math.inf]), "phases[0].extra[1] is -Infinity"),
    (lambda h, a: a["busy_cycles"].fill(1e308),
     "layer busy_cycles holds 1e+308; a trace's values are at most 3.4e+38 (the page draws "
     "float32)"),
    (_drop("link_N"), "layer link_N is missing"),
    (lambda h, a: h.update(layers=h["layers"][:1]), "layer busy_cycles is missing (and 9 more)"),
    (lambda h, a: h["regions"][0].update(rect=[10**400, 0, 2, 2]),
     "regions[0].rect[0] is an integer past a float's range (about 1.8e308)"),
    (lambda h, a: h["regions"][0].update(rect=[7, 0, 2, 2]),
     "regions[0].rect is [7, 0, 2, 2]; it must be [row0, col0, rows, cols] within the 8 x 8 "
     "grid"),
    (lambda h, a: h["allocations"][0].update(region=[0, -1, 8, 8]),
     "allocations[0].region is [0, -1, 8, 8]; it must be [row0, col0, rows, cols] within"),
    (lambda h, a: h["phases"][0].update(critical_pe=[10**400, 0]),
     "phases[0].critical_pe[0] is an integer past a float's range"),
    (lambda h, a: h["phases"][0].update(critical_pe=[0, 8]),
     "phases[0].critical_pe is [0, 8]; it must be a PE [row, col] of the 8 x 8 grid"),
    (_both(lambda h, a: h.update(rows=10**30, cols=10**30, block=10**30), _ones((1, 1))),
     "rows must be an integer in [1, 100,000], got 1000000000000000000000000000000"),
    (_both(lambda h, a: h.update(block=10**6), _ones((1, 1))),
     "block must be an integer in [1, 8], got 1000000"),
    (lambda h, a: h.update(physical_shape=[10**6, 9]),
     "physical_shape[0] must be an integer in [1, 200,000], got 1000000"),
    (_meta(bound="x" * 2_000_000),
     "meta.bound must be a text of at most 1,000 characters, got 2,000,000 characters"),
    (_meta(units=5), "meta.units must be a text of at most 1,000 characters, got 5"),
    (_meta(predicted_s="1"), "meta.predicted_s must be a number, got '1'"),
    (lambda h, a: h.update(name="run\ud800x"), "name holds '\\ud800', a lone surrogate, not text"),
    (_meta(**{"a\udc80": 1}), "a key of meta holds '\\udc80', a lone surrogate, not text"),
]  # fmt: skip


@pytest.mark.parametrize(("change", "message"), CASES)
def test_what_the_page_or_png_cannot_show_is_refused_naming_the_field(
    saved, tmp_path, change, message
):
    bad = _variant(saved, tmp_path, change)
    with pytest.raises(TraceError) as e:
        load(bad)
    line = str(e.value)
    assert line.startswith(f"{bad} is not a valid wse trace: ") and message in line, line
    assert "\n" not in line


def test_a_grid_past_max_cells_is_refused_before_any_array_is_read(saved, tmp_path, monkeypatch):
    # the header says 8 x 8; the layers hold 400 x 400 (were read whole, then refused; hunt
    # 64's 2,800 x 2,800 layers became a 460 MB page)
    bad = _variant(saved, tmp_path, _ones((400, 400)))
    npy = np.lib.npyio.NpzFile.__getitem__.__globals__["format"]  # what NpzFile reads with
    reads = []
    real = npy.read_array

    def spy(*a, **k):
        reads.append(1)
        return real(*a, **k)

    monkeypatch.setattr(npy, "read_array", spy)
    with pytest.raises(TraceError) as e:
        load(bad)
    assert str(e.value) == (
        f"{bad} has 160,000 cells in layer 'sram_bytes' (400 x 400); a wse trace holds at "
        "most 131,072 (its producers write bigger grids in blocks)"
    )
    assert reads == []


def test_the_largest_trace_load_takes_loads_and_its_page_is_strict_json(saved, tmp_path):
    # MAX_CELLS cells of MAX_VALUE (the float32 maximum): the edge of both limits
    r, c = 256, MAX_CELLS // 256
    big = _both(
        lambda h, a: h.update(rows=r, cols=c, shape=[r, c], physical_shape=[r, c]),
        lambda h, a: a.update({k: np.full((r, c), MAX_VALUE) for k in a if k != "dead"}),
        lambda h, a: a.update(dead=np.zeros((0, 2), np.int64)),
    )
    trace = load(_variant(saved, tmp_path, big))
    data = _page_data(page_html(trace))
    for layer in data["header"]["layers"]:  # totals as NumPy sums them: finite
        assert layer["total"] == float(trace.layers[layer["key"]].sum())
        assert math.isfinite(layer["total"])
    assert data["layers"]["busy_cycles"] == {"const": MAX_VALUE}


def test_a_valid_traces_page_is_strict_json_and_keeps_the_header(saved, tmp_path):
    trace = load(_variant(saved, tmp_path, lambda h, a: None))
    data = _page_data(page_html(trace))
    assert data["header"]["meta"] == saved[0]["meta"]
    assert data["header"]["regions"] == saved[0]["regions"]


def test_a_page_never_holds_nan_even_of_a_trace_built_in_memory():
    trace = tiny_trace()[0]
    bad = dataclasses.replace(trace, meta={**trace.meta, "clock_hz": float("nan")})
    with pytest.raises(ValueError, match="not JSON compliant"):  # was a page with NaN: blank
        page_html(bad)


@pytest.mark.parametrize(
    "grid", [(725, 723), (5, 100_000), (762, 1176), (362, 362), (363, 363), (1, 1), (1, 99_999)]
)
def test_trace_from_blocks_never_exceed_max_cells(grid):
    from wse_core.trace import _block

    def cells(b):
        return -(-grid[0] // b) * -(-grid[1] // b)

    smallest = next(b for b in range(1, max(grid) + 1) if cells(b) <= MAX_CELLS)  # oracle
    assert _block(grid, MAX_CELLS) == smallest


def test_a_725_by_723_trace_round_trips(tmp_path):
    # the square root gave 2 x 2 blocks: 363 x 362 = 131,406 cells, past MAX_CELLS
    spec = preset("wse3")
    report = RunReport.build("t", spec, serial(Phase("hop", Work(latency_hops=5))))
    trace = trace_from(spec, report, grid=(725, 723))
    assert trace.block == 3 and math.prod(trace.shape) <= MAX_CELLS
    back = load(trace.save(tmp_path / "t.npz"))
    assert back.shape == trace.shape == (242, 241)
    for key, layer in trace.layers.items():
        np.testing.assert_array_equal(back.layers[key], layer)
