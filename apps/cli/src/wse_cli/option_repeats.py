"""One value per option: a single-valued option given twice with different values is refused.

click keeps the last of `--devices 8 --devices 9` silently (argparse does too), so a script
that appends an option it already holds runs with whichever came last, and a typo in a long
command line goes unseen. `repeated(args, params)` reads the arguments as click will (an
option's values are skipped, `--name=value` and a short option's attached value `-oDIR`
included, up to a bare `--`) and says what is wrong, naming the option and both values,
when one of `params`' single-valued options, under any of its spellings, is given twice with
different values, or a flag together with its `--no-` form. The same value twice is taken:
it asks for one thing. Options declared `multiple` (`--stop`, `--set`, `--assume`) and
counters are repeatable by design; their values are skipped all the same (hunt 67: in
`hpc md --potential FILE --steps 0 --steps 5`, FILE was read as md's subcommand and the
scan stopped there, so 5 steps ran). `wse_cli.errors.WseGroup` asks it where it spells the
options (`wse_cli.option_names.dashed`), once per command, before click parses them, and
refuses with its answer: for a group, only the arguments before its subcommand are its own
(`group=True`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["repeated"]


def _spellings(params: Iterable[Any]) -> dict[str, tuple[Any, bool]]:
    """Each spelling of an option -> (its param, whether it is the primary spelling: a
    flag's `--x` rather than its `--no-x`)."""
    names: dict[str, tuple[Any, bool]] = {}
    for p in params:
        if getattr(p, "param_type_name", "") != "option":
            continue
        names.update({o: (p, True) for o in p.opts})
        names.update({o: (p, False) for o in p.secondary_opts})
    return names


def _repeatable(p: Any) -> bool:
    return bool(p.multiple or p.count)


def _said(given: Any) -> str:
    from wse_core.errors import shown

    return " ".join(shown(v) for v in given) if isinstance(given, tuple) else shown(given)


def repeated(args: Sequence[Any], params: Iterable[Any], *, group: bool = False) -> str:
    """What is wrong when a single-valued option of `params` is given twice with different
    values in `args` ('' when none is; see the module docstring); `group`: stop at the first
    argument that is not an option (the subcommand)."""
    names = _spellings(params)
    seen: dict[str, tuple[str, Any]] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            break
        i += 1
        if not isinstance(arg, str) or not arg.startswith("-") or arg == "-":
            if group:
                break
            continue
        name, eq, value = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        if name not in names and arg[:2] in names and not arg.startswith("--"):
            name, eq, value = arg[:2], "=", arg[2:]  # -oDIR: a short option's value attached
        if name not in names:
            continue
        p, primary = names[name]
        if p.is_flag or p.count:  # no value to skip (click's counter says nargs 1)
            given: Any = primary
        elif eq:
            given = value
        else:
            values = tuple(args[i : i + p.nargs])
            given = values[0] if p.nargs == 1 and values else values
            i += p.nargs  # a repeatable option's value too: it is no subcommand
        if _repeatable(p):
            continue
        if p.name in seen and seen[p.name][1] != given:
            first, before = seen[p.name]
            if p.is_flag:
                return f"{first} and {name} are both given; give one of them"
            return (
                f"{p.opts[0]} is given twice ({_said(before)}, then {_said(given)}); give it once"
            )
        seen[p.name] = (name, given)
    return ""
