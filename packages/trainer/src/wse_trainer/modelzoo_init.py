"""ModelZoo's initial-weights keys of the model section against the draw that runs here.

A run here draws untruncated normals (`wse_models.params._init_leaf`: `INIT_STD` for the
embeddings, the attention and MLP matrices and an untied head; INIT_STD / sqrt(2 n_layers)
for the residual output projections; biases 0, norm gains 1). ModelZoo's defaults
(gpt2_model.py, with `initializer_range` 0.02) draw the same scales, truncated at 2 std
(`create_initializer`'s bounds) but for the head. A key at ModelZoo's default (what its file
asks by leaving the key out: Cerebras-GPT's files write those defaults out) or at the draw
that runs here is read with a note (`modelzoo_ignored.IGNORED_NOTES["init"]`); another scale
or distribution is refused, since the run would start elsewhere than asked (hunt 80: they
were refused with no hint). ModelZoo's `initializer` without `output_layer_initializer` draws
the output projections from it too (its layers' rule), not at the residual scale, and is
refused for that. Imports nothing of wse_trainer; `modelzoo_model` reads it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from wse_core.errors import shown_value

__all__ = ["INIT_KEYS", "INIT_STD", "STD_REL_TOL", "initial_problem"]

INIT_KEYS = ("initializer_range", "embedding_initializer", "initializer",
             "output_layer_initializer")  # fmt: skip

# The initial weights' std here (`wse_models.params._init_leaf`, GPT-2's initialisation,
# Radford et al. 2019 Sec. 2.3): embeddings, attention and MLP matrices and an untied head
# N(0, 0.02); the residual output projections (attention out, MLP down) N(0, 0.02 / sqrt(2 L)).
# ModelZoo's initializer_range defaults to the same 0.02 (gpt2_model.py), its defaults
# truncated at 2 std (create_initializer: a, b = -2 std, 2 std) except an untied head's normal
INIT_STD = 0.02
# How close a std written in a file must be to ours: ModelZoo's files write the residual std
# to 16 digits (0.004472135954999579 = 0.02 / sqrt(20)); 1e-6 takes 7 significant digits
STD_REL_TOL = 1e-6


def _spec(value: Any) -> tuple[str, Any, Any, Any, Any] | None:
    """(name, mean, std, a, b) of ModelZoo's initializer `value` (a name or a mapping, as its
    `create_initializer` reads it: std 0.05 unless given; truncated_normal's bounds -2 and 2
    std unless given; a, b None for normal), for normal and truncated_normal; else None."""
    spec = {"name": value} if isinstance(value, str) else value
    if not isinstance(spec, Mapping) or not isinstance(spec.get("name"), str):
        return None
    name = spec["name"].casefold()
    if name not in ("normal", "truncated_normal"):
        return None
    mean, std = spec.get("mean", 0.0), spec.get("std", 0.05)
    if name == "normal":
        return name, mean, std, None, None
    number = isinstance(std, int | float) and not isinstance(std, bool)
    a, b = (spec.get("a", -2 * std), spec.get("b", 2 * std)) if number else (None, None)
    return name, mean, std, a, b


def _close(value: Any, want: float) -> bool:
    number = isinstance(value, int | float) and not isinstance(value, bool)
    return number and math.isclose(value, want, rel_tol=STD_REL_TOL)


def _drawn(value: Any, std: float) -> bool:
    """Whether initializer `value` draws N(0, std) (ours) or its ModelZoo default (truncated
    at 2 std)."""
    spec = _spec(value)
    if spec is None:
        return False
    name, mean, got, a, b = spec
    if not (_close(got, std) and isinstance(mean, int | float) and mean == 0):
        return False
    return name == "normal" or (_close(a, -2 * std) and _close(b, 2 * std))


# What each initializer key sets, as ModelZoo's gpt2_model.py applies it
_INIT_WHAT = {
    "embedding_initializer": "embeddings",
    "initializer": "attention and MLP matrices",
    "output_layer_initializer": "residual output projections (attention out, MLP down)",
}


def initial_problem(fields: Mapping[str, Any], layers: Any, key: str) -> str | None:
    """The line for the model section's initial-weights key `key` (of `INIT_KEYS`, in
    `fields`) that would start the run elsewhere, for a model of `layers` layers; None where
    it draws what runs here or ModelZoo's default (module docstring)."""
    value = fields[key]
    if key == "initializer_range":
        if _close(value, INIT_STD):
            return None
        return (
            f"model.initializer_range {shown_value(value)} scales ModelZoo's initial weights; a "
            f"run here draws them at {INIT_STD} (ModelZoo's default): give {INIT_STD}, or "
            "leave the key out"
        )
    if type(layers) is not int or layers < 1:
        return None  # the model refuses its layers
    out_std = INIT_STD / math.sqrt(2 * layers)
    std = out_std if key == "output_layer_initializer" else INIT_STD
    if key == "initializer" and "output_layer_initializer" not in fields:
        return (
            "model.initializer without model.output_layer_initializer draws the residual "
            "output projections from it too (ModelZoo's rule); a run here draws them from "
            f"N(0, {out_std:.6g}) (0.02 / sqrt(2 x {layers} layers)): give "
            f"model.output_layer_initializer {{name: truncated_normal, std: {out_std!r}}} "
            "beside it, or leave model.initializer out"
        )
    if _drawn(value, std):
        return None
    return (
        f"model.{key} {shown_value(value)}: a run here draws the {_INIT_WHAT[key]} from "
        f"N(0, {std:.6g}), untruncated, and reads ModelZoo's default for this key (that std, "
        "truncated at 2 std) as the key left out; another draw would not start the run asked "
        f"for: give {{name: truncated_normal, std: {std!r}}} or {{name: normal, std: {std!r}}}, "
        "or leave the key out"
    )
