"""The serving demo part serves the model the training part wrote (here a tiny model saved
where training puts it), then the mock, says which is which, and leaves its load-test JSON
and no busy slot."""

from __future__ import annotations

import json

import pytest
from rich.console import Console
from wse_inference.demo.serving import part

pytestmark = pytest.mark.timeout(300)


def test_serve_demo_part_quick(tmp_path):
    from wse_inference.testing import save_tiny_model

    save_tiny_model(tmp_path / "train" / "model_dir" / "hf", n_layers=2)  # as `wse train` does
    console = Console(record=True, width=400)
    part(console, out_dir=tmp_path, quick=True)
    out = console.export_text()
    assert "engine: the model the demo trained" in out and "engine: the mock" in out
    assert "trained model, gRPC Generate" in out and "4/4 completed" in out
    assert out.index("engine: the model the demo trained") < out.index("engine: the mock")
    assert "matches the mock's rule" in out and "health SERVING" in out
    assert "mock slots in use after close: 0" in out
    summary = json.loads((tmp_path / "serve_bench.json").read_text())
    assert (summary["completed"], summary["failed"]) == (32, 0)
    assert summary["output_tokens"] == 32 * 32
