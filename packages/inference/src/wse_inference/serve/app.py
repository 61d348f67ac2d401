"""OpenAI-compatible HTTP serving (FastAPI + uvicorn) and the process shell around it.

Architecture (one process):

    HTTP clients ─► uvicorn / FastAPI (asyncio) ─┐                    ┌─► Engine
    gRPC clients ─► grpc.Server (thread pool) ───┼─► Scheduler ──────┤   (prefill / insert /
                                                 │   one engine thread│    generate / release)
    GET /metrics ◄─ ServeMetrics ◄───────────────┘   bounded queue    └─ continuous batching

Routes: POST /v1/completions and /v1/chat/completions (streaming SSE ending in
`data: [DONE]`, `usage`, `stream_options.include_usage`, Cerebras' `time_info`), GET /v1/models
(and /v1/models/{id}, 404 model_not_found for a name not served), /health (503 while
draining), /metrics (Prometheus), and vLLM's POST /tokenize ({prompt} or
{messages} -> {count, max_model_len, tokens}) and /detokenize ({tokens} -> {prompt}).
Errors use OpenAI's body {"error": {"message", "type", "param", "code"}}: 400 for a bad
request (malformed or too deeply nested JSON, a Content-Type other than JSON included), 404
for a model this server does not serve (model_not_found, as OpenAI and vLLM) or a URL it does
not have (the message lists the routes), 405 naming the methods a route takes, 413 for a body beyond
`ServeConfig.limits.max_body_bytes` (from Content-Length, or while it streams in), 429 with
Retry-After when the queue is full, 503 while shutting down. Bodies are read by
`wse_inference.serve.http_body`; parsing, validation (`wse_inference.serve.admission`, the
same for gRPC) and tokenization run in a worker thread, never on the event loop. A client
that disconnects cancels its request: its slot and KV cache are released before the next
engine step. The wire format lives in `wse_inference.serve.openai_request`, one request's
answer (whole or streamed, n choices) in `wse_inference.serve.openai_response`.

`Server(engine, ServeConfig(...))` wires everything; `.start()` runs it on background threads
(tests, demos) and `.close()` drains and stops it; `serve(engine, config)` runs in the
foreground until SIGTERM or SIGINT, then drains: no new connections, requests in flight run
to completion for up to `drain_s`, what is left ends with an error event, and the process
exits 0. Every port may be 0 (a free port); `.http_url` / `.grpc_target` give the bound ones.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import math
import signal
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException as StarletteHTTPException

from wse_inference.engine import Engine, SamplingParams
from wse_inference.serve import openai_request as oa
from wse_inference.serve.admission import (
    InvalidRequestError,
    ModelNotFoundError,
    QueueFullError,
    RequestLimits,
    ShuttingDownError,
)
from wse_inference.serve.generation import Generation
from wse_inference.serve.http_body import (
    ClientGone,
    protocol_for,
    read_json,
    refusal_response,
    run_off_loop,
)
from wse_inference.serve.metrics import CONTENT_TYPE, ServeMetrics
from wse_inference.serve.openai_response import error_response
from wse_inference.serve.scheduler import Scheduler

__all__ = ["ServeConfig", "Server", "build_app", "serve"]

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ServeConfig:
    host: str = "127.0.0.1"
    port: int = 8000  # 0: a free port
    grpc_port: int | None = None  # None: no gRPC server; 0: a free port
    max_queued: int = 64
    drain_s: float = 10.0  # grace for requests in flight at shutdown
    model_names: tuple[str, ...] = ()  # names clients may ask for; default engine.model_name
    warmup: bool = True  # `run` sends one tiny request through the engine before serving
    chat_template: str | None = None  # Jinja; overrides the tokenizer's (vLLM's --chat-template)
    limits: RequestLimits = RequestLimits()  # body size, JSON depth, stop strings (both APIs)


def build_app(
    scheduler: Scheduler,
    metrics: ServeMetrics,
    *,
    model_names: Sequence[str],
    chat_template: str | None = None,
    limits: RequestLimits = RequestLimits(),
) -> FastAPI:
    """The FastAPI app over a started scheduler; see the module docstring."""
    app = FastAPI(title="wse-stack inference", docs_url=None, redoc_url=None)
    app.router.redirect_slashes = (
        False  # /v1/completions/ is a JSON 404 naming the route, not a 307
    )
    started = int(time.time())
    _add_error_handlers(app)
    _add_generation_routes(app, scheduler, metrics, model_names, chat_template, limits)
    _add_tokenizer_routes(app, scheduler.engine, metrics, model_names, chat_template, limits)
    _add_status_routes(app, scheduler, metrics, model_names, started)
    return app


def _add_error_handlers(app: FastAPI) -> None:
    """HTTP errors (404, 405...) and unhandled exceptions in OpenAI's error body."""

    @app.exception_handler(StarletteHTTPException)
    async def _httperror_response(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        where = f"{request.method} {request.url.path[:200]}"
        headers = dict(exc.headers or {})
        if exc.status_code == 405 and "Allow" in headers:  # hunt 56: "Method Not Allowed"
            allowed = sorted(m.strip() for m in headers["Allow"].split(","))
            message = f"{where} is not allowed; this route takes {' or '.join(allowed)}."
        elif exc.status_code == 404:  # OpenAI's "Invalid URL (...)", with the routes there are
            routes = sorted(
                f"{'/'.join(sorted(r.methods - {'HEAD'}))} {r.path_format}"  # type: ignore[attr-defined]
                for r in app.routes
                if getattr(r, "methods", None) and getattr(r, "include_in_schema", True)
            )
            message = f"Invalid URL ({where}); this server serves {', '.join(routes)}."
            path = request.url.path.rstrip("/")
            if path != request.url.path and any(r.endswith(" " + path) for r in routes):
                message = f"Invalid URL ({where}); did you mean {path}?"
        else:
            message = str(exc.detail)
        return error_response(
            exc.status_code, message, type_="invalid_request_error", headers=headers or None
        )

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error")
        return error_response(500, f"internal error: {type(exc).__name__}", type_="server_error")


def _add_generation_routes(
    app: FastAPI, scheduler: Scheduler, metrics: ServeMetrics, model_names: Sequence[str],
    chat_template: str | None, limits: RequestLimits,
) -> None:  # fmt: skip
    """POST /v1/completions and /v1/chat/completions, whole or streamed."""
    engine = scheduler.engine
    parse = functools.partial(
        oa.parse_request,
        tokenizer=engine.tokenizer,
        model_names=model_names,
        max_context=engine.max_context,
        chat_template=chat_template,
        limits=limits,
    )

    async def generate(request: Request, kind: str) -> Response:
        try:
            body = await read_json(request, limits)
            p = await run_off_loop(functools.partial(parse, body, kind=kind))
            gen = Generation(scheduler, p)
        except (InvalidRequestError, QueueFullError, ShuttingDownError, ClientGone) as e:
            return refusal_response(e, metrics)
        if p.stream:
            # The background task also runs when the client left before the stream started.
            return StreamingResponse(
                gen.stream(),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache"},
                background=BackgroundTask(gen.cancel),
            )
        return await gen.whole(request)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await generate(request, "completion")

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await generate(request, "chat")


def _add_tokenizer_routes(
    app: FastAPI, engine: Engine, metrics: ServeMetrics, model_names: Sequence[str],
    chat_template: str | None, limits: RequestLimits,
) -> None:  # fmt: skip
    """vLLM's utilities: POST /tokenize and /detokenize."""

    def utility(answer: Callable[[Any], dict]) -> Callable:
        """A route: a JSON body in, `answer(body)` (off the event loop) out; malformed or
        refused, a 400 (413 when too large)."""

        async def route(request: Request) -> Response:
            try:
                body = await read_json(request, limits)
                return JSONResponse(await run_off_loop(answer, body))
            except (InvalidRequestError, ClientGone) as e:
                return refusal_response(e, metrics)

        return route

    known = {"tokenizer": engine.tokenizer, "model_names": model_names}
    tokenize = functools.partial(
        oa.tokenize_request, **known, chat_template=chat_template, max_context=engine.max_context
    )
    app.post("/tokenize")(utility(tokenize))
    detokenize = functools.partial(oa.detokenize_request, **known, vocab_size=engine.vocab_size)
    app.post("/detokenize")(utility(detokenize))


def _add_status_routes(
    app: FastAPI, scheduler: Scheduler, metrics: ServeMetrics, model_names: Sequence[str],
    started: int,
) -> None:  # fmt: skip
    """GET /v1/models, /health (503 while draining) and /metrics (Prometheus)."""
    engine = scheduler.engine

    @app.api_route("/v1/models", methods=["GET", "HEAD"])  # HEAD: as GET, no body
    async def models() -> dict:
        data = [
            {
                "id": n,
                "object": "model",
                "created": started,
                "owned_by": "wse-stack",
                "max_model_len": engine.max_context,
            }
            for n in model_names
        ]
        return {"object": "list", "data": data}

    @app.api_route("/v1/models/{model:path}", methods=["GET", "HEAD"])  # HEAD: as GET, no body
    async def model(model: str) -> Response:  # OpenAI's retrieve: one model, or 404
        if model not in model_names:
            err = ModelNotFoundError(model, model_names)
            return error_response(
                404, str(err), type_="invalid_request_error", param="model", code=err.code
            )
        return JSONResponse(
            {
                "id": model,
                "object": "model",
                "created": started,
                "owned_by": "wse-stack",
                "max_model_len": engine.max_context,
            }  # fmt: skip
        )

    @app.api_route("/health", methods=["GET", "HEAD"])  # HEAD: as GET, no body
    async def health() -> Response:
        s = scheduler.stats()
        body = {
            "status": "draining" if s.draining else "ok",
            "running": s.running,
            "waiting": s.waiting,
            "max_slots": s.max_slots,
        }
        return JSONResponse(body, status_code=503 if s.draining else 200)

    @app.api_route("/metrics", methods=["GET", "HEAD"])  # HEAD: as GET, no body
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE)


def _freeze_startup_objects() -> None:
    """Move what loading and compiling made (JAX, the model, the modules: ~200k objects) out
    of the garbage collector's reach (`gc.freeze`), so a full collection, which holds the GIL
    and so the event loop, walks only what requests make: under a burst of hostile JSON
    bodies full collections took 0.6-1.1 s here before, 10-80 ms after."""
    import gc

    gc.collect()
    gc.freeze()


class _DrainingUvicorn(uvicorn.Server):
    """uvicorn that starts the scheduler's drain as soon as a signal arrives."""

    def __init__(self, config: uvicorn.Config, on_signal: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_signal = on_signal

    def handle_exit(self, sig: int, frame: Any) -> None:
        self._on_signal()
        super().handle_exit(sig, frame)


class Server:
    """Scheduler + HTTP (+ gRPC) over one engine; see the module docstring."""

    def __init__(self, engine: Engine, config: ServeConfig = ServeConfig()) -> None:
        self.engine = engine
        self.config = config
        self.model_names = config.model_names or (engine.model_name,)
        self.metrics = ServeMetrics()
        self.scheduler = Scheduler(
            engine, max_queued=config.max_queued, observer=self.metrics, limits=config.limits
        )
        self.metrics.bind(self.scheduler.stats)
        self.app = build_app(
            self.scheduler,
            self.metrics,
            model_names=self.model_names,
            chat_template=config.chat_template,
            limits=config.limits,
        )
        self._sock = socket.create_server((config.host, config.port), backlog=2048)
        self.http_url = f"http://{config.host}:{self._sock.getsockname()[1]}"
        self.grpc_server: Any = None
        self.grpc_target: str | None = None
        if config.grpc_port is not None:
            from wse_inference.serve.grpc_server import build_grpc_server

            self.grpc_server, port = build_grpc_server(
                self.scheduler,
                host=config.host,
                port=config.grpc_port,
                model_names=self.model_names,
                limits=config.limits,
            )
            self.grpc_target = f"{config.host}:{port}"
        self._uvicorn = _DrainingUvicorn(
            uvicorn.Config(
                self.app,
                log_level="warning",
                access_log=False,
                lifespan="off",
                http=protocol_for(config.limits),  # h11, OpenAI's JSON body on a parse error
                h11_max_incomplete_event_size=config.limits.max_head_bytes,
                ws="none",
                timeout_graceful_shutdown=math.ceil(config.drain_s + 2),
            ),
            self.begin_drain,
        )
        self._thread: threading.Thread | None = None
        self._drain_lock = threading.Lock()
        self._grpc_stopped: threading.Event | None = None
        self._drain_deadline = math.inf

    def _start_engine_and_grpc(self) -> None:
        self.scheduler.start()
        if self.grpc_server is not None:
            self.grpc_server.start()

    def begin_drain(self) -> None:
        """Refuse new work; requests in flight get `drain_s` to finish (idempotent)."""
        with self._drain_lock:
            if self._grpc_stopped is not None:
                return
            self.scheduler.drain(self.config.drain_s)
            self._drain_deadline = time.monotonic() + self.config.drain_s
            if self.grpc_server is not None:
                # a second past the scheduler's deadline, so an aborted stream is told why
                self._grpc_stopped = self.grpc_server.stop(self.config.drain_s + 1)
            else:
                self._grpc_stopped = threading.Event()
                self._grpc_stopped.set()

    def _finish(self) -> None:
        self.begin_drain()
        # HTTP is done (uvicorn waited for its connections); gRPC streams may still run:
        # they get the rest of `drain_s`, as HTTP's did, before what is left is aborted.
        while not self.scheduler.idle and time.monotonic() < self._drain_deadline:
            time.sleep(0.02)
        self.scheduler.stop(timeout_s=self.config.drain_s + 5)
        assert self._grpc_stopped is not None
        self._grpc_stopped.wait(self.config.drain_s + 5)
        with contextlib.suppress(OSError):
            self._sock.close()

    def start(self) -> Server:
        """Run on background threads; returns once the HTTP socket is listening."""
        _freeze_startup_objects()
        self._start_engine_and_grpc()
        self._thread = threading.Thread(
            target=self._uvicorn.run, kwargs={"sockets": [self._sock]}, name="wse-http", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._uvicorn.started and time.monotonic() < deadline:
            time.sleep(0.01)
        return self

    def close(self) -> None:
        """Drain (requests in flight finish, or end with an error after `drain_s`) and stop."""
        self.begin_drain()
        self._uvicorn.should_exit = True
        if self._thread is not None:
            self._thread.join(self.config.drain_s + 5)
        self._finish()

    def warmup(self, timeout_s: float = 600.0) -> float:
        """Run one tiny greedy request through the engine (compiles it); its wall seconds."""
        t0 = time.monotonic()
        done = threading.Event()
        max_tokens = max(1, min(2, self.engine.max_context - 1))
        self.scheduler.submit(
            prompt_ids=[0],
            sampling=SamplingParams(max_tokens=max_tokens, temperature=0.0),
            sink=lambda ev: done.set() if ev.finish_reason is not None else None,
        )
        if not done.wait(timeout_s):
            raise TimeoutError(f"the engine did not answer a warm-up request in {timeout_s} s")
        return time.monotonic() - t0

    def run(self, *, on_ready: Callable[[], None] | None = None) -> None:
        """Serve in the foreground until SIGTERM / SIGINT, then drain and return.

        The engine is warmed up (compiled) first when `config.warmup`; then `on_ready()`.
        """
        # Our handler covers the warm-up; uvicorn's takes over while it runs and re-raises the
        # signal after its shutdown, which ours then absorbs so the exit code stays 0.
        signalled = threading.Event()
        signals = (signal.SIGTERM, signal.SIGINT)
        previous = {sig: signal.signal(sig, lambda *_: signalled.set()) for sig in signals}
        try:
            self._start_engine_and_grpc()
            if self.config.warmup:
                self.warmup()
            _freeze_startup_objects()
            if on_ready is not None:
                on_ready()
            if not signalled.is_set():
                self._uvicorn.run(sockets=[self._sock])
        finally:
            self._finish()
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def serve(engine: Engine, config: ServeConfig, *, announce: Callable[[str], None] = print) -> None:
    """Serve `engine` in the foreground; `announce` gets one line once it is ready."""
    server = Server(engine, config)
    line = f"serving {', '.join(server.model_names)} on {server.http_url}"
    if server.grpc_target is not None:
        line += f" and gRPC {server.grpc_target}"
    server.run(on_ready=lambda: announce(line))
