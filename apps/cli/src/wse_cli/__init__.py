"""wse_cli: the `wse` command (typer). Nothing imports it; it imports every package.

Start-up stays light (`wse --help` and `wse --version` import no JAX): command modules import
their packages inside the command functions.
"""

import importlib.util
from pathlib import Path

# the stack's one version, `wse_core/VERSION`, read without importing wse_core (and JAX)
_core = importlib.util.find_spec("wse_core")
__version__ = (
    Path(_core.origin).with_name("VERSION").read_text().strip() if _core and _core.origin else "0"
)
