"""`wse wafer info` and `wse wafer defects`: a wafer's figures, its defect map and repair."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from wse_cli.errors import WseGroup, fail
from wse_cli.options import SEED, number
from wse_cli.outputs import png_file
from wse_cli.wafer_choice import SPEC_FILE, parse_sets, preset_option, wafer_spec

app = typer.Typer(cls=WseGroup, help="Wafer specs, defect maps and repair.", no_args_is_help=True)

# a soak's bound (test_core_launch keeps a run busy with 10^6 repeats); 10^9 ran until killed
MAX_REPEAT = 10_000_000
# Rows south that `wse wafer check`'s multicast goes: a grid of fewer rows cannot hold it (with
# the zero boundary a multicast reaches at most the grid's rows; fabric.blocks refuses more).
MULTICAST_HOPS = 3

SET_HELP = "Override a spec field, e.g. --set clock_hz=1e9 (repeatable)."


def info_dict(spec) -> dict:
    return {
        "preset": spec.name,
        "grid": [spec.pe_rows, spec.pe_cols],
        "pes": spec.num_pes,
        "sram_bytes_per_pe": spec.sram_bytes_per_pe,
        "sram_total_bytes": spec.sram_total_bytes,
        "clock_hz": spec.clock_hz,
        "sram_bytes_per_s": spec.sram_bytes_per_s,
        "fabric_bytes_per_s": spec.fabric_bytes_per_s,
        "host_io_bytes_per_s": spec.host_io_bytes_per_s,
        "peak_flops": {d: spec.peak_flops(d) for d in spec.flops_per_cycle},
        "spare_rows": spec.spare_rows,
        "spare_cols": spec.spare_cols,
        "defect_rate": spec.defect_rate,
    }


def _si(v: float, unit: str) -> str:
    for p, s in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= p:
            return f"{v / p:.3g} {s}{unit}"
    return f"{v:.3g} {unit}"


@app.command()
def info(
    preset: str = preset_option("wse3", "--preset", "-p"),
    spec: Path = SPEC_FILE,
    sets: list[str] = typer.Option(None, "--set", help=SET_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Grid, PE count, SRAM per PE and in total, clock, bandwidths, peak flops."""
    s = wafer_spec(preset, spec, "wse3", sets, repaired=False)
    d = info_dict(s)
    if as_json:
        typer.echo(json.dumps(d, indent=2))
        return
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    # a Text, not markup: '[' in a name is text (hunt 64: `[/x]` was a MarkupError traceback)
    t = Table(title=Text(f"wafer {s.name}"), show_header=False)
    t.add_row("PE grid", f"{s.pe_rows} x {s.pe_cols} = {s.num_pes:,} PEs")
    t.add_row("SRAM", f"{s.sram_bytes_per_pe:,} B per PE, {_si(s.sram_total_bytes, 'B')} total")
    t.add_row("clock", _si(s.clock_hz, "Hz"))
    t.add_row("SRAM bandwidth", _si(s.sram_bytes_per_s, "B/s"))
    t.add_row("fabric bandwidth", _si(s.fabric_bytes_per_s, "B/s"))
    t.add_row("host I/O", _si(s.host_io_bytes_per_s, "B/s"))
    for dtype, flops in d["peak_flops"].items():
        t.add_row(f"peak {dtype}", _si(flops, "FLOP/s"))
    t.add_row("spares", f"{s.spare_rows} rows, {s.spare_cols} columns")
    t.add_row("defect rate", f"{s.defect_rate:g}")
    Console().print(t)


@app.command()
def defects(
    preset: str = preset_option("wse3", "--preset", "-p"),
    spec: Path = SPEC_FILE,
    sets: list[str] = typer.Option(None, "--set", help=SET_HELP),
    seed: int = number(0, "--seed", help="Seed of the defect map.", **SEED),
    defect_rate: float = number(None, "--defect-rate", help="Dead-PE rate in [0, 1).", ge=0, lt=1),
    png: Path = png_file(None, "--png", help="Write a picture of the defects and remap."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Dead PEs, spares used, repairable or not (not repairable: exit code 1).

    Not repairable is this command's answer, not a refusal: the report (and --png's picture)
    is written and the exit code is 1, as grep's for no match; `wse wafer check`, which
    needs a repaired wafer to run on, refuses one before any work (exit code 2)."""
    from wse_core import DefectError, defect_map, remap

    s = wafer_spec(preset, spec, "wse3", sets, repaired=False)
    given = parse_sets(sets).get("defect_rate")  # hunt 63: --defect-rate won, silently
    if defect_rate is not None and given is not None:
        fail(f"--defect-rate {defect_rate:g} and --set defect_rate={given} both give the "
             "dead-PE rate; give one of them")  # fmt: skip
    if defect_rate is not None and not 0.0 <= defect_rate < 1.0:
        fail(f"--defect-rate must be in [0, 1), got {defect_rate}")
    if png:
        _check_picture_memory(s)
    dm = defect_map(s, seed, defect_rate)
    out: dict = {
        "preset": s.name,
        "seed": seed,
        "rate": dm.rate,
        "dead_pes": dm.num_dead,
        "physical_grid": list(dm.shape),
    }
    try:
        rm = remap(s, dm)
    except DefectError as e:
        out.update(repairable=False, reason=str(e))
        if png:  # named as the repairable case names it (hunt 65: written, never mentioned)
            plot_defects(png, dm, None)
            out["png"] = str(png)
        picture = f"; picture: {png}" if png else ""
        typer.echo(json.dumps(out, indent=2) if as_json else f"{e}{picture}")
        raise typer.Exit(1) from None
    out.update(
        repairable=True,
        retired_rows=list(rm.retired_rows),
        spare_rows_used=rm.spare_rows_used,
        spare_cols_used=rm.spare_cols_used,
        detour_hops=rm.extra_hops,
    )
    if png:
        plot_defects(png, dm, rm)
        out["png"] = str(png)
    if as_json:
        typer.echo(json.dumps(out, indent=2))
        return
    typer.echo(
        f"{s.name}: {dm.num_dead} dead of {dm.dead.size:,} physical PEs (rate {dm.rate:g}, "
        f"seed {seed}); repairable: {retired_text(rm.retired_rows)} ({rm.spare_rows_used}/"
        f"{s.spare_rows} spare rows used) and at most {rm.spare_cols_used}/{s.spare_cols} "
        f"spare columns per row used; detour hops N-S {rm.extra_hops['ns_total']}, "
        f"E-W {rm.extra_hops['ew_total']}" + (f"; picture: {png}" if png else "")
    )


RETIRED_SHOWN = 5  # retired rows a line names; the rest are counted (--json lists them all)


def retired_text(rows: tuple[int, ...]) -> str:
    """The physical rows retired, as a line names them (hunt 69: they were only counted):
    "no row retired", "row 4 retired", "rows 3, 7, 9, 12, 15 and 4 more retired"."""
    if not rows:
        return "no row retired"
    named = ", ".join(str(r) for r in rows[:RETIRED_SHOWN])
    more = f" and {len(rows) - RETIRED_SHOWN:,} more" if len(rows) > RETIRED_SHOWN else ""
    return f"{'row' if len(rows) == 1 else 'rows'} {named}{more} retired"


@app.command()
def check(
    ctx: typer.Context,
    preset: str = preset_option("small", "--preset", "-p"),
    spec: Path = SPEC_FILE,
    grid: tuple[int, int] = number(
        (13, 21),
        "--grid",
        help=f"PE grid rows cols (rows >= {MULTICAST_HOPS}, for the check's multicast).",
        kind=int,
        ge=1,
    ),
    seed: int = number(0, "--seed", help="Seed of the data and the defect map.", **SEED),
    repeat: int = number(
        1, "--repeat", help="Run the ops this many times (a soak).", kind=int, ge=1, le=MAX_REPEAT
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Run every fabric op on this machine's (or this run's) mesh against NumPy oracles.

    Every element is checked against its own value, as np.testing.assert_allclose does
    (`mismatched`): the data are multiples of a power of two whose sums are exact in
    float32, so the allreduce is exact in any order and nothing needs a looser bound. A
    wrong op is exit code 1; a wafer its spares cannot repair is refused before any op runs
    (exit code 2: the check has no wafer to run on; `wse wafer defects` shows why)."""
    import hashlib

    if min(grid) <= 0:
        fail(f"--grid needs positive sizes, got {grid[0]} {grid[1]}")
    if grid[0] < MULTICAST_HOPS:  # hunt 69: refused after JAX by the op, naming no --grid
        fail(f"--grid {grid[0]} {grid[1]}: the check's multicast_S_{MULTICAST_HOPS} needs at "
             f"least {MULTICAST_HOPS} rows; give --grid ROWS >= {MULTICAST_HOPS}")  # fmt: skip
    if repeat <= 0:
        fail(f"--repeat must be positive, got {repeat}")
    if grid[0] * grid[1] > MAX_CHECK_PES:
        fail(f"--grid {grid[0]} {grid[1]} is {grid[0] * grid[1]:,} PEs; the check's sums are "
             f"exact up to {MAX_CHECK_PES:,} PEs (18 x a WSE-3): give a smaller grid")  # fmt: skip
    # the spec before JAX: under `wse launch` a bad one is refused before the join (hunt 62)
    wafer_of_run = wafer_spec(preset, spec, "small", repaired=False)  # its seed's map decides
    (r, c), s, source = grid, wafer_of_run, ctx.get_parameter_source("grid").name
    if r > s.pe_rows or c > s.pe_cols:  # hunt 72: the default, too big, was named as no --grid
        said = "the default --grid" if source == "DEFAULT" else "--grid"
        fail(f"{said} {r} {c} does not fit the {s.name} wafer's {s.pe_rows} x {s.pe_cols} PEs; "
             f"give --grid ROWS COLS of at most {s.pe_rows} x {s.pe_cols}")  # fmt: skip
    import jax
    import numpy as np
    from wse_core.hw.wafer import build_wafer

    wafer = build_wafer(wafer_of_run, grid=tuple(grid), defect_seed=seed)
    x = check_data(grid, seed)
    xs = wafer.place(x)
    cases = _cases(wafer, x)
    errors, wrong, digests = {}, {}, {}
    for name, (op, ref) in cases.items():
        compiled = jax.jit(op)
        for _ in range(repeat - 1):
            jax.block_until_ready(compiled(xs))
        got = wafer.gather(compiled(xs))
        errors[name] = float(np.abs(got - ref).max())
        wrong[name] = mismatched(got, ref)
        digests[name] = hashlib.sha256(np.ascontiguousarray(got).tobytes()).hexdigest()[:16]
    ok = not any(wrong.values())
    out = {
        "ok": ok,
        "processes": jax.process_count(),
        "devices": jax.device_count(),
        "mesh": list(wafer.mesh_shape),
        "grid": list(grid),
        "max_abs_error": errors,
        "mismatched": wrong,
        "sha256": digests,
    }
    if jax.process_index() == 0:
        if as_json:
            typer.echo(json.dumps(out, indent=2))
        else:
            bad = "; ".join(f"{k}: {n:,} elements wrong" for k, n in wrong.items() if n)
            typer.echo(
                f"{'ok' if ok else 'FAILED'}: {len(cases)} fabric ops on a "
                f"{grid[0]} x {grid[1]} grid, mesh {wafer.mesh_shape[0]} x "
                f"{wafer.mesh_shape[1]} over {out['devices']} devices in "
                f"{out['processes']} process(es); worst error {max(errors.values()):.2e}"
                + (f"; {bad}" if bad else "")
            )
    if not ok:
        raise typer.Exit(1)


# Hunt 64: one tolerance of 1e-4 x sum(|x|) over the whole grid passed any op within +-286 of
# the answer on a full WSE-3 grid (data of size ~1): a shift to the wrong neighbour passed.
MAX_CHECK_PES = 1 << 24  # past it no step keeps every float32 partial sum exact
RTOL = 2.0**-23  # float32's epsilon: an element may differ in its last bit, never more


def check_data(grid: tuple[int, int], seed: int):
    """(rows, cols, 4) float32 normal draws rounded to multiples of a power of two, the step,
    small enough that every channel's |values| sum to at most 2**24 steps: every partial sum
    of the allreduce is then a float32 number, its result exact in any order (devices,
    processes), and the oracle's float64 sum equals it."""
    import numpy as np

    z = np.random.default_rng(seed).normal(size=(*grid, 4))
    # rounding adds at most half a step a value to the sum of |values|
    steps_needed = np.abs(z).sum((0, 1)).max() / (2**24 - z[..., 0].size / 2)
    step = 2.0 ** np.ceil(np.log2(steps_needed))
    return (np.rint(z / step) * step).astype(np.float32)


def mismatched(got, ref) -> int:
    """Elements of `got` off `ref` by more than float32 rounding of the element's own value
    (np.testing.assert_allclose with rtol=RTOL, atol=0); a NaN is off."""
    import numpy as np

    ref = np.asarray(ref)  # its own dtype: float32 but for the allreduce's exact float64 sum
    return int(np.count_nonzero(~(np.abs(got - ref) <= RTOL * np.abs(ref))))


def _cases(wafer, x) -> dict:
    """{op name: (function of the placed field, NumPy's answer)}, each op's oracle by hand."""
    import numpy as np
    from wse_core import fabric, testing

    cols = x.shape[1]
    return {
        "shift_E_periodic": (
            lambda a: fabric.shift(wafer, a, "E", boundary="periodic"),
            testing.np_shift(x, "E", 1, "periodic"),
        ),
        "shift_N_zero": (lambda a: fabric.shift(wafer, a, "N"), testing.np_shift(x, "N")),
        f"multicast_S_{MULTICAST_HOPS}": (
            lambda a: fabric.multicast(wafer, a, "S", MULTICAST_HOPS),
            testing.np_multicast(x, "S", MULTICAST_HOPS),
        ),
        "broadcast_row": (
            lambda a: fabric.broadcast(wafer, a, "row", cols - 1),
            np.broadcast_to(x[:, -1:], x.shape),
        ),
        "allreduce_sum": (  # float64: exact for these data, as the op must be (check_data)
            lambda a: fabric.allreduce(wafer, a, "sum"),
            np.broadcast_to(x.astype(np.float64).sum((0, 1)), x.shape),
        ),
        "allreduce_max_row": (
            lambda a: fabric.allreduce(wafer, a, "max", axis="row"),
            np.broadcast_to(x.max(1, keepdims=True), x.shape),
        ),
    }


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


def register(parent: typer.Typer) -> None:
    parent.add_typer(app, name="wafer")
