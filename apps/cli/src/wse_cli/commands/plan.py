"""`wse plan train|infer`: should this run on wafers? Time, energy and cost against GPUs.

    wse plan train --model llama3_8b --tokens 1e12 [--systems N] [--gpus M] [--gpu h100]
    wse plan infer --model llama3-70b [--wafers N] [--gpus M] [--tokens-per-day T]

`--model`: a `wse_models` preset (llama3-70b), a shipped trainer config (llama3_8b), a
params.yaml or an HF directory (config.json). Prints a table, or JSON with `--json`;
`--png FILE` draws bars of time, energy and cost for both systems. The model and its
assumptions are in `wse_cli.planning`, `wse_core.gpu` and `wse_core.economics`; nothing is
compiled.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from wse_cli.errors import WseGroup
from wse_cli.options import number

app = typer.Typer(
    cls=WseGroup, help="Wafers or GPUs? Time, energy and cost of training and serving.",
    no_args_is_help=True,
)  # fmt: skip

MODEL = typer.Option(..., "--model", "-m", help="Preset, shipped config, params.yaml or HF dir.")
WAFER = typer.Option("wse3", "--wafer", help="Wafer preset: wse1, wse2, wse3.")
GPU = typer.Option("h100", "--gpu", help="GPU: a100 or h100.")
JSON = typer.Option(False, "--json", help="Print the plan as JSON.")
PNG = typer.Option(None, "--png", help="Bar chart of time, energy and cost.")
MFU = number(0.4, "--mfu", help="GPU model flops utilisation (assumption).", gt=0, le=1)
USD_GPU = number(None, "--usd-per-gpu-hour", help="Default: wse_core.gpu.", ge=0, unit="USD/h")
USD_SYS = number(
    None,
    "--usd-per-system-hour",
    help="Per wafer system; default in economics.",
    ge=0,
    unit="USD/h",
)
USD_ENG = number(None, "--usd-per-engineer-hour", help="Default $100.", ge=0, unit="USD/h")
ENG_H = number(
    None, "--engineer-hours", help="Per job on each system; default 160.", ge=0, unit="h"
)
USD_KWH = number(
    None, "--usd-per-kwh", help="Electricity; default 0 (in the rates).", ge=0, unit="USD/kWh"
)


def _rates(gpu_h, sys_h, eng_h, hours, kwh) -> dict[str, Any]:
    return {
        "usd_per_gpu_hour": gpu_h,
        "usd_per_system_hour": sys_h,
        "usd_per_engineer_hour": eng_h,
        "engineer_hours": hours,
        "usd_per_kwh": kwh,
    }


def _duration(s: float) -> str:
    for unit, size in (("days", 86400), ("h", 3600), ("min", 60), ("s", 1), ("ms", 1e-3)):
        if s >= size:
            return f"{s / size:.3g} {unit}"
    return f"{s * 1e6:.3g} us"


def _joules(x: float) -> str:
    return f"{x:.4g} J"


def _money(x: float) -> str:
    return f"${x:,.0f}" if x >= 100 else f"${x:.3g}"


def _rows(plan) -> list[tuple[str, str, str]]:
    w, g = plan.wafer.to_dict(), plan.gpu.to_dict()
    if plan.workload == "train":
        rows = [
            ("systems", f"{w['units']} x {w['system']}", f"{g['units']} x {g['system']}"),
            ("time to train", _duration(w["time_s"]), _duration(g["time_s"])),
            ("step", _duration(w["step_s"]), _duration(g["step_s"])),
            ("energy", f"{w['energy_kwh']:,.4g} kWh", f"{g['energy_kwh']:,.4g} kWh"),
            ("energy per step", _joules(w["energy_j_per_step"]), _joules(g["energy_j_per_step"])),
            ("energy per token", _joules(w["energy_j_per_token"]),
             _joules(g["energy_j_per_token"])),
        ]  # fmt: skip
    else:
        rows = [
            ("per replica", f"{w['wafers_per_replica']} x {w['system']}",
             f"{g['gpus_per_replica']} x {g['system']} (tp {g['tp']}, pp {g['pp']})"),
            ("tokens/s per user", f"{w['tokens_per_s_per_user']:,.4g}",
             f"{g['tokens_per_s_per_user']:,.4g}"),
            ("time to first token", _duration(w["ttft_s"]), _duration(g["ttft_s"])),
            ("replicas for the load", str(w["replicas"]), str(g["replicas"])),
            ("energy per million tokens", f"{w['energy_kwh_per_million_tokens']:.4g} kWh",
             f"{g['energy_kwh_per_million_tokens']:.4g} kWh"),
            ("cost per million tokens", _money(w["usd_per_million_tokens"]),
             _money(g["usd_per_million_tokens"])),
        ]  # fmt: skip
    c1, c2 = w["cost_usd"], g["cost_usd"]
    rows += [
        ("cost: hardware", _money(c1["hardware_usd"]), _money(c2["hardware_usd"])),
        ("cost: people", _money(c1["people_usd"]), _money(c2["people_usd"])),
        ("cost: total", _money(c1["total_usd"]), _money(c2["total_usd"])),
    ]
    match = "none" if plan.gpus_to_match is None else f"{plan.gpus_to_match:,}"
    what = "time" if plan.workload == "train" else "tokens/s per user"
    rows.append((f"GPUs to match the wafers' {what}", "", match))
    return rows


def _print(plan) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"wse plan {plan.workload}: {plan.model} ({plan.n_params / 1e9:.3g}B params)")
    t.add_column("")
    t.add_column("wafers", justify="right")
    t.add_column("GPUs", justify="right")
    for row in _rows(plan):
        t.add_row(*row)
    console = Console()
    console.print(t)
    for note in plan.assumptions:
        console.print(f"[dim]- {note}[/]")


def plot(plan, path: Path) -> None:
    """Bars: time, energy and cost of the wafers and the GPUs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    w, g = plan.wafer, plan.gpu
    if plan.workload == "train":
        panels = [("time to train (h)", w.time_s / 3600, g.time_s / 3600),
                  ("energy (MWh)", w.energy_j / 3.6e9, g.energy_j / 3.6e9),
                  ("cost ($)", w.bill.total_usd, g.bill.total_usd)]  # fmt: skip
    else:
        key = ("energy_kwh_per_million_tokens", "usd_per_million_tokens")
        panels = [("ms per token (batch 1)", w.time_s * 1e3, g.time_s * 1e3),
                  ("kWh per million tokens", w.figures[key[0]], g.figures[key[0]]),
                  ("$ per million tokens", w.figures[key[1]], g.figures[key[1]])]  # fmt: skip
    fig, axes = plt.subplots(1, 3, figsize=(10, 3.4))
    labels = [f"{w.units} x {w.system}", f"{g.units} x {g.system}"]
    for ax, (title, a, b) in zip(axes, panels, strict=True):
        ax.bar(labels, [a, b], color=["tab:orange", "tab:green"])
        ax.set_title(title, fontsize=9)
        ax.tick_params(labelsize=7)
    fig.suptitle(f"wse plan {plan.workload}: {plan.model}", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _emit(plan, as_json: bool, png: Path | None) -> None:
    if png is not None:
        plot(plan, png)
    if as_json:
        typer.echo(json.dumps(plan.to_dict(), indent=2, default=float))
    else:
        _print(plan)


@app.command()
def train(
    model: str = MODEL,
    tokens: float = number(
        ..., "--tokens", help="Training tokens, e.g. 1e12.", gt=0, unit="tokens"
    ),
    systems: int = number(
        None, "--systems", help="Wafer systems (default: the config's).", kind=int, ge=1
    ),
    gpus: int = number(
        None, "--gpus", help="GPUs (default: 8 per system, or enough nodes).", kind=int, ge=1
    ),
    batch: int = number(
        None, "--batch", help="Sequences per system (default: config's).", kind=int, ge=1
    ),
    seq_len: int = number(
        None, "--seq-len", help="Sequence length (default: config's).", kind=int, ge=1
    ),
    wafer: str = WAFER,
    gpu: str = GPU,
    mfu: float = MFU,
    as_json: bool = JSON,
    png: Path = PNG,
    usd_gpu: float = USD_GPU,
    usd_sys: float = USD_SYS,
    usd_eng: float = USD_ENG,
    eng_hours: float = ENG_H,
    usd_kwh: float = USD_KWH,
) -> None:
    """Time, energy and cost to train on N wafers and on M GPUs (same global batch)."""
    from wse_cli.planning import plan_train, resolve_model

    plan = plan_train(
        resolve_model(model), tokens=tokens, systems=systems, gpus=gpus, wafer=wafer, gpu=gpu,
        mfu=mfu, batch_per_system=batch, seq_len=seq_len,
        rates=_rates(usd_gpu, usd_sys, usd_eng, eng_hours, usd_kwh),
    )  # fmt: skip
    _emit(plan, as_json, png)


@app.command()
def infer(
    model: str = MODEL,
    wafers: int = number(
        None, "--wafers", help="Wafers per replica (default: fewest).", kind=int, ge=1
    ),
    gpus: int = number(
        None, "--gpus", help="GPUs per replica (default: one node).", kind=int, ge=1
    ),
    tokens_per_day: float = number(
        None,
        "--tokens-per-day",
        help="Load (default: one wafer replica fully busy).",
        gt=0,
        unit="tokens/day",
    ),
    days: float = number(
        365.0, "--days", help="Deployment length (people cost).", gt=0, unit="days"
    ),
    context_len: int = number(8192, "--context-len", help="Context held per user.", kind=int, ge=1),
    prompt_tokens: int = number(
        1024, "--prompt-tokens", help="Prompt (first token).", kind=int, ge=1
    ),
    hbm_fraction: float = number(0.8, "--hbm-fraction", help="Achieved HBM bandwidth.", gt=0, le=1),
    wafer: str = WAFER,
    gpu: str = GPU,
    mfu: float = MFU,
    as_json: bool = JSON,
    png: Path = PNG,
    usd_gpu: float = USD_GPU,
    usd_sys: float = USD_SYS,
    usd_eng: float = USD_ENG,
    eng_hours: float = ENG_H,
    usd_kwh: float = USD_KWH,
) -> None:
    """Batch-1 tokens/s per user, time to first token, energy and cost per million tokens."""
    from wse_cli.planning import plan_infer, resolve_model

    plan = plan_infer(
        resolve_model(model), wafers=wafers, gpus=gpus, tokens_per_day=tokens_per_day,
        days=days, wafer=wafer, gpu=gpu, context_len=context_len, prompt_tokens=prompt_tokens,
        hbm_fraction=hbm_fraction, mfu=mfu,
        rates=_rates(usd_gpu, usd_sys, usd_eng, eng_hours, usd_kwh),
    )  # fmt: skip
    _emit(plan, as_json, png)


def part(console, *, out_dir: Path, quick: bool) -> None:
    """`wse demo`: Llama-3 8B on one CS-3 against an 8-GPU H100 node, serving and training."""
    from wse_cli.planning import plan_infer, plan_train, resolve_model

    del quick  # already a second or two
    choice = resolve_model("llama3-8b")
    inf = plan_infer(choice, wafers=1, gpus=8)
    w, g = inf.wafer.figures, inf.gpu.figures
    console.print(
        f"serve llama3-8b at batch 1: 1 x CS-3 {w['tokens_per_s_per_user']:,.0f} tokens/s, "
        f"{w['usd_per_million_tokens']:.3g} $/Mtok; 8 x H100 {g['tokens_per_s_per_user']:,.0f} "
        f"tokens/s, {g['usd_per_million_tokens']:.3g} $/Mtok"
    )
    tr = plan_train(resolve_model("llama3_8b"), tokens=1e11)
    console.print(
        f"train llama3-8b on 1e11 tokens: {tr.wafer.units} x CS-3 {_duration(tr.wafer.time_s)}, "
        f"{tr.wafer.energy_j / 3.6e9:.3g} MWh; {tr.gpu.units} x H100 {_duration(tr.gpu.time_s)}, "
        f"{tr.gpu.energy_j / 3.6e9:.3g} MWh; GPUs to match: {tr.gpus_to_match or 'none'}"
    )
    plot(inf, out_dir / "plan_infer.png")


def register(parent: typer.Typer) -> None:
    parent.add_typer(app, name="plan")
