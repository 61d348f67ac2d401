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

from wse_core.errors import WseError

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

    def save(self, path: str | Path) -> Path:
        """Write one compressed `.npz` (header JSON + arrays); returns the path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        head = np.frombuffer(json.dumps(self.header()).encode(), dtype=np.uint8)
        buf = io.BytesIO()
        arrays: dict[str, Any] = {"header": head, "dead": self.dead, **self.layers}
        np.savez_compressed(buf, **arrays)
        path.write_bytes(buf.getvalue())
        return path


def load(path: str | Path) -> PeTrace:
    """Read a trace written by `PeTrace.save`; TraceError if it is not one of this schema."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as z:
            head = json.loads(bytes(z["header"]).decode())
            arrays = {k: np.asarray(z[k]) for k in z.files if k != "header"}
    except FileNotFoundError:
        raise TraceError(f"no trace file {path}") from None
    except (OSError, ValueError, KeyError) as e:
        raise TraceError(f"{path} is not a wse trace (.npz with a header): {e}") from None
    version = head.get("schema_version")
    if version != SCHEMA_VERSION:
        raise TraceError(
            f"{path} has trace schema_version {version}; this wse reads {SCHEMA_VERSION}"
        )
    fields = {f.name for f in dataclasses.fields(PeTrace)} - {"layers", "dead"}
    kwargs = {k: head[k] for k in fields if k in head}
    kwargs["physical_shape"] = tuple(head["physical_shape"])
    layers = {spec["key"]: arrays[spec["key"]].astype(np.float64) for spec in head["layers"]}
    return PeTrace(layers=layers, dead=arrays["dead"].astype(np.int64), **kwargs)


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
