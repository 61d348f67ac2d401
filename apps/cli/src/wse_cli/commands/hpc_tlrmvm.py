"""`wse hpc tlrmvm`: not yet built (see the issue for its contract)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this module's commands to the `wse hpc` group."""
