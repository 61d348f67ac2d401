"""The engine `wse infer serve` runs (`infer_serve`): the mock, or a model folder's pipelined
(or speculative) engine, its inputs checked before JAX is imported: a --speculative-config's
keys the engine would not read, a draft larger than the model (`wse plan infer`'s rule),
--max-model-len against the model's context (and a draft's),
the host memory its slots and context need (refused naming --max-num-seqs and
--max-model-len); and a speculative engine's start-up prediction (`speculative_prediction`,
on the placement the planner serves `served_job`'s request on)."""

from __future__ import annotations

from pathlib import Path

import typer

from wse_cli.errors import fail

MOCK = "mock"


def _speculation_for(spec, model_dir: str) -> None:
    """Refuse the --speculative-config keys the engine would not read (hunt 65: a draft
    `model` of the mock, even a missing folder, was never looked at)."""
    if spec is None:
        return
    if model_dir == MOCK and spec.model is not None:
        fail(
            "--speculative-config's model applies to a real model; the mock engine drafts by "
            "itself (give num_speculative_tokens / mock_accepted_tokens only)"
        )
    if model_dir != MOCK:
        spec.check_real_model()


def _mock_engine(spec, max_slots: int, max_context: int, step_delay_ms: float):
    """The mock engine; `spec` (a SpeculativeConfig or None) sets its drafted and accepted
    tokens per round."""
    from wse_inference.mock import MockEngine

    return MockEngine(
        max_slots=max_slots,
        max_context=max_context,
        spec_tokens=spec.num_speculative_tokens if spec else 0,
        spec_accepted=spec.accepted_tokens if spec else 0,
        step_delay_s=step_delay_ms / 1e3,
    )


def _served_context(cfg, spec, max_model_len: int | None) -> int:
    """--max-model-len checked against the model's context (and a draft's): the context served
    and the KV cache reserved; unset, the model's own (hunt 75: vLLM's option, missing)."""
    from wse_inference.model_dir import read_config

    top, whose = cfg.max_seq_len, "the model's"
    if spec is not None and (d := read_config(spec.draft_dir()).max_seq_len) < top:
        top, whose = d, "the draft's"
    if max_model_len is None:
        return top
    if max_model_len > top:
        fail(f"--max-model-len {max_model_len:,} is larger than {whose} context of {top:,} "
             f"tokens (its config's max_position_embeddings); give at most {top:,}")  # fmt: skip
    return max_model_len


def _real_engine(model_dir: str, spec, max_slots: int, wafer, max_model_len: int | None = None):
    import importlib.util

    if not Path(model_dir).is_dir():
        fail(f"--model-dir {model_dir!r} is not a folder (give a model folder, or 'mock')")
    if importlib.util.find_spec("wse_inference.load") is None:
        fail(
            "this install has no model loader (wse_inference.load.load_engine) yet; "
            "serve the mock engine with --model-dir mock"
        )
    from wse_core.host.memory import HostMemoryError
    from wse_inference.host_memory import check_host_memory
    from wse_inference.model_dir import read_config, read_weights

    if spec is not None:
        spec.draft_dir()  # a real model's speculation needs a draft: say so before loading
    # NumPy, no JAX: a deep config.json, a NaN weight or a damaged file, the target's or the
    # draft's, is refused in about a second
    weights = read_weights(model_dir)
    draft_weights = read_weights(spec.draft_dir()) if spec is not None else None
    cfg = read_config(model_dir)  # imports JAX (wse_models)
    if spec is not None:  # hunt 77: a draft larger than the model served, silently
        from wse_inference.speculative.config import check_draft_size

        check_draft_size(cfg, read_config(spec.draft_dir()), str(model_dir), spec.draft_dir())
    # the pipeline holds one slot per stage, at most one stage per layer: `load.pipeline_stages`,
    # not imported here (it imports the engine: 4 s before the inputs are checked)
    rows = max_slots if spec else max(1, min(max_slots, cfg.n_layers))
    context = _served_context(cfg, spec, max_model_len)
    try:
        check_host_memory(
            cfg,
            rows=rows,
            max_context=context,
            what=f"serving {rows} slots ({rows} KV-cache rows) of context {context}",
            # the target's weights, read above, are part of what it needs: not counted twice
            # (the draft's, also read, are not part of it and stay out of what is available)
            held_bytes=sum(a.nbytes for a in weights.values()),
        )
    except HostMemoryError as e:  # hunt 75: it named a context no option set
        fail(f"{e}; set them with --max-num-seqs (slots) and --max-model-len (context)")
    from wse_inference.load import load_engine, slot_cap_line  # JAX: once inputs are checked
    from wse_models import sdpa_cpu

    sdpa_cpu.compile_early(cfg.hd, "float32", backward=False)  # load_model's dtype; meanwhile
    engine = load_engine(
        model_dir,
        spec=wafer,
        speculative_config=spec,
        max_slots=max_slots,
        max_context=max_model_len,
        weights=weights,
        draft_weights=draft_weights,
    )
    if spec is None and (line := slot_cap_line(max_slots, cfg.n_layers)):
        typer.echo(line)  # hunt 68: 256 asked of a 32-layer model served 32, silently
    if spec is not None and max_model_len is None and engine.max_context < cfg.max_seq_len:
        # hunt 70: silently the draft's
        typer.echo(
            f"serving a context of {engine.max_context:,} tokens, the draft's (its config's "
            f"max_seq_len); the target's is {cfg.max_seq_len:,}: a draft of that context serves "
            "it whole"
        )
    return engine


def served_job(max_context: int):
    """The request a speculative engine's start-up line is priced for (a `wse_systems.
    serving.Workload`): `wse plan infer`'s own request when none is given (`default_workload`:
    1,024 prompt + 256 output tokens, or the same 4:1 split of a shorter context) within the
    served context, each slot holding `max_context` tokens of KV cache (the server reserves
    it whatever the request).

    Why this one: the server has no one request of its own (a completion's max_tokens
    defaults to 16, a chat's to the rest of the context, which depends on a prompt not yet
    sent; `wse infer bench --dataset-name random` sends vLLM's 1,024 + 128), and the rule is
    that a prediction prices the placement the planner serves for the same job, so the job
    is the planner's own: the line names the options with which `wse plan infer MODEL --draft
    DRAFT --gamma G` serves the same placement (session 85:
    a speculative engine said nothing at start, and its report, given no job, prices the
    shortest round's placement, not a served one)."""
    from wse_systems.planning.infer_inputs import workload_within
    from wse_systems.serving import Workload

    fit = workload_within(max_context)  # the served context
    return Workload(prompt_tokens=fit.prompt_tokens, output_tokens=fit.output_tokens,
                    context_len=max_context)  # fmt: skip


def speculative_prediction(engine) -> str:
    """The start-up line of a speculative engine: one emitted token of one user of
    `served_job`'s request at one token a round (no draft accepted yet: the acceptance the
    requests measure moves it, as `wse infer generate` prices a run's), on the placement
    `wse plan infer --draft` serves that job on (`SpeculativeEngine.report` given the job)."""
    job = served_job(engine.max_context)
    r = engine.report(kv_tokens=job.kv_tokens, workload=job)
    return (
        f"predicted on {r.wafer}: {r.predicted_s * 1e6:,.2f} us an emitted token of one "
        f"user ({1 / r.predicted_s:,.0f} tokens/s) at one token a round, before any draft is "
        f"accepted, for a request of {job.prompt_tokens:,} prompt + {job.output_tokens:,} "
        f"output tokens in a {job.held_tokens:,}-token context, on the placement `wse plan "
        f"infer --draft` serves it on (--alpha 0 --users 1 --prompt-tokens {job.prompt_tokens} "
        f"--output-tokens {job.output_tokens} --context-len {job.held_tokens})"
    )
