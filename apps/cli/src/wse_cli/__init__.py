"""wse_cli: the `wse` command (typer). Nothing imports it; it imports every package.

Start-up stays light (`wse --help` and `wse --version` import no JAX): command modules import
their packages inside the command functions.
"""

__version__ = "0.1.0"
