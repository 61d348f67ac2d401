"""`wse view` against hunt 64: each refusal exits 2 with one line, before any work, and
leaves nothing on disk. Broken before:
- the default page (FILE with .html) was never checked as --out is: a folder there was an
  IsADirectoryError traceback after the work, a FIFO hung forever (hole 3);
- `wse view t.html` (the page given back) was refused as "--out t.html is the input FILE",
  an --out never given (hole 15);
- traces the page or the PNG cannot show (NaN in meta, layers of 1e308, a missing layer, a
  rect of 10^400, rows of 10^30, a bound of 2,000,000 characters, 2,800 x 2,800 layers, a
  lone surrogate in the name) wrote a blank page, a traceback after the page was written, a
  460 MB page, or hung in the PNG's title (holes 4 to 7 and 9); `load`'s own refusals are
  tested in packages/wse_core/tests/test_trace_hunt64.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import time

import numpy as np
import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import WSE, clean_env, invoke, refused_in_one_line
from wse_core.testing import tiny_trace

pytestmark = pytest.mark.timeout(120)
ROOT = typer.main.get_command(app)


@pytest.fixture
def trace(tmp_path):
    return tiny_trace()[0].save(tmp_path / "t.npz")


def _variant(trace, change):
    with np.load(trace) as z:
        arrays = {k: z[k] for k in z.files}
    head = json.loads(bytes(arrays.pop("header")))
    change(head, arrays)
    out = trace.with_name("bad.npz")
    np.savez_compressed(out, header=np.frombuffer(json.dumps(head).encode(), np.uint8), **arrays)
    return out


def test_a_folder_at_the_default_page_is_refused_before_the_work(trace, tmp_path):
    (tmp_path / "t.html").mkdir()
    line = refused_in_one_line(ROOT, ["view", trace], "is a folder")
    assert line == f"Error: the default page {tmp_path / 't.html'} is a folder; give a file " \
        f"name, e.g. {tmp_path / 't.html' / 'output'}"  # fmt: skip
    assert os.listdir(tmp_path / "t.html") == []


def test_a_fifo_at_the_default_page_is_refused_not_waited_on(trace, tmp_path):
    os.mkfifo(tmp_path / "t.html")  # a subprocess: before the fix this hung for good
    done = subprocess.run(
        [*WSE, "view", str(trace)], capture_output=True, text=True, timeout=90, env=clean_env()
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip() == (
        f"Error: the default page {tmp_path / 't.html'} is a FIFO, not a regular file; give a "
        "file name"
    )


PAGE_LINE = (
    "is an HTML page (what wse view writes), not a trace: give the .npz file that a run's "
    "--trace FILE wrote"
)


def test_the_page_given_back_is_named_as_a_page_not_an_out_never_given(trace, tmp_path):
    code, output = invoke(ROOT, ["view", trace])
    assert code == 0, output
    page = tmp_path / "t.html"
    before = page.read_bytes()
    line = refused_in_one_line(ROOT, ["view", page], PAGE_LINE)
    assert line == f"Error: {page} {PAGE_LINE}" and "--out" not in line
    refused_in_one_line(ROOT, ["view", page, "--out", tmp_path / "x.html"], PAGE_LINE)
    assert page.read_bytes() == before and not (tmp_path / "x.html").exists()


def test_a_trace_named_html_is_told_to_give_out(trace, tmp_path):
    named = tmp_path / "run.html"
    named.write_bytes(trace.read_bytes())
    line = refused_in_one_line(ROOT, ["view", named], "ends in .html")
    assert line == f"Error: FILE {named} ends in .html, the name of its own page; give --out " \
        "another name"  # fmt: skip
    assert named.read_bytes() == trace.read_bytes()
    code, output = invoke(ROOT, ["view", named, "--out", tmp_path / "run.page.html"])
    assert code == 0, output


def _meta(**kv):
    return lambda h, a: h["meta"].update(kv)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (_meta(clock_hz=float("nan")), "meta.clock_hz is NaN; a trace holds finite numbers"),
        (lambda h, a: a["busy_cycles"].fill(1e308), "layer busy_cycles holds 1e+308"),
        (lambda h, a: h.update(layers=h["layers"][:1]), "layer busy_cycles is missing"),
        (lambda h, a: h.update(regions=[{"name": "r", "rect": [10**400, 0, 2, 2]}]),
         "regions[0].rect[0] is an integer past a float's range"),
        (lambda h, a: (h.update(rows=10**30, cols=10**30, block=10**30),
                       a.update({k: np.ones((1, 1)) for k in a if k != "dead"})),
         "rows must be an integer in [1, 100,000]"),
        (_meta(bound="x" * 2_000_000), "meta.bound must be a text of at most 1,000 characters"),
        (lambda h, a: a.update({k: np.ones((400, 400)) for k in a if k != "dead"}),
         "has 160,000 cells in layer 'sram_bytes' (400 x 400); a wse trace holds at most 131,072"),
        (lambda h, a: h.update(name="run\ud800x"),
         "name holds '\\ud800', a lone surrogate, not text"),
    ],
    ids=["nan meta", "1e308 layer", "missing layer", "huge rect", "huge rows", "long bound",
         "too many cells", "lone surrogate"],
)  # fmt: skip
def test_a_trace_the_view_cannot_show_is_refused_leaving_nothing(trace, tmp_path, change, message):
    bad = _variant(trace, change)
    start = time.perf_counter()
    refused_in_one_line(ROOT, ["view", bad, "--png", tmp_path / "v.png"], message)
    assert time.perf_counter() - start < 10  # the long bound took minutes in the PNG's title
    assert not (tmp_path / "bad.html").exists() and not (tmp_path / "v.png").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.npz", "t.npz"]
