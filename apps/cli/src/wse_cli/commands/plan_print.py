"""How `wse plan` prints a plan: the table of both systems (time, energy, cost, the figures
per step or per token), the frontier table, JSON, and the charts (`plot`: bars of a training
plan, both frontiers of a serving plan with the chosen points marked). Nothing here plans:
the plans are `wse_systems.planning`'s. `Assumed` (`wse_cli.commands.plan_assumed`) is what
a plan was priced under: the `--assume` changes, the calibration in force, the swept
constants that move its figures and notes on assumed constants (JSON "assume",
"calibration", "assumed"); the table lists them under the plan's own assumptions.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import typer

from wse_cli.commands.plan_assumed import Assumed
from wse_cli.commands.plan_print_wafer import draft_rows, dtypes, wafers
from wse_cli.errors import UserInputError

__all__ = ["Assumed", "emit", "plot", "frontier_figure", "duration", "count"]


def duration(s: float) -> str:
    for unit, size in (("days", 86400), ("h", 3600), ("min", 60), ("s", 1), ("ms", 1e-3)):
        if s >= size:
            return f"{s / size:.3g} {unit}"
    return f"{s * 1e6:.3g} us"


def _joules(x: float) -> str:
    return f"{x:.4g} J"


def _money(x: float) -> str:
    return f"${x:,.0f}" if x >= 100 else f"${x:.3g}"


def _rows(plan) -> list[tuple[str, str, str]]:
    w = plan.wafer.to_dict()
    g = plan.gpu.to_dict() if plan.gpu is not None else None  # None: no GPU layout holds it

    def gpu(fn) -> str:
        return "-" if g is None else fn(g)

    tokens = plan.inputs["global_batch"] * plan.inputs["seq_len"]
    rows = [
        ("systems", f"{w['units']} x {w['system']}",
         gpu(lambda g: f"{g['units']} x {g['system']}")),
        ("time to train", duration(w["time_s"]), gpu(lambda g: duration(g["time_s"]))),
        ("steps", _steps(plan.inputs), gpu(lambda g: "the same")),  # hunt 76: whole steps
        ("step", duration(w["step_s"]), gpu(lambda g: duration(g["step_s"]))),
        ("GPU step floor", "-", gpu(_train_floor)),
        ("GPU step parts", "-", gpu(_gpu_parts)),
        ("tokens/s", f"{w['tokens_per_s']:,.4g}",
         gpu(lambda g: f"{tokens / g['step_s']:,.4g}")),
        # hunt 68: an fp32 wafer job was set against a bf16 GPU job, neither named
        ("precision", w["precision"],
         gpu(lambda g: f"{g['precision']} ({g['peak_flops'] / 1e12:g} TFLOP/s peak)")),
        ("batch per system", f"{plan.inputs['batch_per_system']} = {w['micro_batches']} x "
         f"micro-batch {w['micro_batch']} ({plan.inputs['micro_batch_size']})", ""),
        *([("batch chosen", w["batch_choice"], "")] if w.get("batch_choice") else []),
        ("wafer step bound", f"{w['step_bound']}, streams add "
         f"{100 * w['stall_fraction']:.1f}%", ""),
        ("wafer step parts", f"compute {duration(w['compute_s'])}; busy: weights in "
         f"{duration(w['weights_in_s'])}, gradients out {duration(w['gradients_out_s'])}, "
         f"MemoryX update {duration(w['memoryx_update_s'])}", ""),
        ("wafer weights", w["weight_chunks"], ""),
        ("speedup vs 1 system", _scaling(w), ""),
        ("energy", f"{w['energy_kwh']:,.4g} kWh", gpu(lambda g: f"{g['energy_kwh']:,.4g} kWh")),
        ("energy per step", _joules(w["energy_j_per_step"]),
         gpu(lambda g: _joules(g["energy_j_per_step"]))),
        ("energy per trained token", _joules(w["energy_j_per_token"]),
         gpu(lambda g: _joules(g["energy_j_per_token"]))),
    ]  # fmt: skip
    return (
        rows
        + _cost_rows(w, g)
        + [("GPUs to match the wafers' time", "", count(plan.gpus_to_match))]
    )


def _steps(inputs: dict) -> str:
    """The job's whole steps and the tokens they train: --tokens rounded up (hunt 76)."""
    asked, trained = inputs["tokens"], inputs["tokens_trained"]
    how = "rounded up to whole steps" if trained > asked else "whole steps"
    return f"{inputs['steps']:,} steps = {trained:,} tokens (--tokens {asked:,.0f} {how})"


def _train_floor(g: dict) -> str:
    """The GPU training step's floor (`wse_systems.gpu.train_floor`, hunt 76) and its bound."""
    f = g["floor"]
    tp = f" + tp all-reduces {duration(f['tp_allreduce_s'])}" if f["tp_allreduce_s"] else ""
    return (f"{duration(f['floor_s'])}: {f['kernels']:,} kernels x {f['kernel_s'] * 1e6:g} us"
            f"{tp} ({g['step_bound']} bound)")  # fmt: skip


def _gpu_parts(g: dict) -> str:
    """The GPU step's layout, its micro-batch size (hunt 79: chosen, was one sequence) and
    what it adds to compute (hunt 77: pipeline sends priced)."""
    lay, d = g["layout"], duration
    return (f"dp {lay['dp']} x tp {lay['tp']} x pp {lay['pp']}, micro-batches of "
            f"{lay.get('micro_batch', 1):,}: compute {d(g['compute_s'])}, "
            f"stage sends {d(g['stage_sends_s'])}, bubble {d(g['bubble_s'])}, exposed "
            f"all-reduce {d(g['exposed_allreduce_s'])}")  # fmt: skip


def _scaling(w: dict) -> str:
    """Weak (same batch per system and micro-batch setting: 1 at one system) and strong
    (same global batch, one system at its fastest micro-batch, at every N: below 1 at one
    system where the micro-batch priced is slower) speedups over one system."""
    weak = f"weak {w['weak_speedup']:.4g}x"
    strong = "-" if w["strong_speedup"] is None else f"{w['strong_speedup']:.4g}x"
    return (f"{weak}, strong {strong} ({w['swarmx_levels']} SwarmX levels; weak: one system "
            "at the same micro-batch setting, strong: at its fastest)")  # fmt: skip


def _cost_rows(w: dict, g: dict | None) -> list[tuple[str, str, str]]:
    c1 = w["cost_usd"]
    c2 = None if g is None else g["cost_usd"]
    return [
        (f"cost: {k}", _money(c1[f"{k}_usd"]), "-" if c2 is None else _money(c2[f"{k}_usd"]))
        for k in ("hardware", "people", "total")
    ]


def count(n: int | None) -> str:
    return "none" if n is None else f"{n:,}"


def _layout(g: dict) -> str:
    lay, idle = g["point"]["layout"], g.get("idle_gpus", 0)
    reps = f"{lay['replicas']} x " if lay["replicas"] > 1 else ""
    rest = f"; {idle} GPU{'s' if idle > 1 else ''} idle" if idle else ""  # review 82: unsaid
    return f"{g['gpus_per_replica']} x {g['system']} ({reps}tp {lay['tp']}, pp {lay['pp']}{rest})"


def _how(plan, meets: bool) -> str:
    if plan.choice == "knee":
        return "knee"
    if plan.choice == "users":
        return "users asked"
    speed, ttft = plan.inputs["min_user_tokens_per_s"], plan.inputs.get("max_ttft_s")
    limits = [f">= {speed:g} tokens/s per user" if speed else "",
              f"first token <= {ttft:g} s" if ttft else ""]  # fmt: skip
    asked = ", ".join(x for x in limits if x)
    return asked if meets else "one user (misses the limits)"


def _first_token(point: dict) -> str:
    """The wafer's first token, marked where it is a bound (hunt 73: at most the mean over
    the users' phases, `layout["ttft_bound"]`)."""
    bound = " (bound)" if point["layout"].get("ttft_bound") else ""
    return duration(point["ttft_s"]) + bound


def _admission(layout: dict) -> str:
    """The wait before a request is admitted (the busiest resource full), or none."""
    wait = layout.get("admission_wait_s", 0.0)
    return duration(wait) if wait > 0 else "none"


_NO_WINDOW = "none (one output token: the prompt's pass emits it)"


def _match_speed(w: dict, gpus: int | None) -> str:
    """GPUs to match the wafers' per-user speed: "n/a" where it is (hunt 76: it printed 1)."""
    return "n/a" if w["tokens_per_s_per_user"] is None else count(gpus)


def _match_both(w: dict, gpus: int | None) -> tuple[str, str, str]:
    """The speed-and-throughput match's row: throughput only at one output token, where no
    load has a per-user speed (hunt 77: it read "speed and throughput", matched at 0)."""
    what = "throughput only" if w["tokens_per_s_per_user"] is None else "speed and throughput"
    return (f"GPUs to match {what}", "", count(gpus))


def _per_user(speed: float | None) -> str:
    """Tokens/s per user: "n/a" at one output token, no time between tokens (hunt 75)."""
    return "n/a" if speed is None else f"{speed:,.4g}"


def _window(layout: dict) -> str:
    """A user's output window: its tokens alone and the others' prompts' stalls (hunt 66)."""
    alone, stalls = layout["decode_alone_s"], layout["decode_stalls_s"]
    if not layout["decode_s"]:
        return _NO_WINDOW
    return (
        f"{duration(layout['decode_s'])} ({duration(alone)} alone + {duration(stalls)} "
        "stalled by others' prompts)"
        if stalls > 0
        else duration(layout["decode_s"])
    )


def _token(layout: dict) -> str:
    """T1 in parts: what moves it when wafers are added (hunt 66)."""
    between = layout["between_wafers_s"]
    return (
        f"{duration(layout['token_s'])}: regions' work {duration(layout['regions_work_s'])}, "
        f"hops and fixed cycles {duration(layout['regions_latency_s'])}, between wafers "
        f"{duration(between) if between else 'none'}"
    )


def _blocks(layout: dict) -> str:
    """The wafer's prompt block: at most what the regions' SRAM holds beside the KV cache."""
    k = layout.get("prompt_block_tokens")
    return "-" if k is None else f"blocks of {k:,} tokens (free SRAM beside the KV cache)"


def _chunks(layout: dict) -> str:
    """The GPU's prompt chunks: what the step budget leaves beside the decode tokens."""
    return f"chunks within steps of {layout['token_budget']:,} tokens"


def _floor(layout: dict) -> str:
    """The GPU step's fixed cost (hunt 67), with the assumed kernel cost's range."""
    from wse_systems.serving.gpu_step import KERNEL

    kernel_s, lo, hi = layout["kernel_s"], min(KERNEL.sweep), max(KERNEL.sweep)
    return (
        f"{duration(layout['step_floor_s'])} a step: {layout['step_floor_s'] / kernel_s:.0f} "
        f"kernels x {kernel_s * 1e6:g} us (assumed, {lo * 1e6:g}..{hi * 1e6:g} us)"
        if kernel_s
        else "none"
    )


def _serving_rows(plan) -> list[tuple[str, str, str]]:
    w, g = plan.wafer.to_dict(), plan.gpu.to_dict()
    both = lambda key, fmt: (fmt(w[key]), fmt(g[key]))  # noqa: E731
    rows = [
        ("per replica", wafers(w), _layout(g)),
        *draft_rows(w),
        # hunt 68: a float32 model folder was priced 16-bit, and no row said which
        ("weights and KV", dtypes(plan.inputs), plan.inputs["gpu_precision"]),
        ("operating point", *both("meets_speed", lambda ok: _how(plan, ok))),
        ("users in flight", *both("users", lambda u: f"{u:,}")),
        ("most users that fit", *both("max_users", lambda u: f"{u:,}")),
        ("tokens/s per user", *both("tokens_per_s_per_user", _per_user)),
        ("output tokens/s in all", *both("tokens_per_s", lambda x: f"{x:,.4g}")),
        ("prompt tokens/s in all", *both("input_tokens_per_s", lambda x: f"{x:,.4g}")),
        ("time to first token", _first_token(w["point"]), duration(g["ttft_s"])),
        ("of it, waiting to be admitted", *both("point", lambda p: _admission(p["layout"]))),
        ("first token to last", _window(w["point"]["layout"]),
         duration(g["point"]["layout"]["decode_s"]) if g["point"]["layout"]["decode_s"]
         else _NO_WINDOW),
        # hunt 69: the aggregate fell 11% at the last users that fit, where their KV cache
        # leaves the prompts smaller blocks, and no row said so
        ("prompts run in", _blocks(w["point"]["layout"]), _chunks(g["point"]["layout"])),
        ("a token alone (wafer)", _token(w["point"]["layout"]), "-"),
        ("bound", *both("bound", str)),
        ("step floor (kernels)", "-", _floor(g["point"]["layout"])),
        ("replicas for the load", *both("replicas", str)),
        ("energy per million output tokens",
         *both("energy_kwh_per_million_tokens", lambda x: f"{x:.4g} kWh")),
        ("cost per million output tokens", *both("usd_per_million_tokens", _money)),
        ("hardware $/M input tokens", *both("usd_per_million_input_tokens", _money)),
        ("hardware $/M output tokens", *both("usd_per_million_output_tokens", _money)),
        ("hardware $/M tokens, blend", *both("usd_per_million_tokens_blend", _money)),
    ]  # fmt: skip
    match = plan.gpus_to_match
    return (
        rows
        + _cost_rows(w, g)
        + [
            ("GPUs to match per-user speed", "", _match_speed(w, match["user_speed"])),
            _match_both(w, match["user_speed_and_throughput"]),
        ]
    )


def _frontier_table(plan):
    from rich.markup import escape
    from rich.table import Table

    w, g = plan.wafer_frontier, plan.gpu_frontier
    t = Table(title=escape(f"frontiers of {w.units} x {w.system} and {g.units} x {g.system} "
                           "(Pareto points; * the chosen point)"))  # fmt: skip
    for col in ("system", "users", "tokens/s per user", "output tokens/s in all", "TTFT", "bound"):
        t.add_column(col, justify="left" if col in ("system", "bound") else "right")
    for front, chosen in ((plan.wafer_frontier, plan.wafer_point),
                          (plan.gpu_frontier, plan.gpu_point)):  # fmt: skip
        points = {p.users: p for p in front.pareto()} | {chosen.users: chosen}
        for u in sorted(points):
            p = points[u]
            mark = "*" if u == chosen.users else ""
            t.add_row(escape(front.system), f"{mark}{u:,}",
                      _per_user(p.user_tokens_per_s), f"{p.aggregate_tokens_per_s:,.4g}",
                      duration(p.ttft_s), p.bound)  # fmt: skip
    return t


def _print(plan, in_force: Assumed | None) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    # names are text, not markup (stop 65: a model folder named 'm[/x]' was a MarkupError)
    t = Table(title=escape(f"wse plan {plan.workload}: {plan.model} "
                           f"({plan.n_params / 1e9:.3g}B params)"))  # fmt: skip
    t.add_column("")
    t.add_column("wafers", justify="right")
    t.add_column("GPUs", justify="right")
    for row in _rows(plan) if plan.workload == "train" else _serving_rows(plan):
        t.add_row(*(escape(c) for c in row))
    console = Console()
    console.print(t)
    hint = plan.wafer.figures.get("micro_batch_hint")  # hunt 72: explore priced, auto run
    if hint:
        console.print(f"hint: {hint}", markup=False)
    if plan.workload == "infer":
        console.print(_frontier_table(plan))
        console.print(f"- wafer SRAM: {plan.wafer.figures['sram_budget']}", style="dim",
                      markup=False)  # fmt: skip
    for note in [*plan.assumptions, *(in_force.lines() if in_force else [])]:
        console.print(f"- {note}", style="dim", markup=False)


def plot(plan, path: Path) -> None:
    """`plan train`: bars of time, energy and cost (wafers alone when no GPU layout holds
    the model); `plan infer`: the two frontiers. Names (a model folder, a system) are drawn
    as typed (`wse_core.figures.plain`; hunt 68: `-m 'm$\\frac$'` was a traceback)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from wse_core.figures import plain, save_png

    if plan.workload == "infer":
        fig = frontier_figure(plan)
    else:
        sides = [plan.wafer] + ([plan.gpu] if plan.gpu is not None else [])
        panels = [("time to train (h)", [s.time_s / 3600 for s in sides]),
                  ("energy (MWh)", [s.energy_j / 3.6e9 for s in sides]),
                  ("cost ($)", [s.bill.total_usd for s in sides])]  # fmt: skip
        fig, axes = plt.subplots(1, 3, figsize=(10, 3.4), layout="tight")  # laid out in save_png
        labels = [plain(f"{s.units} x {s.system}") for s in sides]
        for ax, (title, values) in zip(axes, panels, strict=True):
            ax.bar(labels, values, color=["tab:orange", "tab:green"][: len(sides)])
            ax.set_title(title, fontsize=9)
            ax.tick_params(labelsize=7)
        fig.suptitle(plain(f"wse plan {plan.workload}: {plan.model}"), fontsize=10)
    save_png(fig, path, dpi=110)


def frontier_figure(plan):
    """Both systems' frontiers (`wse_systems.serving.figure`), the chosen points marked."""
    import matplotlib.pyplot as plt
    from wse_core.figures import plain
    from wse_systems.serving.figure import Curve, draw_frontiers

    fig, ax = plt.subplots(figsize=(6.4, 4.4), layout="tight")  # laid out when saved
    w, g = plan.wafer_frontier, plan.gpu_frontier
    curves = [Curve(w, plan.wafer_point, "tab:orange", plain(f"{w.units} x {w.system}")),
              Curve(g, plan.gpu_point, "tab:green", plain(f"{g.units} x {g.system}"))]  # fmt: skip
    work = plan.inputs["workload"]
    title = (f"{plan.model}: {work['prompt_tokens']} prompt / {work['output_tokens']} output "
             f"tokens (* {plan.choice})")  # fmt: skip
    draw_frontiers(ax, curves, title=plain(title))
    return fig


def _first_non_finite(value, path: str = "") -> tuple[str, float] | None:
    if isinstance(value, float) and not math.isfinite(value):
        return path, value
    items = value.items() if isinstance(value, dict) else (
        enumerate(value) if isinstance(value, list | tuple) else ())  # fmt: skip
    for k, v in items:
        found = _first_non_finite(v, f"{path}.{k}" if path else str(k))
        if found:
            return found
    return None


def emit(plan, as_json: bool, png: Path | None, in_force: Assumed | None = None) -> None:
    """Print `plan` (table or JSON) and draw it to `png`; `in_force`: what it was priced
    under, listed with it (JSON: "assume", "calibration", and its notes in "assumptions")."""
    data = plan.to_dict()
    if in_force is not None:
        data = {**data, **in_force.to_dict(),
                "assumptions": [*data["assumptions"], *in_force.notes]}  # fmt: skip
    found = _first_non_finite(data)
    if found:  # extreme inputs (1e300 tokens, 1e308 hours x 1e308 USD) overflow a float
        raise UserInputError(
            f"the plan's {found[0]} comes out {found[1]}: the inputs overflow a float; give "
            "smaller values (tokens, hours, rates)"
        )
    if png is not None:
        plot(plan, png)
    if as_json:
        typer.echo(json.dumps(data, indent=2, default=float))
    else:
        _print(plan, in_force)
