"""The files of a model folder, read within the stack's limits: `ModelLoadError` (a folder
that cannot be used as asked), `json_file` (a JSON file within the file size and depth
limits) and `present` (a regular file, or nothing; anything else refused).
`wse_inference.model_dir` and `wse_inference.tokenizer_config` read their files with them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from wse_core.errors import WseError
from wse_core.host.readers import load_json, not_regular, read_text

__all__ = ["ModelLoadError", "json_file", "present"]


class ModelLoadError(WseError):
    """A model directory that cannot be used as asked."""


def json_file(path: Path) -> Any:
    """A JSON file of the model folder, within the stack's file size and depth limits."""
    return load_json(read_text(path, path.name), str(path))


def present(path: Path, what: str) -> bool:
    """True for a regular file at `path`, False where nothing is; ModelLoadError for anything
    else (hunt 62: a dangling tokenizer.json link, a partly fetched HF snapshot's, or a FIFO
    or folder, was passed over: the model was served with the byte tokenizer, or without its
    chat template, exit 0)."""
    if why := not_regular(path):
        raise ModelLoadError(f"{str(path)!r} {why}; {what}")
    return path.is_file()
