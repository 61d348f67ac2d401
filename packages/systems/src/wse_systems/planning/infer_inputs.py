"""What `wse plan infer` is asked, checked: the wafer and GPU setups, where to serve on each
frontier (`Target`), what the costs are counted over (`Costing`), speculative decoding
(`Draft`, resolved by `speculation_of`; the draft-size rule the engines share,
`check_draft_size`; the draft's weights and KV as the plan prices and says them,
`draft_inputs`), the request (`default_workload`, `check_request`) and the bytes of a wafer
value in a dtype the wafer prices (`wafer_bytes`, the target's or the draft's, each refused
naming its own option).
`wse_systems.planning.infer` plans with them and re-exports the setups."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

from wse_core import WaferSpec
from wse_core.hw.dtypes import DTYPES, dtype_bytes, dtype_name

from wse_systems import serving as sv
from wse_systems.planning.choice import ModelChoice, PlanError, check_context

DEFAULT_GAMMA = 4  # drafted tokens per round when a draft is given without --gamma
DEFAULT_WORKLOAD = sv.Workload(prompt_tokens=1024, output_tokens=256)


def default_workload(config: Any) -> sv.Workload:
    """`DEFAULT_WORKLOAD`, or within a shorter context (GPT-2's 1,024 positions) the same
    4:1 split of it: the request a plan serves when none is given."""
    return workload_within(config.max_seq_len)


def workload_within(context: int) -> sv.Workload:
    """`default_workload` within `context` tokens (a model's positions or a served context)."""
    if DEFAULT_WORKLOAD.held_tokens <= context:
        return DEFAULT_WORKLOAD
    output = max(1, context // 5)
    return sv.Workload(prompt_tokens=max(1, context - output), output_tokens=output)


def check_request(config: Any, work: sv.Workload) -> None:
    """hunt 63: a request longer than the model's context was planned (GPT-2 at 4,256
    tokens, past its 1,024 positions); a params file's sequence was refused."""
    what = (
        f"--context-len {work.context_len}" if work.context_len else f"a request of "
        f"{work.held_tokens} tokens (--prompt-tokens {work.prompt_tokens} + --output-tokens "
        f"{work.output_tokens})"
    )  # fmt: skip
    check_context(config, what, work.held_tokens)


def check_draft_size(
    target_config: Any, draft_config: Any, *, target: str, draft: str, remedy: str,
    error: type[Exception] = PlanError,
) -> None:  # fmt: skip
    """The one rule for a draft's size, `wse plan infer`'s and the speculative engine's
    (`wse_inference.speculative.config.check_draft_size`): `error` when the draft's config
    counts more parameters (`num_params()`) than the target's, in one line naming both as
    `draft` and `target`, then `remedy`. Such a draft's round costs more than the target's
    steps it saves (hunt 57: a 70B draft for an 8B model searched placements for minutes;
    hunt 77: a 6-layer draft of a 3-layer target ran, 93.3 us a token against 31.3)."""
    drafted, served = draft_config.num_params(), target_config.num_params()
    if drafted > served:
        raise error(
            f"{draft} ({_params(drafted)} parameters) is larger than the model {target} "
            f"({_params(served)}): a draft must be at most the model's size; {remedy}"
        )


def _params(n: int) -> str:
    """A parameter count: 3 significant digits in billions, exact where that would show a
    tiny model as 0."""
    return f"{n / 1e9:.3g}B" if n >= 1e8 else f"{n:,}"


def speculation_of(asked: Draft, target: ModelChoice, work: sv.Workload) -> sv.Speculation | None:
    draft, gamma, alpha, _ = asked
    if draft is None:
        if alpha is not None:
            raise PlanError("--alpha needs --draft (the draft model it is the acceptance of)")
        if gamma is not None:  # hunt 58: it was dropped, and the plan ran without speculation
            raise PlanError("--gamma needs --draft (the draft model that drafts the tokens)")
        return None
    if alpha is None:
        raise PlanError("--draft needs --alpha: Leviathan's acceptance rate, e.g. the "
                        "speculative engine's measured spec_alpha")  # fmt: skip
    check_draft_size(target.config, draft.config, target=target.name,
                     draft=f"--draft {draft.name}", remedy="give a smaller --draft")  # fmt: skip
    vocab, own = draft.config.vocab_size, target.config.vocab_size
    if vocab != own:  # hunt 62: priced; the engines refuse it (`model_dir.check_draft`)
        raise PlanError(
            f"--draft {draft.name} has a vocabulary of {vocab:,} tokens, the model {target.name} "
            f"{own:,}: a draft proposes the model's own tokens, so it must share its tokenizer"
        )
    if work.held_tokens > draft.config.max_seq_len:  # the engines refuse it (found stop 65)
        raise PlanError(
            f"--draft {draft.name} holds a context of {draft.config.max_seq_len:,} tokens, a "
            f"request here {work.held_tokens:,}: a draft reads the whole request, so give a "
            f"draft with at least that context or a shorter request"
        )
    config = draft.config  # named as given (hunt 62: an HF folder's unnamed config was
    if not getattr(config, "name", None):  # printed as "ModelConfig")
        config = dataclasses.replace(config, name=draft.name)
    return sv.Speculation(draft=config, gamma=DEFAULT_GAMMA if gamma is None else gamma,
                          alpha=alpha)  # fmt: skip


def check_inputs(users, speed, ttft, hbm_fraction, mfu) -> None:
    if users is not None and (speed is not None or ttft is not None):
        raise PlanError("give --users, or --min-user-tokens-per-s and/or --max-ttft-s, not both")
    if ttft is not None and not (ttft > 0 and math.isfinite(ttft)):
        raise PlanError(f"--max-ttft-s must be a positive number, got {ttft:g}")
    if users is not None and users < 1:
        raise PlanError(f"--users must be at least 1, got {users}")
    if speed is not None and not (speed > 0 and math.isfinite(speed)):
        raise PlanError(f"--min-user-tokens-per-s must be a positive number, got {speed:g}")
    if not 0 < hbm_fraction <= 1:
        raise PlanError(f"--hbm-fraction must be in (0, 1], got {hbm_fraction:g}")
    if not 0 < mfu <= 1:
        raise PlanError(f"--mfu must be in (0, 1], got {mfu:g}")


GEMV_NOTE = {  # the wafer note's words for each GEMV program (`--gemv`)
    "sdk": "the SDK gemv dataflow (what the model takes for Cerebras' software)",
    "meshgemv": "WaferLLM's MeshGEMV (He et al., OSDI 2025; wse_systems.meshgemv), each "
    "product of a prompt block of k > 1 tokens the cheaper of k MeshGEMVs and its MeshGEMM "
    "where that fits (wse_systems.meshgemm), not Cerebras' published software",
}


class WaferSetup(NamedTuple):
    """The wafer side asked for: replicas of `wafers` wafers of `spec` (None: the fewest that
    hold the model, its draft and one user), each GEMV priced as `gemv` (`GEMV_PROGRAMS`),
    weights and KV in `dtype` (a name of `wse_core.hw.dtypes`: 16-bit, or float32 as the
    engine serves a float32 model folder)."""

    spec: WaferSpec
    wafers: int | None = None
    gemv: str = "sdk"
    dtype: str = "bfloat16"


class GpuSetup(NamedTuple):
    """The GPU side asked for: replicas of `gpus` GPUs of kind `gpu` (None: one node, or the
    fewest whole nodes that hold the model), at `hbm_fraction` of HBM bandwidth and `mfu`
    (None: the fitted `wse_systems.serving.gpu_step` values), weights, KV and products in
    `precision` (bf16 or fp8)."""

    gpu: str = "h100"
    gpus: int | None = None
    hbm_fraction: float | None = None
    mfu: float | None = None
    precision: str = "bf16"


class Target(NamedTuple):
    """Where on each frontier to serve (module contract): `users` in flight, or the largest
    load at least `min_user_tokens_per_s` per user and/or with a first token within
    `max_ttft_s`; none of them: each side's knee."""

    users: int | None = None
    min_user_tokens_per_s: float | None = None
    max_ttft_s: float | None = None


class Costing(NamedTuple):
    """What the costs are counted over: `tokens_per_day` output tokens a day (None: one wafer
    replica busy all day at its point) for `days` days (people's cost spread over them), at
    `rates` (`check_rates`' keys; the rest the defaults of `wse_systems.economics`)."""

    tokens_per_day: float | None = None
    days: float = 365.0
    rates: dict[str, Any] | None = None


class Draft(NamedTuple):
    """Speculative decoding asked for: a draft `model` drafting `gamma` tokens a round
    (None: DEFAULT_GAMMA) accepted at Leviathan's rate `alpha`, its weights and KV on the
    wafer in `dtype` (None: the target's, `WaferSetup.dtype`; `wse plan infer`'s
    --wafer-dtype auto: the draft folder's own, as the speculative engine prices it); no
    model: none (then gamma and alpha must stay None)."""

    model: ModelChoice | None = None
    gamma: int | None = None
    alpha: float | None = None
    dtype: str | None = None


def wafer_bytes(dtype: str, draft: Draft | None = None) -> int:
    """Bytes of a wafer weight (and cached value) in `dtype`: the SIMD table's dtypes only
    (fp16, bf16, fp32: what `wse_systems.decoder` prices); `draft`: the draft's dtype,
    refused naming the draft (session 86: its refusal named the target's --wafer-dtype)."""
    if dtype_name(dtype) in DTYPES:
        return dtype_bytes(dtype)
    if draft is None or draft.model is None:
        raise PlanError(f"--wafer-dtype {dtype!r}: the wafer prices float32, bfloat16 or "
                        "float16 weights and KV")  # fmt: skip
    raise PlanError(
        f"--draft {draft.model.name}: its dtype {dtype!r} is not one the wafer prices; a "
        "draft's weights and KV are float32, bfloat16 or float16 (with --wafer-dtype auto, "
        "its folder's config.json dtype; a given --wafer-dtype sets the target's and the "
        "draft's)"
    )


def draft_inputs(
    speculation: sv.Speculation | None, draft: Draft, dtype: str, bpp: int
) -> dict[str, Any]:
    """The draft's weights and KV on the wafer, as the plan prices them: its own dtype and
    bytes a value, else the target's (`Speculation.draft_bytes_per_param` None); none
    without a draft (session 86: the table named the target's dtype alone)."""
    if speculation is None:
        return {}
    own = speculation.draft_bytes_per_param is not None and draft.dtype is not None
    return {"draft_dtype": dtype_name(draft.dtype if own else dtype),
            "draft_bytes_per_param": speculation.draft_bytes_per_param if own else bpp}  # fmt: skip
