"""`wse view FILE`: a per-PE trace (`wse_core.trace`, written by `--trace FILE`) as a
self-contained HTML page and, with `--png`, as a PNG.

The page (`wse_core.trace.page`) opens offline from disk: layers (SRAM, busy cycles per part,
link traffic N/S/E/W, defects, regions), zoom and pan, hover with a PE's numbers and
allocations, each phase's critical PE marked. The PNG (`wse_core.trace.png`) is the same
view for papers and terminals. A missing or foreign file exits 2 with one line, and so does a
page given back as FILE; the default page (FILE with .html) is checked as --out is, before
any work.

`demo_part` is the demo's wafer view: GPT-2 124M planned for pipelined decoding on two
`demo` wafers (with defects), wafer 0's trace as `wafer_view.{npz,html,png}`.
"""

from __future__ import annotations

from pathlib import Path

import typer

from wse_cli.errors import UserInputError
from wse_cli.outputs import check_writable, output_file, png_file, refuse_overlap

__all__ = ["view", "write_view", "demo_part", "register"]


def write_view(trace, out: Path, png: Path | None = None) -> tuple[Path, Path | None]:
    """Write the page (and the PNG) of a `PeTrace`; returns their paths. The page is built
    first and written last, so that a PNG that fails leaves no page behind (hunt 68: a `$`
    in the name, or `--png .png`, was a traceback after t.html was written)."""
    from wse_core.host.atomic import write_atomically
    from wse_core.trace.page import page_html

    page = page_html(trace)
    if png is not None:
        from wse_core.trace.png import figure_png

        figure_png(trace, png)
    write_atomically(out, page)
    return out, png


def view(
    file: Path = typer.Argument(..., help="A trace file (.npz) written by --trace."),
    out: Path = output_file(None, "--out", help="The HTML page (default: FILE with .html)."),
    png: Path = png_file(None, "--png", help="Also write the view as a PNG."),
) -> None:
    """Show a per-PE trace as a self-contained web page (and a PNG)."""
    from wse_core.trace import load

    if not file.name:  # "" (or "."): with_suffix raised ValueError (hunt 57)
        raise UserInputError("FILE is empty or '.': give a trace file (.npz) written by --trace")
    named = "--out" if out is not None else "the default page"
    out = out or _default_page(file)
    refuse_overlap({"FILE": file}, {named: out, "--png": png})
    trace = load(file)  # TraceError (exit 2) for a missing or foreign file
    page, _ = write_view(trace, out, png)
    grid = f"{trace.rows} x {trace.cols} PEs" + (
        f" in {trace.block} x {trace.block} blocks" if trace.block > 1 else ""
    )
    typer.echo(f"page: {page} ({page.stat().st_size / 1e6:.2f} MB, {grid})")
    if png is not None:
        typer.echo(f"png: {png}")


def _default_page(file: Path) -> Path:
    """FILE with .html, checked as --out is (hunt 64: the option's check never saw this
    default, so a folder there was a traceback after the work and a FIFO hung)."""
    from wse_core.trace import load

    page = file.with_suffix(".html")
    if page.name == file.name:  # FILE is x.html: most likely a page given for its trace
        load(file)  # a page is refused in load's words ("an HTML page ..., not a trace")
        raise UserInputError(
            f"FILE {file} ends in .html, the name of its own page; give --out another name"
        )
    check_writable(page, kind="file", name="the default page")
    return page


def demo_part(console, *, out_dir: Path, quick: bool) -> None:
    """The wafer view of a pipelined GPT-2 124M decode on two demo wafers with defects."""
    from wse_core import preset
    from wse_core.hw.wafer import build_wafer
    from wse_models.config import PRESETS
    from wse_systems.pipeline import Regions, plan_pipeline
    from wse_systems.trace import pipeline_traces

    spec, cfg = preset("demo"), PRESETS["gpt2-124m"]
    plan = plan_pipeline(cfg, spec, num_wafers=2, context_len=256, regions=Regions(stages=12))
    wafers = [build_wafer(spec, defect_seed=7 + w) for w in range(plan.num_wafers)]
    trace = pipeline_traces(cfg, plan, wafers=wafers)[0]
    trace.save(out_dir / "wafer_view.npz")
    page, png = write_view(trace, out_dir / "wafer_view.html", out_dir / "wafer_view.png")
    console.print(
        f"{cfg.name} decoding on {plan.num_wafers} {spec.name} wafers: wafer 0 holds "
        f"{', '.join(r['name'] for r in trace.regions)}; {len(trace.dead)} dead PEs; predicted "
        f"{trace.meta['predicted_s'] * 1e6:.1f} µs per token\nwafer view: {page} "
        f"({page.stat().st_size / 1e3:.0f} kB; open it in a browser), {png}"
    )


def register(app: typer.Typer) -> None:
    app.command("view")(view)
