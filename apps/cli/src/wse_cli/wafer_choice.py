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
are applied after the file or preset (`wse_core.cost.assumptions.apply_sets`); a wafer they
change is named `NAME+set` (unless they set its name), as a spec file's is `BASE+STEM`.

Every command prices the logical grid of a repaired wafer, so a spec whose wafer does not
repair at its defect_rate is refused here, once, with `wse plan`'s line
(`wse_core.hw.repair.require_repairable`: DefectError, exit code 2, before any work); only
the commands that show the wafer itself, its defects and repair (`wse wafer info`,
`defects`, `check`) take it with `repaired=False`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:  # imported when a command runs: `wse --help` imports no wse_core
    from wse_core import WaferSpec

__all__ = ["SPEC_FILE", "names_spec_file", "preset_option", "wafer_spec", "parse_sets"]


SPEC_FILE: Any = typer.Option(
    None,
    "--spec",
    help="A YAML wafer spec (base: PRESET plus fields, or every field), instead of the preset.",
)


def names_spec_file(wafer: str) -> bool:
    """Whether a params file's `runconfig.wafer` names a spec file, not a preset: a '/' or a
    .yaml/.yml suffix, which no preset name has (`wse train` and `wse plan train` read it so)."""
    return "/" in wafer or wafer.lower().endswith((".yaml", ".yml"))


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
    *,
    repaired: bool = True,
) -> WaferSpec:
    """The command's one `WaferSpec`: the preset (or `default`) or the spec file, then
    `--set` items; with `repaired`, one whose wafer repairs (module docstring; hunt 69:
    `wse train`, `wse infer generate` and `wse hpc` priced a WSE-3 at defect_rate 0.5)."""
    from wse_core import SpecError
    from wse_core.cost.assumptions import apply_sets, resolve_spec
    from wse_core.hw.repair import require_repairable

    if preset is not None and spec_file is not None:
        raise SpecError(f"give a wafer preset ({preset!r}) or --spec FILE, not both")
    name = None if spec_file is not None else (default if preset is None else preset)
    given = parse_sets(sets)
    base = resolve_spec(name=name, path=spec_file)
    spec = apply_sets(base, given)
    if spec != base and "name" not in given:
        # hunt 69: `-p wse3 --set clock_hz=2e9` printed "preset": "wse3" for a wafer that is
        # not wse3; a spec file's wafer is named BASE+STEM alike
        spec = spec.replace(name=f"{base.name}+set")
    return require_repairable(spec) if repaired else spec
