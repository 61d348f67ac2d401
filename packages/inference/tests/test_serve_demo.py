"""The serving demo part runs end to end and leaves its load-test JSON and no busy slot."""

from __future__ import annotations

import json

import pytest
from rich.console import Console
from wse_inference.serve_demo import part

pytestmark = pytest.mark.timeout(60)


def test_serve_demo_part_quick(tmp_path):
    console = Console(record=True, width=120)
    part(console, out_dir=tmp_path, quick=True)
    out = console.export_text()
    assert "matches the mock's rule" in out and "health SERVING" in out
    assert "slots in use after close: 0" in out
    summary = json.loads((tmp_path / "serve_bench.json").read_text())
    assert (summary["completed"], summary["failed"]) == (32, 0)
    assert summary["output_tokens"] == 32 * 32
