"""`wse launch`: start N local processes of a wse command (not yet built)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add `wse launch` to the root app."""
