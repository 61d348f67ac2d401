"""Field equations on the wafer: placed fields, operators from fabric halos, implicit solves.

A WFA user (NETL's `WSE_Interface` / `WSE_Array` / `WSE_For_loop`) finds the same three
things here: `field_grid(spec, shape, ...)` is the interface (a wafer whose PE grid is the
grid's X x Y, each Z column in its PE's SRAM), `grid.field(name, values, loc=, bc=)` the array
(declared in the SRAM ledger, NumPy-like arithmetic, every op a PE-local program recorded for
pricing), and `jax.lax.fori_loop` over a pure step function the for-loop. Operators
(`wse_hpc.fields.operators`) move data only through `wse_core.fabric`; solvers
(`wse_hpc.fields.solvers`) run CG, Jacobi-PCG (null space handled) and BiCGSTAB over any
field operator; `wse_hpc.fields.reference` is the same scheme in NumPy (the tests' oracle).
"""

from wse_hpc.fields.grid import (
    Bc,
    Field,
    FieldError,
    FieldGrid,
    dirichlet,
    field_grid,
    neumann,
    no_slip,
    periodic,
    program,
)
from wse_hpc.fields.operators import (
    advect,
    divergence,
    dot,
    enforce,
    face_gradient,
    gradient,
    interpolate,
    laplacian,
    max_abs,
    mean,
    neighbour,
    total,
)
from wse_hpc.fields.solvers import SolveResult, bicgstab, cg, jacobi_preconditioner, poisson

__all__ = [
    "Bc",
    "Field",
    "FieldError",
    "FieldGrid",
    "SolveResult",
    "advect",
    "bicgstab",
    "cg",
    "dirichlet",
    "divergence",
    "dot",
    "enforce",
    "face_gradient",
    "field_grid",
    "gradient",
    "interpolate",
    "jacobi_preconditioner",
    "laplacian",
    "max_abs",
    "mean",
    "neighbour",
    "neumann",
    "no_slip",
    "periodic",
    "poisson",
    "program",
    "total",
]
