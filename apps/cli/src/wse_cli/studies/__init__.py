"""Experiments that need several packages at once and so live in the CLI."""
