"""A safetensors checkpoint read into NumPy, without JAX, every tensor checked as it is read.

Contract. `weight_map(folder)` maps each tensor name of an HF-format checkpoint folder to its
file: the shards `model.safetensors.index.json` names (read within the JSON limits), else
every `*.safetensors` of the folder. `read_tensors(folder)` reads each tensor once into a
NumPy array (`safetensors`' numpy framework: bfloat16 as ml_dtypes') and returns
{name: array}; HF's non-parameter buffers (`HF_BUFFERS`: GPT-2's attention masks, RoPE's
inv_freq) are left unread. Before a byte of data is read the files' total size is checked
against host memory (`wse_core.host.memory.require`); a floating tensor holding NaN or Inf
is refused as it is read, naming the tensor, its file and the count (a model would generate
nothing from it, silently). Every error is a `TensorFileError` (a `WseError`, one line): a
missing index shard, a damaged header, truncated data, a non-finite tensor. The model loader
(`wse_models.load_params(..., tensors=)`) takes the arrays as they are, so a command can
refuse a bad checkpoint before it imports JAX and the weights are still read once.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from wse_core.errors import WseError
from wse_core.host.readers import not_regular

__all__ = ["INDEX_FILE", "HF_BUFFERS", "TensorFileError", "weight_map", "read_tensors"]

INDEX_FILE = "model.safetensors.index.json"
# non-parameter buffers some HF checkpoints carry: never read (transformers rebuilds them)
HF_BUFFERS = re.compile(r"(\.attn\.bias|\.attn\.masked_bias|rotary_emb\.inv_freq)$")


# safetensors dtypes NumPy reads without ml_dtypes (bfloat16 and the float8s need it)
NUMPY_DTYPES = frozenset(
    {"BOOL", "U8", "I8", "U16", "I16", "U32", "I32", "U64", "I64", "F16", "F32", "F64"}
)


class TensorFileError(WseError):
    """A checkpoint's tensors cannot be read, or hold values no model can use."""


def weight_map(folder: str | os.PathLike) -> dict[str, str]:
    """Tensor name -> the file holding it (module docstring)."""
    from wse_core.host.readers import load_json, read_text

    path = Path(folder)
    index = path / INDEX_FILE
    if index.exists():
        try:
            wm = load_json(read_text(index, INDEX_FILE), str(index))["weight_map"]
        except (OSError, ValueError, TypeError, KeyError) as err:
            raise TensorFileError(f"cannot read {index}: {err}") from None
        for f in sorted(set(wm.values())):
            if not (path / f).exists():
                raise TensorFileError(f"{INDEX_FILE} names shard {f!r}, missing from {path}")
        return {k: str(path / f) for k, f in wm.items()}
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise TensorFileError(
            f"no *.safetensors in {path} (only safetensors checkpoints are read, not .bin)"
        )
    out: dict[str, str] = {}
    for f in files:
        with _opened(str(f)) as h:
            out.update(dict.fromkeys(h.keys(), str(f)))
    return out


def _opened(file: str) -> Any:
    from safetensors import SafetensorError, safe_open

    if why := not_regular(file):  # hunt 60: safe_open of a FIFO waited forever
        raise TensorFileError(f"{file} {why}")
    try:
        return safe_open(file, framework="numpy")
    except (SafetensorError, OSError) as err:  # a damaged header
        raise TensorFileError(f"{file} is not a readable safetensors file: {err}") from None


def read_tensors(folder: str | os.PathLike) -> dict[str, Any]:
    """Every tensor of the checkpoint in `folder` (module docstring): name -> np.ndarray."""
    from safetensors import SafetensorError

    from wse_core.host.memory import require

    files = weight_map(folder)
    by_file: dict[str, list[str]] = {}
    for name, f in files.items():
        if not HF_BUFFERS.search(name):
            by_file.setdefault(f, []).append(name)
    require(
        f"reading the weights in {folder}",
        sum(os.path.getsize(f) for f in by_file),
        fits=lambda _: "free memory, or use a smaller checkpoint",
    )
    out: dict[str, Any] = {}
    for f, names in by_file.items():
        with _opened(f) as h:
            for name in names:
                try:
                    if h.get_slice(name).get_dtype() not in NUMPY_DTYPES:
                        import ml_dtypes  # noqa: F401  (NumPy learns bfloat16, float8: 0.3 s)
                    tensor = h.get_tensor(name)
                except (SafetensorError, OSError) as err:  # truncated data
                    raise TensorFileError(f"cannot read tensor {name!r} from {f}: {err}") from None
                _check_finite(tensor, name, f)
                out[name] = tensor
    return out


def _check_finite(tensor: Any, name: str, file: str) -> None:
    """Refuse a floating tensor holding NaN or Inf."""
    import numpy as np

    if tensor.dtype.kind not in "fcV":  # V: ml_dtypes' bfloat16 and float8 types
        return
    finite = np.isfinite(tensor)
    if not finite.all():
        bad = int(finite.size - np.count_nonzero(finite))
        raise TensorFileError(
            f"tensor {name!r} in {file} holds {bad:,} NaN or infinite values of "
            f"{finite.size:,}; this checkpoint cannot be served"
        )
