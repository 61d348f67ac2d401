"""`wse infer serve`: an OpenAI-compatible HTTP + gRPC server (`wse infer bench`: infer_bench).

`serve --model-dir DIR` loads the pipelined engine with
`wse_inference.load.load_engine(DIR, spec=..., speculative_config=..., max_slots=...)` (its
tokens predicted on `--preset` / `--spec`, default wse3), the `--speculative-config` read by
`wse_inference.speculative.config.parse_speculative_config` (as `wse infer generate` reads it);
`--model-dir mock` serves `MockEngine` (next token = last + 1, byte tokenizer) for demos and
tests. On a CPU the attention's numba kernels compile in a helper process while the weights
load (`wse_models.sdpa_cpu.compile_early`), as `wse infer generate`'s do. The server runs
until SIGTERM / SIGINT, then drains (see `wse_inference.serve.app`). A `--speculative-config`
naming a draft `model` is refused for the mock (it drafts by itself), `mock_accepted_tokens`
for a real model (its drafts are its draft model's). The pipelined engine holds one slot per
stage and at most one stage per layer: a --max-num-seqs past a model's layers is served with
fewer slots, said in one line at start (`load.slot_cap_line`). --chat-template-content-format
is vLLM's (`chat_template.CONTENT_FORMATS`); the template is rendered on a sample chat at start
(`chat_template.template_problem`). --allowed-origins, --allowed-methods, --allowed-headers
(JSON lists, default ["*"]) and --allow-credentials are vLLM's CORS options
(`wse_inference.serve.cors`); a list that is not one is refused at parsing. --api-key (repeated
for several keys; else $WSE_API_KEY, this stack's spelling of vLLM's VLLM_API_KEY) is vLLM's:
every request to /v1/*, /tokenize, /detokenize and gRPC's Generate must carry one as a Bearer
token (`wse_inference.serve.api_keys`); a key a client could not send (empty, a space, not
ASCII) is refused at parsing, never echoed. --served-model-name takes several names, as vLLM's
(nargs="+": the names after it are the command's arguments, `_model_names`): requests may name
any, /v1/models lists each, answers and /metrics name the first.
"""

from __future__ import annotations

from pathlib import Path

import typer
from wse_systems.transformer import MAX_SIZES

from wse_cli.commands.infer_serve_engine import (  # noqa: F401 (tests use them from here)
    MOCK,
    _mock_engine,
    _real_engine,
    _speculation_for,
)
from wse_cli.errors import UserInputError, fail
from wse_cli.options import PORT, number
from wse_cli.wafer_choice import SPEC_FILE, preset_option, wafer_spec

SERVE_HELP = (
    "Serve a model over an OpenAI-compatible HTTP API (and gRPC) until SIGTERM.\n\n"
    "Routes: POST /v1/completions and /v1/chat/completions (SSE with stream=true), GET "
    "/v1/models, /health, /metrics (vLLM's metrics, named wse_* where vLLM's are vllm:*, "
    "with a draft model vLLM's wse_spec_decode_num_drafts_total, _num_draft_tokens_total, "
    "_num_accepted_tokens_total and _num_accepted_tokens_per_pos_total{position}; "
    "the warm-up's requests not counted, by the server or the engine; not served: "
    "kv_cache_usage_perc, "
    "num_preemptions_total, prefix_cache_queries_total, prefix_cache_hits_total, "
    "request_max_num_generation_tokens, "
    "time_per_prefill_token_request_seconds, cache_config_info, lora_requests_info and the "
    "deprecated time_per_output_token_seconds), /version; POST /tokenize and /detokenize "
    "(vLLM's). "
    "Chat prompts "
    "use --chat-template, else the model's chat template (chat_template.jinja or "
    "tokenizer_config.json beside tokenizer.json), else one "
    '"role: content" line per message followed by "assistant:".'
)

MAX_NAME_CHARS = 256  # hunt 60: 100,000 characters were served (vLLM and OpenAI ids are short)


def _served_name(value: str | None) -> str | None:
    """--served-model-name, checked at parsing: not empty, not padded, printable, at most
    MAX_NAME_CHARS characters."""
    if value is None:
        return None
    from wse_core.errors import shown

    if value == "":  # was served under the engine's name, silently
        raise UserInputError(
            "--served-model-name must not be empty; leave it out to use the model's own name"
        )
    if len(value) > MAX_NAME_CHARS:
        raise UserInputError(
            f"--served-model-name {shown(value)} is longer than {MAX_NAME_CHARS} characters; "
            "give a short model name"
        )
    if value != value.strip():
        raise UserInputError(f"--served-model-name {value!r} has leading or trailing blanks")
    if not value.isprintable():  # control characters; a byte that is not UTF-8 arrives
        # surrogate-escaped: /v1/models answered 500
        raise UserInputError(f"--served-model-name {value!r} must be printable UTF-8 text")
    return value


def _served_names(values: list[str] | None) -> tuple[str, ...]:
    """--served-model-name's names (the option repeated), each checked (`_served_name`)."""
    return tuple(_served_name(v) for v in values or ())


def _model_names(given: tuple[str, ...] | None, more: list[str] | None) -> tuple[str, ...]:
    """vLLM's `--served-model-name a b` (nargs="+"): the names after the option come as the
    command's arguments (`more`), checked as the option's; each once, in order (the first is
    the one reported). An argument without the option is one line."""
    from wse_core.errors import shown

    if more and not given:
        fail(f"unexpected argument {shown(more[0])}: serve takes options, and more "
             "--served-model-name names after it, e.g. --served-model-name a b")  # fmt: skip
    return tuple(dict.fromkeys([*(given or ()), *(_served_name(v) for v in more or ())]))


def _chat_template(value: str | None) -> str | None:
    """--chat-template: a Jinja file, or the template itself (as vLLM takes it); checked now."""
    if value is None:
        return None
    if not value.strip():  # hunt 58: '' served the default template, silently
        fail("--chat-template must not be empty: give a Jinja file or template, or leave it out")
    import jinja2
    from wse_core.host.readers import read_text
    from wse_inference.serve.chat_template import compile_chat_template

    path = Path(value)
    if path.is_file():
        try:
            value = read_text(path, "--chat-template")
        except (OSError, UnicodeDecodeError) as e:
            fail(f"--chat-template: cannot read {str(path)!r}: {e}")
        if "{{" not in value and "{%" not in value:  # hunt 58: an empty file was served
            fail(f"--chat-template file {str(path)!r} holds no Jinja ({{{{ }}}} or {{% %}}): "
                 "every chat would render the same text, its messages unread")  # fmt: skip
    elif "{{" not in value and "{%" not in value:
        fail(f"--chat-template: {value!r} is neither a file nor a Jinja template")
    try:
        compile_chat_template(value)
    except jinja2.TemplateSyntaxError as e:
        fail(f"--chat-template: Jinja syntax error on line {e.lineno}: {e.message}")
    return value


def _content_format(value: str) -> str:
    """--chat-template-content-format: one of vLLM's (auto, string, openai)."""
    from wse_core.errors import shown
    from wse_inference.serve.chat_template import CONTENT_FORMATS

    if value not in CONTENT_FORMATS:
        raise UserInputError(
            f"--chat-template-content-format must be one of {', '.join(CONTENT_FORMATS)}, "
            f"got {shown(value)}"
        )
    return value


def _check_chat_template(engine, template: str | None, option: str | None, form: str) -> None:
    """The template the server will render, rendered on a sample chat at start (hunt 62):
    one line naming its source when it cannot be, or renders it without its message (hunt
    68; `chat_template.template_problem`). A content format given that is not the one
    detected is said, as vLLM warns of it."""
    from wse_inference.serve.chat_template import detect_content_format, template_problem

    tokenizer = getattr(engine, "tokenizer", None)
    if tokenizer is None:
        return
    if why := template_problem(tokenizer, template, option, form):
        fail(why)
    jinja = template or getattr(tokenizer, "chat_template", None)
    found = detect_content_format(jinja) if form != "auto" and isinstance(jinja, str) else form
    if found != form:
        typer.echo(
            f"note: --chat-template-content-format {form} differs from the format detected in "
            f"the chat template ({found!r}); leave the option out to use that one"
        )


def _prediction(engine: object) -> str | None:
    """The line that says what `--preset` / `--spec` predict (hunt 75: nothing showed it): a
    pipelined engine's decode token on its plan (`PipelineEngine.report`, as `wse infer
    generate` prints it); a speculative engine's emitted token before any draft is accepted,
    on the placement the planner serves its nominal request on
    (`infer_serve_engine.speculative_prediction`); None for the mock."""
    from wse_inference.pipeline.engine import PipelineEngine
    from wse_inference.speculative.engine import SpeculativeEngine

    if isinstance(engine, SpeculativeEngine):
        from wse_cli.commands.infer_serve_engine import speculative_prediction

        return speculative_prediction(engine)
    if not isinstance(engine, PipelineEngine):
        return None
    kv = engine.plan.context_len // 2  # price_token's own default, said
    r = engine.report(kv_tokens=kv)
    return (
        f"predicted on {r.wafer}: {r.predicted_s * 1e6:,.2f} us a decode token of one user "
        f"with {kv:,} tokens cached ({1 / r.predicted_s:,.0f} tokens/s; `wse plan infer` "
        "prices whole requests and loads)"
    )


def _json_list(option: str, example: str):
    """The callback of a CORS list option: its JSON list read now (`cors.json_list`), one
    line and exit 2 when it is not one."""

    def read(value: str) -> tuple[str, ...]:
        from wse_inference.serve.cors import json_list

        return json_list(value, option, example)

    return read


def _cors_list(option: str, what: str, example: str):
    return typer.Option(
        '["*"]', option, callback=_json_list(option, example),
        help=f"{what} allowed to call the server from a browser (CORS): a JSON list, as vLLM's.",
    )  # fmt: skip


def _api_keys(values: list[str] | None) -> tuple[str, ...]:
    """--api-key's keys (or $WSE_API_KEY's), each one a client can send in a header
    (`api_keys.check_key`: an empty one, which would serve an open endpoint, is refused);
    never shown in a refusal."""
    from wse_inference.serve.api_keys import check_key

    return tuple(check_key(k, "--api-key (or WSE_API_KEY)") for k in values or ())


def _check_ports(host: str, port: int, grpc_port: int | None) -> None:
    """Refuse ports that are the same or already taken, before any engine is loaded."""
    from wse_inference.serve.addresses import listening_socket

    if grpc_port is not None and grpc_port == port and port != 0:
        fail(f"--port and --grpc-port are both {port}; give two different ports")
    for name, p in (("--port", port), ("--grpc-port", grpc_port)):
        if not p:  # None (off) or 0 (the system picks a free one)
            continue
        try:
            with listening_socket(host, p):  # IPv6 hosts too (hunt 75)
                pass
        except OSError as e:
            fail(f"{name} {p} on {host} cannot be bound: {e.strerror or e}")


def serve(
    model_dir: str = typer.Option(
        ..., "--model-dir", help="Model folder, or 'mock' for the mock engine."
    ),
    speculative_config: str = typer.Option(
        None,
        "--speculative-config",
        help='Speculative decoding: JSON (e.g. \'{"model": DIR, "num_speculative_tokens": 4}\', '
        'both required, the draft at most the model\'s size; "method": "draft_model" or '
        "left out; --model-dir mock: num_speculative_tokens, default 4, and "
        "mock_accepted_tokens) or a file.",
    ),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind."),
    port: int = number(8000, "--port", **PORT, help="HTTP port (0: a free port)."),
    grpc_port: int = number(None, "--grpc-port", **PORT, help="gRPC port (0: free; unset: off)."),
    max_num_seqs: int = number(
        8,
        "--max-num-seqs",
        kind=int,
        ge=1,
        limit="serve_slots",
        help="Decode slots (sequences in flight).",
    ),
    max_model_len: int = number(
        None,
        "--max-model-len",
        kind=int,
        ge=2,
        le=MAX_SIZES["max_seq_len"],
        help="Context served, prompt and output, in tokens (vLLM's); the KV cache reserved for "
        "it. Default: the model's (the mock's --mock-max-context).",
    ),
    max_queued: int = number(
        64,
        "--max-queued",
        kind=int,
        ge=0,
        le=1_000_000,
        help="Waiting requests beyond which the server says 429.",
    ),
    drain_s: float = number(
        10.0, "--drain-s", ge=0, le=86_400, unit="s", help="Grace for requests at shutdown."
    ),
    warmup: bool = typer.Option(
        True,
        "--warmup/--no-warmup",
        help="Compile every program a request runs (decode, admission under load, penalties, "
        "logprobs) with warm-up requests before serving.",
    ),
    served_model_name: list[str] = typer.Option(
        None,
        "--served-model-name",
        callback=_served_names,
        show_default=False,
        metavar="NAME",
        help="Model name clients use (default: engine's; at most "
        f"{MAX_NAME_CHARS} characters). As vLLM's, it takes several (--served-model-name a b, "
        "or the option repeated): requests may name any, and /v1/models lists each; answers "
        "and /metrics name the first.",
    ),
    more_names: list[str] = typer.Argument(
        None,
        show_default=False,
        metavar="[NAME]...",
        help="More --served-model-name names, after it (vLLM's --served-model-name a b).",
    ),
    chat_template: str = typer.Option(
        None, "--chat-template", help="Jinja chat template (a file, or the template itself)."
    ),
    chat_template_content_format: str = typer.Option(
        "auto",
        "--chat-template-content-format",
        callback=_content_format,
        help="Message content as the template reads it: auto (detected, as vLLM does), "
        'string, or openai (a list of {"type": "text", "text": ...} parts).',
    ),
    mock_step_delay_ms: float = number(
        5.0,
        "--mock-step-delay-ms",
        help="Mock engine: time per decode step.",
        ge=0,
        le=60_000,
        unit="ms",
    ),
    mock_max_context: int = number(
        2048,
        "--mock-max-context",
        help="Mock engine: context window in tokens.",
        kind=int,
        ge=2,
        le=MAX_SIZES["max_seq_len"],  # hunt 56: 10^15 was served, as no model's context is
    ),
    allowed_origins: str = _cors_list("--allowed-origins", "Origins", '["http://localhost:3000"]'),
    allowed_methods: str = _cors_list("--allowed-methods", "HTTP methods", '["GET", "POST"]'),
    allowed_headers: str = _cors_list("--allowed-headers", "Request headers", '["Content-Type"]'),
    allow_credentials: bool = typer.Option(
        False, "--allow-credentials", help="Allow credentials (cookies) in CORS requests."
    ),
    api_key: list[str] = typer.Option(
        None,
        "--api-key",
        envvar="WSE_API_KEY",
        show_default=False,
        callback=_api_keys,
        metavar="KEY",
        help="Require 'Authorization: Bearer KEY' on /v1/*, /tokenize and /detokenize (401 "
        "otherwise; /health, /metrics, /version stay open) and gRPC's Generate "
        "(UNAUTHENTICATED), as vLLM's --api-key; repeat it for several keys. Default: "
        "$WSE_API_KEY (vLLM's VLLM_API_KEY), several separated by spaces. Never printed.",
    ),
    preset: str = preset_option(
        "wse3", help="Wafer the tokens are predicted on (said at start): wse1, wse2, wse3"
    ),
    spec_file: Path = SPEC_FILE,
) -> None:
    """Serve a model over an OpenAI-compatible HTTP API (and gRPC) until SIGTERM."""
    if not host.strip():  # uvicorn reads "" as every interface
        fail("--host must be an address, e.g. 127.0.0.1 (0.0.0.0: every interface); got ''")
    _check_ports(host, port, grpc_port)
    wafer = wafer_spec(preset, spec_file, "wse3")
    spec = None
    if speculative_config is not None:  # '' is given, not left out: the parser refuses it
        from wse_inference.speculative.config import parse_speculative_config

        spec = parse_speculative_config(speculative_config)
        _speculation_for(spec, model_dir)
    template = _chat_template(chat_template)
    if not model_dir.strip():  # hunt 61: '' was read as '.', the current folder
        fail(f"--model-dir is empty ({model_dir!r}); give a model folder (or {MOCK!r})")
    if model_dir == MOCK:
        context = mock_max_context if max_model_len is None else max_model_len
        engine = _mock_engine(spec, max_num_seqs, context, mock_step_delay_ms)
    else:
        engine = _real_engine(model_dir, spec, max_num_seqs, wafer, max_model_len)
    _check_chat_template(engine, template, chat_template, chat_template_content_format)
    # the front end (FastAPI, uvicorn, gRPC) is imported once every input has been checked
    from wse_inference.serve.app import ServeConfig
    from wse_inference.serve.app import serve as run_server
    from wse_inference.serve.cors import CorsConfig

    names = _model_names(served_model_name, more_names)
    config = ServeConfig(
        host=host,
        port=port,
        grpc_port=grpc_port,
        max_queued=max_queued,
        drain_s=drain_s,
        model_names=names,
        warmup=warmup,
        chat_template=template,
        chat_template_content_format=chat_template_content_format,
        cors=CorsConfig(
            allowed_origins=allowed_origins,  # tuples: read by their callbacks
            allowed_methods=allowed_methods,
            allowed_headers=allowed_headers,
            allow_credentials=allow_credentials,
        ),
        api_keys=tuple(api_key or ()),  # checked by its callback
    )
    predicted = _prediction(engine)

    def announce(line: str) -> None:  # the address first: scripts read it from line one
        typer.echo(line, err=False)
        if predicted:
            typer.echo(predicted, err=False)

    try:
        run_server(engine, config, announce=announce)
    except OSError as e:
        fail(f"cannot serve on {host}:{port}: {e.strerror or e}")


def register(app: typer.Typer) -> None:
    """Add `serve` and `bench` (`infer_bench`) to the `wse infer` group."""
    from wse_cli.commands import infer_bench

    app.command("serve", help=SERVE_HELP)(serve)
    infer_bench.register(app)
