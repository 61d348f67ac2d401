"""The one spelling of the `wse` command's options: words joined by dashes (`--model-dir`,
`--block-z`), as typer and vLLM spell them.

Every option is declared in the dash form only, so `--help` shows one spelling. The
underscore spelling that scripts and Cerebras-style run scripts use (`--model_dir`,
`--validate_only`, `--num_processes`) stays accepted as a hidden alias: `dashed(args,
params)` rewrites `--a_b` and `--a_b=VALUE` to `--a-b` when `--a-b` is one of `params`'
options and `--a_b` is not, up to a bare `--` (what follows belongs to another program, such
as the command `wse launch` starts). `wse_cli.errors.WseGroup`, the group class of every
typer app of the CLI, applies it once per command, before click parses that command's
arguments: the group's own options in `parse_args`, a subcommand's in `resolve_command`.
Anything else (an unknown `--x_y`, a value) is left as typed, so click's own error names
what the user wrote.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["dashed", "OUTPUT_MARK"]

# the attribute an output option's callback carries (its kind, "file" or "dir"): set by
# `wse_cli.outputs`, read by `wse_cli.errors` (which must not import outputs: a circle)
OUTPUT_MARK = "wse_output"


def dashed(args: Sequence[str], params: Iterable[Any]) -> list[str]:
    """`args` with each underscore spelling of one of `params`' dash-named options in the
    dash form (see the module docstring). `params`: a command's click parameters (typer's
    own copy of click: options are those whose `param_type_name` is "option")."""
    options = [p for p in params if getattr(p, "param_type_name", "") == "option"]
    known = {o for p in options for o in (*p.opts, *p.secondary_opts)}
    out = list(args)
    for i, arg in enumerate(out):
        if arg == "--":
            break
        if not isinstance(arg, str):  # a caller's Path or number, passed through as given
            continue
        name, eq, value = arg.partition("=")
        if name.startswith("--") and "_" in name and name not in known:
            spelled = name.replace("_", "-")
            if spelled in known:
                out[i] = spelled + eq + value
    return out
