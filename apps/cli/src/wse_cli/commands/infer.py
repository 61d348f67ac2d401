"""`wse infer`: generation and serving (not yet built; see the inference issues)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the `wse infer` group to the root app."""
