"""`wse infer serve` and `wse infer bench`: not yet built (see the serving issue)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add `serve` and `bench` to the `wse infer` group."""
