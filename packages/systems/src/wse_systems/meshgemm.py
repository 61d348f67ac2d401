"""WaferLLM's MeshGEMM as published, counted per PE: one prefill GEMM's instructions on a region.

Contract. `meshgemm_phases(region, k, n_in, n_out)` is one matrix product Y (k x n_out) =
X (k x n_in) @ W (n_in x n_out) as WaferLLM's prefill runs it (He et al., OSDI 2025,
arXiv:2502.04563; the code `SOURCE`, docs/references/meshgemm.md), on one PE (every PE runs
the same schedule; a ring's end sends one hop, not two), phase by phase. The program is
Cannon's algorithm on a P x P grid with its rings folded into two-hop rings (PE i sends to
i +- 2, the routers of the PEs between pass the wavelets on: no core relays). On a region of
rows x cols PEs it runs on P = min(rows, cols) of them (a square: the code's only shape; the
other PEs of the region idle). Each PE holds a tile of X of Mt x Kt, of W of Kt x Nt and of
Y of Mt x Nt, Mt = ceil(k / P), Kt = ceil(n_in / P), Nt = ceil(n_out / P) (the code takes
the exact quotients, `run_sim.sh`: `Mt=$(($2 / $1))`; the ceil pads a ragged product):

- skew: `left_matrix_shift_callback`, P // 2 steps: X's tile one place along the two-hop
  ring of its row (`left_matrix_shift` / `_reverse`, by the row's parity): one async
  `@mov16` of Mt Kt values to the fabric and one from it (ceil(Mt Kt x bytes / 4)
  wavelets each way on the ramp), 2 hops, one task (`x_shift_finish`). W is placed skewed
  by the host (weights are static); X, the activation, is skewed on the wafer.
- zero: `@fmovh(res_dsd, 0.0)`: one 16-bit move DSD of Mt Nt from a scalar.
- step (P times, `mm_compute`): `two_hop_comm` starts X's tile along the row ring and W's
  along the column ring (4 async `@mov16`: 2 to the fabric, 2 from it; each tile's
  Mt Kt or Kt Nt x bytes / 4 wavelets, rounded up, each way on the ramp, X's on the row's
  link, W's on the column's, 2 hops), while the core runs Kt `@map(gemv_static_step_X,
  W_dsd)`, each Nt `@fmach(out, out, X_col, w)`: Kt Nt FMAC DSDs of Mt (X and out read, out
  written; the map's scalar w is not counted, as MeshGEMV's x_i). Four tasks gate the next
  step (`x_finish`, `y_finish`, `jumpcast_finish`, `next_step`). The step is priced as one
  `Work`: the FMACs and the moves on the core, the SRAM ports and the links at once
  (`wse_core.cost.pricing`: max(compute, sram, link) + 2 hops).

The output tile is where the next product's input tile must be (rows of Y by PE row, its
columns by PE column, as X's): the products chain with no move, each skewing its own input
(the prefill's q, k and v share one skew, `Prefill/WSE-2/src/prefill.csl`; here q/k/v are
one product, as up and gate). Words: two 16-bit values per 32-bit wavelet (the fabric
DSDs' `simd_64`, the model's convention). The code's fabric DSD extents round Mt Kt and Kt Nt
down to even (`_Mt_Kt`); the model counts the values.

At k = 1 the program pads X to P rows (Mt = 1 on every PE row): P times the FMAC elements of a
MeshGEMV on the same P x P PEs, n_in n_out / P FMAC DSDs of length 1 per PE; at k a multiple
of P it does k such MeshGEMVs' arithmetic in P Kt Nt DSDs of Mt (`test_systems_gemm_hand`).
Its buffers are checked (`meshgemm_max_tokens`): a block of k tokens fits a region only if
what a PE of the region holds, re-spread over the P x P square, plus the largest product's W
receive tile (Kt Nt), X's two tiles (2 Mt Kt) and Y's (Mt Nt) fit the PE's SRAM.
"""

from __future__ import annotations

import math

from wse_core.cost.collectives import wavelets
from wse_core.cost.perf import Op, Phase, Phases, Work, serial
from wse_core.hw.sram import Region

from wse_systems.attention import value_dtype

__all__ = ["SOURCE", "PHASE_NAMES", "is_meshgemm", "meshgemm_tiles", "meshgemm_parts",
           "meshgemm_phases", "meshgemm_max_tokens"]  # fmt: skip

# The code read for the counts above (He et al., OSDI 2025; references/calibration-rows.md lists
# it as calibration material: instruction counts per PE, no cycle counts published). At this
# commit the prefill is published for WSE-2 only (no Prefill/WSE-3).
SOURCE = {
    "repository": "MeshInfra/WaferLLM",
    "commit": "2cd13b5c16ab0c280a2cc1f80f105d704c333915",
    "files": (
        "MeshGEMM/WSE-3/src/meshgemm.csl",
        "MeshGEMM/WSE-3/src/comm_lib/comm_pe.csl",
        "MeshGEMM/WSE-3/src/comm_lib/comm_layout.csl",
        "MeshGEMM/WSE-3/src/layout.csl",
        "MeshGEMM/WSE-3/run_sim.sh",
        "Prefill/WSE-2/src/prefill.csl",
    ),
}
PHASE_NAMES = ("skew", "zero", "step")  # a MeshGEMM's phases, in order (`is_meshgemm`)


def is_meshgemm(part: object) -> bool:
    """Whether `part` (a phase tree node) is one `meshgemm_phases`."""
    return isinstance(part, Phases) and tuple(getattr(p, "name", "") for p in part.parts) == (
        PHASE_NAMES
    )


def meshgemm_tiles(region: Region, k: int, n_in: int, n_out: int) -> tuple[int, int, int, int]:
    """(P, Mt, Kt, Nt): the square of PEs the program runs on and each PE's tile sizes."""
    if min(k, n_in, n_out) < 1:
        raise ValueError(f"k, n_in and n_out must be >= 1, got {k}, {n_in}, {n_out}")
    p = min(region.rows, region.cols)
    return p, math.ceil(k / p), math.ceil(n_in / p), math.ceil(n_out / p)


def _send_recv(dt: str, n: int) -> tuple[Op, Op]:
    """One async `@mov16` of n values to the fabric (memory read, no write) and one from it
    (fabric in, memory written)."""
    return Op("move", dt, n, mem_writes=0.0), Op("move", dt, n, fabric_in=True)


def meshgemm_parts(
    region: Region, k: int, n_in: int, n_out: int, *, bytes_per_value: int = 2
) -> tuple[tuple[str, Work, int], ...]:
    """The named phases of one MeshGEMM (the module contract) with their repeats."""
    p, mt, kt, nt = meshgemm_tiles(region, k, n_in, n_out)
    dt, size = value_dtype(bytes_per_value), bytes_per_value
    xv, wv = mt * kt, kt * nt  # values of X's and W's tiles
    xw, ww = wavelets(xv, size), wavelets(wv, size)  # their whole wavelets
    hops = float(min(2, p - 1))  # two-hop rings (one hop at a ring's end; none on one PE)
    comm = p > 1
    skew = Work(
        ops=_send_recv(dt, xv) if comm else (),
        sram_read_bytes=xv * size * comm,
        sram_write_bytes=xv * size * comm,
        links={"E": xw, "ramp": xw} if comm else {},
        latency_hops=hops,
        task_activations=1.0,
    )
    zero = Work(ops=(Op("move", dt, mt * nt, mem_reads=0.0),), sram_write_bytes=mt * nt * size)
    fmacs = kt * nt * mt
    step = Work(
        ops=(Op("fmac", dt, mt, count=kt * nt),)
        + ((*_send_recv(dt, xv), *_send_recv(dt, wv)) if comm else ()),
        sram_read_bytes=(2 * fmacs + (xv + wv) * comm) * size,
        sram_write_bytes=(fmacs + (xv + wv) * comm) * size,
        links={"E": xw, "S": ww, "ramp": xw + ww} if comm else {},
        latency_hops=hops,
        task_activations=4.0,
    )
    return (("skew", skew, p // 2), ("zero", zero, 1), ("step", step, p))


def meshgemm_phases(
    region: Region,
    k: int,
    n_in: int,
    n_out: int,
    *,
    bytes_per_value: int = 2,
    name: str = "meshgemm",
) -> Phases:
    """`meshgemm_parts` as serial phases (a PE's steps in order; `PHASE_NAMES`)."""
    parts = meshgemm_parts(region, k, n_in, n_out, bytes_per_value=bytes_per_value)
    return serial(*(Phase(n, w, repeat=r) for n, w, r in parts), name=name)


def meshgemm_max_tokens(
    region: Region,
    products,
    *,
    held_bytes_per_pe: float,
    sram_bytes_per_pe: int,
    bytes_per_value: int = 2,
) -> int:
    """The largest prompt block whose MeshGEMMs fit the PEs' SRAM (see the module): what a
    PE of `region` holds (`held_bytes_per_pe`: weights, KV cache, activations) re-spread over
    the P x P square, beside the largest of `products`' (n_in, n_out) W receive tile (Kt Nt)
    and X and Y tiles (2 Mt Kt + Mt Nt), Mt = ceil(k / P). 0 when not even one row fits."""
    b, rows = bytes_per_value, math.inf
    for n_in, n_out in products:
        p, _, kt, nt = meshgemm_tiles(region, 1, n_in, n_out)
        free = sram_bytes_per_pe - held_bytes_per_pe * region.num_pes / (p * p)
        rows = min(rows, math.floor((free - kt * nt * b) / ((2 * kt + nt) * b)))
    return 0 if rows == math.inf else int(max(0, rows)) * p
