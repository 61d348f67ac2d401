"""The demo's training part trains from scratch in a folder an earlier demo used, and never
removes a model_dir it did not write."""

from __future__ import annotations

import io

import pytest
from rich.console import Console
from wse_trainer.config import ConfigError
from wse_trainer.demo import MARKER, fresh_model_dir, part


def test_fresh_model_dir_replaces_only_the_demos_own(tmp_path):
    first = fresh_model_dir(tmp_path)
    assert first == tmp_path / "train" / "model_dir"
    assert (first / MARKER).is_file()
    (first / "checkpoints").mkdir()
    (first / "checkpoints" / "250").write_text("state")
    again = fresh_model_dir(tmp_path)  # an earlier demo's run: removed, marked again
    assert again == first and sorted(p.name for p in again.iterdir()) == [MARKER]

    other = tmp_path / "mine"
    (other / "train" / "model_dir").mkdir(parents=True)
    (other / "train" / "model_dir" / "weights.npz").write_text("keep me")
    with pytest.raises(ConfigError, match="not written by `wse demo`"):
        fresh_model_dir(other)
    assert (other / "train" / "model_dir" / "weights.npz").read_text() == "keep me"


@pytest.mark.slow
def test_demo_part_runs_twice_in_one_folder(tmp_path):
    """A second demo in the same --out trains again (it resumed at the last step before)."""
    for _ in range(2):
        buf = io.StringIO()
        part(Console(file=buf, width=200), out_dir=tmp_path, quick=True)
        text = buf.getvalue()
        assert "over 20 steps" in text, text[-2000:]
