"""`wse plan train|infer`: should this run on wafers? Time, energy and cost against GPUs.

    wse plan train --model llama3_8b --tokens 1e12 [--systems N] [--gpus M] [--gpu h100]
    wse plan infer --model llama3-70b [--users N | --min-user-tokens-per-s S] [--wafers N]
                   [--gpus M] [--prompt-tokens P --output-tokens O]
                   [--draft M --alpha A | --tokens-per-round X]
                   [--gemv sdk|meshgemv] [--wafer-dtype auto|float32|bfloat16] [--stages S]
    either with [--assume KEY=VALUE ...]

`--model`: a `wse_models` preset (llama3-70b), a shipped trainer config (llama3_8b), a
params.yaml or an HF directory (config.json). Prints a table, or JSON with `--json`.
`plan train --png FILE` draws bars of time, energy and cost for both systems; `plan infer
--png FILE` draws both systems' frontiers (aggregate tokens/s against tokens/s per user,
the chosen points marked). The models and their assumptions are in `wse_systems.planning.train`,
`wse_systems.planning.infer`, `wse_systems.gpu`, `wse_systems.serving` and
`wse_systems.economics`; nothing is compiled. Each command parses its options, calls the
planner and prints (`plan_print`).

`--assume KEY=VALUE` is `wse experiments run --assume` (`wse_core.cost.assumptions`, the same
parser, refusals and meaning): a wafer field changes the wafer priced only (`applied` to the
one `WaferSpec`), `calibration.FIELD` the calibration's WSE-2, and the plan runs inside
`assume(...)` so that the calibration is refitted under what moves it. The plan lists the
assumptions in force, the calibration it priced with (its wafer, clock and fitted
constants, read from `wse_core.cost.calibration.current()`) and every swept constant that
moves its figures, recorded as the planner priced (`wse_core.cost.reads`): `Assumed`. An
`--assume` key the plan never reads is refused (`wse_cli.commands.plan_assumed`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from wse_cli.commands.plan_assumed import priced_under, register_system_constants
from wse_cli.commands.plan_print import count, duration, emit, plot
from wse_cli.errors import WseGroup
from wse_cli.options import GPUS, number
from wse_cli.outputs import png_file
from wse_cli.wafer_choice import SPEC_FILE, preset_option, wafer_spec

app = typer.Typer(
    cls=WseGroup, help="Wafers or GPUs? Time, energy and cost of training and serving.",
    no_args_is_help=True,
)  # fmt: skip

MODEL = typer.Option(..., "--model", "-m", help="Preset, shipped config, params.yaml or HF dir.")
WAFER = preset_option("wse3", "--wafer", help="Wafer preset: wse1, wse2, wse3")
GPU = typer.Option("h100", "--gpu", help="GPU: a100 or h100.")
JSON = typer.Option(False, "--json", help="Print the plan as JSON.")
PNG = png_file(None, "--png", help="Bar chart of time, energy and cost.")  # plan train
ASSUME: Any = typer.Option(
    [],
    "--assume",
    help="KEY=VALUE: plan with another value of an assumption (repeatable; `wse experiments "
    "assumptions` lists them). A wafer field (clock_hz) changes the wafer priced; "
    "calibration.FIELD (calibration.clock_hz) the WSE-2 the calibration rows were measured "
    "on, and the calibration is refitted under it, as under a setting or a fitted constant held.",
)
# Upper bounds of the plan's quantities (hunt 55): inside them every total is finite and still
# means something; `--tokens 1e308` printed 1e301 kWh. Lower ones (hunt 57): at least one
# token to train, a day of deployment (1e-300 days spread the people cost over nothing); a
# token a day served (hunt 58: 1e-300 made the energy per token inf, and the refusal asked
# for smaller values).
MAX_TOKENS = 1e17  # training tokens: ~7,000x Llama 3's 15e12
MAX_TOKENS_PER_DAY = 1e16  # served a day: ~300x Google's ~3e13 (2025)
MAX_USER_TOKENS_PER_S = 1_000_000  # per user: ~500x the fastest served (~2,000 tokens/s)
MAX_DAYS = 36_500  # a century of deployment
MAX_HOURS = 1_000_000  # engineer hours per job (~114 years)
MAX_TTFT_S = 86_400  # a day to the first token
MAX_USD_PER_HOUR = 1_000_000  # any hourly rate: ~250,000x an H100's cloud price (~$4/h)
MAX_USD_PER_KWH = 100  # ~1,000x industrial electricity (~$0.1/kWh)
MAX_BATCH = 1 << 20  # sequences per system
MAX_SEQ_TOKENS = 100_000_000  # one sequence / context: 10x Llama 4 Scout's 10M-token context
MAX_USERS = 10_000_000  # users in flight on one replica
WAFER_DTYPE = typer.Option(
    "auto", "--wafer-dtype", help="Wafer weights and KV: float32, bfloat16, float16 or auto (a "
    "model folder's own dtype, as wse infer generate runs it; else bfloat16; a --draft's "
    "by its own folder).",
)  # fmt: skip
# hunt 71: a params file's wafer and the assumption gpu.train_mfu were overridden by defaults
TRAIN_WAFER = preset_option("a params file's runconfig.wafer, else wse3", "--wafer",
                            help="Wafer preset: wse1, wse2, wse3")  # fmt: skip
MFU = number(None, "--mfu", help="GPU model flops utilisation (default: the assumption "
             "gpu.train_mfu, 0.39).", ge=0.01, le=1)  # fmt: skip
USD_GPU = number(None, "--usd-per-gpu-hour", help="Default: wse_systems.gpu.", ge=0,
                 le=MAX_USD_PER_HOUR, unit="USD/h")  # fmt: skip
USD_SYS = number(None, "--usd-per-system-hour", help="Per wafer system; default in economics.",
                 ge=0, le=MAX_USD_PER_HOUR, unit="USD/h")  # fmt: skip
USD_ENG = number(
    None, "--usd-per-engineer-hour", help="Default $100.", ge=0, le=MAX_USD_PER_HOUR, unit="USD/h"
)
ENG_H = number(None, "--engineer-hours", help="Per job on each system; default 160.", ge=0,
               le=MAX_HOURS, unit="h")  # fmt: skip
USD_KWH = number(None, "--usd-per-kwh", help="Electricity; default 0 (in the rates).", ge=0,
                 le=MAX_USD_PER_KWH, unit="USD/kWh")  # fmt: skip


def _rates(gpu_h, sys_h, eng_h, hours, kwh) -> dict[str, Any]:
    return {
        "usd_per_gpu_hour": gpu_h,
        "usd_per_system_hour": sys_h,
        "usd_per_engineer_hour": eng_h,
        "engineer_hours": hours,
        "usd_per_kwh": kwh,
    }


def _assumed(items: list[str], wafer: str | None, spec_file: Path | None):
    """(the checked assumptions, the wafer priced under them): `wse experiments run
    --assume`'s parser and `resolve_spec`'s last step (`applied`), refused the same way
    (`gpu.kernel_s` moves both plans' GPU steps: hunt 76 gave the training step its floor)."""
    from wse_core.cost.assumptions import applied, parse_assumptions

    register_system_constants()
    changes = parse_assumptions(items)
    return changes, applied(wafer_spec(wafer, spec_file, "wse3"), changes)


@app.command()
def train(
    model: str = MODEL,
    tokens: float = number(
        ..., "--tokens", help="Training tokens, e.g. 1e12.", ge=1, le=MAX_TOKENS, unit="tokens"
    ),
    systems: int = number(
        None,
        "--systems",
        help="Wafer systems (default: the config's).",
        kind=int,
        ge=1,
        limit="systems",
    ),
    gpus: int = number(
        None, "--gpus", help="GPUs (default: 8 per system, or enough nodes).", **GPUS
    ),
    batch: int = number(
        None,
        "--batch",
        help="Sequences per system (default: config's batch_size / num_csx).",
        kind=int,
        ge=1,
        le=MAX_BATCH,
    ),
    micro_batch: str = typer.Option(
        None,
        "--micro-batch",
        help="Sequences per system at once: auto (the largest that fits; the default, as "
        "wse train runs an unset micro_batch_size), explore (the fastest predicted; the plan "
        "names it when faster), none, or an integer dividing --batch.",
    ),
    seq_len: int = number(
        None,
        "--seq-len",
        help="Sequence length (default: config's).",
        kind=int,
        ge=1,
        le=MAX_SEQ_TOKENS,
    ),
    wafer: str = TRAIN_WAFER,
    spec_file: Path = SPEC_FILE,
    gpu: str = GPU,
    mfu: float = MFU,
    as_json: bool = JSON,
    png: Path = PNG,
    usd_gpu: float = USD_GPU,
    usd_sys: float = USD_SYS,
    usd_eng: float = USD_ENG,
    eng_hours: float = ENG_H,
    usd_kwh: float = USD_KWH,
    assume: list[str] = ASSUME,
) -> None:
    """Time, energy and cost to train on N wafers and on M GPUs (same global batch)."""
    from wse_core.cost.assumptions import assume as assumed
    from wse_core.cost.reads import recording
    from wse_systems.planning.train import TrainBatch, TrainGpus, plan_train

    from wse_cli.model_choice import micro_batch_setting, plan_wafer, resolve_model

    choice = resolve_model(model)  # hunt 71: a params file's wafer, as wse train runs it
    changes, spec = _assumed(assume, *plan_wafer(choice, wafer, spec_file))
    with assumed(**changes), recording() as reads:
        plan = plan_train(
            choice, tokens=tokens, spec=spec, systems=systems,
            gpus=TrainGpus(gpu, gpus, mfu),
            batch=TrainBatch(batch, micro_batch_setting(micro_batch), seq_len),
            rates=_rates(usd_gpu, usd_sys, usd_eng, eng_hours, usd_kwh),
        )  # fmt: skip
        in_force = priced_under(changes, [], reads, "wse plan train")
    emit(plan, as_json, png, in_force)


@app.command()
def infer(
    model: str = MODEL,
    users: int = number(
        None, "--users", help="Users in flight on each side.", kind=int, ge=1, le=MAX_USERS
    ),
    min_user_tokens_per_s: float = number(
        None,
        "--min-user-tokens-per-s",
        help="Among loads with every user this fast, admitted at once (a queued load meets no "
        "speed), the most output tokens/s within 1%, then the soonest first token; at one "
        "output token there is no speed to meet.",
        gt=0,
        le=MAX_USER_TOKENS_PER_S,
        unit="tokens/s",
    ),
    wafers: int = number(
        None,
        "--wafers",
        help="Wafers per replica (default: fewest).",
        kind=int,
        ge=1,
        limit="systems",
    ),
    stages: int = number(  # hunt 75: always one a layer; `wse infer generate --stages`'s count
        None, "--stages", help="Wafer layer stages, <= layers (default: searched).", kind=int, ge=1
    ),
    gpus: int = number(None, "--gpus", help="GPUs per replica (default: one node).", **GPUS),
    tokens_per_day: float = number(
        None,
        "--tokens-per-day",
        help="Output tokens/day served (default: one wafer replica busy at its point).",
        ge=1,
        le=MAX_TOKENS_PER_DAY,
        unit="tokens/day",
    ),
    days: float = number(
        365.0,
        "--days",
        help="Deployment length: hours, energy and tokens scale with it; the engineer hours "
        "(a fixed total) are spread over its tokens.",
        ge=1,
        le=MAX_DAYS,
        unit="days",
    ),
    prompt_tokens: int = number(
        None,
        "--prompt-tokens",
        help="Prompt tokens per user (default 1024; 4/5 of a shorter context).",
        kind=int,
        ge=1,
        le=MAX_SEQ_TOKENS,
    ),
    output_tokens: int = number(
        None,
        "--output-tokens",
        help="Output tokens per user (default 256; 1/5 of a shorter context).",
        kind=int,
        ge=1,
        le=MAX_SEQ_TOKENS,
    ),
    context_len: int = number(
        None,
        "--context-len",
        help="KV context held per user (default: prompt + output).",
        kind=int,
        ge=1,
        le=MAX_SEQ_TOKENS,
    ),
    hbm_fraction: float = number(
        None, "--hbm-fraction", help="Achieved HBM bandwidth (default: fitted).", ge=0.01, le=1
    ),
    gpu_precision: str = typer.Option(
        "bf16", "--gpu-precision", help="GPU weights, KV cache and products: bf16 or fp8."
    ),
    max_ttft_s: float = number(
        None,
        "--max-ttft-s",
        help="Among loads whose first token comes this soon, the most output tokens/s within "
        "1%, then the soonest first token.",
        gt=0,
        le=MAX_TTFT_S,
        unit="s",
    ),
    draft: str = typer.Option(None, "--draft", help="Draft model: speculative decoding."),
    gamma: int = number(
        None,
        "--gamma",
        help="Drafted tokens per round (default: 4).",
        kind=int,
        ge=1,
        limit="gamma",
    ),
    alpha: float = number(  # the range Speculation checks, named with the option (hunt 67)
        None,
        "--alpha",
        ge=0,
        le=1,
        help="Leviathan's acceptance rate (the engine's spec_alpha): a round is priced at "
        "(1 - a^(g+1)) / (1 - a) tokens, which assumes each draft position is accepted at a "
        "alone (i.i.d.); a measured round: --tokens-per-round.",
    ),  # fmt: skip
    tokens_per_round: float = number(  # hunt 72: the i.i.d. round was 8.1% over the engine's
        None,
        "--tokens-per-round",
        ge=1,
        unit="tokens",
        help="Tokens a speculative round keeps, measured (wse infer generate --json's "
        "speculative.tokens_per_round), in place of --alpha's formula; 1 to gamma + 1.",
    ),  # fmt: skip
    wafer: str = WAFER,
    spec_file: Path = SPEC_FILE,
    gpu: str = GPU,
    mfu: float = number(
        None, "--mfu", help="GPU model flops utilisation (default: fitted).", ge=0.01, le=1
    ),
    gemv: str = typer.Option(
        "sdk",
        "--gemv",
        help="Each wafer GEMV priced as: sdk (the SDK's dataflow) or meshgemv (WaferLLM's).",
    ),
    wafer_dtype: str = WAFER_DTYPE,
    as_json: bool = JSON,
    png: Path = png_file(None, "--png", help="Both frontiers, chosen points marked."),
    usd_gpu: float = USD_GPU,
    usd_sys: float = USD_SYS,
    usd_eng: float = USD_ENG,
    eng_hours: float = ENG_H,
    usd_kwh: float = USD_KWH,
    assume: list[str] = ASSUME,
) -> None:
    """Serving at an operating point: tokens/s per user and in all, time to first token,
    energy and cost per million tokens, on wafers and GPUs (default: each side's knee)."""
    from wse_core.cost.assumptions import assume as assumed
    from wse_core.cost.reads import recording
    from wse_systems import serving as sv
    from wse_systems.planning import infer as pi
    from wse_systems.serving.gpu_step import floor_note

    from wse_cli.model_choice import draft_asked, resolve_model
    from wse_cli.model_choice import wafer_dtype as dtype_of

    changes, spec = _assumed(assume, wafer, spec_file)
    choice = resolve_model(model)
    drafted, round_notes = draft_asked(draft, gamma, alpha, tokens_per_round)
    if draft is not None:  # the draft's own dtype where auto, as the engine holds it
        drafted = drafted._replace(dtype=dtype_of(wafer_dtype, draft, drafted.model))
    fit = pi.default_workload(choice.config)  # hunt 63: 1,280 tokens were past GPT-2's 1,024
    with assumed(**changes), recording() as reads:
        plan = pi.plan_infer(
            choice,
            wafer=pi.WaferSetup(spec, wafers, gemv, dtype_of(wafer_dtype, model, choice)),
            gpu=pi.GpuSetup(gpu, gpus, hbm_fraction, mfu, gpu_precision),
            workload=sv.Workload(
                prompt_tokens=fit.prompt_tokens if prompt_tokens is None else prompt_tokens,
                output_tokens=fit.output_tokens if output_tokens is None else output_tokens,
                context_len=context_len,
            ),
            target=pi.Target(users, min_user_tokens_per_s, max_ttft_s),
            costing=pi.Costing(tokens_per_day, days, _rates(usd_gpu, usd_sys, usd_eng,
                                                            eng_hours, usd_kwh)),
            draft=drafted, stages=stages,
        )  # fmt: skip
        # the GPU step's fixed cost, an assumed constant, beside the figures it moves (hunt 67)
        notes = [floor_note(choice.config), *round_notes]
        in_force = priced_under(changes, notes, reads, "wse plan infer")
    emit(plan, as_json, png, in_force)


def part(console, *, out_dir: Path, quick: bool) -> None:
    """`wse demo`: Llama-3 8B on one CS-3 against an 8-GPU H100 node, serving at each side's
    knee (not batch 1), and training."""
    from wse_systems.planning.infer import GpuSetup, WaferSetup, plan_infer
    from wse_systems.planning.train import plan_train

    from wse_cli.model_choice import resolve_model

    del quick  # already a few seconds
    wse3 = wafer_spec(None, None, "wse3")
    inf = plan_infer(resolve_model("llama3-8b"), wafer=WaferSetup(wse3, 1), gpu=GpuSetup(gpus=8))
    w, g = inf.wafer.figures, inf.gpu.figures
    console.print(
        f"serve llama3-8b at the knee of each frontier ({inf.inputs['workload']['prompt_tokens']}"
        f" prompt / {inf.inputs['workload']['output_tokens']} output tokens): 1 x CS-3 "
        f"{w['users']:,} users at {w['tokens_per_s_per_user']:,.0f} tokens/s each, "
        f"{w['tokens_per_s']:,.0f} in all, {w['usd_per_million_tokens']:.3g} $/Mtok; 8 x H100 "
        f"{g['users']:,} users at {g['tokens_per_s_per_user']:,.0f} tokens/s each, "
        f"{g['tokens_per_s']:,.0f} in all, {g['usd_per_million_tokens']:.3g} $/Mtok; GPUs to "
        f"match per-user speed: {count(inf.gpus_to_match['user_speed'])}"
    )
    tr = plan_train(resolve_model("llama3_8b"), tokens=1e11, spec=wse3)
    console.print(
        f"train llama3-8b on 1e11 tokens: {tr.wafer.units} x CS-3 {duration(tr.wafer.time_s)}, "
        f"{tr.wafer.energy_j / 3.6e9:.3g} MWh; {tr.gpu.units} x H100 {duration(tr.gpu.time_s)}, "
        f"{tr.gpu.energy_j / 3.6e9:.3g} MWh; GPUs to match: {tr.gpus_to_match or 'none'}"
    )
    plot(inf, out_dir / "plan_infer.png")
    console.print(f"frontiers: {out_dir / 'plan_infer.png'}")


def register(parent: typer.Typer) -> None:
    parent.add_typer(app, name="plan")
