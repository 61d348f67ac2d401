"""`wse wafer info`, `wse wafer defects` (`wafer_defects`) and `wse wafer check`: a wafer's
figures, its defect map and repair, its fabric ops against NumPy."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from wse_cli.commands import wafer_defects
from wse_cli.commands.wafer_defects import (  # noqa: F401 (`demo` and tests import them here)
    PICTURE_BYTES_PER_PE,
    SET_HELP,
    defects_figure,
    plot_defects,
    retired_text,
)
from wse_cli.errors import WseGroup, fail
from wse_cli.options import SEED, number
from wse_cli.wafer_choice import SPEC_FILE, preset_option, wafer_spec

app = typer.Typer(cls=WseGroup, help="Wafer specs, defect maps and repair.", no_args_is_help=True)

# a soak's bound (test_core_launch keeps a run busy with 10^6 repeats); 10^9 ran until killed
MAX_REPEAT = 10_000_000
# Rows south that `wse wafer check`'s multicast goes: a grid of fewer rows cannot hold it (with
# the zero boundary a multicast reaches at most the grid's rows; fabric.blocks refuses more).
MULTICAST_HOPS = 3


def info_dict(spec) -> dict:
    from wse_core.hw.published import published_totals

    return {
        "preset": spec.name,
        "grid": [spec.pe_rows, spec.pe_cols],
        "pes": spec.num_pes,
        "sram_bytes_per_pe": spec.sram_bytes_per_pe,
        "sram_total_bytes": spec.sram_total_bytes,
        # what a PE offers data: its SRAM less the program's code and stack (assumed)
        "code_stack_bytes_per_pe": spec.code_stack_bytes_per_pe,
        "data_bytes_per_pe": spec.data_bytes_per_pe,
        # the largest rectangle a user program gets (the whole grid where none is given)
        "program_grid": [
            min(spec.program_rows or spec.pe_rows, spec.pe_rows),
            min(spec.program_cols or spec.pe_cols, spec.pe_cols),
        ],
        "clock_hz": spec.clock_hz,
        "sram_bytes_per_s": spec.sram_bytes_per_s,
        "fabric_bytes_per_s": spec.fabric_bytes_per_s,
        "host_io_bytes_per_s": spec.host_io_bytes_per_s,
        "peak_flops": {d: spec.peak_flops(d) for d in spec.flops_per_cycle},
        "spare_rows": spec.spare_rows,
        "spare_cols": spec.spare_cols,
        "defect_rate": spec.defect_rate,
        # each total with what it counts, beside Cerebras's published figure (hunt 76)
        "totals": published_totals(spec),
    }


def _total_rows(t, label: str, total: dict, shown: str) -> None:
    """A total's row (its value, = what it counts) and, where published, Cerebras's row."""
    t.add_row(label, f"{shown} = {total['counted']}")
    if "published_note" in total and label == "SRAM":  # once: why none is compared
        t.add_row("  Cerebras", total["published_note"])
    if "published" in total:
        t.add_row("  Cerebras", f"{total['published_as']}: ours is {total['ratio']:.2f}x; "
                  f"{total['gap']}")  # fmt: skip


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
    """Grid, PE count, SRAM per PE and in total, clock, bandwidths, peak flops.

    Each total says what it counts, and for wse1/wse2/wse3 Cerebras's published figure
    beside it with the ratio and why they differ (`wse_core.hw.published`)."""
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
    rows, cols = d["program_grid"]
    whole = " (the whole grid)" if (rows, cols) == (s.pe_rows, s.pe_cols) else ""
    t.add_row("program rectangle", f"{rows} x {cols} = {rows * cols:,} PEs{whole}")
    totals, fabric = d["totals"], s.fabric_bytes_per_s
    _total_rows(t, "SRAM", totals["sram_bytes"], f"{_si(s.sram_total_bytes, 'B')} total")
    t.add_row(
        "  for data",
        f"{s.data_bytes_per_pe:,} B a PE ({s.code_stack_bytes_per_pe:,} B of "
        f"{s.sram_bytes_per_pe:,} are the program's code and stack, assumed)",
    )
    t.add_row("clock", _si(s.clock_hz, "Hz"))
    _total_rows(t, "SRAM bandwidth", totals["sram_bytes_per_s"], _si(s.sram_bytes_per_s, "B/s"))
    shown = f"{_si(fabric, 'B/s')} = {_si(8 * fabric, 'b/s')}"  # Cerebras quotes bit/s
    _total_rows(t, "fabric bandwidth", totals["fabric_bytes_per_s"], shown)
    t.add_row("host I/O", _si(s.host_io_bytes_per_s, "B/s"))
    for dtype, flops in d["peak_flops"].items():
        t.add_row(f"peak {dtype}", _si(flops, "FLOP/s"))
    t.add_row("spares", f"{s.spare_rows} rows, {s.spare_cols} columns")
    t.add_row("defect rate", f"{s.defect_rate:g}")
    Console().print(t)


wafer_defects.register(app)  # `wse wafer defects`, between info and check as before


@app.command()
def check(
    ctx: typer.Context,
    preset: str = preset_option("small", "--preset", "-p"),
    spec: Path = SPEC_FILE,
    sets: list[str] = typer.Option(None, "--set", help=SET_HELP),
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

    The ops that move or combine data (all but fabric.count): shift, multicast,
    multicast_apply, halo_apply, window_apply, sliding_extreme (max, with a NaN), broadcast,
    reduce and allreduce (sum; max with a NaN, which must stay NaN), allreduce_apply and
    local_apply. Every element is checked against its own value, as
    np.testing.assert_allclose does (`mismatched`; NaN equals NaN): the data are multiples
    of a power of two whose sums are exact in float32, so every sum is exact in any order
    and nothing needs a looser bound. A wrong op is exit code 1; a wafer its spares cannot
    repair is refused before any op runs (exit code 2: the check has no wafer to run on;
    `wse wafer defects` shows why)."""
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
    # `--set` as `wafer info` and `wafer defects` take it (hunt 81: check alone refused it)
    wafer_of_run = wafer_spec(preset, spec, "small", sets, repaired=False)  # its map decides
    (r, c), s, source = grid, wafer_of_run, ctx.get_parameter_source("grid").name
    if r > s.pe_rows or c > s.pe_cols:  # hunt 72: the default, too big, was named as no --grid
        said = "the default --grid" if source == "DEFAULT" else "--grid"
        fail(f"{said} {r} {c} does not fit the {s.name} wafer's {s.pe_rows} x {s.pe_cols} PEs; "
             f"give --grid ROWS COLS of at most {s.pe_rows} x {s.pe_cols}")  # fmt: skip
    import jax
    import numpy as np
    from wse_core.hw.wafer import build_wafer

    from wse_cli.commands.wafer_cases import cases as check_cases

    wafer = build_wafer(wafer_of_run, grid=tuple(grid), defect_seed=seed)
    x = check_data(grid, seed)
    xs = wafer.place(x)
    cases = check_cases(wafer, x, MULTICAST_HOPS)
    errors, wrong, digests = {}, {}, {}
    for name, (op, ref) in cases.items():
        compiled = jax.jit(op)
        for _ in range(repeat - 1):
            jax.block_until_ready(compiled(xs))
        got = wafer.gather(compiled(xs))
        errors[name] = float(_errors(got, ref).max())
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


def _errors(got, ref):
    """|got - ref| per element: 0 where both are NaN, inf where only one is."""
    import numpy as np

    ref = np.asarray(ref)  # its own dtype: float32 but for the sums' exact float64
    nan_got, nan_ref = np.isnan(got), np.isnan(ref)
    diff = np.where(nan_got | nan_ref, np.inf, np.abs(got - ref))
    return np.where(nan_got & nan_ref, 0.0, diff)


def mismatched(got, ref) -> int:
    """Elements of `got` off `ref` by more than float32 rounding of the element's own value
    (np.testing.assert_allclose with rtol=RTOL, atol=0, which takes NaN for NaN as equal); a
    NaN where `ref` has a number is off, and a number where it has NaN."""
    import numpy as np

    ref = np.asarray(ref)
    same = (_errors(got, ref) <= RTOL * np.abs(ref)) | (np.isnan(got) & np.isnan(ref))
    return int(np.count_nonzero(~same))


def register(parent: typer.Typer) -> None:
    parent.add_typer(app, name="wafer")
