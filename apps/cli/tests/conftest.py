"""Fixtures the CLI's test files share."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    """A 2-layer tiny HF model folder (`wse_inference.testing.save_tiny_model`), one per file."""
    from wse_inference.testing import save_tiny_model

    path = tmp_path_factory.mktemp("tiny") / "hf"
    save_tiny_model(path, n_layers=2)
    return path


@pytest.fixture(scope="module")
def cu(tmp_path_factory):
    """A Cu setfl file from `wse hpc md potential` (Zhou et al. 2004), one per file."""
    import typer
    from wse_cli.app import app
    from wse_cli.testing import invoke

    out = tmp_path_factory.mktemp("md") / "Cu.eam.alloy"
    code, output = invoke(
        typer.main.get_command(app), ["hpc", "md", "potential", "--elements", "Cu", "--out", out]
    )
    assert code == 0, output
    return out
