"""`wse infer`: generate (pipelined / speculative decoding), serve (HTTP + gRPC), bench."""

from __future__ import annotations

import typer

from wse_cli.commands import infer_generate, infer_serve
from wse_cli.errors import WseGroup

app = typer.Typer(
    cls=WseGroup, help="Generate, serve and load-test language models.", no_args_is_help=True
)
for module in (infer_generate, infer_serve):
    module.register(app)


def register(parent: typer.Typer) -> None:
    parent.add_typer(app, name="infer")
