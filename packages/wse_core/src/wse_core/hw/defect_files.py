"""Defect-map files: a wafer's dead PEs written and read, so that a measured map can be
repaired (`wse wafer defects --load FILE`) and a drawn one kept (`--save FILE`; hunt 76: maps
could only be drawn from a seed).

The format, the only one: an `.npz` archive (NumPy's `np.savez`, uncompressed) holding

- `dead` (required): a 2-D bool array on the wafer's physical grid, (pe_rows + spare_rows)
  x (pe_cols + spare_cols), True for a dead PE: `np.savez("map.npz", dead=mask)` is a
  whole measured map;
- `seed` (optional): the 0-d integer in [0, 2**63 - 1] it was drawn from (absent: not
  drawn; `--seed`'s bound, kept as an int64: hunt 77, a uint64 2**64 - 1 was read, then
  crashed `--save`);
- `rate` (optional): the 0-d rate in [0, 1] it was drawn at, each PE's probability of being
  dead (absent: the map's dead fraction). A rate that cannot draw the map, 0 beside a dead PE
  or 1 beside a live one, is refused; any other can draw any map, however unlikely, so a
  fraction far from it is shown beside it (`wse wafer defects`), not refused (hunt 77);
- `wafer` (optional): the 0-d text name of the spec it was made for, shown, never checked
  (a map fits any spec with its physical grid).

Each member is read as `np.load` reads it: `dead.npy` (what `np.savez` writes) or `dead` (a
zip written by other tools; hunt 77: refused as "no item named 'dead.npy'"); one name given
both ways is refused. `save_defect_map` writes all four, whole or not at all
(`write_atomically`: an existing file is left as it was when the write fails), and refuses a
map whose rate cannot draw it, as `load_defect_map` would. `load_defect_map` refuses, as one
`DefectError` line naming the file, anything else: no regular file, no .npz, no `dead`, a
`dead` of another dtype, rank or shape than the spec's physical grid (from its array header,
before any data is read), a `seed`, `rate` or `wafer` of the wrong kind, and any other member
(a typo of `dead` is not silently a map of no defects). The `remap` of a loaded map equals
the remap of the map that was saved.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from wse_core.errors import NUMPY_FILE_ERRORS, DefectError, WseError, numpy_file_problem
from wse_core.hw.defects import DefectMap
from wse_core.hw.spec import WaferSpec

__all__ = ["save_defect_map", "load_defect_map", "rate_problem", "MEMBERS"]

MEMBERS = ("dead", "seed", "rate", "wafer")  # `dead` required, the rest optional
_KINDS = {"seed": "iu", "rate": "fiu", "wafer": "U"}  # each optional member's dtype kinds
MAX_NAME = 200  # characters of `wafer` (a spec's name; a long text is no name)


def save_defect_map(path: str | Path, dm: DefectMap, wafer: str = "") -> Path:
    """Write `dm` to `path` (module docstring's format) whole or not at all; returns the
    path. `wafer`: the name of the spec it belongs to (informational)."""
    import io

    from wse_core.host.atomic import write_atomically

    if why := rate_problem(dm):  # the file `load_defect_map` would refuse
        raise DefectError(f"cannot save the defect map to {path}: {why}")
    if len(str(wafer)) > MAX_NAME:  # hunt 77: written, then refused on reading
        raise DefectError(f"cannot save the defect map to {path}: its wafer name has "
                          f"{len(str(wafer))} characters; give a spec's name of at most "
                          f"{MAX_NAME}")  # fmt: skip
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
            members = _members(path, z.zip.namelist())
            _require_members(path, list(members))
            _require_dead_header(path, _header(z, members["dead"]), spec)
            for name, member in members.items():
                if name != "dead":
                    _require_scalar(path, name, _header(z, member))
            require_npz(z, named, fits=lambda b: "give a map of the wafer's physical grid")
            arrays = {n: z[n] for n in members}
    except WseError as e:  # a limit (members, memory) or our refusal: its own line
        if str(e).startswith("it "):  # `open_npz`'s "it is a folder, not a regular file"
            raise DefectError(f"cannot read {named}: {e}") from None
        raise
    except NUMPY_FILE_ERRORS as e:
        raise DefectError(f"{path} is not a defect map (an .npz with a 2-D bool array "
                          f"`dead`): {numpy_file_problem(e)}") from None  # fmt: skip
    return _defect_map(path, arrays)


def _members(path: Path, names: list[str]) -> dict[str, str]:
    """{array name: zip member}, as `np.load` names them ("dead.npy" and "dead" are both
    `dead`); DefectError for one name given both ways (NumPy reads the last, silently)."""
    out: dict[str, str] = {}
    for member in names:
        name = member.removesuffix(".npy")
        if name in out:
            raise DefectError(f"{path} holds `{name:.40}` twice, as {out[name]!r:.44} and "
                              f"{member!r:.44}: keep one")  # fmt: skip
        out[name] = member
    return out


def _header(z: Any, member: str) -> tuple[tuple[int, ...], np.dtype]:
    """(shape, dtype) from zip member `member`'s array header, without reading its data."""
    with z.zip.open(member) as f:
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
        want = {"seed": "an integer", "rate": "a number",
                "wafer": f"a text of at most {MAX_NAME} characters"}[name]  # fmt: skip
        raise DefectError(
            f"{path}: `{name}` must be a single value ({want}), got a {dtype} array of shape "
            f"{shape}"
        )


def _defect_map(path: Path, arrays: dict[str, np.ndarray]) -> DefectMap:
    dead = np.asarray(arrays["dead"])
    seed = int(arrays["seed"]) if "seed" in arrays else None
    rate = float(arrays["rate"]) if "rate" in arrays else float(dead.mean()) if dead.size else 0.0
    try:
        dm = DefectMap(dead=dead, seed=seed, rate=rate)
    except DefectError as e:  # a seed outside [0, 2**63 - 1], a rate outside [0, 1] or NaN
        raise DefectError(f"{path}: {e}") from None
    if why := rate_problem(dm):
        raise DefectError(
            f"{path}: {why}, or leave `rate` out (its dead fraction is then its rate)"
        )
    return dm


def rate_problem(dm: DefectMap) -> str | None:
    """Why `dm.rate` cannot be the rate its dead PEs were drawn at, or None: a draw makes each
    PE dead with probability `rate` (`defect_map`), so rate 0 draws no dead PE and rate 1 no
    live one; any other rate can draw any map (module docstring)."""
    dead, pes = dm.num_dead, dm.dead.size
    if (dm.rate == 0 and dead) or (dm.rate == 1 and dead < pes):
        return (
            f"`rate` {dm.rate:g} cannot draw {dead:,} dead PE{'s' * (dead != 1)} of {pes:,} (a "
            "rate is each PE's "
            f"probability of being dead); give the rate it was drawn at"
        )
    return None
