"""The published decode figures' setup, priced on the plan `wse plan infer` serves it on: the
calibration set's 8B check and the assumptions that move it, swept beside it.

Contract. `PUBLISHED_SETUP` is what the published 8B figure measures and on what setup
(sources beside each value); `PUBLISHED_WORKLOAD` is its workload as the serving model takes
it (Artificial Analysis' 1k workload in the API's 8,192-token context: a decode step reads
1,000 + 1,000 / 2 cached tokens).

`served(config, spec, num_wafers=..., gemv=..., workload=...)` is the serving system `wse plan
infer` builds for that setting (`wse_systems.planning.infer_wafers.wafer_serving`, the same
function: the fewest wafers that hold the model and a user where `num_wafers` is None);
`served_plan(...)` is the plan it serves one user on, the planner's search
(`wse_systems.serving.placements.search`: each layout, each stage count of
`wse_systems.serving.stage_counts`, each head size and footprint, the policy's choice at one
user: the most output, a 1% tie, then the soonest first token); `served_token(...)` is one
decode token on it (`wse_systems.token.price_token`) with that plan. The experiment
`hotchips24-inference` prices its rows and `wse demo` its 70B line by `served_token`.

`check_case()` is the 8B check's `CheckCase` under the assumptions and calibration in force
(the spec, the plan, the token's phases, the serving system), kept by all three;
`decode_case()` its (spec, phases); `decode_check_row(cal)` the calibration row
(`wse_core.cost.calibration.row`): 1,800 tokens/s against the model under `cal`.
`check_sweeps()` prices the check at each value of the assumptions that move it and that
no calibration row identifies (issue 41: "a constant no row can identify stays `assumed`,
with its sweep range shown beside every prediction it moves"), each on the check's plan:
the clock, the cache the attention reads (the filled tokens or the whole allocated buffer),
the latency of the token's trip to the host, and, from the serving model, the users in
flight beside the measured one; `sweep_params(sweeps)` is the one line each that the rows
printing the check carry.

Why (hunt decode41, session 82): the check planned one region per layer
(`wse_systems.token.choose_layout`, which searches no stage count: 32 stages, 332.16 us a
token, 3,010.58 tokens/s) where `wse plan infer` serves the same setting on 16 stages of two
layers (287.5 us a token alone, 3,478 tokens/s per user): the check row and the planner
disagreed on the published case, and the check's +67% understated the model's miss. The
check now prices the planner's plan, whichever is nearer the figure.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from wse_core.cost.assumptions import assume, assumed_spec
from wse_core.cost.mechanisms import CONSTANTS
from wse_core.cost.perf import PerfModel, Phases
from wse_core.cost.reads import recording
from wse_core.cost.report import RunReport
from wse_core.hw.spec import WaferSpec, preset

from wse_systems.decoder import decode_phases
from wse_systems.pipeline import PipelinePlan
from wse_systems.planning.infer_wafers import wafer_serving
from wse_systems.serving import WaferServing, Workload
from wse_systems.token import price_token
from wse_systems.transformer import LLAMA31_8B

__all__ = [
    "AA_INPUT_TOKENS",
    "AA_OUTPUT_TOKENS",
    "CheckCase",
    "PUBLISHED_SETUP",
    "PUBLISHED_WORKLOAD",
    "Swept",
    "check_case",
    "check_sweeps",
    "decode_case",
    "decode_check_row",
    "served",
    "served_plan",
    "served_token",
    "sweep_params",
]


# The published 8B figure (shared/REFERENCES.md: 1,800 tokens/s, Hot Chips 2024) and what it
# measures. Cerebras' launch post (cerebras.ai/blog/introducing-cerebras-inference-ai-at-
# instant-speed, 2024-08-27): 1,800 tokens/s for Llama3.1 8B, "native 16-bit weights";
# Cerebras' quality post (cerebras.ai/blog/llama3.1-model-quality-evaluation-...): "1800+
# tokens per second ... as benchmarked by Artificial Analysis"; The Register on Hot Chips
# 2024: 8B "at 16-bit precision", 70B "distributed across four of its CS-3" (one wafer holds
# 8B: "20B models fit on a single CS-3", Cerebras as quoted at sbhn.g1b.me/item/47001147;
# the 8B row names no more systems). Artificial Analysis' output speed: tokens per
# second received after the first chunk, one prompt at a time through the public API,
# median over 72 h; its 1k workload is ~1,000 input and ~1,000 output tokens, "default
# benchmark on our website" (artificialanalysis.ai/methodology/performance-benchmarking; the
# page is undated; its 100-token workload, ~100 in / ~300 out, reads 250 tokens on average).
# The service's context: 8,192 tokens (freemodels.net/providers/cerebras/llama3_1-8b_free,
# the API's model card). Cerebras' release of 2024-10-24 (quoted at
# news.ycombinator.com/item?id=41942822): "Wafer IO has been streamlined to run
# asynchronously from compute": in the measured (August) release the wafer's I/O waited on
# compute, so each token's trip to the host is on the step's path (`token_out`).
AA_INPUT_TOKENS = 1000  # Artificial Analysis 1k workload, input (tokens)
AA_OUTPUT_TOKENS = 1000  # its output (tokens); a decode step reads input + output / 2 on average
PUBLISHED_SETUP: dict[str, Any] = {
    "wafer": "wse3",  # WSE-3 (CS-3), as the calibration set names it
    "wafers": 1,
    "bytes_per_param": 2,
    "context_len": 8192,
    "kv_tokens": AA_INPUT_TOKENS + AA_OUTPUT_TOKENS // 2,
    "token_out": True,
    "users": 1,  # one prompt at a time; per-user tokens/s
    # Cerebras' kernels are not public; the model prices the SDK gemv dataflow. WaferLLM's
    # MeshGEMV ("meshgemv") is a published program, not the measured software: shown beside.
    "gemv": "sdk",
}
PUBLISHED_WORKLOAD = Workload(
    prompt_tokens=AA_INPUT_TOKENS,
    output_tokens=AA_OUTPUT_TOKENS,
    context_len=int(PUBLISHED_SETUP["context_len"]),
)
assert PUBLISHED_WORKLOAD.kv_tokens == PUBLISHED_SETUP["kv_tokens"]  # one reading of the cache


def served(
    config: Any,
    spec: WaferSpec,
    *,
    num_wafers: int | None = None,
    gemv: str = "sdk",
    bytes_per_param: int = 2,
    workload: Workload = PUBLISHED_WORKLOAD,
) -> WaferServing:
    """The wafers' serving system `wse plan infer` builds for `config` on `num_wafers` wafers
    of `spec` (None: the fewest that hold it and a user) serving `workload` (module
    contract)."""
    return wafer_serving(
        config, spec, num_wafers=num_wafers, workload=workload, gemv=gemv,
        bytes_per_param=bytes_per_param,
    )  # fmt: skip


def served_plan(config: Any, spec: WaferSpec, **kwargs: Any) -> PipelinePlan:
    """The plan `wse plan infer --users 1` serves `config` on (`served`'s keywords)."""
    return served(config, spec, **kwargs).plans(1)[0]


def served_token(
    config: Any,
    spec: WaferSpec,
    *,
    num_wafers: int | None = None,
    gemv: str = "sdk",
    kv_tokens: int | None = None,
    token_out: bool = False,
) -> tuple[RunReport, PipelinePlan]:
    """(report, plan) of one 16-bit decode token of `config` on `served_plan`'s plan for the
    published workload, reading `kv_tokens` cached tokens (None: the workload's, 1,500) with
    the token's trip to the host when `token_out` (`wse_systems.token.price_token`)."""
    plan = served_plan(config, spec, num_wafers=num_wafers, gemv=gemv)
    kv = PUBLISHED_WORKLOAD.kv_tokens if kv_tokens is None else kv_tokens
    return price_token(config, plan, kv_tokens=kv, token_out=token_out), plan


class CheckCase(NamedTuple):
    """The 8B check as priced: the wafer, the planner's plan, one token's phases on it
    (`wse_systems.decoder.decode_phases` with the trip to the host) and the serving system
    whose search chose the plan."""

    spec: WaferSpec
    plan: PipelinePlan
    phases: Phases
    serving: WaferServing


_CASES: dict[tuple, tuple[CheckCase, Any]] = {}  # by spec, assumptions and calibration


def check_case() -> CheckCase:
    """The calibration set's 8B case as published (`PUBLISHED_SETUP`): Llama 3.1 8B, 16-bit,
    on one WSE-3 under the active assumptions, the plan `wse plan infer` serves its one user
    on (`served_plan`), one decode token reading the measured workload's cache, with its trip
    to the host."""
    from wse_core.cost.assumptions import active
    from wse_core.cost.calibration import current
    from wse_core.cost.reads import read

    spec = assumed_spec(str(PUBLISHED_SETUP["wafer"]))
    # by every assumption in force and the calibration (hunt 70: a calibration clock's plan, hunt
    # 76: one exp_fmacs' phases were kept for others); a hit reads again what the build read
    key = (spec.key(), tuple(sorted(active().items())), tuple(sorted(current().values.items())))
    if key not in _CASES:
        with recording() as got:
            _CASES[key] = (_built(spec), got)
    else:
        got = _CASES[key][1]
        for name, v in ((k, v) for k, vs in got.values.items() for v in vs):
            read(name, v, name in got.moving)
    return _CASES[key][0]


def _built(spec: WaferSpec) -> CheckCase:
    """The setup's token on `spec` on the planner's plan, never the one nearer the figure."""
    setup = PUBLISHED_SETUP
    ws = served(
        LLAMA31_8B, spec, num_wafers=int(setup["wafers"]), gemv=str(setup["gemv"]),
        bytes_per_param=int(setup["bytes_per_param"]),
    )  # fmt: skip
    plan = ws.plans(int(setup["users"]))[0]
    kv, out = int(setup["kv_tokens"]), bool(setup["token_out"])
    return CheckCase(spec, plan, decode_phases(LLAMA31_8B, plan, kv_tokens=kv, token_out=out), ws)


def decode_case() -> tuple[WaferSpec, Phases]:
    """(the wafer, one token's phases) of `check_case`."""
    case = check_case()
    return case.spec, case.phases


def decode_check_row(cal: Any = None) -> dict[str, object]:
    """The calibration row of the 8B case (`wse_core.cost.calibration.row`): Hot Chips 2024's
    1,800 tokens/s against the model under `cal` (default: the calibration in force)."""
    from wse_core.cost.calibration import DECODE_8B_TOKENS_PER_S, current, row

    spec, phases = decode_case()
    timing = PerfModel(spec, cal or current()).evaluate(phases)
    published = 1 / DECODE_8B_TOKENS_PER_S
    return row(
        "llama3.1-8b wse3 x1", "seconds/token", published, timing.seconds, "check", timing.bound
    )


class Swept(NamedTuple):
    """One assumption swept beside the check: its key, what it is, and (each value in words,
    the check's tokens/s there), the value the check prices marked "priced"."""

    key: str
    what: str
    values: tuple[tuple[str, float], ...]


# The clocks swept beside the check (Hz, why): WSE-3's clock is not published
# (`wse_core.cost.mechanisms.CONSTANTS["clock_hz"]`, assumed).
SDK_CLOCK_HZ = 0.85e9  # csl-examples' scripts divide cycles by 850 MHz (a WSE-2 figure)
WSE3_SRAM_BYTES_PER_S = 21e15  # Cerebras' CS-3 launch (2024): 21 PB/s of on-chip memory bandwidth
# The users in flight swept beside the one-user check: the serving model's per-user speed
# at each (the load behind the published API figure is not published)
SWEPT_USERS = (1, 8, 16)


def _clocks(spec: WaferSpec) -> tuple[tuple[float, str], ...]:
    """The clocks swept (Hz, source): the SDK scripts', the one the 21 PB/s SRAM total gives
    at the PE's 16 B read + 8 B write a cycle (`sram_*_bytes_per_cycle`), the preset's, and
    `spec`'s where an assumption moved it; the one priced marked."""
    per_pe = spec.sram_read_bytes_per_cycle + spec.sram_write_bytes_per_cycle
    implied = WSE3_SRAM_BYTES_PER_S / (spec.pe_rows * spec.pe_cols * per_pe)
    clocks = [
        (SDK_CLOCK_HZ, "the SDK scripts'"),
        (implied, f"21 PB/s over {spec.pe_rows * spec.pe_cols:,} PEs x {per_pe:g} B"),
        (preset(spec.name).clock_hz, "the top of the 1.0-1.1 GHz the marketing totals give"),
    ]
    clocks += [] if any(hz == spec.clock_hz for hz, _ in clocks) else [(spec.clock_hz, "assumed")]
    return tuple((hz, f"{why}; priced" if hz == spec.clock_hz else why) for hz, why in clocks)


def check_sweeps() -> tuple[Swept, ...]:
    """The 8B check at each value of the assumptions that move it and that no calibration row
    identifies (module contract), each priced on the check's plan (the planner's choice at
    the values in force; the users in flight: the serving model's own plan at each load)."""
    case = check_case()
    with recording(isolated=True):  # the values swept are no values the check read
        return _swept(case)


def _swept(case: CheckCase) -> tuple[Swept, ...]:
    spec, plan, phases = case.spec, case.plan, case.phases

    def rate(changes: dict[str, float] | None = None, ph: Phases = phases) -> float:
        """The check's tokens/s with `changes` assumed beside those in force (the wafer
        priced as `assume` builds it, as `--assume KEY=VALUE` would)."""
        with assume(**(changes or {})):
            return 1.0 / PerfModel(assumed_spec(str(PUBLISHED_SETUP["wafer"]))).evaluate(ph).seconds

    def mark(value: float, priced: float) -> str:
        return " (priced)" if value == priced else ""

    clock = Swept(
        "clock_hz",
        "the PE clock (assumed; not published)",
        tuple((f"{hz / 1e9:.3g} GHz ({why})", rate({"clock_hz": hz})) for hz, why in _clocks(spec)),
    )
    lat = spec.system_latency_s
    trip = Swept(
        "system_latency_s",
        "the token's trip to the host, one pass (assumed; the registry's sweep)",
        tuple((f"{s * 1e6:g} us{mark(s, lat)}", rate({"system_latency_s": s}))
              for s in CONSTANTS["system_latency_s"].sweep),
    )  # fmt: skip
    kv, out = int(PUBLISHED_SETUP["kv_tokens"]), bool(PUBLISHED_SETUP["token_out"])
    ctx = plan.context_len
    whole = decode_phases(LLAMA31_8B, plan, kv_tokens=ctx, token_out=out)
    cache = Swept(
        "kv read",
        "the cached tokens the attention reads (an assumption): the filled ones, or the whole "
        "allocated buffer as WaferLLM's decode computes over it (MeshInfra/WaferLLM 2cd13b5, "
        "Decode/WSE-3/src/decode.csl: score_matvec_mult Nt = seq_len_p_pe, lines 551-565; "
        "output_matvec_mult Kt = seq_len_p_pe, lines 612-626)",
        ((f"{kv:,} filled (priced)", rate()), (f"{ctx:,}, the whole buffer", rate(None, whole))),
    )  # fmt: skip
    users = Swept(
        "users in flight",
        "other users sharing the pipeline (not published): the serving model's tokens/s per "
        "user at each load, its own plan at each (`wse plan infer --users U`; no trip to the "
        "host: the serving model prices the wafer's time)",
        tuple((f"{u}", float(case.serving.point(u).user_tokens_per_s or 0.0))
              for u in SWEPT_USERS),
    )  # fmt: skip
    return clock, trip, cache, users


def sweep_params(sweeps: tuple[Swept, ...]) -> dict[str, str]:
    """One line per swept assumption, for the params of a row that prints the check:
    `{"swept KEY": "VALUE: TOKENS/S; ..."}`."""
    return {
        f"swept {s.key}": "; ".join(f"{label}: {tps:,.0f}" for label, tps in s.values)
        for s in sweeps
    }
