"""Hunt 76, `wse wafer defects` and `wse wafer info`. Broken before: a defect map could only
be drawn from a seed (no file in or out), `--json` listed neither the dead PEs nor the
repair's maps, and `wse wafer info` printed a "fabric bandwidth" of 10.3 PB/s (WSE-2) with
no definition beside Cerebras's 220 Pb/s.

Oracles: the saved file read back by NumPy (`np.load`), the remap computed with NumPy from
that file (each kept row's live columns in order), the totals by hand."""

from __future__ import annotations

import json

import numpy as np
import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke
from wse_core.hw.spec import preset

ROOT = typer.main.get_command(app)
WIDE = {"COLUMNS": "250"}


def _run(*args, code: int = 0) -> str:
    got, out = invoke(ROOT, [str(a) for a in args], env=WIDE)
    assert got == code, out[-2000:]
    return out


def _numpy_remap(dead: np.ndarray, spec) -> tuple[list[int], list[list[int]]]:
    """(phys_row, phys_col) by hand: rows with more dead PEs than spare columns retired,
    each kept row's logical column j on its j-th live PE."""
    kept = [r for r in range(dead.shape[0]) if dead[r].sum() <= spec.spare_cols][: spec.pe_rows]
    return kept, [np.flatnonzero(~dead[r])[: spec.pe_cols].tolist() for r in kept]


def test_save_then_load_gives_the_same_map_and_repair(tmp_path):
    spec, path = preset("small"), tmp_path / "map.npz"
    drawn = json.loads(_run("wafer", "defects", "-p", "small", "--seed", 3, "--defect-rate",
                            0.02, "--save", path, "--json"))  # fmt: skip
    dead = np.load(path)["dead"]  # NumPy's reading of the file, the oracle
    assert dead.shape == (33, 34) and dead.dtype == np.bool_
    assert drawn["dead"] == np.argwhere(dead).tolist() and drawn["saved"] == str(path)
    loaded = json.loads(_run("wafer", "defects", "-p", "small", "--load", path, "--json"))
    assert loaded["map_file"] == str(path) and loaded["seed"] == 3
    phys_row, phys_col = _numpy_remap(dead, spec)
    for report in (drawn, loaded):
        assert report["phys_row"] == phys_row and report["phys_col"] == phys_col
    same = ("dead", "dead_pes", "retired_rows", "spare_cols_used", "detour_hops")
    assert {k: drawn[k] for k in same} == {k: loaded[k] for k in same}
    assert "(map " in _run("wafer", "defects", "-p", "small", "--load", path)


def test_a_measured_map_is_repaired(tmp_path):
    spec = preset("tiny")
    dead = np.zeros((spec.physical_rows, spec.physical_cols), bool)
    dead[4, 2] = dead[7, [0, 5]] = True  # row 7: 2 dead > 1 spare column: retired
    np.savez(tmp_path / "measured.npz", dead=dead)
    out = json.loads(_run("wafer", "defects", "-p", "tiny", "--load",
                          tmp_path / "measured.npz", "--json"))  # fmt: skip
    assert out["seed"] is None and out["dead"] == [[4, 2], [7, 0], [7, 5]]
    assert out["retired_rows"] == [7]
    assert (out["phys_row"], out["phys_col"]) == _numpy_remap(dead, spec)


def test_a_full_wafer_lists_counts_not_a_million_numbers():
    out = json.loads(_run("wafer", "defects", "--json"))  # wse3: 896,112 logical PEs
    assert out["phys_col"] is None and "10,000" in out["listed"] and "--save" in out["listed"]
    assert len(out["dead"]) == out["dead_pes"] and len(out["phys_row"]) == 762


def test_an_unrepairable_map_is_still_saved(tmp_path):
    out = _run("wafer", "defects", "-p", "tiny", "--seed", 1, "--defect-rate", 0.3, "--save",
               tmp_path / "bad.npz", code=1)  # fmt: skip
    assert "not repairable" in out and "map saved to" in out
    assert np.load(tmp_path / "bad.npz")["dead"].shape == (9, 9)


@pytest.mark.parametrize(
    "members, said",
    [
        ({"dead": np.zeros((9, 9), int)}, "needs a 2-D bool array of its physical grid, 9 x 9"),
        ({"dead": np.zeros((33, 34), bool)}, "`dead` is a 2-D bool array of 33 x 34"),
        ({"mask": np.zeros((9, 9), bool)}, "has no array `dead`"),
        ({"dead": np.zeros((9, 9), bool), "rate": np.float64(2.0)}, "rate must be"),
    ],
)
def test_a_bad_file_exits_2_in_one_line_and_keeps_the_old_output(tmp_path, members, said):
    np.savez(tmp_path / "in.npz", **members)
    out_file = tmp_path / "out.npz"
    out_file.write_bytes(b"the old map")
    out = _run("wafer", "defects", "-p", "tiny", "--load", tmp_path / "in.npz", "--save",
               out_file, code=2)  # fmt: skip
    assert said in out and len(out.strip().splitlines()) == 1, out
    assert out_file.read_bytes() == b"the old map"


@pytest.mark.parametrize("content", [b"", b"not a zip", None])
def test_foreign_files_exit_2(tmp_path, content):
    path = tmp_path / "x.npz"
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    out = _run("wafer", "defects", "-p", "tiny", "--load", path, code=2)
    assert str(path) in out and len(out.strip().splitlines()) == 1, out


@pytest.mark.parametrize("extra", [["--seed", "2"], ["--defect-rate", "0.1"],
                                   ["--set", "defect_rate=0.1"]])  # fmt: skip
def test_load_refuses_the_options_that_draw_a_map(tmp_path, extra):
    np.savez(tmp_path / "m.npz", dead=np.zeros((9, 9), bool))
    out = _run("wafer", "defects", "-p", "tiny", "--load", tmp_path / "m.npz", *extra, code=2)
    assert "gives the defect map" in out


def test_save_onto_the_loaded_file_is_refused(tmp_path):
    np.savez(tmp_path / "m.npz", dead=np.zeros((9, 9), bool))
    out = _run("wafer", "defects", "-p", "tiny", "--load", tmp_path / "m.npz", "--save",
               tmp_path / "m.npz", code=2)  # fmt: skip
    assert "would destroy the input" in out


# `wse wafer info`'s totals -------------------------------------------------------------
def test_info_defines_each_total_beside_cerebras_figure():
    text = _run("wafer", "info", "-p", "wse2")
    pes, hz = 757 * 996, 850e6
    assert f"{pes * 24 * hz / 1e15:.3g} PB/s = {pes:,} PEs x (16 B read + 8 B write)" in text
    fabric = pes * 16 * hz  # 4 links x 4 B a cycle
    assert (
        f"{fabric / 1e15:.3g} PB/s = {8 * fabric / 1e15:.3g} Pb/s = {pes:,} PEs x 4 links" in text
    )
    assert f"20 PB/s: ours is {pes * 24 * hz / 20e15:.2f}x" in text
    assert f"220 Pb/s: ours is {8 * fabric / 220e15:.2f}x" in text


def test_info_json_carries_the_totals():
    d = json.loads(_run("wafer", "info", "-p", "wse3", "--json"))
    pes = 762 * 1176
    assert d["fabric_bytes_per_s"] == pytest.approx(pes * 16 * 1.1e9)  # the key kept
    fabric = d["totals"]["fabric_bytes_per_s"]
    assert fabric["published"] == pytest.approx(214e15 / 8)
    assert fabric["ratio"] == pytest.approx(pes * 16 * 1.1e9 * 8 / 214e15)
    assert fabric["counted"] and fabric["gap"] and fabric["unit"] == "B/s"
    tiny = json.loads(_run("wafer", "info", "-p", "tiny", "--json"))["totals"]
    assert "published" not in tiny["sram_bytes_per_s"]
