"""`wse view`: a trace becomes a self-contained page and a PNG; bad input exits 2 with one
line. The slow test opens the page in headless Chromium (Debian's `chromium`): no script
errors, the hover box of a known PE shows that PE's stored numbers, the screenshot is not
blank, and the full WSE-3 grid renders in under two seconds (timed by the page itself)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner
from wse_cli.app import app
from wse_core import Op, PerfModel, Phase, RunReport, Work, preset, serial
from wse_core.cost.calibration import UNCALIBRATED
from wse_core.hw.sram import SramLedger
from wse_core.trace import trace_from

runner = CliRunner()
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = (
    "--headless --no-sandbox --disable-gpu --disable-quic --no-first-run "
    "--disable-background-networking --disable-component-update --disable-sync "
    "--window-size=1200,800"
).split()


def _trace(spec_name: str = "small", grid_weight: bool = True):
    spec = preset(spec_name)
    rows, cols = spec.pe_rows, spec.pe_cols
    ledger = SramLedger(rows, cols, spec.sram_bytes_per_pe)
    left = ledger.region("left", 0, 0, rows, cols // 3)
    ledger.allocate("field", 400)
    ledger.allocate("halo", 96, left)
    work = Work(ops=(Op("add", "fp32", 64),), links={"E": 10.0, "N": 4.0})
    phases = serial(Phase("add", work, repeat=3), Phase("hop", Work(latency_hops=5)))
    report = RunReport.build("view test", spec, phases, model=PerfModel(spec, UNCALIBRATED))
    w = np.add.outer(np.arange(rows), np.arange(cols)).astype(float) if grid_weight else None
    per_pe = {"add": w / w.max()} if w is not None else {}
    return trace_from(spec, report, per_pe_work=per_pe, regions=[left], sram=ledger)


def test_view_writes_a_self_contained_page_and_a_png(tmp_path):
    path = _trace().save(tmp_path / "t.npz")
    r = runner.invoke(app, ["view", str(path), "--png", str(tmp_path / "v.png")])
    assert r.exit_code == 0, r.output
    page = (tmp_path / "t.html").read_text()
    assert "page:" in r.output and 'id="data"' in page
    assert not re.search(r"(src|href)=\"?(https?:)?//", page)  # nothing from a network
    assert (tmp_path / "v.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("content", [None, "not a trace"])
def test_bad_input_exits_2_with_one_line(tmp_path, content):
    path = tmp_path / "x.npz"
    if content is not None:
        path.write_text(content)
    r = runner.invoke(app, ["view", str(path)])
    assert r.exit_code == 2
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error:") and "trace" in lines[0]


def _chromium(url: str, *args: str, cwd: Path) -> str:
    out = subprocess.run(
        [CHROMIUM, *FLAGS, f"--user-data-dir={cwd / 'profile'}", *args, url],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )
    return out.stdout


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="no chromium (apt-get install chromium)")
def test_the_page_renders_in_a_real_browser(tmp_path):
    import matplotlib.image

    trace = _trace()
    page = tmp_path / "t.html"
    runner.invoke(app, ["view", str(trace.save(tmp_path / "t.npz")), "--out", str(page)])
    r, c = 20, 7
    dom = _chromium(f"{page.as_uri()}?pe={r},{c}", "--dump-dom", cwd=tmp_path)
    assert re.search(r'<pre id="errors">\s*</pre>', dom), dom[-2000:]
    assert 'data-ready="1"' in dom
    assert f'data-row="{r}" data-col="{c}"' in dom
    shown = dict(re.findall(r'data-key="(\w+)" data-value="([^"]+)"', dom))
    assert set(shown) == set(trace.layers)
    for key, layer in trace.layers.items():
        assert float(shown[key]) == pytest.approx(layer[r, c], rel=1e-6)  # float32 on the page
    assert float(shown["link_E"]) == pytest.approx(3 * 10.0 * (r + c) / (31 + 31))
    shot = tmp_path / "shot.png"
    _chromium(f"{page.as_uri()}?layer=link_E", f"--screenshot={shot}", cwd=tmp_path)
    pixels = matplotlib.image.imread(shot)[..., :3]
    assert pixels.std() > 0.05  # a blank page is one colour


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="no chromium (apt-get install chromium)")
def test_the_full_wse3_grid_renders_in_under_two_seconds(tmp_path):
    trace = _trace("wse3")
    assert trace.block == 3
    page = tmp_path / "full.html"
    runner.invoke(app, ["view", str(trace.save(tmp_path / "f.npz")), "--out", str(page)])
    dom = _chromium(f"{page.as_uri()}?pe=700,1100", "--dump-dom", cwd=tmp_path)
    assert re.search(r'<pre id="errors">\s*</pre>', dom)
    ms = float(re.search(r"rendered in (\d+) ms", dom).group(1))
    assert ms < 2000, f"the full WSE-3 view took {ms} ms to render"
