"""`wse hpc`: the HPC kernels — stencil (+ BiCGSTAB), md (EAM), tlrmvm, cfd, swe (fields)."""

from __future__ import annotations

import typer

from wse_cli.commands import hpc_cfd, hpc_md, hpc_stencil, hpc_swe, hpc_tlrmvm
from wse_cli.errors import WseGroup

app = typer.Typer(cls=WseGroup, help="HPC kernels on the wafer.", no_args_is_help=True)
for module in (hpc_stencil, hpc_md, hpc_tlrmvm, hpc_cfd, hpc_swe):
    module.register(app)


def register(parent: typer.Typer) -> None:
    parent.add_typer(app, name="hpc")
