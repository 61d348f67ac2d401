"""TLR-MVM on the wafer, grouped layout: each PE row serves a group of tile columns (phase 1)
and a group of tile rows (phase 3); every PE column is a set of rank rows that meets each PE
row at most w times (an edge colouring), so the bases fill the PEs with little padding once
a PE row serves several tile columns. Same contract and `TlrFns` as `wafer.tlrmvm`; the
default layout of `TlrEngine.build`.

Placement (how the rank rows are dealt into groups, coloured into PE columns and rows,
and how s is chosen) is in `grouped_plan`.

Complex bases are stored as float32 pairs (w, 2 nb), real and imaginary parts interleaved,
and the values between the phases travel as (re, im) pairs: XLA:CPU's complex dot and
complex sums are 2-4x slower than the real ones.

The product y = A x (`matvec_fn(bases, x)`, x: (N, b)):
0. the s pieces x_j of PE row g's tile columns enter at its west edge and are broadcast
   along the row;
1. phase 1: every PE multiplies each of its V rows by the x piece of that row's tile column;
2. phase 2, the reshuffle: a periodic multicast south along each PE column (a ring
   allgather of the w values per PE); the PE of U row (g', r, k) keeps row k of the slot of
   PE row g, the group of its tile column;
3. phase 3: each PE adds its U rows times those values into a partial y piece per tile row
   of its group (s pieces); a sum along the PE row (row allreduce of the s pieces) delivers
   the y_i.
The adjoint A^H y runs the same placement backwards: the y pieces along the rows, U^H y_i per
U row, the ring allgather south (the V row keeps the slot of its tile row's group), V times
it into partial x pieces and a sum along the row.

How the emulator runs each phase (`kernel`: "pe", the PEs' own numba kernels, or "xla",
one dot per PE row) is in `grouped_phases`; the order in which the PE kernels keep the bases
in host memory (each block's PE rows packed, `TlrFns.store_fn`) in `grouped_storage`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from wse_core.hw.wafer import Wafer

from wse_hpc.tlrmvm import pe_kernels
from wse_hpc.tlrmvm.compress import TlrError
from wse_hpc.tlrmvm.grouped_phases import (
    PhaseSpec,
    Side,
    ring_at,
    ring_pick,
    row_out,
    rows_times_pieces,
    west_in,
    whole_column,
)
from wse_hpc.tlrmvm.grouped_plan import GroupedPlan, group_position
from wse_hpc.tlrmvm.grouped_storage import at_in_order, in_order, storage_order, stored
from wse_hpc.tlrmvm.wafer import TlrBases, TlrFns, check_vector

__all__ = ["kernel_note", "resolve_kernel", "tlrmvm_grouped"]


def row_index(plan: GroupedPlan, padded: tuple[int, int], adjoint: bool) -> dict[str, np.ndarray]:
    """Per (PE, row k) int32 maps, padded to the grid: `win`, the x piece (V row) or y piece
    (U row) the row belongs to, and `slot`, the ring slot the row's PE keeps for it (slot d
    at PE row g holds PE row g - d's values, mod L). Forward: the V rows' pieces and the U
    rows' slots; adjoint: the U rows' pieces and the V rows' slots."""
    (mt, nt), ring = plan.tiles, plan.ring
    col_grp, col_pos = group_position(plan.col_group, nt)
    row_grp, row_pos = group_position(plan.row_group, mt)
    shape = (*padded, plan.rank_chunk)
    out = {name: np.zeros(shape, np.int32) for name in ("v_win", "u_win", "slot")}
    at = np.nonzero(plan.v_rank[..., 0] >= 0)
    i, j = plan.v_rank[at][:, 0], plan.v_rank[at][:, 1]
    out["v_win"][at] = col_pos[j]
    if adjoint:
        out["slot"][at] = (at[0] - row_grp[i]) % ring
    at = np.nonzero(plan.u_rank[..., 0] >= 0)
    i, j = plan.u_rank[at][:, 0], plan.u_rank[at][:, 1]
    out["u_win"][at] = row_pos[i]
    if not adjoint:
        out["slot"][at] = (at[0] - col_grp[j]) % ring
    return out


def row_lengths(plan: GroupedPlan, padded: tuple[int, int], pair: int) -> tuple[np.ndarray, ...]:
    """(V rows, U rows) int32 (*padded, w): the stored floats of each row that can be nonzero,
    `pair` x the width of its tile (the edge tiles are narrower than nb); 0 for empty rows.
    The PE kernels read only these: a product streams the operator's bases, not the padding."""
    (m, n), nb = plan.shape, plan.nb
    out = []
    for rank, axis, size in ((plan.v_rank, 1, n), (plan.u_rank, 0, m)):
        lens = np.zeros((*padded, plan.rank_chunk), np.int32)
        at = np.nonzero(rank[..., 0] >= 0)
        tile = rank[at][:, axis]
        lens[at] = pair * np.minimum(nb, size - tile * nb)
        out.append(lens)
    return tuple(out)


KERNELS = ("auto", "pe", "xla")
# Below this many bytes of placed bases the PE kernels' parallel regions cost more than they
# save. Hunt 76, the 2-core VM, one device, medians of 5 rounds of 9 products (pe / xla, ms):
# 70 x 45 complex (0.02 MB) 0.02-0.03 / 0.03-0.05, but single rounds of 150-190 ms and a
# median of 136 ms when its products alternate with an XLA-dot engine's; n 1024 (1.3 MB)
# 0.40-0.49 / 0.10-0.16; n 2048 (4.8 MB) 0.48 / 0.21; n 3072 (7.9 MB) 0.58-1.08 /
# 0.31-2.9; n 4096 (8.2 MB) 0.21-0.91 / 3.7-4.1; n 9801 (34 MB) 2.1-2.6 / 19.5-19.9.
# `auto` still picks "pe" there (its tests and the PE path's coverage rest on it): the run
# notes it (`kernel_note`).
PE_KERNEL_MIN_BYTES = 8_000_000


def resolve_kernel(wafer: Wafer, plan: GroupedPlan, kernel: str) -> str:
    """The kernel a product will run: "pe" where phases 1 and 3 can run as `pe_kernels`
    (numba, a CPU mesh, float32 data) and `kernel` allows it, else "xla". TlrError for an
    unknown name, or for "pe" asked for where it cannot run."""
    if kernel not in KERNELS:
        raise TlrError(f"unknown kernel {kernel!r}; use one of {', '.join(KERNELS)}")
    ok = (
        np.dtype(plan.dtype) in (np.float32, np.complex64)
        and all(d.platform == "cpu" for d in wafer.mesh.devices.flat)
        and pe_kernels.available()
    )
    if kernel == "pe" and not ok:
        raise TlrError(
            "kernel 'pe' needs numba, a CPU mesh and float32 or complex64 bases; "
            "use kernel='xla' (or 'auto')"
        )
    return "pe" if ok and kernel != "xla" else "xla"


def kernel_note(plan: GroupedPlan, asked: str, ran: str) -> str | None:
    """A line for a run whose `asked` kernel "auto" ran the PE kernels ("pe") on fewer bases
    than PE_KERNEL_MIN_BYTES, where they were measured no faster than XLA's dots and far
    slower beside other busy threads; None otherwise (hunt 76)."""
    mb = plan.padded_bases_bytes / 1e6
    if asked != "auto" or ran != "pe" or plan.padded_bases_bytes >= PE_KERNEL_MIN_BYTES:
        return None
    return (
        f"note: --kernel auto ran the PEs' numba kernels on {mb:.2g} MB of bases; below "
        f"{PE_KERNEL_MIN_BYTES / 1e6:g} MB they measured no faster than XLA's dots, and "
        "beside other busy threads up to ~0.2 s a product: --kernel xla times XLA's dots"
    )


def tlrmvm_grouped(wafer: Wafer, plan: GroupedPlan, *, kernel: str = "auto") -> TlrFns:
    """Pure functions for A x and A^H y on the grouped bases; the caller decides `jit`.
    `kernel`: "pe" runs phases 1 and 3 as the PEs' own kernels (`pe_kernels`: each row
    times its own piece, on the cores), "xla" as one XLA dot per PE row (any backend),
    "auto" the first where it can (numba installed, a CPU mesh, float32 data)."""
    (m, n), nb, (mt, nt), ring, s = plan.shape, plan.nb, plan.tiles, plan.ring, plan.windows
    dtype, cplx = np.dtype(plan.dtype), plan.dtype.startswith("complex")
    use_pe = resolve_kernel(wafer, plan, kernel) == "pe"
    cores = wafer.mesh.devices.size == 1  # several devices already run one block per thread
    fwd = row_index(plan, wafer.padded_shape, False)
    adj = row_index(plan, wafer.padded_shape, True)
    local_row = (np.arange(wafer.padded_shape[0]) % wafer.block_shape[0])[:, None, None] * s
    v_len, u_len = row_lengths(plan, wafer.padded_shape, 2 if cplx else 1)
    ps = PhaseSpec(wafer, nb, s, ring, cplx, use_pe, cores)
    bc = wafer.block_shape[1]
    # the PE kernels' storage order (`grouped_storage`), where phase 2 picks from the block
    order = {"v": storage_order(v_len, bc), "u": storage_order(u_len, bc)}
    packs = whole_column(ps)
    for d, one, three in ((fwd, "v", "u"), (adj, "u", "v")):  # phase 1's and 3's bases
        d["at"] = ring_at(ps, d.pop("slot"))  # only as gather positions
        # the floats of each stored row the PE kernels read
        d["len1"], d["len3"] = (v_len, u_len) if one == "v" else (u_len, v_len)
        if use_pe:  # phase 1's piece among the block's pieces
            d["sel"] = (local_row + d[f"{one}_win"]).astype(np.int32)
        if packs:
            for key, o in ((f"{one}_win", one), ("sel", one), ("len1", one)):
                d[key] = in_order(d[key], order[o])
            for key in (f"{three}_win", "len3"):
                d[key] = in_order(d[key], order[three])
            d["at"] = at_in_order(d["at"], order[one], order[three], bc)
    fwd, adj = ({k: jnp.asarray(v) for k, v in d.items()} for d in (fwd, adj))
    cols = Side(n, nt, plan.col_group, *group_position(plan.col_group, nt))
    rows = Side(m, mt, plan.row_group, *group_position(plan.row_group, mt))

    def matvec_fn(bases: TlrBases, x: jax.Array) -> jax.Array:
        check_vector(x, n, plan, "x")  # type: ignore[arg-type]
        xr = west_in(ps, x.astype(dtype), cols)
        yv = rows_times_pieces(ps, bases.vh, xr, fwd, "v_win", False)  # phase 1
        yu = ring_pick(ps, yv, fwd["at"])  # phase 2
        return row_out(ps, bases.u, yu, fwd, "u_win", False, rows)  # phase 3

    def rmatvec_fn(bases: TlrBases, y: jax.Array) -> jax.Array:
        check_vector(y, m, plan, "y")  # type: ignore[arg-type]
        yr = west_in(ps, y.astype(dtype), rows)
        t = rows_times_pieces(ps, bases.u, yr, adj, "u_win", True)  # phase 1 (adjoint)
        tv = ring_pick(ps, t, adj["at"])  # phase 2 (adjoint)
        return row_out(ps, bases.vh, tv, adj, "v_win", True, cols)  # phase 3

    def store_fn(bases: TlrBases) -> TlrBases:
        return TlrBases(stored(bases.vh, order["v"]), stored(bases.u, order["u"]))

    return TlrFns(matvec_fn, rmatvec_fn, "pe" if use_pe else "xla", store_fn if packs else None)
