"""`wse infer generate`: pipelined (or speculative) decoding of one prompt from a model dir.

    wse infer generate --model-dir DIR (--prompt TEXT | --prompt-ids 1,2,3) [--max-tokens N]
        [--temperature T] [--top-k K] [--top-p P] [--seed S] [--stop STR]...
        [--speculative-config '{"model": DIR, "num_speculative_tokens": 4}'] [--stages S]
        [--max-context N] [--logprobs N] [--ignore-eos] [--min-tokens N]
        [--include-stop-str-in-output] [--presence-penalty X] [--frequency-penalty X]
        [--repetition-penalty X] [--preset P | --spec FILE] [--json]

On a terminal the text streams as it is generated, then TTFT, tokens/s, the engine's
predicted wafer time per token on `--preset` / `--spec` (default wse3; the plan it ran, its
weights' dtype and layout named, priced by `wse_systems.token.price_token`; both engines
planned for the job's context, prompt + max_tokens, as `wse plan infer` plans it; speculative:
the rounds run over the tokens kept, a round cut at max_tokens or a stop priced whole) beside the
measured time per token (pipelined: labelled with its stage count, and beside it `wse plan
infer --users 1`'s token for the request where the plan's count differs, `infer_plan_token`;
and the request's predicted first token beside the measured TTFT, its prompt in the engine's
32-token chunks, and the whole request, TTFT + (n - 1) tokens, on the same plan:
`predicted.ttft_s`, `predicted.request_s`, `predicted.request`),
and (speculative) acceptance statistics (speculative decoding runs on the
serving engine, `SpeculativeEngine`, whose rounds also give logprobs; with `--logprobs`, the
mean logprob and perplexity); `--json` prints token ids, text, metrics and (`--logprobs N`)
each token's raw logprob and its N most likely alternatives [[id, logprob], ...] as one JSON
object. A sampling setting not given is generation_config.json's, said in one line (vLLM's
--generation-config auto), else 32 tokens at temperature 1 with no top-k, top-p or penalty.
Bad input (missing/incompatible checkpoint, prompt longer than the context,
max_tokens <= 0, temperature outside [0, 2], top_p outside (0, 1], --min-tokens past
--max-tokens (vLLM's words), draft/target vocabulary
mismatch, a draft larger than the model, --stages or --trace with --speculative-config: the
pipelined engine's options; its `mock_accepted_tokens`: the mock server's) exits 2, one
line. Heavy packages are imported inside the command, so `wse --help` stays fast. On a CPU
the attention's numba kernels compile in a helper process while the weights load
(`wse_models.sdpa_cpu.compile_early`).
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import typer

from wse_cli.commands import infer_prompt as prompts
from wse_cli.commands.infer_plan_token import (
    plan_line,
    plan_token,
    request_figure,
    stages_of,
    ttft_line,
)
from wse_cli.errors import fail
from wse_cli.options import INT32_MAX, SEED, number
from wse_cli.outputs import output_file
from wse_cli.wafer_choice import SPEC_FILE, preset_option, wafer_spec


def _pipelined(model, ids, sampling, stages, context, stream, wafer, trace=None):
    """Prefill + insert + generate on the pipelined engine, streaming text; -> result dict."""
    from wse_inference.pipeline.engine import PipelineEngine
    from wse_inference.pipeline.plan import engine_plan

    context = min(context, len(ids) + sampling.max_tokens)
    kv = _kv_tokens(len(ids), sampling.max_tokens)  # placed as `wse plan infer` places it
    plan = None  # stages outside the layers: the engine's refusal
    if 1 <= stages <= model.config.n_layers:
        plan = engine_plan(
            model.config, stages=stages, max_context=context, spec=wafer, kv_tokens=kv
        )
    engine = PipelineEngine(model, spec=wafer, stages=stages, max_context=context, plan=plan,
                            prefill_chunk=32)  # fmt: skip
    result = _on_engine(engine, model, ids, sampling, stream, lambda st: st.seqs[0], trace)
    result["engine"] = f"pipelined, {stages} stage(s) on a {stages} x 1 PE grid"
    result["predicted"]["stages"] = stages  # each token labelled with its stage count
    # the request's first token and whole, on the plan it ran (hunt jobs16 H3: the measured
    # TTFT was printed beside the decode token's price alone)
    n = len(result["token_ids"])
    figure = request_figure(model.config, engine.plan, prompt_tokens=len(ids), output_tokens=n,
                            chunk=engine.prefill_chunk)  # fmt: skip
    result["predicted"] |= {"ttft_s": figure["ttft_s"], "request_s": figure["request_s"],
                            "request": figure}  # fmt: skip
    planned = plan_token(model.config, wafer, prompt_tokens=len(ids), stages=stages,
                         output_tokens=sampling.max_tokens)  # fmt: skip
    if planned is not None:  # hunt 75: the plan's count differs (or the plan refuses)
        result["plan_predicted"] = planned
    return result


def _kv_tokens(prompt: int, output: int) -> int:
    """A decode step's mean cache read, `wse plan infer`'s (`Workload.kv_tokens`)."""
    from wse_systems.serving import Workload

    return Workload(prompt_tokens=prompt, output_tokens=output).kv_tokens


def _finite(lp) -> None:
    if lp is not None and not all(map(math.isfinite, (lp.logprob, *(v for _, v in lp.top)))):
        fail(
            f"the model's log probabilities are not finite ({lp.logprob}): its weights hold NaN "
            "or inf, or overflow in the model's dtype; check the model's safetensors"
        )


def _on_engine(engine, model, ids, sampling, stream, tracker_of, trace=None, priced=None):
    """One sequence through an `Engine` (slot 0), streaming its text; -> result dict, with
    the tokens' logprobs when `sampling.logprobs` is set. `tracker_of(state)`: the slot's
    `SequenceTracker`; `model`: the target (`LoadedModel`) whose precision is priced;
    `priced`: more keywords of the engine's `report` (the speculative job's workload)."""
    import dataclasses

    asked = sampling.logprobs
    # each token's own logprob, always: a model whose weights overflow (finite, but NaN or inf
    # logits) is refused before its text is shown (hunt 62: NUL characters, exit 0, and NaN
    # in --json); no recompile (the engine's logprobs are traced arguments)
    sampling = dataclasses.replace(sampling, logprobs=asked or 0)
    state = engine.init_decode_state()
    t0 = time.perf_counter()
    prefix = engine.prefill(prompt_ids=ids, sampling=sampling)
    _finite(prefix.first_logprob)
    state = engine.insert(prefix=prefix, state=state, slot=0)
    ttft = time.perf_counter() - t0
    tracker = tracker_of(state)
    logprobs = [prefix.first_logprob]
    shown = ""
    while tracker.finish_reason is None:
        shown = stream(tracker.visible_text(), shown)
        state, outs = engine.generate(state=state)
        logprobs += [x for o in outs for x in o.logprobs or ()]
    for x in logprobs:
        _finite(x)
    stream(tracker.visible_text(), shown)
    decode = time.perf_counter() - t0 - ttft
    n, kv = len(tracker.tokens) - 1, _kv_tokens(len(ids), len(tracker.tokens))
    report = engine.report(measured_wall_s=decode, tokens=n, kv_tokens=kv, **(priced or {}))
    result = {
        "token_ids": tracker.tokens,
        "text": tracker.visible_text(),
        "finish_reason": tracker.finish_reason,
        "ttft_s": ttft,
        "decode_s": decode,
        "tokens_per_s": n / decode if n > 0 and decode > 0 else 0.0,
        "predicted": _predicted(report, model.config),
    }
    if trace is not None:  # a PipelineEngine: its plan's head and stages on each wafer
        result["trace"] = _save_traces(engine, report, trace, kv_tokens=kv)
    if asked is not None:
        result["logprobs"] = [{"token_id": x.token, "logprob": x.logprob,
                               "top": [list(a) for a in x.top]} for x in logprobs]  # fmt: skip
    return result


def generate(
    model_dir: Path = typer.Option(..., "--model-dir", help="HF dir or wse train model_dir."),
    prompt: str = typer.Option(None, "--prompt", help="Prompt text."),
    prompt_ids: str = typer.Option(None, "--prompt-ids", help="Ids: 1,2,3."),
    max_tokens: int = number(None, "--max-tokens", help="Tokens to make.", kind=int, ge=1),
    temperature: float = number(  # the server's range (admission.MAX_TEMPERATURE, OpenAI's)
        None, "--temperature", help="In [0, 2]; 0 is greedy.", ge=0, le=2
    ),
    top_k: int = number(  # -1 as vLLM, `wse infer serve` and bench take it (hunt 79: exit 2)
        None,
        "--top-k",
        help="0 or -1 (vLLM's) disables it (int32 on the device).",
        kind=int,
        ge=-1,
        le=INT32_MAX,
    ),  # fmt: skip
    top_p: float = number(None, "--top-p", help="In (0, 1].", gt=0, le=1),
    seed: int = number(None, "--seed", help="Sampling seed.", **SEED),
    stop: list[str] = typer.Option(None, "--stop", help="Stop string (repeatable)."),
    ignore_eos: bool = typer.Option(
        False, "--ignore-eos", help="Run past the model's end-of-sequence tokens."
    ),
    min_tokens: int = number(
        0,
        "--min-tokens",
        help="vLLM's: no end-of-sequence or stop before this many tokens (0..--max-tokens).",
        kind=int,
        ge=0,
        le=INT32_MAX,
    ),
    include_stop_str_in_output: bool = typer.Option(
        False,
        "--include-stop-str-in-output",
        help="vLLM's: keep the matched --stop string at the end of the text.",
    ),
    presence_penalty: float = number(
        0.0, "--presence-penalty", help="In [-2, 2]; 0 is off.", ge=-2, le=2
    ),
    frequency_penalty: float = number(
        0.0, "--frequency-penalty", help="In [-2, 2]; 0 is off.", ge=-2, le=2
    ),
    repetition_penalty: float = number(None, "--repetition-penalty", help="> 0; 1 is off.", gt=0),
    logprobs: int = number(
        None,
        "--logprobs",
        help="Each token's raw log probability and the N most likely tokens' (0..20).",
        kind=int,
        ge=0,
        le=20,
    ),
    speculative_config: str = typer.Option(
        None,
        "--speculative-config",
        help='vLLM style: \'{"model": DIR, "num_speculative_tokens": 4}\' (both required; '
        '"method": "draft_model" or left out). The draft must be at most the model\'s size.',
    ),
    stages: int = number(
        None, "--stages", help="Pipeline stages (<= layers; default 1).", kind=int, ge=1
    ),
    max_context: int = number(
        None, "--max-context", help="Context length (default: the model's).", kind=int, ge=1
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    trace: Path = output_file(
        None, "--trace", help="Write the per-PE trace of the plan (wse view FILE; pipelined)."
    ),
    preset: str = preset_option("wse3", help="Wafer the tokens are predicted on: wse1, wse2, wse3"),
    spec_file: Path = SPEC_FILE,
) -> None:
    """Generate text from a model with the pipelined wafer engine (or speculative decoding)."""
    from wse_inference.engine import SamplingParams, validate_sampling
    from wse_inference.model_dir import check_config_file, check_tokenizer_file, load_model

    for name, text in [("--prompt", prompt), *(("--stop", s) for s in stop or ())]:
        prompts.check_utf8(name, text)  # hunt 60: the tokenizer's UnicodeEncodeError, after loading
    parsed_ids = prompts.parse_prompt_ids(prompt, prompt_ids)  # a typo: refused before any file
    prompts.check_stop(stop or [])  # the server's bounds on stop strings, before any file too
    check_config_file(model_dir)  # a huge or deep config.json is refused before JAX loads
    check_tokenizer_file(model_dir)  # an unreadable tokenizer.json: refused before the weights

    from wse_inference.model_dir import cli_settings

    settings = cli_settings(  # generation_config.json's where not given (hunt 69: ignored)
        model_dir, max_tokens=max_tokens, temperature=temperature,
        top_k=0 if top_k == -1 else top_k, top_p=top_p,
        repetition_penalty=repetition_penalty,
    )  # fmt: skip
    sampling = SamplingParams(
        **settings, seed=seed, stop=tuple(stop or ()), ignore_eos=ignore_eos, logprobs=logprobs,
        presence_penalty=presence_penalty, frequency_penalty=frequency_penalty,
        min_tokens=min_tokens, include_stop_str_in_output=include_stop_str_in_output,
    )  # fmt: skip
    # the settings alone, before the weights are read (the context: once config.json is read)
    alone = sampling.max_tokens + 1
    validate_sampling(sampling, vocab_size=1 << 30, max_context=alone, prompt_len=1)
    wafer = wafer_spec(preset, spec_file, "wse3")
    spec = None
    if speculative_config is not None:
        from wse_inference.speculative.config import parse_speculative_config

        spec = parse_speculative_config(speculative_config)
        spec.check_real_model()  # hunt 67: mock_accepted_tokens was read by nothing here
        spec.draft_dir()  # generate always runs a draft: say so before loading the target
    if trace is not None and spec is not None:
        fail("--trace draws the pipelined engine's plan; drop --speculative-config to use it")
    if stages is not None and spec is not None:  # hunt 65: any --stages, even 9, was ignored
        fail("--stages applies to the pipelined engine; drop it with --speculative-config")
    if any(not s for s in stop or ()):  # hunt 55: as vLLM, an empty stop matches at once
        fail("--stop strings must not be empty (an empty one would stop at once)")
    if stop and prompt is None:
        fail("--stop strings need --prompt text (a tokenizer); with --prompt-ids use neither")
    from wse_inference.model_dir import read_config, read_weights

    weights = read_weights(model_dir)  # NumPy, no JAX: a NaN weight is refused in ~1 s
    draft_weights = read_weights(spec.draft_dir()) if spec is not None else None  # the draft's
    from wse_inference.host_memory import check_host_memory

    cfg = read_config(model_dir)
    if spec is not None:  # hunt 77: a draft larger than the model ran, as `wse plan infer` refuses
        from wse_inference.speculative.config import check_draft_size

        check_draft_size(cfg, read_config(spec.draft_dir()), str(model_dir), spec.draft_dir())
    if max_context is not None and max_context > cfg.max_seq_len:  # hunt 56: cut silently
        fail(
            f"--max-context {max_context:,} is greater than the model's context of "
            f"{cfg.max_seq_len:,} tokens (its config.json); use at most "
            f"{cfg.max_seq_len:,}, or leave it unset"
        )
    context = max_context or cfg.max_seq_len
    # the prompt's ids (outside the vocabulary, or too many for the context with max_tokens):
    # refused before the model loads (JAX); hunt 62: a text prompt was counted as 1 token
    from wse_inference.model_dir import read_tokenizer

    early = read_tokenizer(model_dir, cfg.vocab_size) if parsed_ids is None else None
    n_prompt = len(prompts.prompt_ids(prompt, parsed_ids, early, cfg.vocab_size))
    validate_sampling(sampling, vocab_size=cfg.vocab_size, max_context=context, prompt_len=n_prompt)
    check_host_memory(
        cfg, rows=1 if spec is not None else stages or 1, max_context=context,
        what=f"generate with {stages or 1} stage(s) and context {context}",
        held_bytes=sum(a.nbytes for a in weights.values()),  # read above: not counted twice
    )  # fmt: skip
    from wse_models import sdpa_cpu

    sdpa_cpu.compile_early(cfg.hd, "float32", backward=False)  # load_model's dtype; meanwhile
    model = load_model(model_dir, tokenizer_required=prompt is not None, weights=weights)
    ids = prompts.prompt_ids(prompt, parsed_ids, model.tokenizer, model.config.vocab_size)
    context = max_context or model.config.max_seq_len
    validate_sampling(
        sampling, vocab_size=model.config.vocab_size, max_context=context, prompt_len=len(ids)
    )
    stream = _streamer(enabled=not as_json)
    if spec is None:
        result = _pipelined(model, ids, sampling, stages or 1, context, stream, wafer, trace)
    else:
        # --max-context as given (None: both models', the draft's may be smaller); the job's
        # part of it is what `_speculative` holds and plans
        result = _speculative(model, spec, draft_weights, ids, sampling, max_context, stream, wafer)
    _report(result, as_json)


def _speculative(model, spec, draft_weights, ids, sampling, context, stream, wafer):
    """One runtime, the serving engine's (`SpeculativeEngine`, one slot): its rounds give
    the logprobs (`SpeculativeDecoder.generate`'s fused loop does not) and the same tokens
    as the decoder for the same seed; its report is the decoder's prediction at its
    acceptance statistics."""
    from wse_inference.model_dir import load_model
    from wse_inference.speculative.engine import SpeculativeEngine

    gamma = spec.num_speculative_tokens
    # check_draft compares vocabularies; the draft's weights were read before JAX
    draft = load_model(spec.draft_dir(), tokenizer_required=False, weights=draft_weights)
    name = f"speculative, draft {draft.name!r}, gamma {gamma}"
    # the job's context, as `_pipelined` and `wse plan infer` place it (hunt 70: the whole
    # model's was planned, llama3-8b's token 2.17x at 1,280 tokens); past the draft's context
    # it stays as asked, for the decoder's refusal
    asked = context or min(model.config.max_seq_len, draft.config.max_seq_len)
    if asked <= draft.config.max_seq_len:
        context = min(asked, len(ids) + sampling.max_tokens)
    engine = SpeculativeEngine(
        model, draft, gamma=gamma, spec=wafer, max_slots=1, max_context=context
    )
    # priced on the placement `wse plan infer --draft` serves this job on (session 84: the
    # shortest round's layout was priced, the planner's policy weighs the whole request)
    from wse_systems.serving import Workload

    job = {"workload": Workload(prompt_tokens=len(ids), output_tokens=sampling.max_tokens)}
    result = _on_engine(engine, model, ids, sampling, stream, lambda st: st.slots[0].tracker,
                        priced=job)  # fmt: skip
    result["speculative"] = engine.stats.to_dict()
    return {**result, "engine": name}


def _save_traces(engine, report, path: Path, *, kv_tokens: int) -> list[str]:
    """One trace per wafer of the engine's plan (`wse_systems.trace`, the report's own
    phases): wafer 0 (the head) at `path`, wafer w at `<stem>.wafer<w>.npz`."""
    from wse_systems.trace import pipeline_traces

    traces = pipeline_traces(engine.config, engine.plan, kv_tokens=kv_tokens, report=report)
    names = [path] + [path.with_name(f"{path.stem}.wafer{w}.npz") for w in range(1, len(traces))]
    return [str(t.save(p)) for t, p in zip(traces, names, strict=True)]


def _predicted(report, config) -> dict:
    """The engine's `RunReport` (one token on the wafer) as the figures printed beside the
    measured ones, with the precision both engines price `config` at: its `param_dtype`, what
    they emulate (hunt 68: a float32 folder's 4-byte weights, and the layout, went unsaid)."""
    from wse_core.hw.dtypes import dtype_bytes, dtype_name

    plan, dtype = report.extra["plan"], config.param_dtype
    return {
        "wafer": report.wafer, "wafers": report.systems, "regions": len(plan["regions"]),
        "weights": dtype_name(dtype), "bytes_per_param": dtype_bytes(dtype),
        "layout": plan["layout"], "wafer_s_per_token": report.predicted_s,
        "tokens_per_s": report.units_per_s, "bound": report.bound,
        "measured_s_per_token": report.measured_wall_s,
        "calibration": report.calibration.describe(),
        "assumed": [e.to_dict() for e in report.assumed],  # what moves it (hunt 69)
    }  # fmt: skip


def _streamer(*, enabled: bool):
    """Prints what `text` adds to `shown`: the tracker's `visible_text()`, final text only
    (the server's `TextStream`: no half character, no start of a stop string), never
    taken back (hunt 70: U+FFFD and "KM" of stop "KMR" were printed)."""

    def stream(text: str, shown: str) -> str:
        if enabled and len(text) > len(shown):
            typer.echo(text[len(shown) :], nl=False)
        return text

    return stream


def _report(result: dict, as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(result, default=float))
        return
    typer.echo("")
    typer.echo(
        f"[{result['engine']}] {len(result['token_ids'])} tokens, finish "
        f"{result['finish_reason']}; TTFT {result['ttft_s'] * 1e3:.1f} ms, "
        f"{result['tokens_per_s']:.1f} tokens/s"
    )
    pred = result.get("predicted")
    if pred:
        measured = pred["measured_s_per_token"]
        here = f"{measured * 1e3:.3f} ms" if measured else "-"
        typer.echo(
            f"predicted on {pred['wafers']} {pred['wafer']} wafer(s), {pred['weights']} weights "
            f"and KV, {stages_of(pred)}{pred['layout']} regions: "
            f"{pred['wafer_s_per_token'] * 1e6:.1f} us/token "
            f"({pred['tokens_per_s']:,.0f} tokens/s, {pred['bound']}-bound); measured on "
            f"this emulator {here}/token"
        )
        if "ttft_s" in pred:  # the request's first token and whole (hunt jobs16 H3)
            typer.echo(ttft_line(pred["request"], result["ttft_s"]))
        else:
            typer.echo("the first token is not predicted on this engine (its prompt pass of "
                       "two models is priced by wse plan infer --draft)")  # fmt: skip
        if pred.get("assumed"):  # hunt 69: the assumptions that move it went unsaid
            from wse_core.cost.listing import Listed, compact

            typer.echo(compact(Listed.from_dict(d) for d in pred["assumed"]))
        if result.get("plan_predicted"):  # wse plan infer's token for the request (hunt 75)
            typer.echo(plan_line(result["plan_predicted"], pred["stages"]))
    if result.get("trace"):
        typer.echo(f"per-PE trace, one file per wafer: {', '.join(result['trace'])}")
    lps = result.get("logprobs")
    if lps:
        mean = sum(x["logprob"] for x in lps) / len(lps)
        typer.echo(
            f"mean logprob {mean:.3f} over {len(lps)} tokens (perplexity {math.exp(-mean):.2f})"
        )
    spec = result.get("speculative")
    if spec:
        per = ", ".join(f"{x:.2f}" for x in spec["position_acceptance"])
        kept = spec["emitted_per_round"]
        priced = ""  # hunt 70: a cut round was priced as if its discarded tokens were kept
        if kept != spec["mean_tokens_per_pass"]:
            priced = (
                f"; priced at the {kept:.2f} tokens kept per round ({spec['emitted']} in "
                f"{spec['rounds']}): a round cut at max_tokens or a stop runs whole"
            )
        typer.echo(
            f"acceptance rate {spec['acceptance_rate']:.3f}, mean tokens per target "
            f"pass {spec['mean_tokens_per_pass']:.2f}, per position [{per}]{priced}"
        )


def register(app: typer.Typer) -> None:
    """Add `generate` to the `wse infer` group."""
    app.command("generate")(generate)
