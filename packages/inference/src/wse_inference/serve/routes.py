"""The FastAPI app of the OpenAI-compatible server: its routes and its error bodies.

Routes: POST /v1/completions and /v1/chat/completions (streaming SSE ending in
`data: [DONE]`, `usage`, `stream_options.include_usage`, Cerebras' `time_info`), GET /v1/models
(and /v1/models/{id}, 404 (reason model_not_found) for a name not served; each entry vLLM's
ModelCard, `_model_card`: root the engine's model, parent null, one permission, max_model_len,
and the model's vocab_size, which vLLM does not list), /health (503 while
draining), /metrics (Prometheus: vLLM's metrics this server measures, named `wse_*` where
vLLM's are `vllm:*`; `metrics.NOT_SERVED` lists those it does not),
vLLM's GET /version ({version}: the stack's) and POST /tokenize ({prompt} or
{messages} -> {count, max_model_len, tokens}) and /detokenize ({tokens} -> {prompt}).
The response id is vLLM's `chatcmpl-<id>` / `cmpl-<id>`, the id the X-Request-Id header
names, else the body's request_id, else a fresh uuid (vLLM's `_base_request_id`; either one
past `RequestLimits.max_request_id_chars` = 256 characters is a 400 naming it); a request's
X-Request-Id comes back as a response header (vLLM's XRequestIdMiddleware).
Errors use vLLM's body {"error": {"message", "type", "param", "code"}} (`code` the HTTP
status, `type` vLLM's name for it: "BadRequestError"...), with this server's `reason`
(`openai_response.error_body`): 400 for a bad
request (malformed or too deeply nested JSON, a Content-Type other than JSON included), 404
for a request naming a model this server does not serve (/tokenize and /detokenize too) and
GET /v1/models/{id} of one (model_not_found, as OpenAI and vLLM answer; hunt 77: a 400), or a
URL it does not have (the message lists the routes), 405 naming the methods a route takes,
413 for a body beyond `ServeConfig.limits.max_body_bytes` (from Content-Length, or while it
streams in), 429 with Retry-After when the queue is full, 503 while shutting down. Bodies are
read by `wse_inference.serve.http_body`; parsing, validation (`wse_inference.serve.admission`,
the same for gRPC) and tokenization run in a worker thread, never on the event loop. A client
that disconnects cancels its request: its slot and KV cache are released before the next
engine step. The wire format lives in `wse_inference.serve.openai_request`, one request's
answer (whole or streamed, n choices) in `wse_inference.serve.openai_response`.

A response to a request from an allowed Origin carries the CORS headers of `ServeConfig.cors`
(vLLM's `--allowed-origins` and the rest, `wse_inference.serve.cors`), errors included, and a
CORS preflight (OPTIONS) is answered by Starlette's CORSMiddleware, not a 405; an unhandled
error's 500 is sent by Starlette's outermost layer, outside it, without them.

With API keys (`ServeConfig.api_keys`, vLLM's `--api-key`), a request to /v1/*, /tokenize
or /detokenize without `Authorization: Bearer <one of them>` is a 401
(`wse_inference.serve.api_keys`); /health, /metrics and /version stay open, as vLLM's.

`build_app(scheduler, metrics, model_names=..., chat_template=..., content_format=...,
limits=..., cors=..., api_keys=...)` returns the app over a started scheduler;
`wse_inference.serve.app.Server` runs it under uvicorn.
"""

from __future__ import annotations

import dataclasses
import functools
import http
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.background import BackgroundTask
from starlette.datastructures import Headers, MutableHeaders
from starlette.exceptions import HTTPException as StarletteHTTPException
from wse_core import __version__
from wse_core.errors import shown

from wse_inference.engine import Engine
from wse_inference.generation_config import server_defaults
from wse_inference.serve import openai_request as oa
from wse_inference.serve.admission import (
    InvalidRequestError,
    ModelNotFoundError,
    QueueFullError,
    RequestLimits,
    ShuttingDownError,
)
from wse_inference.serve.api_keys import add_api_keys
from wse_inference.serve.cors import CorsConfig, add_cors
from wse_inference.serve.generation import Generation
from wse_inference.serve.http_body import ClientGone, read_json, refusal_response, run_off_loop
from wse_inference.serve.metrics import CONTENT_TYPE, ServeMetrics
from wse_inference.serve.openai_fields import check_request_id
from wse_inference.serve.openai_response import error_response
from wse_inference.serve.scheduler import Scheduler

__all__ = ["build_app"]

log = logging.getLogger(__name__)


def build_app(
    scheduler: Scheduler,
    metrics: ServeMetrics,
    *,
    model_names: Sequence[str],
    chat_template: str | None = None,
    content_format: str = "auto",
    limits: RequestLimits | None = None,  # None: the scheduler's
    cors: CorsConfig = CorsConfig(),
    api_keys: Sequence[str] = (),  # vLLM's --api-key: one of them required (`api_keys`)
) -> FastAPI:
    """The FastAPI app over a started scheduler; see the module docstring."""
    limits = scheduler.limits if limits is None else limits
    # no /openapi.json either (hunt 58b: it described FastAPI's 422 bodies, which this server
    # never sends, and warned of duplicate operation ids on every fetch); a JSON 404 instead
    app = FastAPI(title="wse-stack inference", docs_url=None, redoc_url=None, openapi_url=None)
    app.router.redirect_slashes = (
        False  # /v1/completions/ is a JSON 404 naming the route, not a 307
    )
    started = int(time.time())
    _add_error_handlers(app)
    chat = {"chat_template": chat_template, "content_format": content_format}
    _add_generation_routes(app, scheduler, metrics, model_names, chat, limits)
    _add_tokenizer_routes(app, scheduler.engine, metrics, model_names, chat, limits)
    _add_status_routes(app, scheduler, metrics, model_names, started)
    # innermost: a 401 carries the X-Request-Id echo and the CORS headers, as other errors do
    add_api_keys(app, api_keys)
    app.add_middleware(_EchoRequestId)
    add_cors(app, cors)  # vLLM's: a browser's preflight and Origin answered (hunt 74)
    return app


class _EchoRequestId:
    """A request's X-Request-Id header comes back on its response, errors included, as vLLM's
    XRequestIdMiddleware sends it (vLLM: with --enable-request-id-headers, where a request
    without one gets a fresh uuid; here only the client's own, at no cost). Pure ASGI, as
    vLLM's: Starlette's BaseHTTPMiddleware would hide a client's disconnect from streams."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        rid = Headers(scope=scope).get("x-request-id") if scope["type"] == "http" else None
        if rid is None:
            return await self.app(scope, receive, send)

        async def send_with_id(message: Any) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message).append("X-Request-Id", rid)
            await send(message)

        return await self.app(scope, receive, send_with_id)


def _add_error_handlers(app: FastAPI) -> None:
    """HTTP errors (404, 405...) and unhandled exceptions in vLLM's error body."""

    @app.exception_handler(StarletteHTTPException)
    async def _httperror_response(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        # hunt 60: a 10,000-character method came back whole (h11 takes any token)
        where = f"{shown(request.method, quote=False)} {shown(request.url.path, quote=False)}"
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
        return error_response(  # vLLM's type: the status' phrase ("Not Found")
            exc.status_code,
            message,
            headers=headers or None,
            type_=http.HTTPStatus(exc.status_code).phrase,
        )

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error")
        return error_response(500, f"internal error: {type(exc).__name__}")


def _add_generation_routes(
    app: FastAPI, scheduler: Scheduler, metrics: ServeMetrics, model_names: Sequence[str],
    chat: dict[str, Any], limits: RequestLimits,
) -> None:  # fmt: skip
    """POST /v1/completions and /v1/chat/completions, whole or streamed (`chat`: the chat
    template and its content format)."""
    engine = scheduler.engine
    parse = functools.partial(
        oa.parse_request,
        tokenizer=engine.tokenizer,
        model_names=model_names,
        max_context=engine.max_context,
        limits=limits,
        sampling_defaults=server_defaults(engine),  # generation_config.json's (hunt 69)
        **chat,
    )

    async def generate(request: Request, kind: str) -> Response:
        try:
            body = await read_json(request, limits)
            header_id = request.headers.get("x-request-id")  # vLLM's _base_request_id: first
            if header_id is not None:  # bounded as the body's (h11 refuses CR, LF and NUL)
                check_request_id(header_id, "X-Request-Id", limits)
            p = await run_off_loop(functools.partial(parse, body, kind=kind))
            if header_id is not None:
                p = dataclasses.replace(p, request_id=header_id)
            gen = Generation(scheduler, p)
        except (InvalidRequestError, QueueFullError, ShuttingDownError, ClientGone) as e:
            return refusal_response(e, metrics)
        metrics.on_admitted(p.n)
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
    chat: dict[str, Any], limits: RequestLimits,
) -> None:  # fmt: skip
    """vLLM's utilities: POST /tokenize and /detokenize."""

    def utility(answer: Callable[[Any], dict]) -> Callable:
        """A route: a JSON body in, `answer(body)` (off the event loop) out; malformed or
        refused, a 400 (413 when too large)."""

        async def route(request: Request) -> Response:
            try:
                body = await read_json(request, limits)
                return JSONResponse(await run_off_loop(answer, body))
            except (InvalidRequestError, QueueFullError, ClientGone) as e:
                return refusal_response(e, metrics)

        return route

    known = {"tokenizer": engine.tokenizer, "model_names": model_names}
    tokenize = functools.partial(
        oa.tokenize_request, **known, **chat, max_context=engine.max_context
    )
    app.post("/tokenize")(utility(tokenize))
    detokenize = functools.partial(oa.detokenize_request, **known, vocab_size=engine.vocab_size)
    app.post("/detokenize")(utility(detokenize))


def _model_card(name: str, engine: Engine, created: int) -> dict:
    """One entry of GET /v1/models: vLLM's ModelCard (vllm/entrypoints/openai/protocol.py) with
    its `root` (vLLM's: the model's path; here the engine's model, whatever name it is served
    under), `parent` (the base of a LoRA: none here) and one default ModelPermission (hunt 80:
    a client's `m["root"]` was a KeyError), and the model's vocab_size, which vLLM does not list
    (`wse infer bench --dataset-name random`'s ids)."""
    permission = {
        "id": f"modelperm-{uuid.uuid4().hex}",  # vLLM's random_uuid(), a fresh one each time
        "object": "model_permission",
        "created": created,
        "allow_create_engine": False,
        "allow_sampling": True,
        "allow_logprobs": True,
        "allow_search_indices": False,
        "allow_view": True,
        "allow_fine_tuning": False,
        "organization": "*",
        "group": None,
        "is_blocking": False,
    }
    return {
        "id": name,
        "object": "model",
        "created": created,
        "owned_by": "wse-stack",
        "root": engine.model_name,
        "parent": None,
        "max_model_len": engine.max_context,
        "permission": [permission],
        "vocab_size": engine.vocab_size,
    }


def _add_status_routes(
    app: FastAPI, scheduler: Scheduler, metrics: ServeMetrics, model_names: Sequence[str],
    started: int,
) -> None:  # fmt: skip
    """GET /v1/models, /health (503 while draining), /metrics (Prometheus) and /version."""
    engine = scheduler.engine

    @app.api_route("/v1/models", methods=["GET", "HEAD"])  # HEAD: as GET, no body
    async def models() -> dict:
        return {"object": "list", "data": [_model_card(n, engine, started) for n in model_names]}

    @app.api_route("/v1/models/{model:path}", methods=["GET", "HEAD"])  # HEAD: as GET, no body
    async def model(model: str) -> Response:  # OpenAI's retrieve: one model, or 404
        if model not in model_names:
            err = ModelNotFoundError(model, model_names)
            return error_response(404, str(err), param="model", reason=err.code)
        return JSONResponse(_model_card(model, engine, started))

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

    @app.api_route("/version", methods=["GET", "HEAD"])  # vLLM's (hunt 73: a JSON 404)
    async def version() -> dict:
        return {"version": __version__}
