"""Hunt 77: a TLR-MVM plan past the program rectangle ignored --batch. `--batch 46 --rank-chunk
2` of a 1024 x 1024 operator (nb 32) on `tiny` said "no --rank-chunk fits both them and a PE's
SRAM: compress with a larger --nb ... or use a larger wafer", and `--batch 500 --rank-chunk 2`
said "at most --batch 46 fits", where only --batch 5 (at a larger rank chunk) ran.

Oracle: the planners themselves, searched exhaustively. The --batch a refusal names runs (at
the rank chunk it names, else the planner's own), and the next batch runs at no rank chunk
at all (every chunk from 1 to past the largest that changes the grid, and the planner's own).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke
from wse_core import preset
from wse_core.errors import PlacementError, SramBudgetError
from wse_hpc.tlrmvm import load_operator
from wse_hpc.tlrmvm.compress import TlrOperator
from wse_hpc.tlrmvm.grouped_plan import plan_grouped
from wse_hpc.tlrmvm.packed import plan_packed
from wse_hpc.tlrmvm.perf import product_s
from wse_hpc.tlrmvm.wafer import plan_placement

ROOT = typer.main.get_command(app)
# The hunt's wafer: `tiny` as it was then, every byte of a PE data's (hunt 81 reserved the
# program's code and stack, `code_stack_bytes_per_pe`; the searches below find today's
# `tiny`'s largest batch as they do this one's)
HUNT_TINY = preset("tiny").replace(code_stack_bytes_per_pe=0)
REFUSED = (PlacementError, SramBudgetError)
NAMED = re.compile(
    r"at most --batch (\d+) fits(?: at --rank-chunk (\d+)| \(at --rank-chunk (\d+)\))?$"
)
PLANNERS = {
    "grouped": lambda op, spec, **kw: plan_grouped(op, spec, price=product_s, **kw),
    "packed": plan_packed,
    "banded": plan_placement,
}


@pytest.fixture(scope="module")
def op1k(tmp_path_factory):
    """The hunt's operator, made as it made it: `wse hpc tlrmvm compress --n 1024 --nb 32`
    (32 x 32 tiles of the synthetic seismic slice; `run` plans it grouped)."""
    path = tmp_path_factory.mktemp("op") / "op1k.npz"
    code, out = invoke(ROOT, ["hpc", "tlrmvm", "compress", "--n", "1024", "--nb", "32",
                              "--out", str(path)])  # fmt: skip
    assert code == 0, out[-2000:]
    return load_operator(path)


def column(tiles: int, rank: int, nb: int) -> TlrOperator:
    """`tiles` tiles of nb x nb in one tile column, each of rank `rank` (random bases): one
    PE column, so that the packed and banded plans fit an 8 x 8 program at some chunk."""
    rng = np.random.default_rng(rank)
    u = tuple(rng.standard_normal((nb, rank)).astype(np.float32) for _ in range(tiles))
    v = (rng.standard_normal((nb, tiles * rank)).astype(np.float32),)
    ranks = np.full((tiles, 1), rank)
    return TlrOperator((tiles * nb, nb), nb, 1e-3, ranks, u, v, error_fro=0.0, rule="matrix")


def _runs(plan, op, spec, batch: int, rank_chunk: int | None) -> bool:
    try:
        plan(op, spec, batch=batch, rank_chunk=rank_chunk)
    except REFUSED:
        return False
    return True


def _chunks(op) -> list[int | None]:
    """Every rank chunk that can give another plan: past the largest group's rank rows a
    grid no longer shrinks (grouped's groups hold at most 4 tile rows or columns)."""
    top = 4 * int(max(op.ranks.sum(0).max(), op.ranks.sum(1).max())) + 1
    return [None, *range(1, top + 1)]


def _check_named(layout, op, spec, batch, rank_chunk):
    plan = PLANNERS[layout]
    with pytest.raises(REFUSED) as e:
        plan(op, spec, batch=batch, rank_chunk=rank_chunk)
    line = str(e.value)
    assert "\n" not in line
    got = NAMED.search(line)
    assert got, line
    named = int(got[1])
    at = int(got[2] or got[3]) if (got[2] or got[3]) else None
    assert named < batch
    assert _runs(plan, op, spec, named, at), line  # the named batch runs ...
    assert at is not None or got[2] is None
    nothing = [w for w in _chunks(op) if _runs(plan, op, spec, named + 1, w)]
    assert nothing == [], line  # ... and the next one at no rank chunk at all
    return line, named, at


@pytest.mark.parametrize(
    ("batch", "rank_chunk"), [(46, 2), (46, None), (20, None), (500, 2), (500, None), (46, 10**3)]
)
def test_the_hunts_refusals_name_the_largest_batch_that_runs(op1k, batch, rank_chunk):
    line, named, at = _check_named("grouped", op1k, HUNT_TINY, batch, rank_chunk)
    assert named == 5  # the hunt's: `--batch 5` runs
    if rank_chunk is None:
        assert at is None and line.endswith("at most --batch 5 fits")  # the planner picks one
    else:
        assert at is not None and _runs(PLANNERS["grouped"], op1k, HUNT_TINY, 5, at)
    assert "compress with a larger --nb" not in line
    _check_named("grouped", op1k, preset("tiny"), batch, rank_chunk)  # today's tiny too


# banded's given chunk past SRAM is the ledger's refusal, "SRAM over budget: allocation
# 'tlrmvm.vectors' ..." (test_tlrmvm_wafer), not a planner's: its cases give no chunk or a
# chunk whose grid is past the rectangle
CASES = [(layout, 400, w) for layout in ("grouped", "packed") for w in (None, 1, 8)]
CASES += [("grouped", 4000, 2), ("packed", 4000, 2), ("banded", 400, None), ("banded", 4000, None)]


@pytest.mark.parametrize(("layout", "batch", "rank_chunk"), CASES)
def test_each_layout_names_a_batch_that_runs_and_none_larger(layout, batch, rank_chunk):
    """Four tiles of rank 8 in one column: 4 x ceil(8 / w) PE rows fit 8 from w = 4 on."""
    _check_named(layout, column(4, 8, 32), preset("tiny"), batch, rank_chunk)


def test_banded_takes_the_largest_chunk_that_fits_where_a_smaller_does_not():
    """Banded's vector buffers hold a band's partials, ceil(kmax / w) of them, so a PE at
    w = 8 needs fewer bytes than at w = 1: its own chunk was the ledger's binary search, which
    refused --batch 115 at w = 1 where w = 8 runs (found by the search above)."""
    op, spec = column(4, 8, 32), preset("tiny")
    runs = [w for w in range(1, 9) if _runs(plan_placement, op, spec, 115, w)]
    assert 1 not in runs and runs and plan_placement(op, spec, batch=115).rank_chunk == max(runs)


@pytest.mark.parametrize("layout", ["grouped", "packed", "banded"])
def test_a_rank_chunk_too_small_at_a_batch_that_runs_still_names_the_chunk(layout):
    op, spec = column(4, 8, 32), preset("tiny")
    with pytest.raises(PlacementError) as e:
        PLANNERS[layout](op, spec, batch=2, rank_chunk=1)
    least = int(re.search(r"give a larger --rank-chunk \((\d+) fits\)$", str(e.value))[1])
    assert _runs(PLANNERS[layout], op, spec, 2, least)
    assert not any(_runs(PLANNERS[layout], op, spec, 2, w) for w in range(1, least))


def test_the_hunts_command_line_names_batch_5_and_exits_2(op1k, tmp_path):
    from wse_hpc.tlrmvm import save_operator

    most = _check_named("grouped", op1k, preset("tiny"), 20, None)[1]  # the largest that runs
    save_operator(op1k, tmp_path / "op1k.npz")
    run = ["hpc", "tlrmvm", "run", "--operator", str(tmp_path / "op1k.npz"), "-p", "tiny",
           "--kernel", "xla"]  # fmt: skip
    for extra in (["--batch", "46", "--rank-chunk", "2"], ["--batch", "20"]):
        code, out = invoke(ROOT, [*run, *extra], env={"COLUMNS": "400"})
        assert code == 2 and len(out.strip().splitlines()) == 1, out[-2000:]
        assert f"at most --batch {most} fits" in out and "--nb" not in out
