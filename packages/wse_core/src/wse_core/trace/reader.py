"""Reading a trace file (`load`): the `.npz` `PeTrace.save` writes, checked against the schema.

Contract. `load(path)` returns the `PeTrace`, or raises `TraceError` with one line naming what
is wrong. Refused: no file or no regular file, an empty one, an HTML page (what `wse view`
writes), anything that is not an `.npz` of arrays (nothing is unpickled), archives past the
host's memory, a layer of more than `MAX_CELLS` cells (from its array header, before any
layer is read), another `SCHEMA_VERSION`, and everything the page (JSON, float32 layers) or
the PNG cannot show: a missing or malformed header field, a header number that is NaN,
infinite or an integer past a float, a lone surrogate in a text, texts over `MAX_TEXT`
characters, more than `MAX_RECORDS` phases, allocations or regions, a grid side over
`MAX_PE_SIDE`, a layer missing, of the wrong shape, negative, non-finite or past
`MAX_VALUE`, rectangles and critical PEs off the grid, dead PEs off the physical wafer,
listed twice, or more of them than the physical wafer has PEs (from `dead`'s array header,
before it is read).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from wse_core.errors import NUMPY_FILE_ERRORS, WseError, numpy_file_problem
from wse_core.host.readers import load_json, open_npz, require_npz
from wse_core.hw.description import MAX_PE_SIDE
from wse_core.trace.fields import FIELDS as _FIELDS
from wse_core.trace.fields import MAX_RECORDS, MAX_TEXT, TEXT_WORDS, is_str
from wse_core.trace.fields import META as _META
from wse_core.trace.schema import (
    _SPEC,
    MAX_CELLS,
    MAX_VALUE,
    SCHEMA_VERSION,
    PeTrace,
    TraceError,
)

__all__ = ["load", "MAX_TEXT", "MAX_RECORDS"]


def load(path: str | Path) -> PeTrace:
    """Read a trace written by `PeTrace.save`; TraceError (one line) if it is not one of this
    schema (the module docstring lists what is refused)."""
    path = Path(path)
    if not path.is_file():
        why = "is a folder" if path.is_dir() else "is a FIFO, socket or device"
        raise TraceError(
            f"{path} {why}, not a trace file" if path.exists() else f"no trace file {path}"
        )
    if path.stat().st_size == 0:
        raise TraceError(f"{path} is empty, not a wse trace (.npz with a header)")
    _refuse_page(path)
    try:
        z = open_npz(path, f"wse view: {path}")
        with z:
            _require_memory(path, z)
            _require_cells(path, z)
            head = load_json(bytes(z["header"]), f"{path}'s header")
            _require_dead_count(path, z, head)
            arrays = {k: np.asarray(z[k]) for k in z.files if k != "header"}
    except WseError:  # a limit refused (memory, header depth): its own line
        raise
    except NUMPY_FILE_ERRORS as e:
        why = numpy_file_problem(e)
        raise TraceError(f"{path} is not a wse trace (.npz with a header): {why}") from None
    if not isinstance(head, dict):
        raise TraceError(f"{path}: the header is not a JSON object")
    version = head.get("schema_version")
    if type(version) is not int or version != SCHEMA_VERSION:  # hunt 72: "1", true and 1.0
        raise TraceError(  # passed as 1 (or read "has 1; reads 1"): the integer, shown as given
            f"{path} has trace schema_version {version!r:.40}; this wse reads the integer "
            f"{SCHEMA_VERSION}"
        )
    try:
        _require_plain(head, "")
        return _checked(_trace(head, arrays))
    except (KeyError, IndexError, TypeError, ValueError) as e:
        raise TraceError(f"{path} is not a valid wse trace: {numpy_file_problem(e)}") from None


def _refuse_page(path: Path) -> None:
    """A page `wse view` wrote, given back to it (hunt 64: the refusal named an --out never
    given): say what it is, and what a trace is."""
    try:
        with open(path, "rb") as f:
            head = f.read(64).lstrip().lower()
    except OSError:  # unreadable: open_npz says so in its words
        return
    if head.startswith((b"<!doctype html", b"<html")):
        raise TraceError(
            f"{path} is an HTML page (what wse view writes), not a trace: give the .npz file "
            "that a run's --trace FILE wrote"
        )


def _require_cells(path: Path, z: Any) -> None:
    """Refuse a layer of more than MAX_CELLS cells from its array header, before any layer is
    read: wse's producers write larger grids in blocks (hunt 64: a 5.8 MB file of 2,800 x
    2,800 layers became a 460 MB page, with 3 GB of memory)."""
    for name in z.zip.namelist():
        if name in ("header.npy", "dead.npy"):  # dead: `_require_dead_count`
            continue
        shape = _array_shape(z, name)
        if math.prod(shape) > MAX_CELLS:
            raise TraceError(
                f"{path} has {math.prod(shape):,} cells in layer {name.removesuffix('.npy')!r:.60} "
                f"({' x '.join(map(str, shape))}); a wse trace holds at most {MAX_CELLS:,} "
                "(its producers write bigger grids in blocks)"
            )


def _require_dead_count(path: Path, z: Any, head: Any) -> None:
    """Refuse more dead PEs than the physical wafer has PEs, from `dead`'s array header before
    it is read (hunt 68: a 65 kB file listed 4,000,000 dead PEs on an 81-PE wafer; the page
    was 24 MB and said "4000000 dead PEs"). A malformed header is left to `_trace`."""
    try:
        rows, cols = _physical(head["physical_shape"])
    except (KeyError, IndexError, TypeError, ValueError):
        return
    if "dead.npy" not in z.zip.namelist():
        return
    shape = _array_shape(z, "dead.npy")
    if len(shape) == 2 and shape[0] > rows * cols:
        raise TraceError(
            f"{path} lists {shape[0]:,} dead PEs on a {rows} x {cols} physical wafer "
            f"({rows * cols:,} PEs); a trace lists each dead PE once"
        )


def _array_shape(z: Any, name: str) -> tuple[int, ...]:
    """The shape in member `name`'s array header, without reading its data."""
    with z.zip.open(name) as f:
        major, _ = np.lib.format.read_magic(f)
        read = np.lib.format.read_array_header_1_0 if major == 1 else None
        return (read or np.lib.format.read_array_header_2_0)(f)[0]


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
    rows, cols = _count(head, "rows", MAX_PE_SIDE), _count(head, "cols", MAX_PE_SIDE)
    return PeTrace(
        name=_text(head, "name"),
        wafer=_text(head, "wafer"),
        rows=rows,
        cols=cols,
        block=_count(head, "block", max(rows, cols)),  # one block holds the whole grid
        layers=layers,
        dead=dead.astype(np.int64),
        physical_shape=_physical(head["physical_shape"]),
        phases=_records(head, "phases"),
        allocations=_records(head, "allocations"),
        regions=_records(head, "regions"),
        meta=_meta(head),
    )


def _count(where: Any, key: Any, high: int, name: str = "") -> int:
    """where[key], an integer in [1, high] (hunt 64: rows of 10^30 overflowed the PNG's C
    longs; a wafer's side is at most MAX_PE_SIDE PEs)."""
    v = where[key]
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= high:
        raise ValueError(f"{name or key} must be an integer in [1, {high:,}], got {_shown(v)}")
    return v


def _shown(v: Any) -> str:
    """A header value in an error line: a long text by its length, anything else cut short."""
    return f"{len(v):,} characters" if isinstance(v, str) and len(v) > 40 else f"{v!r:.40}"


def _text(head: dict[str, Any], key: str) -> str:
    v = head[key]
    if not is_str(v):
        raise ValueError(f"{key} must be {TEXT_WORDS}, got {_shown(v)}")
    return v


def _physical(v: Any) -> tuple[int, int]:
    if not isinstance(v, list) or len(v) != 2:
        raise ValueError(f"physical_shape must be [rows, cols], got {str(v)[:40]}")
    # physical = logical rows + spare rows, each at most MAX_PE_SIDE
    side = 2 * MAX_PE_SIDE
    return _count(v, 0, side, "physical_shape[0]"), _count(v, 1, side, "physical_shape[1]")


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
            want = TEXT_WORDS if ok is is_str else "a number"
            raise ValueError(f"meta.{field} must be {want}, got {_shown(meta[field])}")
    return meta


MAX_FLOAT = float(np.finfo(np.float64).max)


def _require_plain(v: Any, where: str) -> None:
    """Refuse in a header what the page's JSON.parse or its UTF-8 cannot hold (hunt 64):
    NaN and infinities (Python's json reads them, JSON has none), integers past a float (the
    PNG's float() overflowed) and lone surrogates (an escape such as \\ud800, no character)."""
    if isinstance(v, float) and not math.isfinite(v):
        word = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}[repr(v)]
        raise ValueError(f"{where} is {word}; a trace holds finite numbers")
    if isinstance(v, int) and not isinstance(v, bool) and abs(v) > MAX_FLOAT:
        raise ValueError(f"{where} is an integer past a float's range (about 1.8e308)")
    if isinstance(v, str):
        try:
            v.encode("utf-8")
        except UnicodeEncodeError as e:
            raise ValueError(f"{where} holds {v[e.start]!r}, a lone surrogate, not text") from None
    elif isinstance(v, dict):
        for k, x in v.items():
            _require_plain(k, f"a key of {where or 'the header'}")
            name = k if k.isascii() and k.isprintable() and len(k) <= 40 else repr(k[:40])
            _require_plain(x, f"{where}.{name}" if where else name)
    elif isinstance(v, list):
        for i, x in enumerate(v):
            _require_plain(x, f"{where}[{i}]")


def _checked(t: PeTrace) -> PeTrace:
    """`t` if its arrays fit its grid: every layer of LAYERS, of `t.shape`, finite, >= 0
    (sums of bytes, cycles and wavelets) and at most MAX_VALUE, its rectangles and critical
    PEs on the grid, the dead PEs on the physical wafer, each once."""
    if not t.layers:
        raise ValueError("it has no layers")
    if missing := [k for k in _SPEC if k not in t.layers]:  # the PNG drew them: a KeyError
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise ValueError(f"layer {missing[0]} is missing{more}")
    for key, a in t.layers.items():
        if a.shape != t.shape:
            raise ValueError(f"layer {key} has shape {a.shape}, the header says {t.shape}")
        bad = int(np.count_nonzero(~np.isfinite(a) | (a < 0)))
        if bad:
            raise ValueError(f"layer {key} has {bad} NaN, infinite or negative values")
        if a.size and a.max() > MAX_VALUE:
            raise ValueError(
                f"layer {key} holds {a.max():.3g}; a trace's values are at most "
                f"{MAX_VALUE:.3g} (the page draws float32)"
            )
    _require_on_grid(t)
    _require_dead_once(t)
    return t


def _require_dead_once(t: PeTrace) -> None:
    """The dead PEs on the physical wafer, each listed once: the page counts and draws the
    list as it is (hunt 68: one PE listed 4,000,000 times)."""
    rows, cols = t.physical_shape
    if len(t.dead) and not (
        (t.dead >= 0).all() and (t.dead[:, 0] < rows).all() and (t.dead[:, 1] < cols).all()
    ):
        raise ValueError(f"dead PEs lie outside the {rows} x {cols} wafer")
    flat, counts = np.unique(t.dead[:, 0] * cols + t.dead[:, 1], return_counts=True)
    if len(flat) < len(t.dead):
        n = int(counts.argmax())
        raise ValueError(
            f"dead PE ({flat[n] // cols}, {flat[n] % cols}) is listed {counts[n]:,} times; "
            "a trace lists each dead PE once"
        )


def _require_on_grid(t: PeTrace) -> None:
    """Regions' and allocations' rectangles [row0, col0, rows, cols] and critical PEs on the
    `rows x cols` grid (hunt 64: a rect of 10^400 was the PNG's OverflowError)."""
    for key, field in (("regions", "rect"), ("allocations", "region")):
        for i, record in enumerate(getattr(t, key)):
            r0, c0, nr, nc = record[field]
            if not (0 <= r0 and 0 <= c0 and 0 <= nr and 0 <= nc and r0 + nr <= t.rows
                    and c0 + nc <= t.cols):  # fmt: skip
                raise ValueError(
                    f"{key}[{i}].{field} is {str(record[field]):.60}; it must be [row0, col0, "
                    f"rows, cols] within the {t.rows} x {t.cols} grid"
                )
    for i, phase in enumerate(t.phases):
        pe = phase["critical_pe"]
        if pe is not None and not (0 <= pe[0] < t.rows and 0 <= pe[1] < t.cols):
            raise ValueError(
                f"phases[{i}].critical_pe is {str(pe):.60}; it must be a PE [row, col] of "
                f"the {t.rows} x {t.cols} grid"
            )
