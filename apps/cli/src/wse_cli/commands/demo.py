"""`wse demo`: the main job — every part of the stack once, on embedded defaults.

Parts run in order; each is a function `part(console, *, out_dir: Path, quick: bool)` named
here as "module:function" (packages add theirs). The whole demo stays under ~5 minutes on
2 cores; `--quick` shortens every part.

The demo writes its files straight into --out, so it runs only in a folder that is new,
empty, or an earlier demo's: it marks the folder with `wse_trainer.demo.MARKER` before the
first part (a folder from before the mark is known by its marked `train/model_dir`), and
refuses any other --out before the work, naming an entry it holds (hunt 62: a file of the
user's named like a demo file was overwritten, a file `train` failed at part 6).
"""

from __future__ import annotations

import importlib
import os
import time
from pathlib import Path

import typer

from wse_cli.errors import UserInputError
from wse_cli.outputs import output_dir

# (title, "module:function"). Each workload appends its part.
DEMO_PARTS: list[tuple[str, str]] = [
    ("The wafer: spec, defects, a fabric collective", "wse_cli.commands.demo:wafer_part"),
    ("HPC: BiCGSTAB and the 25-point stencil", "wse_hpc.stencil.demo:part"),
    ("HPC: TLR-MVM of a seismic operator", "wse_hpc.tlrmvm.demo:part"),
    ("HPC: EAM molecular dynamics, one atom per PE", "wse_hpc.studies.santos24_md:part"),
    ("HPC: field equations, cavity and Rayleigh-Benard", "wse_hpc.fields.demo:part"),
    ("Training: weight streaming, a model for inference", "wse_trainer.demo:part"),
    ("Inference: pipelined and speculative decoding", "wse_inference.demo.generation:part"),
    ("Serving: OpenAI-compatible HTTP and gRPC", "wse_inference.demo.serving:part"),
    ("Planning: wafers or GPUs, time, energy and cost", "wse_cli.commands.plan:part"),
    ("See the wafer: per-PE view of a pipelined decode", "wse_cli.commands.view:demo_part"),
]


def wafer_part(console, *, out_dir: Path, quick: bool) -> None:
    """A demo wafer with defects, a shift and an allreduce checked against NumPy."""
    import jax
    import numpy as np
    from wse_core import PerfModel, Work, fabric, preset
    from wse_core.hw.wafer import build_wafer

    spec = preset("demo")
    wafer = build_wafer(spec, defect_seed=7)
    d = wafer.describe()
    console.print(
        f"wafer [bold]{spec.name}[/]: {spec.pe_rows} x {spec.pe_cols} PEs on a "
        f"{d['mesh'][0]} x {d['mesh'][1]} mesh of {d['devices']} {d['platform']} devices; "
        f"{d['dead_pes']} dead PEs repaired with spares (detour hops {d['detour_hops']})"
    )
    from wse_cli.commands.wafer import plot_defects

    plot_defects(out_dir / "defects.png", wafer.defects, wafer.remap)
    x = np.random.default_rng(0).normal(size=(wafer.rows, wafer.cols, 16)).astype(np.float32)
    xs = wafer.place(x)
    step = jax.jit(lambda a: fabric.allreduce(wafer, fabric.shift(wafer, a, "E"), "sum"))
    jax.block_until_ready(step(xs))  # compile
    t0 = time.perf_counter()
    out = jax.block_until_ready(step(xs))
    wall = time.perf_counter() - t0
    shifted = np.zeros_like(x)
    shifted[:, 1:] = x[:, :-1]
    err = float(np.abs(wafer.gather(out)[0, 0] - shifted.sum((0, 1))).max())
    traffic = fabric.count(
        wafer, lambda a: fabric.allreduce(wafer, fabric.shift(wafer, a, "E")), xs
    )
    pred = PerfModel(spec).cost(Work.from_traffic(traffic, exchanges=1))  # the shift's
    console.print(
        f"shift E + allreduce of 16 floats per PE: max |error| vs NumPy {err:.2e}; "
        f"emulated {wall * 1e3:.2f} ms; predicted on the wafer {pred.seconds * 1e6:.2f} µs "
        f"({pred.cycles:.0f} cycles, {pred.bound}-bound); traffic {traffic.words:.0f} words, "
        f"{traffic.word_hops:.0f} word-hops"
    )
    console.print(f"defect map: {out_dir / 'defects.png'}")


def check_out(out: Path, marker: str) -> None:
    """Refuse an --out that is neither new, empty nor an earlier demo's (module docstring)."""
    if not out.is_dir() or (out / marker).is_file():
        return
    if (out / "train" / "model_dir" / marker).is_file():  # a demo's from before the mark
        return
    entries = sorted(os.listdir(out))
    if entries:
        more = f" and {len(entries) - 1} more" if len(entries) > 1 else ""
        raise UserInputError(
            f"--out {out} holds {entries[0]!r}{more}, not written by `wse demo`, which writes "
            "its files into --out; give a new or empty folder, or an earlier demo's"
        )


def demo(
    out: Path = output_dir(Path("wse_demo_out"), "--out", help="Folder for the demo's files."),
    quick: bool = typer.Option(False, "--quick", help="Shorter parts."),
) -> None:
    """Run every part of the stack once on embedded defaults (a few minutes on 2 cores)."""
    from rich.console import Console
    from rich.markup import escape
    from wse_trainer.demo import MARKER

    check_out(out, MARKER)
    console = Console()
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).write_text("written by `wse demo`; the next demo run replaces its files\n")
    start = time.perf_counter()
    for i, (title, target) in enumerate(DEMO_PARTS, 1):
        console.rule(f"[bold]{i}/{len(DEMO_PARTS)} {title}")
        module, func = target.split(":")
        t0 = time.perf_counter()
        getattr(importlib.import_module(module), func)(console, out_dir=out, quick=quick)
        console.print(f"[dim]({time.perf_counter() - t0:.1f} s)[/]")
    console.rule(escape(f"demo done in {time.perf_counter() - start:.1f} s; files in {out}"))


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)
