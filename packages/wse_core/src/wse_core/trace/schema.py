"""The per-PE trace's schema: its layers, its data type and its file.

`LAYERS` names every layer with its unit and the reduction ("sum" or "max") that turns a
block of PEs into one cell; `downsample(trace, block)` applies it, so sums and maxima survive.
A `PeTrace` holds one run's layers on a `rows x cols` grid in `block`-sized cells, the dead
PEs and a JSON-able header (phases, SRAM allocations, named regions, meta). On disk
(`PeTrace.save` / `load`): one `.npz` with `header` (UTF-8 JSON, `schema_version`), one
float64 array per layer of shape `shape` (the block grid), and `dead` (n, 2) int64; a file of
another `SCHEMA_VERSION` is a `TraceError`. `wse_core.trace` builds traces from a run and
re-exports all of this.
"""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path
from typing import Any

import numpy as np

from wse_core.errors import NUMPY_FILE_ERRORS, WseError, numpy_file_problem
from wse_core.host.readers import load_json, open_npz, require_npz

__all__ = [
    "SCHEMA_VERSION",
    "DIRECTIONS",
    "PARTS",
    "LAYERS",
    "TraceError",
    "LayerSpec",
    "PeTrace",
    "downsample",
    "load",
]

SCHEMA_VERSION = 1
DIRECTIONS = ("N", "S", "E", "W")
PARTS = ("compute", "sram", "fabric", "latency")


@dataclasses.dataclass(frozen=True)
class LayerSpec:
    key: str
    title: str
    unit: str
    reduction: str  # "sum" or "max": how a block of PEs is reduced to one cell


LAYERS: tuple[LayerSpec, ...] = (
    LayerSpec("sram_bytes", "SRAM in use", "B", "sum"),
    LayerSpec("busy_cycles", "busy cycles", "cycles", "max"),
    *(LayerSpec(f"{p}_cycles", f"{p} cycles", "cycles", "max") for p in PARTS),
    *(LayerSpec(f"link_{d}", f"link {d} traffic", "wavelets", "sum") for d in DIRECTIONS),
    LayerSpec("detour_hops", "detour hops (E and S links)", "hops", "sum"),
)
_SPEC = {layer.key: layer for layer in LAYERS}


class TraceError(WseError):
    """A trace file is missing, unreadable or of another schema version."""


@dataclasses.dataclass(frozen=True)
class PeTrace:
    """Per-PE layers of one run on a `rows x cols` grid, stored in `block`-sized cells."""

    name: str
    wafer: str
    rows: int
    cols: int
    block: int
    layers: dict[str, np.ndarray]  # key -> (ceil(rows / block), ceil(cols / block)) float64
    dead: np.ndarray  # (n, 2) int64 physical (row, col) of dead PEs
    physical_shape: tuple[int, int]
    phases: list[dict[str, Any]]  # name, path, cycles (all repeats), bound, critical_pe or None
    allocations: list[dict[str, Any]]  # name, bytes_per_pe, region [row0, col0, rows, cols]
    regions: list[dict[str, Any]]  # name, rect [row0, col0, rows, cols]
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def shape(self) -> tuple[int, int]:
        return -(-self.rows // self.block), -(-self.cols // self.block)

    def header(self) -> dict[str, Any]:
        """Everything but the arrays, as JSON-able data (with the layer table)."""
        out = {k: v for k, v in dataclasses.asdict(self).items() if k not in ("layers", "dead")}
        out["physical_shape"] = list(self.physical_shape)
        out["schema_version"] = SCHEMA_VERSION
        out["shape"] = list(self.shape)
        out["layers"] = [
            {
                **dataclasses.asdict(_SPEC[k]),
                "total": float(a.sum()),
                "max": float(a.max()) if a.size else 0.0,
            }
            for k, a in self.layers.items()
        ]
        out["num_dead"] = int(len(self.dead))
        return out

    def _repr_html_(self) -> str:
        """The page `wse view` writes, inline (`wse_core.trace.page`)."""
        from wse_core.notebook import iframe_html
        from wse_core.trace.page import page_html

        return iframe_html(page_html(self))

    def plot(self, title: str | None = None) -> Any:
        """The four-panel view (`wse_core.trace.png.trace_figure`), a matplotlib Figure."""
        from wse_core.trace.png import trace_figure

        return trace_figure(self, title)

    def save(self, path: str | Path) -> Path:
        """Write one compressed `.npz` (header JSON + arrays); returns the path."""
        from wse_core.host.atomic import write_atomically

        head = np.frombuffer(json.dumps(self.header()).encode(), dtype=np.uint8)
        buf = io.BytesIO()
        arrays: dict[str, Any] = {"header": head, "dead": self.dead, **self.layers}
        np.savez_compressed(buf, **arrays)
        return write_atomically(path, buf.getvalue())


def load(path: str | Path) -> PeTrace:
    """Read a trace written by `PeTrace.save`; TraceError (one line) if it is not one of this
    schema: not an `.npz` (empty, cut short, another format), a header that is not JSON or
    lacks a field, a layer missing, of the wrong shape, negative, NaN or infinite, or dead
    PEs outside the wafer. Nothing is unpickled."""
    path = Path(path)
    if not path.is_file():
        why = "is a folder" if path.is_dir() else "is a FIFO, socket or device"
        raise TraceError(
            f"{path} {why}, not a trace file" if path.exists() else f"no trace file {path}"
        )
    if path.stat().st_size == 0:
        raise TraceError(f"{path} is empty, not a wse trace (.npz with a header)")
    try:
        z = open_npz(path, f"wse view: {path}")
        with z:
            _require_memory(path, z)
            head = load_json(bytes(z["header"]), f"{path}'s header")
            arrays = {k: np.asarray(z[k]) for k in z.files if k != "header"}
    except WseError:  # a limit refused (memory, header depth): its own line
        raise
    except NUMPY_FILE_ERRORS as e:
        why = numpy_file_problem(e)
        raise TraceError(f"{path} is not a wse trace (.npz with a header): {why}") from None
    if not isinstance(head, dict):
        raise TraceError(f"{path}: the header is not a JSON object")
    version = head.get("schema_version")
    if version != SCHEMA_VERSION:
        raise TraceError(
            f"{path} has trace schema_version {version}; this wse reads {SCHEMA_VERSION}"
        )
    try:
        return _checked(_trace(head, arrays))
    except (KeyError, IndexError, TypeError, ValueError) as e:
        raise TraceError(f"{path} is not a valid wse trace: {numpy_file_problem(e)}") from None


def _require_memory(path: Path, z: Any) -> None:
    """Refuse an archive whose array headers claim more host memory than is available (each
    layer is read, then held as float64), before reading any array's data."""
    require_npz(
        z,
        f"wse view: {path}",
        extra_per_value=8,
        fits=lambda budget: (
            "this trace was not written by this machine's wse, or needs a larger host"
        ),
    )


def _trace(head: dict[str, Any], arrays: dict[str, np.ndarray]) -> PeTrace:
    """The PeTrace of a header and its arrays (KeyError / TypeError / ValueError if a part
    is missing or of the wrong type)."""
    layers = {}
    specs = head["layers"]
    if not isinstance(specs, list) or not all(isinstance(x, dict) for x in specs):
        raise ValueError("layers must be a list of objects")
    for spec in specs:
        key = spec["key"]
        if key not in _SPEC:
            raise ValueError(f"unknown layer {key!r}")
        if arrays[key].dtype.kind not in "biuf":  # strings would parse, complex lose a part
            raise ValueError(f"layer {key} must hold real numbers, got dtype {arrays[key].dtype}")
        layers[key] = np.asarray(arrays[key], dtype=np.float64)
    dead = np.asarray(arrays["dead"])
    if not (np.issubdtype(dead.dtype, np.integer) and dead.ndim == 2 and dead.shape[1] == 2):
        raise ValueError(f"dead must be (n, 2) integers, got {dead.dtype} {dead.shape}")
    return PeTrace(
        name=_text(head, "name"),
        wafer=_text(head, "wafer"),
        rows=_count(head, "rows"),
        cols=_count(head, "cols"),
        block=_count(head, "block"),
        layers=layers,
        dead=dead.astype(np.int64),
        physical_shape=_physical(head["physical_shape"]),
        phases=_records(head, "phases"),
        allocations=_records(head, "allocations"),
        regions=_records(head, "regions"),
        meta=_meta(head),
    )


def _count(where: Any, key: Any) -> int:
    v = where[key]
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{key} must be a positive integer, got {v!r}")
    return v


MAX_TEXT = 1000  # characters of a name in a header (a page title, a PNG's caption)
MAX_RECORDS = 10_000  # phases, allocations, regions (the producers write < 1,000 of each)


def _text(head: dict[str, Any], key: str) -> str:
    v = head[key]
    if not isinstance(v, str) or len(v) > MAX_TEXT:
        what = f"{len(v):,} characters" if isinstance(v, str) else repr(v)[:40]
        raise ValueError(f"{key} must be a text of at most {MAX_TEXT:,} characters, got {what}")
    return v


def _physical(v: Any) -> tuple[int, int]:
    if not isinstance(v, list) or len(v) != 2:
        raise ValueError(f"physical_shape must be [rows, cols], got {str(v)[:40]}")
    return _count(v, 0), _count(v, 1)


def _is_str(v: Any) -> bool:
    return isinstance(v, str) and len(v) <= MAX_TEXT


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and np.isfinite(v)


def _is_ints(v: Any, n: int) -> bool:
    return isinstance(v, list) and len(v) == n and all(type(x) is int for x in v)


# What each entry of the header's lists holds, as the page and the PNG read it.
_FIELDS: dict[str, dict[str, Any]] = {
    "phases": {
        "path": _is_str,
        "cycles": _is_number,
        "bound": _is_str,
        "critical_pe": lambda v: v is None or _is_ints(v, 2),
    },
    "allocations": {
        "name": _is_str,
        "bytes_per_pe": _is_number,
        "region": lambda v: _is_ints(v, 4),
    },
    "regions": {"name": _is_str, "rect": lambda v: _is_ints(v, 4)},
}
_META = {"predicted_s": _is_number, "units": _is_str}


def _records(head: dict[str, Any], key: str) -> list[dict[str, Any]]:
    v = head.get(key, [])
    if not isinstance(v, list) or not all(isinstance(r, dict) for r in v):
        raise ValueError(f"{key} must be a list of objects")
    if len(v) > MAX_RECORDS:
        raise ValueError(f"{key} lists {len(v):,} entries; a trace holds at most {MAX_RECORDS:,}")
    for i, record in enumerate(v):
        for field, ok in _FIELDS[key].items():
            if field not in record or not ok(record[field]):
                raise ValueError(f"{key}[{i}].{field} is missing or of the wrong type")
    return v


def _meta(head: dict[str, Any]) -> dict[str, Any]:
    meta = head.get("meta") or {}
    if not isinstance(meta, dict):
        raise ValueError("meta must be an object")
    for field, ok in _META.items():
        if field in meta and not ok(meta[field]):
            raise ValueError(f"meta.{field} is of the wrong type")
    return meta


def _checked(t: PeTrace) -> PeTrace:
    """`t` if its arrays fit its grid: each layer of `t.shape`, finite and >= 0 (sums of
    bytes, cycles and wavelets), the dead PEs on the physical wafer."""
    if not t.layers:
        raise ValueError("it has no layers")
    for key, a in t.layers.items():
        if a.shape != t.shape:
            raise ValueError(f"layer {key} has shape {a.shape}, the header says {t.shape}")
        bad = int(np.count_nonzero(~np.isfinite(a) | (a < 0)))
        if bad:
            raise ValueError(f"layer {key} has {bad} NaN, infinite or negative values")
    rows, cols = t.physical_shape
    if len(t.dead) and not (
        (t.dead >= 0).all() and (t.dead[:, 0] < rows).all() and (t.dead[:, 1] < cols).all()
    ):
        raise ValueError(f"dead PEs lie outside the {rows} x {cols} wafer")
    return t


def downsample(trace: PeTrace, block: int) -> PeTrace:
    """`trace` in cells of `block` x `block` of its cells, each layer by its reduction."""
    if block <= 1:
        return trace
    out = {}
    for key, a in trace.layers.items():
        r, c = a.shape
        padded = np.zeros((-(-r // block) * block, -(-c // block) * block))
        padded[:r, :c] = a  # every layer is >= 0, so zero padding changes no sum and no max
        cells = padded.reshape(padded.shape[0] // block, block, padded.shape[1] // block, block)
        out[key] = cells.max(axis=(1, 3)) if _SPEC[key].reduction == "max" else cells.sum((1, 3))
    return dataclasses.replace(trace, block=trace.block * block, layers=out)
