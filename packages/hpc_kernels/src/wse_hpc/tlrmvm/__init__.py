"""TLR-MVM: tile low-rank matrix-vector multiply on the wafer (Ltaief et al., SC23).

`compress` cuts a dense operator into low-rank tiles (`TlrOperator`, saved as `.npz`);
`wafer.place_operator` puts the stacked bases in PE SRAM (the ledger sizes the plan) and
`wafer.tlrmvm` returns pure functions for A x and A^H y in three phases (V^H x per tile
column, the reshuffle through the fabric, U y per tile row); `seismic` makes synthetic
Green's-function operators; `mdd` solves multi-dimensional deconvolution with LSQR on top.
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
