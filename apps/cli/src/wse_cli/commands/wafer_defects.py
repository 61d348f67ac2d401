"""`wse wafer defects`: a wafer's defect map, drawn from a seed or read from a file, and its
repair; registered on the `wse wafer` group by `commands.wafer`.

A map is drawn (`--seed`, `--defect-rate`) or loaded (`--load FILE`: a measured map), and
written with `--save FILE` (hunt 76: maps could only be drawn). The file is the one format of
`wse_core.hw.defect_files`: an `.npz` whose `dead` is a 2-D bool array of the physical grid
(`np.savez(FILE, dead=mask)` makes one), with the optional `seed`, `rate` and `wafer` that
`--save` adds; a loaded file's `wafer`, the spec it was written for, is shown ("written for
wafer 'wse2'", `--json`'s `map_wafer`; hunt 78: it was documented as shown and never was),
never checked. The map's measured dead fraction is shown beside its rate (a file's stated
rate may be far from it: a rate is a probability, refused only where it cannot draw the
map). A bad file is refused in one line (exit code 2) before anything is written; `--save`
writes aside and renames, so a failed write leaves an existing file as it was.

`--json` lists the dead PEs as [row, col] and the repair's logical -> physical maps
(`phys_row[r]`: the physical row of logical row r; `phys_col[r][c]`: the physical column of
logical PE (r, c)), each while it has at most `MAX_LISTED` entries; past that it is null and
`listed` says so (a full WSE-3's `phys_col` is 896,112 numbers): `--save FILE` keeps the
whole map, from which `wse_core.remap(spec, load_defect_map(FILE, spec))` gives the maps.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from wse_cli.errors import fail
from wse_cli.options import SEED, number
from wse_cli.outputs import output_file, png_file, refuse_overlap
from wse_cli.wafer_choice import SPEC_FILE, parse_sets, preset_option, wafer_spec

__all__ = ["register", "defects", "plot_defects", "defects_figure", "retired_text"]

SET_HELP = "Override a spec field, e.g. --set clock_hz=1e9 (repeatable)."
MAX_LISTED = 10_000  # entries of a list --json prints (dead PEs, phys_row, phys_col)
LOAD_HELP = (
    "Repair this defect map instead of drawing one: an .npz whose `dead` is a 2-D bool array "
    "of the physical grid, True = dead (np.savez(FILE, dead=mask), or a --save file)."
)
SAVE_HELP = (
    "Write the defect map to this .npz (`dead`: bool, physical rows x cols; `seed`, `rate`, "
    "`wafer`), for --load."
)


def register(app: typer.Typer) -> None:
    app.command()(defects)


def defects(
    ctx: typer.Context,
    preset: str = preset_option("wse3", "--preset", "-p"),
    spec: Path = SPEC_FILE,
    sets: list[str] = typer.Option(None, "--set", help=SET_HELP),
    seed: int = number(0, "--seed", help="Seed of the defect map.", **SEED),
    defect_rate: float = number(None, "--defect-rate", help="Dead-PE rate in [0, 1).", ge=0, lt=1),
    load: Path = typer.Option(None, "--load", metavar="<path>", help=LOAD_HELP),
    save: Path = output_file(None, "--save", suffix=".npz", help=SAVE_HELP),
    png: Path = png_file(None, "--png", help="Write a picture of the defects and remap."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Dead PEs, spares used, repairable or not (not repairable: exit code 1).

    Not repairable is this command's answer, not a refusal: the report (and --png's picture,
    --save's map) is written and the exit code is 1, as grep's for no match; `wse wafer
    check`, which needs a repaired wafer to run on, refuses one before any work (exit code
    2)."""
    from wse_core import DefectError, remap

    s = wafer_spec(preset, spec, "wse3", sets, repaired=False)
    given = parse_sets(sets).get("defect_rate")  # hunt 63: --defect-rate won, silently
    if defect_rate is not None and given is not None:
        fail(f"--defect-rate {defect_rate:g} and --set defect_rate={given} both give the "
             "dead-PE rate; give one of them")  # fmt: skip
    if defect_rate is not None and not 0.0 <= defect_rate < 1.0:
        fail(f"--defect-rate must be in [0, 1), got {defect_rate}")
    _refuse_draw_options(ctx, load, defect_rate, given)
    refuse_overlap({"--load": load}, {"--save": save, "--png": png})
    if png:
        _check_picture_memory(s)
    dm = _the_map(s, load, seed, defect_rate)
    if save:  # before the repair: a map its spares cannot repair is kept too
        from wse_core.hw.defect_files import save_defect_map

        save_defect_map(save, dm, s.name)
    out = _listing(s, dm, load, save)
    out["map_wafer"] = _written_for(load) if load else None
    try:
        rm = remap(s, dm)
    except DefectError as e:
        out.update(repairable=False, reason=str(e))
        if png:  # named as the repairable case names it (hunt 65: written, never mentioned)
            plot_defects(png, dm, None)
            out["png"] = str(png)
        typer.echo(json.dumps(out, indent=2) if as_json else f"{e}{_written(png, save)}")
        raise typer.Exit(1) from None
    out.update(
        repairable=True,
        retired_rows=list(rm.retired_rows),
        spare_rows_used=rm.spare_rows_used,
        spare_cols_used=rm.spare_cols_used,
        detour_hops=rm.extra_hops,
        phys_row=_listed(rm.phys_row),
        phys_col=_listed(rm.phys_col),
    )
    if png:
        plot_defects(png, dm, rm)
        out["png"] = str(png)
    if as_json:
        typer.echo(json.dumps(out, indent=2))
        return
    where = f"rate {dm.rate:g}, seed {seed}"
    if load:  # the measured fraction beside a stated rate (hunt 77: rate 1.0 over 167 dead)
        where = f"map {load}" + ("" if dm.rate == _fraction(dm) else f", rate {dm.rate:g}")
        if out["map_wafer"]:
            from wse_core.errors import shown

            where += f", written for wafer {shown(out['map_wafer'])}"
    typer.echo(
        f"{s.name}: {dm.num_dead} dead of {dm.dead.size:,} physical PEs, "
        f"a dead fraction of {_fraction(dm):.3g} ({where}); "
        f"repairable: {retired_text(rm.retired_rows)} ({rm.spare_rows_used}/"
        f"{s.spare_rows} spare rows used) and at most {rm.spare_cols_used}/{s.spare_cols} "
        f"spare columns per row used; detour hops N-S {rm.extra_hops['ns_total']}, "
        f"E-W {rm.extra_hops['ew_total']}" + _written(png, save)
    )


def _refuse_draw_options(
    ctx: typer.Context, load: Path | None, defect_rate: float | None, set_rate: str | None
) -> None:
    """--load gives the map: --seed and a rate, which draw one, are refused beside it."""
    if load is None:
        return
    seeded = ctx.get_parameter_source("seed").name != "DEFAULT"
    options = (("--seed", seeded), ("--defect-rate", defect_rate is not None),
               ("--set defect_rate", set_rate is not None))  # fmt: skip
    drawn = [name for name, given in options if given]
    if drawn:
        verb = "draws" if len(drawn) == 1 else "draw"
        fail(f"--load {load} gives the defect map; {' and '.join(drawn)} {verb} one: give "
             "one or the other")  # fmt: skip


def _the_map(s, load: Path | None, seed: int, defect_rate: float | None):
    from wse_core import defect_map

    if load is None:
        return defect_map(s, seed, defect_rate)
    from wse_core.hw.defect_files import load_defect_map

    return load_defect_map(load, s)


def _listing(s, dm, load: Path | None, save: Path | None) -> dict:
    """--json's map part: where it came from, its counts, the dead PEs (bounded)."""
    import numpy as np

    out: dict = {
        "preset": s.name,
        "seed": dm.seed,
        "rate": dm.rate,  # drawn at (a file's stated, else its dead fraction)
        "map_file": str(load) if load else None,
        "dead_pes": dm.num_dead,
        "dead_fraction": _fraction(dm),  # measured, beside the rate (hunt 77)
        "physical_grid": list(dm.shape),
        "dead": _listed(np.argwhere(dm.dead)) if dm.num_dead <= MAX_LISTED else None,
        "listed": (
            f"dead [row, col], phys_row and phys_col while each has at most {MAX_LISTED:,} "
            "entries, else null (--save FILE keeps the whole map)"
        ),
    }
    if save:
        out["saved"] = str(save)
    return out


def _written_for(load: Path) -> str | None:
    """The `wafer` a loaded map file names (None: it names none, or an empty one): informational,
    read once `load_defect_map` has checked it is one short text."""
    from wse_core.host.readers import open_npz

    with open_npz(load, f"defect map {load}") as z:
        name = str(z["wafer"]) if "wafer" in z.files else ""
    return name or None


def _fraction(dm) -> float:
    """The map's dead PEs over its physical PEs, as `load_defect_map` reads an absent rate."""
    return dm.num_dead / dm.dead.size if dm.dead.size else 0.0


def _listed(a):
    """`a` as nested lists of ints, or None past MAX_LISTED entries (module docstring)."""
    return a.tolist() if a.size <= MAX_LISTED else None


def _written(png: Path | None, save: Path | None) -> str:
    return (f"; picture: {png}" if png else "") + (f"; map saved to {save}" if save else "")


RETIRED_SHOWN = 5  # retired rows a line names; the rest are counted (--json lists them all)


def retired_text(rows: tuple[int, ...]) -> str:
    """The physical rows retired, as a line names them (hunt 69: they were only counted):
    "no row retired", "row 4 retired", "rows 3, 7, 9, 12, 15 and 4 more retired"."""
    if not rows:
        return "no row retired"
    named = ", ".join(str(r) for r in rows[:RETIRED_SHOWN])
    more = f" and {len(rows) - RETIRED_SHOWN:,} more" if len(rows) > RETIRED_SHOWN else ""
    return f"{'row' if len(rows) == 1 else 'rows'} {named}{more} retired"


# --png's peak memory, measured (hunt 64: 20,100 x 1,012 physical PEs drew with 2.2 GB where
# 0.97 GB was checked): the whole command, the maps and matplotlib's two images of the
# physical grid, peaked at 91 to 98 B a PE above its start from 2.1 to 20.5 million PEs
# (124 B at 0.5 million, matplotlib's own ~15 MB counted in); priced with a margin, and
# measured again by test_cli_wafer_hunt64.
PICTURE_BYTES_PER_PE = 112


def _check_picture_memory(spec) -> None:
    """Refuse --png of a physical grid whose picture will not fit in memory, before any work
    (the defect map's own 48 B a PE are checked by `defect_map`, within these)."""
    from wse_core.host.memory import require

    rows, cols = spec.physical_rows, spec.physical_cols
    require(
        f"--png of the defect map of a {rows:,} x {cols:,} PE wafer",
        rows * cols * PICTURE_BYTES_PER_PE,
        fits=lambda b: (
            f"a picture of at most {b // PICTURE_BYTES_PER_PE:,} physical PEs fits "
            "(wse3 has 905,256); leave out --png for the map alone"
        ),
        share=False,
    )


def plot_defects(path: Path, dm, rm) -> None:
    """The picture of `defects_figure(dm, rm)`, written to `path` whole or not at all."""
    import matplotlib.pyplot as plt
    from wse_core.host.atomic import atomic_path

    fig = defects_figure(dm, rm)
    try:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, dpi=100, bbox_inches="tight")
    finally:
        plt.close(fig)


def defects_figure(dm, rm):
    """Two panels on the physical grid: the dead PEs, and where the remap puts each logical
    PE (its column shift; a retired row or an unused spare holds none). Retired rows are
    hatched on both (hunt 69: the remap was drawn on the logical grid, the row repair not
    at all). `rm` None: not repairable."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(1, 2, figsize=(12, 5))
    axes[0].imshow(dm.dead, cmap="Greys", interpolation="nearest", aspect="auto")
    r, c = np.nonzero(dm.dead)
    axes[0].scatter(c, r, s=6, c="red")
    axes[0].set_title(f"dead PEs on the physical grid ({dm.num_dead})")
    if rm is not None:
        # each logical PE's shift right (dead PEs skipped in its row); top + 1, drawn blank,
        # where none sits; the smallest integer type: memory is priced (PICTURE_BYTES_PER_PE)
        top = max(1, rm.spare_cols_used)
        placed = np.full(dm.shape, top + 1, dtype=np.min_scalar_type(top + 1))
        cols = np.arange(rm.phys_col.shape[1], dtype=placed.dtype)
        placed[rm.phys_row[:, None], rm.phys_col] = rm.phys_col - cols
        colours = plt.get_cmap("viridis").with_extremes(over="white")
        im = axes[1].imshow(
            placed, cmap=colours, interpolation="nearest", aspect="auto", vmin=0, vmax=top
        )
        fig.colorbar(im, ax=axes[1], label="column shift (spare columns used)")
        hatched = " (hatched)" if rm.retired_rows else ""
        title = f"remap: the physical PE of each logical PE\n{retired_text(rm.retired_rows)}"
        axes[1].set_title(title + hatched)
        for ax in axes:
            ax.add_collection(_hatched_rows(rm.retired_rows, dm.shape[1]))
    else:
        axes[1].text(0.5, 0.5, "not repairable", ha="center", va="center", fontsize=16)
        axes[1].set_axis_off()
    for ax in axes:
        ax.set_xlabel("physical column")
        ax.set_ylabel("physical row")
    return fig


def _hatched_rows(rows: tuple[int, ...], cols: int):
    """Hatched bands over `rows`, one collection (a wafer may retire thousands of rows)."""
    from matplotlib.collections import PatchCollection
    from matplotlib.patches import Rectangle

    boxes = [Rectangle((-0.5, row - 0.5), cols, 1) for row in rows]
    return PatchCollection(boxes, facecolor="none", edgecolor="red", hatch="///")
