"""Hunt 76 (a seismic-imaging user): a plan past the CS-2's 750 x 994 program rectangle was run
and priced as 0 copies per system beside 36 PB/s; SC23's 92.58 PB/s stood on no row; rows that
leave host I/O out showed "host_io 100%"; a forced --rank-chunk was told "use a larger nb";
`--nb 128` on a 100 x 100 matrix named no option; the matrix rule's error bound was never
printed; --sweep labelled two rows "#2"; small operators printed "0.00 TB/s".

Oracles: the SDK's program rectangle and clock as its single-tile-matvec example states them
(`sweep.py --dims 750,994`, cycles over 850 MHz; the CS-2's 757 x 996 PEs), the least rank
chunk by hand (ceil(rank / side)), the abstract's 92.58 PB/s, NumPy for the error and its
bound, and each row's mechanisms summing to the time its own value divides by.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke, refused_in_one_line
from wse_core import preset
from wse_core.errors import PlacementError
from wse_core.studies.experiment import PredictionRow, row_role
from wse_core.studies.sweeps import sweep
from wse_hpc.tlrmvm import load_operator, save_operator
from wse_hpc.tlrmvm.compress import TlrOperator, compress
from wse_hpc.tlrmvm.grouped_plan import plan_grouped
from wse_hpc.tlrmvm.packed import plan_packed
from wse_hpc.tlrmvm.perf import Deployment, copies_per_system, predict, product_s
from wse_hpc.tlrmvm.seismic import green_operator
from wse_hpc.tlrmvm.wafer import place_plan, plan_placement

ROOT = typer.main.get_command(app)
SDK_RECT = (750, 994)  # a CS-2 program's rectangle (single-tile-matvec's sweep.py --dims)
CS2_PES = (757, 996)  # the CS-2's whole fabric (the SDK)
SDK_CLOCK_HZ = 850e6  # the SDK's benchmark scripts divide cycles by it
SC23_PB_PER_S = 92.58  # Ltaief et al., SC23, abstract: 48 CS-2, 35,784,000 PEs


def _planner(layout):
    return {
        "grouped": lambda op, spec, **kw: plan_grouped(op, spec, price=product_s, **kw),
        "packed": plan_packed,
        "banded": plan_placement,
    }[layout]


def column(tiles: int, rank: int, nb: int) -> TlrOperator:
    """`tiles` nb x nb tiles in one tile column, each of rank `rank` (random bases)."""
    rng = np.random.default_rng(rank)
    u = tuple(rng.standard_normal((nb, rank)).astype(np.float32) for _ in range(tiles))
    v = (rng.standard_normal((nb, tiles * rank)).astype(np.float32),)
    ranks = np.full((tiles, 1), rank)
    return TlrOperator((tiles * nb, nb), nb, 1e-3, ranks, u, v, error_fro=0.0, rule="matrix")


def one_tile(rank: int) -> TlrOperator:
    return column(1, rank, rank)


# (layout, tiles, rank, nb, axis): grouped lays one tile's 995 rank rows across the PE
# columns (1 x 995 at rank chunk 1: inside the wafer's 996 columns, past a program's 994);
# packed and banded stack 376 tiles of rank 2 down the PE rows (752 x 1: inside the wafer's
# 757 rows, past a program's 750)
CASES = [("grouped", 1, 995, 995, 1), ("packed", 376, 2, 4, 0), ("banded", 376, 2, 4, 0)]


@pytest.mark.parametrize(("layout", "tiles", "rank", "nb", "axis"), CASES)
def test_a_plan_past_the_program_rectangle_is_refused_with_the_least_chunk(
    layout, tiles, rank, nb, axis
):
    op, spec, plan = column(tiles, rank, nb), preset("wse2"), _planner(layout)
    pes = tiles * rank if axis == 0 else rank  # at rank chunk 1: a PE per rank row
    assert SDK_RECT[axis] < pes <= CS2_PES[axis]  # the hole: the wafer's PEs, not a program's
    # by hand: the least w whose PEs along that side, (tiles or 1) x ceil(rank / w), fit
    along = tiles if axis == 0 else 1
    least = next(w for w in range(1, rank + 1) if along * -(-rank // w) <= SDK_RECT[axis])
    with pytest.raises(PlacementError) as got:
        plan(op, spec, rank_chunk=1)
    line = str(got.value)
    assert "\n" not in line and f"({layout})" in line
    assert "750 x 994 of its 757 x 996 PEs" in line
    assert line.endswith(f"give a larger --rank-chunk ({least} fits)")
    fitted = plan(op, spec, rank_chunk=least)  # the least that fits: it does
    rows, cols = fitted.grid
    assert rows <= SDK_RECT[0] and cols <= SDK_RECT[1]
    assert copies_per_system(fitted, spec) == (SDK_RECT[0] // rows) * (SDK_RECT[1] // cols) >= 1


def test_the_planners_own_chunk_refused_names_what_would_help():
    """No --rank-chunk given: the planner's is the largest a PE's SRAM holds, so a larger
    one cannot be the fix."""
    spec = preset("wse2").replace(program_rows=1, program_cols=100)
    with pytest.raises(PlacementError) as got:
        _planner("grouped")(one_tile(995), spec)
    line = str(got.value)
    assert "a wse2 program gets 1 x 100 of its 757 x 996 PEs" in line and "--rank-chunk" not in line
    assert line.endswith(
        "compress with a larger --nb or a looser --threshold, or use a larger wafer"
    )


def test_a_plan_past_the_rectangle_is_never_priced_at_zero_copies():
    """A plan made for the whole fabric (no program rectangle) priced on a CS-2: refused,
    where it was 0 copies, 0 PB/s of bases and 3.6e16 B/s by the SDK's rule."""
    op = one_tile(995)
    whole = preset("wse2").replace(program_rows=0, program_cols=0)
    plan = _planner("grouped")(op, whole, rank_chunk=1)
    assert plan.grid == (1, 995)  # fits 757 x 996
    with pytest.raises(PlacementError, match="1 x 995 PEs do not fit a wse2 program's 750 x 994"):
        copies_per_system(plan, preset("wse2"))
    wafer, _ = place_plan(op, preset("wse2"), plan)
    with pytest.raises(PlacementError):
        predict(wafer, plan, op, on=Deployment(48, fill=True))


@pytest.fixture(scope="module")
def tile_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("tlr76") / "r995.npz"
    save_operator(one_tile(995), path)
    return path


def test_run_refuses_the_plan_in_one_line(tile_file):
    args = ["hpc", "tlrmvm", "run", "--operator", tile_file, "--rank-chunk", 1, "--kernel", "xla"]
    refused_in_one_line(ROOT, args, "a wse2 program gets 750 x 994 of its 757 x 996 PEs")
    refused_in_one_line(ROOT, args, "give a larger --rank-chunk (2 fits)")
    code, out = invoke(ROOT, [*args[:-4], "--rank-chunk", 2, "--kernel", "xla", "--json"])
    assert code == 0, out
    c48 = json.loads(out)["predicted_48_systems"]
    assert c48["copies_per_system"] == (750 // 1) * (994 // 498) and c48["model_bytes_per_s"] > 0


def test_an_nb_larger_than_the_matrix_names_the_option(tmp_path):
    out = tmp_path / "s.npz"
    refused_in_one_line(
        ROOT,
        ["hpc", "tlrmvm", "compress", "--n", 100, "--out", out],  # --nb's default: 128
        "--nb 128 is larger than the matrix (100 x 100); give --nb 100 or less",
    )
    np.save(tmp_path / "m.npy", np.ones((100, 60), np.float32))
    refused_in_one_line(
        ROOT,
        ["hpc", "tlrmvm", "compress", "--matrix", tmp_path / "m.npy", "--nb", 101, "--out", out],
        "--nb 101 is larger than the matrix (100 x 60); give --nb 100 or less",
    )
    assert not out.exists()


def test_compress_prints_the_rules_bound_beside_the_threshold(tmp_path):
    n, nb, threshold = 300, 16, 1e-3
    a = green_operator(n=n)
    np.save(tmp_path / "a.npy", a)
    base = ["hpc", "tlrmvm", "compress", "--matrix", tmp_path / "a.npy", "--nb", nb]
    code, text = invoke(ROOT, [*base, "--out", tmp_path / "t.npz"])
    assert code == 0, text
    tiles = math.ceil(n / nb) ** 2  # 19 x 19, by hand
    bound = threshold * math.sqrt(tiles)  # each tile within threshold x ||A||_F, in squares
    assert f"error bound {bound:.3g} (threshold x sqrt({tiles} tiles))" in text
    code, out = invoke(ROOT, [*base, "--out", tmp_path / "j.npz", "--json"])
    d = json.loads(out)
    assert d["error_bound"] == pytest.approx(bound, rel=1e-12)
    op = load_operator(tmp_path / "j.npz")
    achieved = np.linalg.norm(a - op.dense()) / np.linalg.norm(a)  # NumPy, from the file
    assert d["frobenius_rel_error"] == pytest.approx(achieved, rel=1e-3)
    assert threshold < achieved <= bound  # past the threshold, within the rule's bound
    code, text = invoke(ROOT, [*base, "--out", tmp_path / "u.npz", "--threshold-rule", "tile"])
    assert f"error bound {threshold:.3g} (the threshold)" in text


def test_the_sweep_tells_rows_apart_by_their_copies():
    def rows(seed=0):
        one = {"wafer": "wse2", "systems": 1, "layout": "grouped"}
        return [PredictionRow("model_pb_per_s", v, "PB/s", one | {"copies": c}) for v, c in
                ((0.63, 1), (347.0, 551))]  # fmt: skip

    labels = [label for label, _, _ in sweep(rows, "dsd_issue_cycles", (8.0, 11.0)).lines]
    assert len(labels) == 2 and not any("#" in label for label in labels)
    assert any("copies=1 " in f"{label} " for label in labels)
    assert any("copies=551" in label for label in labels)


@pytest.fixture(scope="module")
def case_rows():
    """`ltaief23-tlrmvm`'s rows of one wafer and layout, on a small slice in place of SC23's
    (the same code: only the operator is smaller)."""
    from wse_hpc.studies import ltaief23_tlrmvm as study

    op = compress(green_operator(n=1024), nb=128, threshold=1e-3)
    mp = pytest.MonkeyPatch()
    mp.setattr(study, "paper_operator", lambda seed=0: op)
    try:
        rows, info, _ = study._case_rows("wse2", "grouped", 0)
    finally:
        mp.undo()
    return op, rows, info


def test_each_rows_mechanisms_are_the_time_its_value_divides_by(case_rows):
    op, rows, info = case_rows
    clock = preset("wse2").clock_hz
    seen = set()
    for r in rows:
        p, mech = r.params, r.mechanisms
        cycles = sum(mech.values())
        if r.name == "time_per_mvm":
            assert cycles / clock == pytest.approx(r.value * 1e-6, rel=1e-9)
            continue
        if r.name.startswith("model"):  # the compressed bases of every copy, once per vector
            moved = p["systems"] * p["copies"] * op.bases_bytes
            assert cycles / clock == pytest.approx(moved / (r.value * 1e15), rel=1e-9)
            assert ("host_io" in mech) == (r.name == "model_with_io_pb_per_s"), (r.name, p)
            seen.add(r.name)
            continue
        # the SDK's accounting: the slowest PE's phases 1 and 3 at 850 MHz
        key = f"systems_{p['systems']}" + ("_real_split" if p["bytes"] == "real-split" else "")
        c = info[key]["cerebras"]
        kind = "relative" if "relative" in r.name else "absolute"
        pes = 750 * 994 * p["systems"] if r.name.startswith("sdk_") else p["pes"]
        expect = c[f"{kind}_bytes_per_pe"] * pes / (cycles / SDK_CLOCK_HZ) / 1e15
        assert r.value == pytest.approx(expect, rel=1e-9), r.name
        assert "host_io" not in mech
        seen.add(r.name)
    assert {"model_pb_per_s", "model_with_io_pb_per_s"} <= seen
    # the small slice's I/O bounds the filled systems: only that row says so
    io = [r for r in rows if r.name == "model_with_io_pb_per_s" and r.params["systems"] == 48]
    assert io[0].mechanisms.get("host_io", 0) > 0.5 * sum(io[0].mechanisms.values())


def test_sc23s_figure_is_a_check_on_the_48_system_sdk_rows_only(case_rows):
    _, rows, _ = case_rows
    checks = [r for r in rows if row_role(r) == "check"]
    assert {(r.name, r.params["bytes"]) for r in checks} == {
        (f"sdk_{k}{s}_pb_per_s", b)
        for k in ("relative", "absolute")
        for s, b in (("", "held"), ("_real_split", "real-split"))
    }
    for r in checks:
        assert r.params["systems"] == 48 and r.published == SC23_PB_PER_S
        assert r.params["pes"] <= 35_784_000 == r.params["rectangle_pes"]
        assert "92.58" in r.source and "abstract" in r.source
        # nothing fitted: the SDK's rule scales one system's figure by 48, exactly
        one = next(
            o
            for o in rows
            if o.name == r.name
            and o.params["systems"] == 1
            and o.params["bytes"] == r.params["bytes"]
        )
        assert r.value == pytest.approx(48 * one.value, rel=1e-12)
        assert one.published is None and row_role(one) == "prediction"
    assert all(r.published is None for r in rows if r not in checks)


def test_a_small_operator_is_shown_in_significant_figures():
    from wse_cli.commands.hpc_tlrmvm import _figure

    for x in (0.0037123, 4.2e-7, 0.099, 0.371, 12.345, 3.0e3):
        shown = _figure(x)
        assert float(shown) == pytest.approx(x, rel=0.05), (x, shown)  # two figures at least
        assert len(shown.split(".")[1]) >= 2
        if x >= 0.1:
            assert shown == f"{x:.2f}"
    assert _figure(0.0) == "0.00"


def test_auto_notes_pe_kernels_on_a_small_operator():
    from wse_hpc.tlrmvm.grouped import PE_KERNEL_MIN_BYTES, kernel_note

    op = one_tile(64)
    plan = _planner("grouped")(op, preset("wse2"))
    assert plan.padded_bases_bytes < PE_KERNEL_MIN_BYTES
    assert "--kernel xla" in kernel_note(plan, "auto", "pe")
    assert kernel_note(plan, "pe", "pe") is None and kernel_note(plan, "auto", "xla") is None
