"""Stencils and BiCGSTAB on the wafer (Rocki et al., SC20; Jacquelin et al., 2022).

A 3D grid (nx, ny, nz) maps X x Y onto the PE grid and each Z column into its PE's SRAM
(`placement`); kernels move ±X / ±Y halos only through `wse_core.fabric` (`kernels`: the
7-point Laplacian, Jacobi and heat steps; `bicgstab`: the Poisson solver in mixed or fp32
precision; `wave`: the 25-point acoustic wave stencil with localized broadcasts and Z blocks).
`refine`: BiCGSTAB with reliable updates that stops on the true residual, the stack's one
BiCGSTAB (over the 7-point Laplacian or any `bicgstab.Operator`: `wse_hpc.fields.solvers`
hands it field operators with periodic / Neumann / Dirichlet boundaries). `perf`
counts each kernel's instructions, SRAM bytes and traced fabric words on the plan it runs
(`wse_core.cost.perf` prices them; `detours` adds what dead PEs' detours cost where nothing
traced holds them, `traffic` is the run's ledger count); `runs` is the shell (jit, loops,
timing) used by the CLI, the benchmark, the experiments and the demo, and returns a
`StencilRun` whose `.report` is the `wse_core.RunReport`; `problems`
holds the problems' static parts (placed fields, the exact solution, the kernels as run).
"""

from wse_hpc.stencil.bicgstab import (
    PRECISIONS,
    BicgstabResult,
    Operator,
    bicgstab,
    scale_for,
    stencil_operator,
)
from wse_hpc.stencil.kernels import (
    Faces,
    dot,
    face_coefficients,
    heat,
    iterate_padded,
    jacobi,
    laplacian7,
    max_stable_dt,
    norm,
    pad_z,
)
from wse_hpc.stencil.placement import (
    BOUNDARIES,
    StencilError,
    StencilGrid,
    field_bytes_per_pe,
    grid_wafer,
    max_nz,
    place_grid,
)
from wse_hpc.stencil.refine import SolveResult, refine
from wse_hpc.stencil.wave import COEFFS, RADIUS, WaveFns, WaveState, wave25

__all__ = [
    "BOUNDARIES",
    "COEFFS",
    "PRECISIONS",
    "RADIUS",
    "BicgstabResult",
    "Faces",
    "Operator",
    "StencilError",
    "SolveResult",
    "StencilGrid",
    "WaveFns",
    "WaveState",
    "bicgstab",
    "dot",
    "face_coefficients",
    "field_bytes_per_pe",
    "grid_wafer",
    "heat",
    "iterate_padded",
    "jacobi",
    "laplacian7",
    "max_nz",
    "max_stable_dt",
    "norm",
    "pad_z",
    "place_grid",
    "refine",
    "stencil_operator",
    "scale_for",
    "wave25",
]
