"""wse_hpc: HPC kernels on the wafer — stencils and BiCGSTAB (`wse_hpc.stencil`), EAM
molecular dynamics (`wse_hpc.md`), tile low-rank matrix-vector multiply (`wse_hpc.tlrmvm`).

Each kernel places its data with `wse_core` (SRAM ledger first), moves data only through
`wse_core.fabric`, and reports with a `wse_core.RunReport`: `.report` of the result a run
returns (`run_stencil`, `run_md`), or `TlrEngine.report(measured_wall_s=...)`.
"""
