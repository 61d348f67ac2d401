"""Which wafer a command runs on: `--preset NAME` (or `--wafer NAME`) or `--spec FILE`,
resolved once, here, into the one `WaferSpec` the command passes down.

Contract. Every command that takes a wafer preset declares it with `preset_option(default,
*names)` and takes `spec_file: Path = SPEC_FILE` beside it; its body calls
`wafer_spec(preset, spec_file, default, sets)` once and passes the `WaferSpec` on (nothing
below the command resolves a name again). The preset and `--spec` are mutually exclusive;
with neither the command's default preset is used. A spec file is YAML (`base: PRESET` and
any `WaferSpec` fields, or every field: `wse_core.load_spec`); a missing, unreadable or
invalid file, a preset and a file together, or a bad `--set` is a `WseError`, printed as one
line with exit code 2 (`wse_cli.errors.WseGroup`). `--set FIELD=VALUE` items (`wse wafer`)
are applied after the file or preset (`wse_core.cost.assumptions.resolve_spec`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:  # imported when a command runs: `wse --help` imports no wse_core
    from wse_core import WaferSpec

__all__ = ["SPEC_FILE", "preset_option", "wafer_spec", "parse_sets"]


SPEC_FILE: Any = typer.Option(
    None,
    "--spec",
    help="A YAML wafer spec (base: PRESET plus fields, or every field), instead of the preset.",
)


def preset_option(
    default: str, *names: str, help: str = "Wafer preset: wse1, wse2, wse3, tiny, small, demo"
) -> Any:
    """The preset option (default `--preset`), None when not given, so that `--spec` can
    be told apart from the default; the help shows `default`."""
    return typer.Option(
        None,
        *(names or ("--preset",)),
        help=f"{help} (or --spec FILE).",
        show_default=default,
    )


def parse_sets(items: Sequence[str] | None) -> dict[str, str]:
    """`["clock_hz=1e9", ...]` -> {field: text} (a SpecError on an item without `=`, or on a
    mapping field: `--set` takes one number or name a field)."""
    import dataclasses

    from wse_core import SpecError, WaferSpec
    from wse_core.cost.assumptions import key_values

    sets = key_values(items or (), "--set expects FIELD=VALUE")
    fields = {f.name: str(f.type) for f in dataclasses.fields(WaferSpec)}
    for key in sorted(k for k in sets if fields.get(k, "").startswith("Mapping")):
        # hunt 63: `flops_per_cycle=5` "must be a mapping", `={fp32: 2}` "must be a number"
        from wse_core.hw.spec import preset

        pairs = [f"{k}: {v:g}" for k, v in getattr(preset("wse3"), key).items()]
        example = "{" + ", ".join(pairs if len(pairs) <= 4 else [*pairs[:2], "..."]) + "}"
        raise SpecError(
            f"--set {key}: {key} is a mapping and --set takes one value a field; give the "
            f"whole mapping in a --spec FILE ('base: wse3' and '{key}: {example}')"
        )
    return sets


def wafer_spec(
    preset: str | None,
    spec_file: Path | None,
    default: str,
    sets: Sequence[str] | None = None,
) -> WaferSpec:
    """The command's one `WaferSpec`: the preset (or `default`) or the spec file, then
    `--set` items."""
    from wse_core import SpecError
    from wse_core.cost.assumptions import resolve_spec

    if preset is not None and spec_file is not None:
        raise SpecError(f"give a wafer preset ({preset!r}) or --spec FILE, not both")
    name = None if spec_file is not None else (default if preset is None else preset)
    return resolve_spec(name=name, path=spec_file, sets=parse_sets(sets))
