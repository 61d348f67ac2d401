"""The per-PE trace's schema: its layers, its data type and its file.

`LAYERS` names every layer with its unit and the reduction ("sum" or "max") that turns a
block of PEs into one cell; `downsample(trace, block)` applies it, so sums and maxima survive.
A `PeTrace` holds one run's layers on a `rows x cols` grid in `block`-sized cells (at most
`MAX_CELLS` of them), the dead PEs and a JSON-able header (phases, SRAM allocations, named
regions, meta). On disk (`PeTrace.save`, `wse_core.trace.reader.load`): one `.npz` with
`header` (UTF-8 JSON, `schema_version`), one float64 array per layer of shape `shape` (the
block grid, values at most `MAX_VALUE`), and `dead` (n, 2) int64. `wse_core.trace` builds
traces from a run and re-exports all of this.
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
    "MAX_CELLS",
    "MAX_VALUE",
    "TraceError",
    "LayerSpec",
    "PeTrace",
    "downsample",
]

SCHEMA_VERSION = 1
DIRECTIONS = ("N", "S", "E", "W")
PARTS = ("compute", "sram", "fabric", "latency")
MAX_CELLS = 1 << 17  # exact up to 131072 PEs (362 x 362); the full WSE-3 goes in 3 x 3 blocks
# The page sends layers as float32: a larger value would arrive as Infinity (hunt 64: a layer
# of 1e308 summed to inf, and the page's JSON.parse failed on the total).
MAX_VALUE = float(np.finfo(np.float32).max)


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
    """A trace cannot be built as asked (`trace_from`'s inputs, or a trace `load` would
    refuse), or a trace file is missing, unreadable, invalid or of another schema version."""


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
