"""TLR-MVM: tile low-rank matrix-vector multiply on the wafer (Ltaief et al., SC23).

`compress` cuts a dense operator into low-rank tiles (`TlrOperator`, saved as `.npz`);
`grouped_plan.plan_grouped` (default: PE rows serve groups of tile columns and tile rows, each
PE column a set of rank rows found by an edge colouring, the group size the one whose
product `perf.product_s` prices fastest),
`packed.plan_packed` (rank slices bucketed per tile column) or `wafer.plan_placement`
(banded: each tile row padded to its largest rank) plans the layout (the ledger sizes it) and
`wafer.place_plan` puts any plan's bases in PE SRAM; `tlrmvm_grouped` / `tlrmvm_packed` /
`wafer.tlrmvm` return pure functions for A x and A^H y in three phases (V^H x per tile
column, the reshuffle through the fabric, U y per tile row; `grouped_phases` runs the grouped
plan's phases on device blocks); `engine.TlrEngine` is the
shell (jit, timing, RunReports); `perf` prices each plan instruction by instruction (each
PE's own tiles from `pe_programs`; and
Cerebras's matvec bandwidth accounting); `baseline` holds the
plain NumPy TLR-MVMs; `seismic` makes synthetic Green's-function operators; `mdd` solves
multi-dimensional deconvolution with LSQR on top; `experiments` and `demo` are the CLI's
entry points.
"""

from wse_hpc.tlrmvm.compress import (
    TlrError,
    TlrOperator,
    compress,
    load_operator,
    save_operator,
    tlrmvm_numpy,
)

__all__ = [
    "TlrError",
    "TlrOperator",
    "compress",
    "load_operator",
    "save_operator",
    "tlrmvm_numpy",
]
