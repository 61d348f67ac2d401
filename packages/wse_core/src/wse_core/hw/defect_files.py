"""Defect-map files: a wafer's dead PEs written and read, so that a measured map can be
repaired (`wse wafer defects --load FILE`) and a drawn one kept (`--save FILE`; hunt 76: maps
could only be drawn from a seed).

The format, the only one: an `.npz` archive (NumPy's `np.savez`, uncompressed) holding

- `dead` (required): a 2-D bool array on the wafer's physical grid, (pe_rows + spare_rows)
  x (pe_cols + spare_cols), True for a dead PE: `np.savez("map.npz", dead=mask)` is a
  whole measured map;
- `seed` (optional): the 0-d integer >= 0 it was drawn from (absent: not drawn);
- `rate` (optional): the 0-d rate in [0, 1] it was drawn at (absent: the map's dead
  fraction);
- `wafer` (optional): the 0-d text name of the spec it was made for, shown, never checked
  (a map fits any spec with its physical grid).

`save_defect_map` writes all four, whole or not at all (`write_atomically`: an existing file
is left as it was when the write fails). `load_defect_map` refuses, as one `DefectError` line
naming the file, anything else: no regular file, no .npz, no `dead`, a `dead` of another
dtype, rank or shape than the spec's physical grid (from its array header, before any data is
read), a `seed`, `rate` or `wafer` of the wrong kind, and any other member (a typo of
`dead` is not silently a map of no defects). The `remap` of a loaded map equals the remap of
the map that was saved.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from wse_core.errors import NUMPY_FILE_ERRORS, DefectError, WseError, numpy_file_problem
from wse_core.hw.defects import DefectMap
from wse_core.hw.spec import WaferSpec

__all__ = ["save_defect_map", "load_defect_map", "MEMBERS"]

MEMBERS = ("dead", "seed", "rate", "wafer")  # `dead` required, the rest optional
_KINDS = {"seed": "iu", "rate": "fiu", "wafer": "U"}  # each optional member's dtype kinds
MAX_NAME = 200  # characters of `wafer` (a spec's name; a long text is no name)


def save_defect_map(path: str | Path, dm: DefectMap, wafer: str = "") -> Path:
    """Write `dm` to `path` (module docstring's format) whole or not at all; returns the
    path. `wafer`: the name of the spec it belongs to (informational)."""
    import io

    from wse_core.host.atomic import write_atomically

    arrays: dict[str, Any] = {"dead": dm.dead, "rate": np.float64(dm.rate), "wafer": str(wafer)}
    if dm.seed is not None:
        arrays["seed"] = np.int64(dm.seed)
    buf = io.BytesIO()
    np.savez(buf, **arrays)  # at 1x: no member trips the reader's zip-bomb check
    return write_atomically(path, buf.getvalue())


def load_defect_map(path: str | Path, spec: WaferSpec) -> DefectMap:
    """The map in `path` for a wafer of `spec`'s physical grid; DefectError (one line) if it
    is not one (module docstring)."""
    from wse_core.host.readers import open_npz, require_npz

    path = Path(path)
    named = f"defect map {path}"
    if not path.exists() and not path.is_symlink():
        raise DefectError(f"no defect map file {path} (an .npz with a 2-D bool array `dead`)")
    try:
        z = open_npz(path, named)
        with z:
            names = [n.removesuffix(".npy") for n in z.zip.namelist()]
            _require_members(path, names)
            _require_dead_header(path, _header(z, "dead"), spec)
            for name in names:
                if name != "dead":
                    _require_scalar(path, name, _header(z, name))
            require_npz(z, named, fits=lambda b: "give a map of the wafer's physical grid")
            arrays = {n: z[n] for n in names}
    except WseError as e:  # a limit (members, memory) or our refusal: its own line
        if str(e).startswith("it "):  # `open_npz`'s "it is a folder, not a regular file"
            raise DefectError(f"cannot read {named}: {e}") from None
        raise
    except NUMPY_FILE_ERRORS as e:
        raise DefectError(f"{path} is not a defect map (an .npz with a 2-D bool array "
                          f"`dead`): {numpy_file_problem(e)}") from None  # fmt: skip
    return _defect_map(path, arrays)


def _header(z: Any, name: str) -> tuple[tuple[int, ...], np.dtype]:
    """(shape, dtype) from member `name`'s array header, without reading its data."""
    with z.zip.open(f"{name}.npy") as f:
        major, _ = np.lib.format.read_magic(f)
        read = np.lib.format.read_array_header_1_0 if major == 1 else None
        shape, _, dtype = (read or np.lib.format.read_array_header_2_0)(f)
    return tuple(shape), dtype


def _require_members(path: Path, names: list[str]) -> None:
    unknown = sorted(set(names) - set(MEMBERS))
    if "dead" not in names or unknown:
        odd = f"unknown member(s) {', '.join(f'{n!r:.40}' for n in unknown[:5])}" if unknown else ""
        what = "no array `dead`" + (f" and {odd}" if odd else "") if "dead" not in names else odd
        raise DefectError(
            f"{path} has {what}: a defect map holds `dead` (a 2-D bool array of the physical "
            f"grid) and optionally `seed`, `rate`, `wafer`, e.g. np.savez(FILE, dead=mask)"
        )


def _require_dead_header(path: Path, header: tuple, spec: WaferSpec) -> None:
    shape, dtype = header
    want = (spec.physical_rows, spec.physical_cols)
    if dtype != np.bool_ or len(shape) != 2 or shape != want:
        given = " x ".join(f"{n:,}" for n in shape) or "a scalar"
        raise DefectError(
            f"{path}: `dead` is a {len(shape)}-D {dtype} array of {given}; wafer {spec.name!r} "
            f"needs a 2-D bool array of its physical grid, {want[0]:,} x {want[1]:,} "
            f"({spec.pe_rows:,} + {spec.spare_rows} spare rows by {spec.pe_cols:,} + "
            f"{spec.spare_cols} spare columns)"
        )


def _require_scalar(path: Path, name: str, header: tuple) -> None:
    shape, dtype = header
    too_long = name == "wafer" and dtype.itemsize > 4 * MAX_NAME  # 4 B a character
    if shape != () or dtype.kind not in _KINDS[name] or too_long:
        want = {"seed": "an integer", "rate": "a number", "wafer": "a short text"}[name]
        raise DefectError(
            f"{path}: `{name}` must be a single value ({want}), got a {dtype} array of shape "
            f"{shape}"
        )


def _defect_map(path: Path, arrays: dict[str, np.ndarray]) -> DefectMap:
    dead = np.asarray(arrays["dead"])
    seed = int(arrays["seed"]) if "seed" in arrays else None
    rate = float(arrays["rate"]) if "rate" in arrays else float(dead.mean()) if dead.size else 0.0
    try:
        return DefectMap(dead=dead, seed=seed, rate=rate)
    except DefectError as e:  # a seed < 0, a rate outside [0, 1] or NaN: name the file
        raise DefectError(f"{path}: {e}") from None
