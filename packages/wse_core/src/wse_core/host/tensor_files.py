"""A safetensors checkpoint read into NumPy, without JAX, every tensor checked as it is read.

Contract. `weight_map(folder)` maps each tensor name of an HF-format checkpoint folder to its
file: the shards `model.safetensors.index.json` names (read within the JSON limits; a name
leaving the folder, absolute or with `..`, refused in transformers' words), else
every `*.safetensors` of the folder (a tensor two of them hold is refused: which copy to
use is not said). `read_tensors(folder)` reads each tensor once into a NumPy array
(`safetensors`' numpy framework: bfloat16 as ml_dtypes') and returns {name: array}; HF's
non-parameter buffers (`HF_BUFFERS`: GPT-2's attention masks, RoPE's inv_freq) are left
unread. Before a byte of data is read the files' total size is checked against host memory
(`wse_core.host.memory.require`), every floating tensor's dtype against what is read (F16,
BF16, F32, F64: an FP8/FP6/FP4 checkpoint needs its scales, so it is refused, not cast), and,
given the model's `n_layers`, every header's count of tensors against `tensor_limit` (counted
in the header's text before safetensors parses it). A floating tensor holding NaN or Inf is
refused as it is read, naming the tensor, its file and the count (a model would generate
nothing from it, silently); so is, given the `dtype` the model holds its weights in, a finite
value the cast to it makes infinite (F64 1e300 in float32). Every error is a
`TensorFileError` (a `WseError`, one line): a malformed index, a missing index shard, a
damaged header, truncated data, a non-finite tensor. Integer and bool tensors are read as
they are (the model loader refuses them as weights). The model loader
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

__all__ = [
    "INDEX_FILE",
    "HF_BUFFERS",
    "TENSORS_PER_LAYER",
    "TensorFileError",
    "tensor_limit",
    "weight_map",
    "read_tensors",
]

INDEX_FILE = "model.safetensors.index.json"
# non-parameter buffers some HF checkpoints carry: never read (transformers rebuilds them)
HF_BUFFERS = re.compile(r"(\.attn\.bias|\.attn\.masked_bias|rotary_emb\.inv_freq)$")


# safetensors dtypes NumPy reads without ml_dtypes (bfloat16 and the float8s need it)
NUMPY_DTYPES = frozenset(
    {"BOOL", "U8", "I8", "U16", "I16", "U32", "I32", "U64", "I64", "F16", "F32", "F64"}
)
# the floating dtypes read; safetensors' numpy framework has no float8/6/4 (hunt 64: an
# AttributeError traceback), and an FP8 checkpoint's weights mean nothing without the scale
# tensors beside them, which no architecture here applies
FLOAT_DTYPES = frozenset({"F16", "BF16", "F32", "F64"})
# The most tensors one decoder layer of a checkpoint lists (GPT-2: 12 and 2 attention-mask
# buffers; Llama: 9 and RoPE's inv_freq), with room; as many again outside the layers
# (embeddings, final norm, head: 5 at most). A checkpoint listing more is refused unread
# anyway ("tensors this config does not use"); `tensor_limit` refuses it before safetensors
# parses its header (hunt 64: a header of a million empty tensors took 20 s and 1.2 GB).
TENSORS_PER_LAYER = 16
_ENTRY_KEY = b'"data_offsets"'  # once per tensor entry of a safetensors header
_MAX_HEADER_BYTES = 100_000_000  # safetensors' own cap: a longer header is its refusal


class TensorFileError(WseError):
    """A checkpoint's tensors cannot be read, or hold values no model can use."""


def tensor_limit(n_layers: int) -> int:
    """The most tensors a checkpoint of `n_layers` decoder layers lists (`TENSORS_PER_LAYER`
    a layer, as many besides)."""
    return TENSORS_PER_LAYER * (n_layers + 1)


def weight_map(folder: str | os.PathLike, *, n_layers: int | None = None) -> dict[str, str]:
    """Tensor name -> the file holding it (module docstring); with `n_layers`, a checkpoint
    listing more than `tensor_limit(n_layers)` tensors is refused before its headers parse."""
    path = Path(folder)
    index = path / INDEX_FILE
    if index.exists():
        wm = _index_weight_map(index)
        _check_count(len(wm), INDEX_FILE, n_layers)
        for shard in sorted(set(wm.values())):
            _check_inside(shard, index)
            if not (path / shard).exists():
                raise TensorFileError(f"{INDEX_FILE} names shard {shard!r}, missing from {path}")
        return {k: str(path / shard) for k, shard in wm.items()}
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise TensorFileError(
            f"no *.safetensors in {path} (only safetensors checkpoints are read, not .bin)"
        )
    out: dict[str, str] = {}
    for f in files:
        with _opened(str(f), n_layers) as h:
            for name in sorted(h.keys()):
                if (first := out.setdefault(name, str(f))) != str(f):  # hunt 64: the later won
                    raise TensorFileError(
                        f"tensor {name!r} is in both {Path(first).name} and {f.name}; remove "
                        f"one (or add a {INDEX_FILE} saying which file holds each tensor)"
                    )
        _check_count(len(out), f"the *.safetensors of {path}", n_layers)
    return out


_JSON_KINDS = {dict: "an object", list: "a list", str: "a string", bool: "true or false",
               int: "a number", float: "a number", type(None): "null"}  # fmt: skip


def _index_weight_map(index: Path) -> dict[str, str]:
    """The index's "weight_map", an object of tensor name -> shard file name (hunt 64: a
    list, null, a number or a list as a file name were Python's own words)."""
    from wse_core.host.readers import load_json, read_text

    try:
        doc = load_json(read_text(index, INDEX_FILE), str(index))
    except (OSError, ValueError, TypeError) as err:
        raise TensorFileError(f"cannot read {index}: {err}") from None
    want = "an object of tensor name -> shard file name"
    if not isinstance(doc, dict):
        raise TensorFileError(f'{INDEX_FILE} must hold {{"weight_map": {want}}}, got {_kind(doc)}')
    if "weight_map" not in doc:
        raise TensorFileError(f'{INDEX_FILE} has no "weight_map" ({want})')
    wm = doc["weight_map"]
    if not isinstance(wm, dict):
        raise TensorFileError(f'{INDEX_FILE}\'s "weight_map" must be {want}, got {_kind(wm)}')
    for name, f in wm.items():
        if not isinstance(f, str):
            raise TensorFileError(
                f'{INDEX_FILE}\'s "weight_map" must be {want}, got {f!r:.60} for {name!r:.100}'
            )
    return wm


def _check_inside(shard: str, index: Path) -> None:
    """Refuse a shard name that leaves the model folder (an absolute path or a `..` part), in
    transformers' words (`_check_shard_filenames_stay_in_model_dir`: names, not resolved
    paths, so the HF cache's symlinked shards pass); hunt 69: `../other/model.safetensors`
    was read from outside the folder, exit 0."""
    if Path(shard).anchor or ".." in Path(shard).parts:
        raise TensorFileError(
            f"The checkpoint index {index} has a shard filename that points outside the model "
            f"directory: {shard}; shard names must be files in the model folder"
        )


def _kind(value: Any) -> str:
    return _JSON_KINDS.get(type(value), "a value")


def _check_count(count: int, where: str, n_layers: int | None) -> None:
    if n_layers is not None and count > tensor_limit(n_layers):
        raise TensorFileError(
            f"{where} lists {count:,} tensors; a checkpoint of {n_layers:,} "
            f"layer{'s' if n_layers != 1 else ''} lists at "
            f"most {tensor_limit(n_layers):,} ({TENSORS_PER_LAYER} a layer, "
            f"{TENSORS_PER_LAYER} besides): it is not this config's checkpoint"
        )


def _listed(file: str) -> int:
    """How many tensors the header of `file` lists, counted in its text, not parsed (a
    million entries parse in seconds, into a GB): each entry has one "data_offsets" key (a
    name holding that quoted text counts twice: a name no model has). 0 where there is no
    header within safetensors' cap, or no file to read: `safe_open` says what is wrong."""
    try:
        with open(file, "rb") as f:
            head = f.read(8)
            size = int.from_bytes(head, "little") if len(head) == 8 else 0
            return f.read(size).count(_ENTRY_KEY) if size <= _MAX_HEADER_BYTES else 0
    except OSError:
        return 0


def _opened(file: str, n_layers: int | None = None) -> Any:
    from safetensors import SafetensorError, safe_open

    if why := not_regular(file):  # hunt 60: safe_open of a FIFO waited forever
        raise TensorFileError(f"{file} {why}")
    if n_layers is not None:
        _check_count(_listed(file), Path(file).name, n_layers)
    try:
        return safe_open(file, framework="numpy")
    except (SafetensorError, OSError) as err:  # a damaged header
        raise TensorFileError(f"{file} is not a readable safetensors file: {err}") from None


def read_tensors(
    folder: str | os.PathLike, *, n_layers: int | None = None, dtype: str | None = None
) -> dict[str, Any]:
    """Every tensor of the checkpoint in `folder` (module docstring): name -> np.ndarray;
    with `n_layers` (the model's), a checkpoint listing more than `tensor_limit` is refused;
    with `dtype` ("float32" or "bfloat16": what the model holds its weights in), a value the
    cast to it turns into inf is refused (`_check_fits`)."""
    from safetensors import SafetensorError

    from wse_core.host.memory import require

    files = weight_map(folder, n_layers=n_layers)
    by_file: dict[str, list[str]] = {}
    for name, f in files.items():
        if not HF_BUFFERS.search(name):
            by_file.setdefault(f, []).append(name)
    require(
        f"reading the weights in {folder}",
        sum(os.path.getsize(f) for f in by_file),
        fits=lambda _: "free memory, or use a smaller checkpoint",
    )
    dtypes = _dtypes(by_file, n_layers)  # every header's, before a byte of data is read
    out: dict[str, Any] = {}
    for f, names in by_file.items():
        with _opened(f) as h:
            for name in names:
                try:
                    if dtypes[name] not in NUMPY_DTYPES:
                        import ml_dtypes  # noqa: F401  (NumPy learns bfloat16: 0.3 s)
                    tensor = h.get_tensor(name)
                except (SafetensorError, OSError) as err:  # truncated data
                    raise TensorFileError(f"cannot read tensor {name!r} from {f}: {err}") from None
                _check_finite(tensor, name, f)
                _check_fits(tensor, name, f, dtype)
                out[name] = tensor
    return out


def _dtypes(by_file: dict[str, list[str]], n_layers: int | None) -> dict[str, str]:
    """Each tensor's safetensors dtype name, from the headers; a floating one that is not
    read (`FLOAT_DTYPES`) is refused by name."""
    from safetensors import SafetensorError

    out: dict[str, str] = {}
    for f, names in by_file.items():
        with _opened(f, n_layers) as h:
            for name in sorted(names):
                try:
                    out[name] = dtype = h.get_slice(name).get_dtype()
                except SafetensorError as err:  # a name the index gives and the shard lacks
                    raise TensorFileError(f"cannot read tensor {name!r} from {f}: {err}") from None
                if dtype.startswith("F") and dtype not in FLOAT_DTYPES:
                    raise TensorFileError(
                        f"tensor {name!r} in {f} is {dtype}; this loader reads F16, BF16, F32 "
                        "and F64 checkpoints (dequantize an FP8, FP6 or FP4 checkpoint first)"
                    )
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


# the stored dtypes wider than each held dtype: their values may overflow the cast to it
_WIDER = {"float32": ("float64",), "bfloat16": ("float64", "float32")}


def _check_fits(tensor: Any, name: str, file: str, dtype: str | None) -> None:
    """Refuse a finite value that the cast to `dtype` rounds to inf (hunt 69: an F64 1e300
    passed the finite check, became inf in float32, and the model's logits NaN 17 s later):
    |x| at or past halfway between the dtype's max and 2^128 rounds up to inf."""
    import numpy as np

    if dtype is None or tensor.dtype.name not in _WIDER.get(dtype, ()) or not tensor.size:
        return
    info = np.finfo(np.float32) if dtype == "float32" else _bf16_finfo()
    edge = np.ldexp(2.0 - 2.0 ** -(int(info.nmant) + 1), int(info.maxexp) - 1)
    if -edge < tensor.min() and tensor.max() < edge:
        return
    bad = int(np.count_nonzero(np.abs(tensor) >= edge))
    raise TensorFileError(
        f"tensor {name!r} in {file} holds {bad:,} value{'s' * (bad != 1)} beyond {dtype}'s "
        f"range ({float(info.max):.3g}); it would be inf once loaded in {dtype}, the model's "
        "dtype (config.json's)"
    )


def _bf16_finfo() -> Any:
    import ml_dtypes

    return ml_dtypes.finfo(ml_dtypes.bfloat16)
