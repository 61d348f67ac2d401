"""`wse infer generate`: not yet built (see the inference issue)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add `generate` to the `wse infer` group."""
