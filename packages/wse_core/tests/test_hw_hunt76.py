"""Hunt 76, the wafer's hardware description. Broken before:

1. An SRAM over-budget error named the region's corner, not the PE over budget: with 40,000 B
   on PEs (5..6, 5..6) of an 8 x 8 grid, allocating 10,000 B on the grid said "PE (0, 0) has
   9152 B free" (PE (0, 0) used 0 B; PE (5, 5) is the full one).
2. A preset comment said 16 + 8 B a cycle "matches the 20 PB/s marketing total" (it is 0.77x
   at the preset's grid and clock), and `wse wafer info` printed totals with no definition
   and no published figure beside them.
3. `DefectMap` took any array: a map of 2s counted "18 dead PEs" on a row of 9, a 1-D map
   was an IndexError in `remap`, a NaN map a TypeError.
4. Defect maps had no file: a measured map could not be repaired.

Oracles: NumPy's argmax of the per-PE bytes summed from the allocations' rectangles; the
totals by hand from the published grid, clock and bytes a cycle; a map saved and loaded
against the map itself (and its remap against the original's); NumPy's own `np.savez`
files for the refusals."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from wse_core import DefectError, DefectMap, SramBudgetError, defect_map, remap
from wse_core.hw.defect_files import load_defect_map, save_defect_map
from wse_core.hw.published import PUBLISHED, published_totals
from wse_core.hw.spec import preset
from wse_core.hw.sram import SramLedger

PRESETS_PY = Path(__file__).parents[1] / "src/wse_core/hw/presets.py"


# 1. The PE an SRAM refusal names ---------------------------------------------------------
def _per_pe(ledger: SramLedger) -> np.ndarray:
    """Bytes in use on every PE, summed from the allocations' rectangles (the oracle)."""
    use = np.zeros((ledger.rows, ledger.cols), dtype=np.int64)
    for a in ledger.allocations:
        r = a.region
        use[r.row0 : r.row0 + r.rows, r.col0 : r.col0 + r.cols] += a.bytes_per_pe
    return use


def _named_pe(message: str) -> tuple[int, int, int]:
    """(row, col, free bytes) that a refusal names."""
    m = re.search(r"but PE \((\d+), (\d+)\) has (-?\d+) B free", message)
    assert m, message
    return int(m[1]), int(m[2]), int(m[3])


def test_the_hunts_case_names_pe_5_5():
    ledger = SramLedger(8, 8, 49152)
    ledger.allocate("a", 40000, ledger.region("hot", 5, 5, 2, 2))
    with pytest.raises(SramBudgetError) as e:
        ledger.allocate("b", 10000)
    use = _per_pe(ledger)
    want = np.unravel_index(np.argmax(use), use.shape)
    assert _named_pe(str(e.value)) == (*map(int, want), 49152 - int(use.max()))  # was (0, 0)
    assert "(40000 of 49152 B in use)" in str(e.value)


@pytest.mark.parametrize("seed", range(40))
def test_the_named_pe_is_numpys_argmax_over_the_region(seed):
    rng = np.random.default_rng(seed)
    rows, cols, budget = int(rng.integers(1, 12)), int(rng.integers(1, 12)), 1000
    ledger = SramLedger(rows, cols, budget)

    def region(name):
        r0, c0 = int(rng.integers(0, rows)), int(rng.integers(0, cols))
        h, w = int(rng.integers(1, rows - r0 + 1)), int(rng.integers(1, cols - c0 + 1))
        return ledger.region(name, r0, c0, h, w)

    for i in range(int(rng.integers(1, 8))):
        target = region(f"r{i}")
        free = budget - int(_per_pe(ledger)[target.row0 :, target.col0 :][
            : target.rows, : target.cols].max())  # fmt: skip
        if free > 0:
            ledger.allocate(f"a{i}", int(rng.integers(0, free + 1)), target)
    target = region("last")
    window = _per_pe(ledger)[
        target.row0 : target.row0 + target.rows, target.col0 : target.col0 + target.cols
    ]
    r, c = np.unravel_index(np.argmax(window), window.shape)  # row-major first, as NumPy's
    want = (target.row0 + int(r), target.col0 + int(c), budget - int(window.max()))
    assert ledger.fullest_pe(target) == (int(window.max()), want[0], want[1])
    with pytest.raises(SramBudgetError) as e:
        ledger.allocate("over", budget - int(window.max()) + 1, target)
    assert _named_pe(str(e.value)) == want


# 2. The totals and what they count ---------------------------------------------------------
GRID = {"wse1": (633, 633, 850e6), "wse2": (757, 996, 850e6), "wse3": (762, 1176, 1.1e9)}


@pytest.mark.parametrize("name", sorted(GRID))
def test_the_totals_by_hand(name):
    rows, cols, hz = GRID[name]
    spec = preset(name)
    # the per-cycle figures are the SDK's and the stencil paper's (the calibration's): kept
    assert (spec.sram_read_bytes_per_cycle, spec.sram_write_bytes_per_cycle) == (16.0, 8.0)
    assert spec.link_bytes_per_cycle == 4.0
    totals = published_totals(spec)
    sram_bw = rows * cols * 24 * hz
    fabric = rows * cols * 4 * 4 * hz
    assert totals["sram_bytes_per_s"]["value"] == pytest.approx(sram_bw, rel=1e-12)
    assert totals["fabric_bytes_per_s"]["value"] == pytest.approx(fabric, rel=1e-12)
    assert f"{rows * cols:,} PEs x (16 B read + 8 B write)" in totals["sram_bytes_per_s"][
        "counted"]  # fmt: skip
    assert "4 links x 4 B" in totals["fabric_bytes_per_s"]["counted"]
    published = {"wse1": 9e15, "wse2": 20e15, "wse3": 21e15}[name]
    assert totals["sram_bytes_per_s"]["ratio"] == pytest.approx(sram_bw / published)


def test_the_hunts_figures():
    """The tester's: WSE-2 15.4 vs 20 PB/s (-23%), WSE-3 23.7 vs 21 (+13%), WSE-1 8.17 vs 9;
    fabric 82 and 126 Pb/s against 220 and 214."""
    t = {name: published_totals(preset(name)) for name in GRID}
    assert round(t["wse2"]["sram_bytes_per_s"]["value"] / 1e15, 1) == 15.4
    assert round(t["wse2"]["sram_bytes_per_s"]["ratio"] - 1, 2) == -0.23
    assert round(t["wse3"]["sram_bytes_per_s"]["value"] / 1e15, 1) == 23.7
    assert round(t["wse3"]["sram_bytes_per_s"]["ratio"] - 1, 2) == 0.13
    assert round(t["wse1"]["sram_bytes_per_s"]["value"] / 1e15, 2) == 8.17
    for name, bits, published in (("wse2", 82, 220e15), ("wse3", 126, 214e15)):
        fabric = t[name]["fabric_bytes_per_s"]
        assert round(8 * fabric["value"] / 1e15) == bits
        assert fabric["published"] == published / 8
        assert fabric["published_as"] == f"{published / 1e15:g} Pb/s"
    assert "fabric_bytes_per_s" in t["wse1"] and "published" not in t["wse1"]["fabric_bytes_per_s"]


def test_the_gap_lines_reproduce_the_published_figures():
    # 20 PB/s = 850,000 cores x 24 B x 0.98 GHz; 220 Pb/s / 8 at that clock = 33.0 B a core
    wse2 = published_totals(preset("wse2"))
    clock = 20e15 / (850_000 * 24)
    assert f"850,000 cores x 24 B a cycle at {clock / 1e9:.3g} GHz" in wse2["sram_bytes_per_s"][
        "gap"]  # fmt: skip
    assert f"{220e15 / 8 / (850_000 * clock):.1f} B a cycle" in wse2["fabric_bytes_per_s"]["gap"]
    assert "inferred" in wse2["fabric_bytes_per_s"]["gap"]


def test_a_spec_without_published_figures_shows_only_its_own():
    tiny = published_totals(preset("tiny"))
    assert all(set(t) == {"value", "unit", "counted"} for t in tiny.values())
    assert set(PUBLISHED) == {"wse1", "wse2", "wse3"}


def test_the_preset_comment_no_longer_claims_a_match():
    text = PRESETS_PY.read_text()
    assert "which matches the" not in text and "15.4 PB/s, 0.77x" in text


# 3. DefectMap checks its array ------------------------------------------------------------
@pytest.mark.parametrize(
    "dead, said",
    [
        (np.full((9, 9), 2), "2-D int64 array of shape (9, 9)"),  # was "18 dead PEs" a row
        (np.zeros(81, bool), "1-D bool array of shape (81,)"),  # was an IndexError
        (np.full((9, 9), np.nan), "2-D float64 array of shape (9, 9)"),  # was a TypeError
        (np.zeros((9, 9, 1), bool), "3-D bool array"),
        ([[False] * 9] * 9, "a list"),
    ],
)
def test_a_defect_map_is_a_2d_bool_array(dead, said):
    with pytest.raises(DefectError) as e:
        DefectMap(dead=dead, seed=None, rate=0.0)
    assert "must be a 2-D NumPy bool array" in str(e.value) and said in str(e.value)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("seed, rate", [(-1, 0.0), (1.5, 0.0), (None, float("nan")), (0, 1.5)])
def test_a_defect_maps_seed_and_rate_are_checked(seed, rate):
    with pytest.raises(DefectError):
        DefectMap(dead=np.zeros((9, 9), bool), seed=seed, rate=rate)


def test_the_wrong_shape_names_both():
    with pytest.raises(DefectError) as e:
        remap(preset("tiny"), DefectMap(dead=np.zeros((8, 9), bool), seed=None, rate=0.0))
    assert "8 x 9 PEs" in str(e.value) and "physical grid is 9 x 9" in str(e.value)


# 4. Defect-map files --------------------------------------------------------------------
def _repair(spec, dm):
    """remap's result, or its refusal's line (a map the spares cannot repair)."""
    try:
        return remap(spec, dm)
    except DefectError as e:
        return str(e)


@pytest.mark.parametrize("name, seed, rate", [("small", 3, 0.02), ("demo", 7, 0.01),
                                              ("tiny", 1, 0.3), ("small", 0, 0.0)])  # fmt: skip
def test_a_saved_map_loads_as_itself_and_repairs_the_same(tmp_path, name, seed, rate):
    spec = preset(name)
    dm = defect_map(spec, seed, rate)
    path = save_defect_map(tmp_path / "map.npz", dm, spec.name)
    back = load_defect_map(path, spec)
    assert back == dm and back.dead.dtype == np.bool_
    assert np.array_equal(np.load(path)["dead"], dm.dead)  # NumPy reads the file as written
    got, want = _repair(spec, back), _repair(spec, dm)
    assert got == want and type(got) is type(want)


def test_a_measured_map_is_np_savez_of_dead_alone(tmp_path):
    spec = preset("small")
    dead = np.zeros((spec.physical_rows, spec.physical_cols), bool)
    dead[[2, 5, 5], [3, 0, 31]] = True
    np.savez(tmp_path / "measured.npz", dead=dead)
    dm = load_defect_map(tmp_path / "measured.npz", spec)
    assert dm.seed is None and dm.rate == pytest.approx(3 / dead.size)
    assert np.array_equal(dm.dead, dead)
    rm = remap(spec, dm)  # row 5 loses columns 0 and 31: logical columns shift past them
    assert rm.phys_col[5].tolist() == [c for c in range(spec.physical_cols) if c not in (0, 31)][
        : spec.pe_cols]  # fmt: skip


def _bad_files(folder: Path, spec) -> dict[str, Path]:
    shape = (spec.physical_rows, spec.physical_cols)
    ok = np.zeros(shape, bool)
    arrays = {
        "ints": {"dead": ok.astype(int)},
        "flat": {"dead": ok.ravel()},
        "shape": {"dead": np.zeros((3, 3), bool)},
        "typo": {"daed": ok},
        "extra": {"dead": ok, "notes": np.arange(3)},
        "seed": {"dead": ok, "seed": np.int64(-1)},
        "rate": {"dead": ok, "rate": np.float64(np.nan)},
        "rates": {"dead": ok, "rate": np.ones(3)},
        "wafer": {"dead": ok, "wafer": np.arange(2)},
    }
    out = {}
    for name, members in arrays.items():
        np.savez(folder / f"{name}.npz", **members)
        out[name] = folder / f"{name}.npz"
    np.save(folder / "single.npy", ok)
    (folder / "text.npz").write_text("not an archive")
    (folder / "empty.npz").write_bytes(b"")
    (folder / "dir.npz").mkdir()
    out.update(single=folder / "single.npy", text=folder / "text.npz",
               empty=folder / "empty.npz", dir=folder / "dir.npz",
               missing=folder / "missing.npz")  # fmt: skip
    return out


def test_bad_files_are_refused_in_one_line(tmp_path):
    spec = preset("small")
    for name, path in _bad_files(tmp_path, spec).items():
        with pytest.raises(DefectError) as e:
            load_defect_map(path, spec)
        message = str(e.value)
        assert "\n" not in message and str(path) in message, (name, message)
    with pytest.raises(DefectError, match=r"33 x 34 \(32 \+ 1 spare rows"):
        load_defect_map(tmp_path / "shape.npz", spec)  # the shape given and wanted


def test_a_failed_save_leaves_the_old_file(tmp_path, monkeypatch):
    spec = preset("tiny")
    path = save_defect_map(tmp_path / "m.npz", defect_map(spec, 1, 0.1), spec.name)
    before = path.read_bytes()

    def broken(*args, **kwargs):
        raise OSError(28, "No space left on device")

    import wse_core.host.atomic as atomic

    monkeypatch.setattr(atomic.os, "replace", broken)
    with pytest.raises(OSError):
        save_defect_map(path, defect_map(spec, 2, 0.2), spec.name)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["m.npz"]  # no part file left
