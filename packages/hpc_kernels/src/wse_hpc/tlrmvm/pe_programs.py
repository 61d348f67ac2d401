"""What each PE's program multiplies in one TLR-MVM product, from the plan (priced by `perf`).

`pe_tiles(plan)` lists the distinct PE programs of a plan with the number of PEs that run
each: phase 1 (V^H x) and phase 3 (U y) as fp32 `Tile`s in one of two instruction forms:
- "axpy", the SDK's `single-tile-matvec` (csl-examples `benchmarks/single-tile-matvec/src/
  pe_matvec.csl`: `@map` over x of one `@fmacs` y += A[:, i] x_i per column, each a DSD of
  the column's elements padded to 16 bytes, `padded_nb`; per element it reads A and y and
  writes y, and it reads x once per column). Both phases run it (docs/references/
  tlr-pe-program.md says what was read): phase 3 over U's columns (2 nb elements), phase 1
  over the columns of the PE's piece of the transposed V stack, as the authors' own TLR-MVM
  stores it (ecrc/tlrmvm `TlrmvmCPU.cpp`: per tile column the V bases stacked rank row under
  rank row, column-major, one NoTrans GEMV, so a column runs down the rank rows): a PE's
  piece holds the k rank rows it stores for one x piece, so its columns are 2 k elements
  (the grouped plan of SC23's case: 20 held, 10 real-split, one piece per PE; 2-14 in up to
  4 pieces at group size 4) and it issues 2 nb = 512 FMACs per piece, each paying the DSD
  issue (why the grouped planner, pricing each group size, takes 1 there). `PHASE1_FORM`.
  The columns are not padded here: the plans fill a PE's SRAM with unpadded rows
  (single-tile-matvec's 16-byte `padded_nb` would put four of the six plans of SC23's case
  1.6-4.5 kB past 48 kB), and at fmac.fp32's width of 1 the bank rule the padding avoids
  cannot slow the FMAC further; `Tile(align=SDK_COLUMN_ALIGN)` prices it.
- "dot", the same FMAC streamed along the tile's long side (one DSD per row of `n`
  elements into one fp32 accumulator: one element per cycle, reads A and x, the row's
  result stored once): the emulator's phase-1 kernel (`pe_kernels.rows_dot`) and the
  reported alternative for phase 1 (`pe_tiles(plan, phase1="dot")`, `perf.predict`'s
  `phase1_alternative`): a choice of ours, no published program.
The tiles are the ones the emulation multiplies, padding rows of the PE's rank chunk included
(the emulator and every PE run the same program over their stored rows; padded rows are
zeros), grouped by the x piece (phase 1) or y piece (phase 3) they use. A complex (m x n)
tile is one real (2m x 2n) tile: in the dot form, two real dots per complex row (re and im)
over its 2n interleaved values. That is the program of both byte conventions
(`perf.cerebras_bandwidth`): a plan made with `real_split` stores the real tiles themselves
(16 mn bytes per complex tile, not 8), so its planner picks a smaller rank chunk and its
tiles here are shorter (2 w rows of phase 1, 2 w columns of phase 3), priced as they stand.
A padded axpy tile (`align`) is priced in cycles and in the SRAM it takes
(`Tile.stored_bytes`), never in the SDK's byte count, which counts nb as run.py does.
`pe_weights(plan, model)` gives each PE's share of the
busiest PE's cycles (grouped plans: the PEs' programs differ).
"""

from __future__ import annotations

import dataclasses

import numpy as np
from wse_core.cost.perf import Op, PerfModel, Work

from wse_hpc.tlrmvm.grouped_plan import GroupedPlan
from wse_hpc.tlrmvm.packed import PackedPlan
from wse_hpc.tlrmvm.wafer import TlrPlan

__all__ = [
    "FORMS",
    "SDK_COLUMN_ALIGN",
    "PHASE1_FORM",
    "PHASE1_ALTERNATIVE",
    "PeProgram",
    "Tile",
    "pe_tiles",
    "pe_weights",
]

FORMS = ("axpy", "dot")  # single-tile-matvec's column AXPY; one row per DSD (see above)
PHASE1_FORM = "axpy"  # the published program: single-tile-matvec on the PE's V^T stack piece
PHASE1_ALTERNATIVE = "dot"  # ours: one DSD per V^H row into one accumulator (reported beside)
SDK_COLUMN_ALIGN = 4  # single-tile-matvec pads each column to 16 B (4 fp32): `padded_nb`


@dataclasses.dataclass(frozen=True)
class Tile:
    """One fp32 GEMV y (m) += A (m x n) x (n) on one PE, as `form` instructions: "axpy"
    (single-tile-matvec: n FMAC DSDs of m elements) or "dot" (m FMAC DSDs of n elements,
    each reduced into one accumulator)."""

    m: int
    n: int
    form: str = "axpy"
    align: int = 1  # axpy: each column (and y) padded to a multiple of this (SDK: 4)

    def __post_init__(self) -> None:
        if self.form not in FORMS:
            raise ValueError(f"Tile form {self.form!r}; known: {', '.join(FORMS)}")
        if self.align < 1:
            raise ValueError(f"Tile align must be >= 1, got {self.align}")

    @property
    def column(self) -> int:
        """Elements one axpy DSD runs over: m padded to `align` (single-tile-matvec's
        `padded_nb`); the dot form's rows are not padded."""
        return -(-self.m // self.align) * self.align if self.form == "axpy" else self.m

    @property
    def stored_bytes(self) -> int:
        """SRAM the tile takes as its program stores it (axpy: padded columns)."""
        return 4 * self.column * self.n

    def work(self, vectors: int = 1) -> Work:
        """axpy: n FMACs of the padded column, reading A and y and writing y, x once per
        column; dot: m FMACs of n into one accumulator, reading A and x, each row's result
        stored once."""
        m, n = self.column, self.n
        if self.form == "dot":
            op = Op("fmac", "fp32", n, count=m * vectors, accumulate=True, mem_writes=0.0)
            return Work(
                ops=(op,),
                sram_read_bytes=8 * m * n * vectors,
                sram_write_bytes=4 * m * vectors,
            )
        return Work(
            ops=(Op("fmac", "fp32", m, count=n * vectors),),
            sram_read_bytes=(8 * m * n + 4 * n) * vectors,
            sram_write_bytes=4 * m * n * vectors,
        )

    @property
    def relative_bytes(self) -> int:
        """What a cached machine moves: A once, x read, y written (SDK accounting)."""
        return 4 * self.m * self.n + 4 * self.m + 4 * self.n

    @property
    def absolute_bytes(self) -> int:
        """What the loop moves: the SDK's count for axpy (A and y read, y written per
        element, x per column); for dot, A and x read per element, y written per row."""
        if self.form == "dot":
            return 8 * self.m * self.n + 4 * self.m
        return 12 * self.m * self.n + 4 * self.n

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n - self.m


@dataclasses.dataclass(frozen=True)
class PeProgram:
    """The tiles of phases 1 and 3 that `pes` PEs of the plan multiply per vector."""

    pes: int
    phase1: tuple[Tile, ...]
    phase3: tuple[Tile, ...]

    @property
    def stored_bytes(self) -> int:
        """SRAM of the real tiles of both phases as the programs store them."""
        return sum(t.stored_bytes for t in self.phase1 + self.phase3)

    def work(self, phase: int, vectors: int) -> Work:
        out = Work()
        for t in self.phase1 if phase == 1 else self.phase3:
            out = out + t.work(vectors)
        return out


def _per_piece(win: np.ndarray, pieces: int) -> np.ndarray:
    """(PEs, pieces): rows of each PE that use piece t (win: (PEs, w))."""
    return (win[..., None] == np.arange(pieces)).sum(axis=1)


def _grouped_pieces(plan: GroupedPlan) -> np.ndarray:
    """(PEs in row-major grid order, 2 s): each PE's V rows per x piece, then its U rows
    per y piece (the `win` maps the emulator uses: padding rows fall in piece 0)."""
    from wse_hpc.tlrmvm.grouped import row_index

    s, w = plan.windows, plan.rank_chunk
    idx = row_index(plan, plan.grid, False)
    v = _per_piece(idx["v_win"].reshape(-1, w), s)
    u = _per_piece(idx["u_win"].reshape(-1, w), s)
    return np.concatenate([v, u], axis=1)


def _grouped_program(plan: GroupedPlan, sig: np.ndarray, pes: int, phase1: str) -> PeProgram:
    """Phase 1: per x piece, its V rows x nb; phase 3: per y piece, nb x its U rows."""
    p, nb, s = real_pairs(plan), plan.nb, plan.windows
    return PeProgram(
        pes,
        tuple(Tile(p * int(k), p * nb, phase1) for k in sig[:s] if k),
        tuple(Tile(p * nb, p * int(k)) for k in sig[s:] if k),
    )


def _grouped_tiles(plan: GroupedPlan, phase1: str) -> list[PeProgram]:
    sigs, counts = np.unique(_grouped_pieces(plan), axis=0, return_counts=True)
    return [
        _grouped_program(plan, sig, int(c), phase1) for sig, c in zip(sigs, counts, strict=True)
    ]


def pe_tiles(
    plan: TlrPlan | PackedPlan | GroupedPlan, phase1: str = PHASE1_FORM
) -> list[PeProgram]:
    """Every distinct PE program of the plan with the number of PEs that run it, phase 1 in
    the form `phase1` (the published column AXPY by default; "dot": the alternative)."""
    if phase1 not in FORMS:
        raise ValueError(f"phase-1 form {phase1!r}; known: {', '.join(FORMS)}")
    p, nb, w = real_pairs(plan), plan.nb, plan.rank_chunk
    if isinstance(plan, GroupedPlan):
        return _grouped_tiles(plan, phase1)
    r, c = plan.grid
    nt, ch = plan.tiles[1], plan.chunk
    if isinstance(plan, PackedPlan):  # phase 3: each ring slot into its tile row's buffer
        return [PeProgram(r * c, (Tile(p * w, p * nb, phase1),), (Tile(p * ch, p * w),) * nt)]
    return [PeProgram(r * c, (Tile(p * w, p * nb, phase1),), (Tile(p * ch, p * nt * w),))]


def real_pairs(plan) -> int:
    return 2 if plan.dtype.startswith("complex") else 1


def pe_weights(
    plan: TlrPlan | PackedPlan | GroupedPlan, model: PerfModel, phase1: str = PHASE1_FORM
) -> dict[str, np.ndarray]:
    """(rows, cols) share of phases 1 and 3 each PE of the grid does: its own program's
    cycles over the busiest PE's (the phase's cost in `mvm_phases`). Empty for the banded
    and packed layouts, whose PEs all run one program."""
    if not isinstance(plan, GroupedPlan):
        return {}
    sigs, inverse = np.unique(_grouped_pieces(plan), axis=0, return_inverse=True)
    programs = [_grouped_program(plan, sig, 1, phase1) for sig in sigs]
    out = {}
    for phase, name in ((1, "phase1_vhx"), (3, "phase3_uy")):
        cycles = np.array([model.cost(p.work(phase, plan.batch)).cycles for p in programs])
        out[name] = (cycles / cycles.max())[inverse.reshape(-1)].reshape(plan.grid)
    return out
