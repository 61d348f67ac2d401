"""Defect maps and their repair: software always sees a uniform logical PE grid.

A `DefectMap` marks dead PEs on the physical grid (`pe_rows + spare_rows` by
`pe_cols + spare_cols`), drawn from a seed at the spec's defect rate. `remap` repairs it in
two levels, as row/column sparing is done on wafers:

1. A physical row with more dead PEs than there are spare columns is retired whole; the
   spare rows replace retired rows. More retired rows than spare rows: DefectError naming
   the first row that could not be repaired.
2. In each kept row, logical column j is the j-th live PE: dead PEs are skipped and the
   row's spare columns absorb the shift.

A wafer without a map (no defect seed) is repaired as the identity (`identity_remap`), with
no per-PE arrays: a run that draws no dead PEs pays nothing that grows with the wafer.

The result, `Remap`, gives the physical (row, col) of every logical PE and the hop counts of
every logical link; the numbers a kernel computes never depend on it. Where the detours are
paid: every fabric op records its hop chain as its slowest line's, the most physical hops on
its links along any row or column of the grid it runs on (`wse_core.fabric.ledger.chain_hops`;
a periodic axis' ring walked where its layout puts it, `ledger.ring_hops`), so a prediction
priced from traced traffic pays them at `hop_latency_cycles` per hop; a prediction priced from a
published algorithm adds them itself (`wse_hpc.stencil.traffic`, `wse_hpc.fields.perf`) or
lists the omission among its assumptions. `Remap.extra_hops_within(rows, cols)` counts the
detours on the links of the rows x cols grid a run uses (`extra_hops`: the whole wafer's).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from wse_core.errors import DefectError, is_finite, is_int, require_int, shown_setting
from wse_core.hw.spec import WaferSpec

__all__ = [
    "DefectMap",
    "Remap",
    "SEED_MAX",
    "defect_map",
    "identity_remap",
    "remap",
    "require_seed",
    "subgrid_note",
]

SEED_MAX = 2**63 - 1  # a seed is a 64-bit signed integer (jax.random.key, an .npz's int64)


def _same_fields(a: object, b: object) -> bool:
    """Every field of two dataclasses of one type equal, arrays by shape and values."""
    for f in dataclasses.fields(a):  # type: ignore[arg-type]
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            if not np.array_equal(x, y):
                return False
        elif x != y:
            return False
    return True


@dataclasses.dataclass(frozen=True, eq=False)
class DefectMap:
    """Dead PEs on the physical grid: `dead[r, c]` is True for a dead PE. Equal by value
    (the same dead PEs, seed and rate; hunt 74: `==` raised on the array); not hashable."""

    dead: np.ndarray  # bool, (physical_rows, physical_cols)
    seed: int | None
    rate: float

    def __post_init__(self) -> None:
        """Refuse what no wafer's map can be, at construction (hunt 76: a map of 2s counted
        "18 dead PEs" on a row of 9, a 1-D map was an IndexError in `remap`, a NaN one a
        TypeError): `dead` a 2-D NumPy bool array (kept as a read-only copy), `seed` None or
        an integer in [0, 2**63 - 1] (`SEED_MAX`, as `--seed`), `rate` a number in [0, 1] (a
        measured map may be all dead). Its shape against a wafer's physical grid is `remap`'s
        check."""
        dead = self.dead
        if not isinstance(dead, np.ndarray) or dead.dtype != np.bool_ or dead.ndim != 2:
            raise DefectError(f"a defect map must be a 2-D NumPy bool array (physical rows x "
                              f"physical cols, True = dead), got {_described(dead)}")  # fmt: skip
        if dead.flags.writeable:  # a read-only copy: a map used by a Remap cannot change under it
            dead = dead.copy()
            dead.flags.writeable = False
            object.__setattr__(self, "dead", dead)
        if self.seed is not None:  # hunt 77: a uint64 seed past 2**63 - 1 crashed `save`
            require_seed("a defect map's seed", self.seed)
        if not (is_finite(self.rate) and 0.0 <= self.rate <= 1.0):  # type: ignore[operator]
            raise DefectError(f"a defect map's rate must be a number in [0, 1] (a fraction of "
                              f"PEs), got {shown_setting(self.rate)}")  # fmt: skip

    def __eq__(self, other: object) -> bool:
        return _same_fields(self, other) if type(other) is type(self) else NotImplemented

    @property
    def num_dead(self) -> int:
        return int(self.dead.sum())

    @property
    def shape(self) -> tuple[int, int]:
        return self.dead.shape  # type: ignore[return-value]


@dataclasses.dataclass(frozen=True, eq=False)
class Remap:
    """Logical PE (r, c) lives on physical PE (phys_row[r], phys_col[r, c]). Equal by value
    (the same placement of every logical PE, retired rows and spares used); not hashable."""

    phys_row: np.ndarray  # int, (pe_rows,)
    phys_col: np.ndarray  # int, (pe_rows, pe_cols)
    retired_rows: tuple[int, ...]
    spare_rows_used: int
    spare_cols_used: int  # the most spare columns any kept row needed

    def __eq__(self, other: object) -> bool:
        return _same_fields(self, other) if type(other) is type(self) else NotImplemented

    def link_hops(self, axis: int) -> np.ndarray:
        """Physical hops of each logical link along `axis` (0: N-S links, 1: E-W links).

        Shape (pe_rows - 1, pe_cols) for axis 0 and (pe_rows, pe_cols - 1) for axis 1; a link
        without detour is 1 hop. Computed once per axis and kept (read-only): every traced
        fabric op asks for it (a full wafer's took ~7 ms, 552 times in tracing one MD step).
        """
        kept = self.__dict__.setdefault("_link_hops", {})  # frozen: no field, a cache
        if axis not in kept:
            if axis == 1:
                out = np.diff(self.phys_col, axis=1)
            else:
                out = np.diff(self.phys_row)[:, None] + np.abs(np.diff(self.phys_col, axis=0))
            out.setflags(write=False)
            kept[axis] = out
        return kept[axis]

    @property
    def extra_hops(self) -> dict[str, int]:
        """Detour hops beyond one per link over the whole wafer (`extra_hops_within`)."""
        return self.extra_hops_within(*self.phys_col.shape)

    def extra_hops_within(self, rows: int, cols: int) -> dict[str, int]:
        """Detour hops beyond one per link on the links of the logical rows x cols grid at
        (0, 0), the one a run of that grid uses, summed over links and as the longest single
        link (`ns_max`, `ew_max`: physical hops; 1 without detour)."""
        ns = self.link_hops(0)[: max(rows - 1, 0), :cols]
        ew = self.link_hops(1)[:rows, : max(cols - 1, 0)]
        return {
            "ns_total": _extra_total(ns),
            "ew_total": _extra_total(ew),
            "ns_max": _longest(ns),
            "ew_max": _longest(ew),
        }


def _described(value: object) -> str:
    """What a refused map was: "a 1-D int64 array of shape (81,)", "a list"."""
    if not isinstance(value, np.ndarray):
        return f"a {type(value).__name__} (build one with np.asarray(..., dtype=bool))"
    shape = "(" + ", ".join(f"{n:,}" for n in value.shape) + ("," if value.ndim == 1 else "") + ")"
    hint = "; a 0/1 map becomes one as `m != 0`" if value.dtype.kind in "iu" else ""
    return f"a {value.ndim}-D {value.dtype} array of shape {shape}{hint}"


def _uniform(links: np.ndarray) -> bool:
    """True for one value broadcast over the links (the identity repair's: no strides), whose
    sum and maximum need no pass, nor a full-size temporary, over a wafer of any size."""
    return not any(links.strides)


def _extra_total(links: np.ndarray) -> int:
    if links.size == 0:
        return 0
    if _uniform(links):
        return (int(links.flat[0]) - 1) * links.size
    return int((links - 1).sum())


def _longest(links: np.ndarray) -> int:
    if links.size == 0:
        return 1
    return int(links.flat[0]) if _uniform(links) else int(links.max())


PER_PE_BYTES = 48  # the draw (float64), the map (bool), remap's sort (int64 x 2) and copies


def _check_size(spec: WaferSpec) -> None:
    """Refuse a physical grid whose per-PE arrays do not fit in the machine's memory, before
    any (not the problem's share, `WSE_HOST_MEMORY_BYTES`: every run on this wafer pays the
    map, and the workloads' own checks and suggestions size their problems within the share)."""
    from wse_core.host.memory import require

    rows, cols = spec.physical_rows, spec.physical_cols
    require(
        f"the defect map of a {rows:,} x {cols:,} PE wafer",
        rows * cols * PER_PE_BYTES,
        fits=lambda b: f"at most {b // PER_PE_BYTES:,} physical PEs fit (wse3 has 905,256)",
        share=False,
    )


def require_seed(name: str, seed: object) -> None:
    """DefectError unless `seed` is an integer in [0, SEED_MAX]: every seed of the stack is a
    64-bit signed integer (`--seed`'s bound; a map's file keeps it as an int64)."""
    if not (is_int(seed) and 0 <= seed <= SEED_MAX):  # type: ignore[operator]
        # a seed is shown in its digits up to 40 of them (hunt 81: 2**64 - 1 read 1.845e+19)
        small = is_int(seed) and abs(int(seed)) < 10**40  # type: ignore[call-overload]
        got = str(int(seed)) if small else shown_setting(seed)  # type: ignore[call-overload]
        raise DefectError(f"{name} must be an integer in [0, 2**63 - 1], got {got}")


def defect_map(spec: WaferSpec, seed: int, rate: float | None = None) -> DefectMap:
    """Draw dead PEs independently at `rate` (default: the spec's) from `seed`, an integer
    in [0, 2**63 - 1] (NumPy's seeds, 64-bit as every seed here; hunt 67: -1, 2.5 and a
    rate of "0.1" failed inside NumPy)."""
    require_int("defect seed", seed, 0, error=DefectError)  # its words since hunt 67
    require_seed("defect seed", seed)  # and at most 2**63 - 1, before the draw
    rate = spec.defect_rate if rate is None else rate
    if not (is_finite(rate) and 0.0 <= rate < 1.0):  # type: ignore[operator]
        raise DefectError(
            f"defect rate must be a number in [0, 1) (a fraction of PEs), got {shown_setting(rate)}"
        )
    _check_size(spec)
    rng = np.random.default_rng(seed)
    dead = rng.random((spec.physical_rows, spec.physical_cols)) < rate
    return DefectMap(dead=dead, seed=seed, rate=rate)


def _count(n: int, thing: str) -> str:
    return f"{n:,} {thing}{'' if n == 1 else 's'}"


def _not_repairable(spec: WaferSpec, retire: np.ndarray, dead_per_row: np.ndarray) -> str:
    """Why: the first row past the spares, its dead PEs, and where the spare rows went (hunt
    64: a wafer without spare rows read "all 0 spare rows are used by rows -")."""
    bad = int(retire[spec.spare_rows])
    head = (
        f"not repairable: physical row {bad} has {_count(int(dead_per_row[bad]), 'dead PE')} "
        f"but only {_count(spec.spare_cols, 'spare column')}"
    )
    if spec.spare_rows == 0:
        return f"{head}, and the wafer has no spare rows to replace it"
    used = ", ".join(map(str, retire[: spec.spare_rows]))
    verb = "replaces row" if spec.spare_rows == 1 else "replace rows"
    return f"{head}, and its {_count(spec.spare_rows, 'spare row')} already {verb} {used}"


def subgrid_note(spec: WaferSpec, defects: DefectMap, rows: int, cols: int) -> str:
    """What a refused wafer means for a run on its first `rows` x `cols` PEs: the wafer is
    repaired whole before any run, so the run is refused too, and the physical rows its
    logical rows would sit on (the first `rows` whose dead PEs the spare columns mend: hunt
    81, the refusal named only a row past them, as if the run used it). Where fewer rows
    than the run's keep, it says so with the numbers (hunt 82: an empty list, or six rows
    for a 13-row run, "which repair")."""
    keep = np.flatnonzero(defects.dead.sum(axis=1) <= spec.spare_cols)
    head = f"a wafer is repaired whole before a run, so this {rows} x {cols} run is refused too"
    mend = (
        f"at most {_count(spec.spare_cols, 'dead PE')}, what its spare columns mend"
        if spec.spare_cols
        else "no dead PE (the wafer has no spare column to mend one)"
    )
    if len(keep) < rows:
        some = "none" if not len(keep) else f"only {len(keep):,}"
        return (
            f"{head}, and no repair row by row would seat it: {some} of the wafer's "
            f"{spec.physical_rows:,} physical rows have {mend}, and a {rows}-row run needs {rows}"
        )
    kept = [int(r) for r in keep[:rows]]
    if len(kept) <= 6:
        where = f"physical row{'s' * (len(kept) > 1)} " + ", ".join(map(str, kept))
    else:
        where = f"{len(kept)} physical rows from {kept[0]} to {kept[-1]}"
    return f"{head}, though its rows would sit on {where}, each with {mend}"


def identity_remap(spec: WaferSpec) -> Remap:
    """The repair of a wafer without dead PEs: logical PE (r, c) on physical PE (r, c), every
    link one hop, no spare used. What `remap` computes from an all-live map, without the map:
    a row index, a broadcast column index and broadcast one-hop links (read-only views, a
    few bytes whatever the wafer's size; hunt 72: a 10 x 10 x 10 stencil on a 30,000 x 30,000
    spec was refused for a 40.3 GiB defect map of no dead PEs, and 12,000 x 12,000 took 24 s
    and 4.7 GB)."""
    rows, cols = spec.pe_rows, spec.pe_cols
    out = Remap(
        phys_row=np.arange(rows, dtype=np.int64),
        phys_col=np.broadcast_to(np.arange(cols, dtype=np.int64), (rows, cols)),
        retired_rows=(),
        spare_rows_used=0,
        spare_cols_used=0,
    )
    one = np.ones(1, dtype=np.int64)
    shapes = {0: (max(rows - 1, 0), cols), 1: (rows, max(cols - 1, 0))}  # as `link_hops`
    out.__dict__["_link_hops"] = {a: np.broadcast_to(one, s) for a, s in shapes.items()}
    return out


def remap(spec: WaferSpec, defects: DefectMap | None) -> Remap:
    """Repair `defects` with the spec's spares; DefectError if it cannot be done. No map
    (None): the identity (`identity_remap`), with no per-PE arrays to check or allocate."""
    rows, cols = spec.pe_rows, spec.pe_cols
    if defects is None:
        return identity_remap(spec)
    _check_size(spec)
    dead = defects.dead
    if dead.shape != (spec.physical_rows, spec.physical_cols):
        raise DefectError(
            f"defect map is {dead.shape[0]:,} x {dead.shape[1]:,} PEs but wafer {spec.name!r}'s "
            f"physical grid is {spec.physical_rows:,} x {spec.physical_cols:,} ({spec.pe_rows:,}"
            f" + {spec.spare_rows} spare rows by {spec.pe_cols:,} + {spec.spare_cols} spare "
            "columns): give a map of that shape"
        )
    dead_per_row = dead.sum(axis=1)
    retire = np.flatnonzero(dead_per_row > spec.spare_cols)
    if retire.size > spec.spare_rows:
        raise DefectError(_not_repairable(spec, retire, dead_per_row))
    kept = np.setdiff1d(np.arange(spec.physical_rows), retire)[:rows]
    live = ~dead[kept]  # (rows, physical_cols)
    # j-th live PE of each row: the positions of live PEs, in order, first `cols` of them.
    order = np.argsort(~live, axis=1, kind="stable")
    phys_col = order[:, :cols]
    used_cols = int(phys_col[:, -1].max()) + 1 - cols if rows else 0
    return Remap(
        phys_row=kept.astype(np.int64),
        phys_col=phys_col.astype(np.int64),
        retired_rows=tuple(int(r) for r in retire),
        spare_rows_used=int(retire.size),
        spare_cols_used=max(used_cols, 0),
    )
