"""The wafer view page (`wse_core.trace.page`) and `load` against hunt 68's traces. Broken
before:
- the JSON block inside `<script>` escaped only `</`: a name holding `<!--<script>` put the
  HTML tokenizer in its "double escaped" state, the data block swallowed the page's script
  and the page stayed blank, with no error shown (hole 1);
- the `dead` array had no limit and no duplicate check: a 65 kB file listed 4,000,000 dead
  PEs on an 81-PE wafer, a 24 MB page in 11 s and 0.5 GB that said "4000000 dead PEs"
  (hole 4);
- header keys the page never reads (meta.notes, a record's extra keys) were carried whole:
  a 61 kB file made a 60 MB page (hole 5); a phase's `name`, which the page draws, was not
  checked at all;
- `?layer=sram` (no such layer) and `?pe=3` (not ROW,COL) were TypeErrors in the page's
  script, and the canvas stayed blank (hole 6).
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess

import numpy as np
import pytest
from wse_core.testing import tiny_trace
from wse_core.trace import TraceError, load
from wse_core.trace.page import page_html

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
NASTY = ("w<!--<script>", "</script><script>x</script>", "a\u2028b\u2029c", "a&b>c<!--")


def _block(page: str) -> str:
    """The text of the page's JSON data block, as the HTML tokenizer ends it."""
    start = page.index('<script id="data" type="application/json">') + 42
    return page[start : page.index("</script>", start)]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """The 8 x 8 tiny_trace on its 9 x 9 physical wafer with one region, saved:
    (header, arrays)."""
    trace = dataclasses.replace(tiny_trace()[0], regions=[{"name": "r", "rect": [0, 0, 2, 2]}])
    path = trace.save(tmp_path_factory.mktemp("t") / "t.npz")
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    return json.loads(bytes(arrays.pop("header"))), arrays


def _variant(saved, folder, change, name="bad.npz"):
    head, arrays = json.loads(json.dumps(saved[0])), {k: v.copy() for k, v in saved[1].items()}
    change(head, arrays)
    out = folder / name
    np.savez_compressed(out, header=np.frombuffer(json.dumps(head).encode(), np.uint8), **arrays)
    return out


# --- hole 1: texts that end or re-open a <script> ----------------------------------------


@pytest.mark.parametrize("text", NASTY)
def test_texts_round_trip_through_the_json_block(saved, tmp_path, text):
    def change(h, a):
        h["name"] = h["wafer"] = h["regions"][0]["name"] = h["meta"]["units"] = text

    page = page_html(load(_variant(saved, tmp_path, change)))
    block = _block(page)
    assert not set(block) & set("<>&\u2028\u2029")  # nothing the tokenizer or old JS reads
    head = json.loads(block)["header"]
    assert head["name"] == head["wafer"] == head["regions"][0]["name"] == text
    assert head["meta"]["units"] == text
    assert page.count("<script") == 2 and "<!--" not in page  # the data block and the code


# --- hole 4: the dead PEs ----------------------------------------------------------------


def test_more_dead_pes_than_the_wafer_has_are_refused_before_they_are_read(saved, tmp_path):
    path = _variant(saved, tmp_path, lambda h, a: a.update(dead=np.zeros((4_000_000, 2), int)))
    with pytest.raises(TraceError) as e:
        load(path)
    assert str(e.value) == (
        f"{path} lists 4,000,000 dead PEs on a 9 x 9 physical wafer (81 PEs); a trace lists "
        "each dead PE once"
    )


def test_a_dead_pe_listed_twice_is_refused(saved, tmp_path):
    dead = np.array([[1, 2], [3, 4], [1, 2], [8, 8], [1, 2]])
    path = _variant(saved, tmp_path, lambda h, a: a.update(dead=dead))
    with pytest.raises(TraceError) as e:
        load(path)
    assert str(e.value) == (
        f"{path} is not a valid wse trace: dead PE (1, 2) is listed 3 times; a trace lists "
        "each dead PE once"
    )


def test_every_pe_dead_once_loads_and_the_page_counts_them(saved, tmp_path):
    every = np.argwhere(np.ones((9, 9), bool))[::-1]  # all 81, in any order
    trace = load(_variant(saved, tmp_path, lambda h, a: a.update(dead=every)))
    data = json.loads(_block(page_html(trace)))
    assert data["header"]["num_dead"] == 81 and sorted(map(tuple, data["dead"])) == [
        (r, c) for r in range(9) for c in range(9)
    ]


@pytest.mark.parametrize("dead", [[[9, 0]], [[0, -1]]])
def test_a_dead_pe_off_the_wafer_is_still_refused(saved, tmp_path, dead):
    path = _variant(saved, tmp_path, lambda h, a: a.update(dead=np.array(dead)))
    with pytest.raises(TraceError, match="dead PEs lie outside the 9 x 9 wafer"):
        load(path)


# --- hole 5: what the page carries ----------------------------------------------------------

MB = "x" * 1_000_000


@pytest.mark.parametrize(
    "change",
    [
        lambda h, a: h["meta"].update(notes=MB),
        lambda h, a: h["regions"][0].update(junk=MB),
        lambda h, a: h["phases"][0].update(extra=[MB]),
        lambda h, a: h["allocations"][0].update(notes={"a": MB}),
        lambda h, a: h.update(unknown=MB),
    ],
    ids=["meta", "region", "phase", "allocation", "top level"],
)
def test_a_megabyte_of_unknown_keys_stays_out_of_the_page(saved, tmp_path, change):
    plain = page_html(load(_variant(saved, tmp_path, lambda h, a: None, "plain.npz")))
    page = page_html(load(_variant(saved, tmp_path, change)))
    assert len(page) == len(plain)  # was 1 MB more: the page carried every key
    assert json.loads(_block(page))["header"] == json.loads(_block(plain))["header"]


def test_the_page_keeps_every_field_it_reads(saved, tmp_path):
    head = json.loads(_block(page_html(load(_variant(saved, tmp_path, lambda h, a: None)))))
    head = head["header"]
    for key in ("phases", "allocations", "regions", "meta"):
        assert head[key] == saved[0][key]  # the producer writes nothing the page skips


@pytest.mark.parametrize("name", [None, 5, "x" * 1001], ids=["missing", "5", "1001 chars"])
def test_a_phase_name_the_page_cannot_draw_is_refused(saved, tmp_path, name):
    def change(h, a):
        if name is None:
            del h["phases"][0]["name"]
        else:
            h["phases"][0]["name"] = name

    with pytest.raises(TraceError, match=r"phases\[0\]\.name is missing or of the wrong type"):
        load(_variant(saved, tmp_path, change))


# --- holes 1 and 6 in a real browser --------------------------------------------------------


def _dom(url: str, folder) -> str:
    flags = (
        "--headless --no-sandbox --disable-gpu --disable-quic --no-first-run "
        "--disable-background-networking --disable-component-update --disable-sync "
        "--window-size=1200,800"
    ).split()
    out = subprocess.run(
        [CHROMIUM, *flags, f"--user-data-dir={folder / 'profile'}", "--dump-dom", url],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=folder,
    )
    return out.stdout


LAYERS = (
    "sram_bytes, busy_cycles, compute_cycles, sram_cycles, fabric_cycles, latency_cycles, "
    "link_N, link_S, link_E, link_W, detour_hops, regions"
)


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium (apt-get install chromium)")
@pytest.mark.parametrize(
    "name, query, notes",
    [
        ("w<!--<script>", "?pe=1,2", []),
        (
            "t",
            "?layer=sram&pe=3",
            [
                f"?layer=sram is not a layer of this page; showing busy_cycles (layers: {LAYERS})",
                "?pe=3 is not a PE; give ?pe=ROW,COL (e.g. ?pe=0,0)",
            ],
        ),
    ],
)
def test_the_page_renders_with_bad_names_and_link_parameters(tmp_path, name, query, notes):
    page = tmp_path / "t.html"
    page.write_text(page_html(dataclasses.replace(tiny_trace()[0], name=name)), "utf-8")
    dom = _dom(page.as_uri() + query, tmp_path)
    assert re.search(r'<pre id="errors">\s*</pre>', dom), dom[-2000:]  # was a TypeError
    assert 'data-ready="1"' in dom  # was missing: no script ran, or it stopped
    top = re.search(r'<div id="top"><b>(.*?)</b>', dom)[1]
    assert top == name.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    shown = re.search(r'<pre id="notes">(.*?)</pre>', dom, re.S)[1]
    assert shown.replace("&amp;", "&").splitlines() == notes
    assert ('data-row="1" data-col="2"' in dom) == (not notes)
    assert "busy cycles</b>" in dom  # the default layer's legend: the canvas was painted
