"""`wse train`: weight-streaming training (not yet built; see the trainer issue)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add `wse train` to the root app."""
