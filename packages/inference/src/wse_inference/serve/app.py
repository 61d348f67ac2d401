"""OpenAI-compatible HTTP serving (FastAPI + uvicorn) and the process shell around it.

Architecture (one process):

    HTTP clients ─► uvicorn / FastAPI (asyncio) ─┐                    ┌─► Engine
    gRPC clients ─► grpc.Server (thread pool) ───┼─► Scheduler ──────┤   (prefill / insert /
                                                 │   one engine thread│    generate / release)
    GET /metrics ◄─ ServeMetrics ◄───────────────┘   bounded queue    └─ continuous batching

The HTTP routes (OpenAI's /v1/completions, /v1/chat/completions and /v1/models, /health,
/metrics, vLLM's /tokenize, /detokenize and /version) and their error bodies are
`wse_inference.serve.routes`' (`build_app`); this module runs them.

`Server(engine, ServeConfig(...))` wires everything, after refusing a bad `WSE_LIMIT_*`
variable with its one-line `WseError`, as the `wse` root does (the stop-string limit is read
once, when the config's `RequestLimits` are built); `.start()` runs it on background threads
(tests, demos) and `.close()` drains and stops it; `serve(engine, config)` runs in the
foreground until SIGTERM or SIGINT, then drains: no new connections, requests in flight run
to completion for up to `drain_s`, what is left ends with an error event, and the process
exits 0; a second signal ends what is left at once (uvicorn's second Ctrl-C), with the same
error a timed-out drain gives. gRPC keeps its port open while requests run, so that a
grpc.health.v1 Check answers NOT_SERVING (new calls are refused UNAVAILABLE), and stops when
the drain ends. The handlers only count signals; the drain runs outside them. The host may
be IPv6 (`addresses`). Every port may be 0 (a free port); `.http_url` / `.grpc_target` give
the bound ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import uvicorn
from wse_core.errors import WseError
from wse_core.host.limits import check_variables

from wse_inference.engine import Engine
from wse_inference.serve.addresses import listening_socket, netloc
from wse_inference.serve.admission import RequestLimits
from wse_inference.serve.cors import CorsConfig
from wse_inference.serve.http_protocol import protocol_for
from wse_inference.serve.metrics import ServeMetrics
from wse_inference.serve.routes import build_app
from wse_inference.serve.scheduler import Scheduler
from wse_inference.serve.warmup import warm_up

__all__ = ["ServeConfig", "Server", "serve"]

# After a second signal: how long the handlers get to write the "shutting down" error their
# requests ended with (an engine step, then one response) before uvicorn is told to exit.
_TELL_S = 2.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class ServeConfig:
    host: str = "127.0.0.1"
    port: int = 8000  # 0: a free port
    grpc_port: int | None = None  # None: no gRPC server; 0: a free port
    max_queued: int = 64
    drain_s: float = 10.0  # grace for requests in flight at shutdown
    model_names: tuple[str, ...] = ()  # names clients may ask for; default engine.model_name
    warmup: bool = True  # `run` compiles the engine with warm-up requests (`serve.warmup`)
    chat_template: str | None = None  # Jinja; overrides the tokenizer's (vLLM's --chat-template)
    # vLLM's --chat-template-content-format: "auto", "string" or "openai" (see chat_template)
    chat_template_content_format: str = "auto"
    # body size, JSON depth, stop strings (both APIs); built with each config, so the stop
    # limit in force then is read (hunt 80: a default built at import read it at every request)
    limits: RequestLimits = dataclasses.field(default_factory=RequestLimits)
    cors: CorsConfig = CorsConfig()  # vLLM's --allowed-origins and the rest, its defaults
    # vLLM's --api-key: HTTP's /v1/*, /tokenize and /detokenize and gRPC's Generate need one of
    # these as a Bearer token (`serve.api_keys`); () : none needed
    api_keys: tuple[str, ...] = ()


def _freeze_startup_objects() -> None:
    """Move what loading and compiling made (JAX, the model, the modules: ~200k objects) out
    of the garbage collector's reach (`gc.freeze`), so a full collection, which holds the GIL
    and so the event loop, walks only what requests make: under a burst of hostile JSON
    bodies full collections took 0.6-1.1 s here before, 10-80 ms after."""
    import gc

    gc.collect()
    gc.freeze()


class _DrainingUvicorn(uvicorn.Server):
    """uvicorn whose signal handler only counts (`server._note_signal`: plain assignments, no
    lock, no thread started; hunt 75: a second SIGTERM while the first one's handler was
    inside the drain waited on the drain's lock, on the same thread, forever). The drain
    starts on the event loop as uvicorn's shutdown does. A second signal forces the exit, as
    uvicorn's second Ctrl-C does, but only once what is left has ended with the drain's error
    and its handlers have written it (hunt 76: uvicorn's forced exit cancelled them: a 500
    "Internal Server Error", a stream cut without its error or [DONE], a traceback)."""

    def __init__(self, config: uvicorn.Config, server: Server) -> None:
        super().__init__(config)
        self._server = server

    def handle_exit(self, sig: int, frame: Any) -> None:
        # not uvicorn's: it keeps the signal to raise again after its shutdown, which `run`'s
        # handler would count as a second one
        self._server._note_signal(sig)

    async def shutdown(self, sockets: list[Any] | None = None) -> None:
        self._server.begin_drain()  # not in a signal handler: it may take locks
        forcing = asyncio.create_task(self._force_at_second_signal())
        try:
            await super().shutdown(sockets)
        finally:
            forcing.cancel()

    async def _force_at_second_signal(self) -> None:
        loop = asyncio.get_running_loop()
        while len(self._server._signals) < 2:
            await asyncio.sleep(0.02)
        self._server._force_drain()  # what is left ends with "abort" within an engine step
        deadline = loop.time() + _TELL_S
        while self.server_state.connections and loop.time() < deadline:
            await asyncio.sleep(0.02)
        self.force_exit = True


class Server:
    """Scheduler + HTTP (+ gRPC) over one engine; see the module docstring."""

    def __init__(self, engine: Engine, config: ServeConfig | None = None) -> None:
        # every WSE_LIMIT_* variable checked here, as the `wse` root checks them (hunt 80: a
        # bad value started the server and turned each request into a 500)
        check_variables()
        config = ServeConfig() if config is None else config
        self.engine = engine
        self.config = config
        self.model_names = config.model_names or (engine.model_name,)
        # vLLM's model_name label; its context tops the token-count histograms' edges
        self.metrics = ServeMetrics(self.model_names[0], max_model_len=engine.max_context)
        self.scheduler = Scheduler(
            engine, max_queued=config.max_queued, observer=self.metrics, limits=config.limits
        )
        self.metrics.bind(self.scheduler.stats)
        self.app = build_app(
            self.scheduler,
            self.metrics,
            model_names=self.model_names,
            chat_template=config.chat_template,
            content_format=config.chat_template_content_format,
            limits=config.limits,
            cors=config.cors,
            api_keys=config.api_keys,
        )
        self._sock = listening_socket(config.host, config.port)  # IPv6 too (hunt 75)
        self.http_url = f"http://{netloc(config.host, self._sock.getsockname()[1])}"
        self.grpc_server: Any = None
        self.grpc_target: str | None = None
        if config.grpc_port is not None:
            from wse_inference.serve.grpc_server import build_grpc_server

            self.grpc_server, port, self._grpc_health = build_grpc_server(
                self.scheduler,
                host=config.host,
                port=config.grpc_port,
                model_names=self.model_names,
                limits=config.limits,
                metrics=self.metrics,
                api_keys=config.api_keys,
            )
            self.grpc_target = netloc(config.host, port)
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
            self,
        )
        # SIGTERM / SIGINT seen, one entry each: list.append is one step for a handler that
        # interrupts another (`+= 1` could lose a count), and takes no lock
        self._signals: list[int] = []
        self._thread: threading.Thread | None = None
        self._drain_lock = threading.Lock()
        self._draining = self._forced = False
        self._drain_deadline = math.inf

    def _start_engine_and_grpc(self) -> None:
        self.scheduler.start()
        if self.grpc_server is not None:
            self.grpc_server.start()

    def _note_signal(self, sig: int = 0, *_: Any) -> None:
        """The SIGTERM / SIGINT handler's work: count (a second one forces the drain's end:
        `_DrainingUvicorn`, `_finish`). Plain assignments only: a handler runs between two
        bytecodes of the main thread, which may hold any lock (hunt 75)."""
        self._signals.append(sig)
        self._uvicorn.should_exit = True  # also when it arrives as uvicorn is starting

    def begin_drain(self) -> None:
        """Refuse new work; requests in flight get `drain_s` to finish (idempotent). Never
        called from a signal handler (see `_note_signal`)."""
        with self._drain_lock:
            if self._draining:
                return
            self._draining = True
            self.scheduler.drain(self.config.drain_s)  # new calls: 503 / UNAVAILABLE
            self._drain_deadline = time.monotonic() + self.config.drain_s
            if self.grpc_server is not None:
                # grpc.health.v1: NOT_SERVING. The server is stopped at the drain's end, not
                # now: `stop` refuses every new call at once, so a Check saw "Connection
                # refused" instead (hunt 76)
                self._grpc_health.enter_graceful_shutdown()

    def _force_drain(self) -> None:
        """A second signal: what is still running ends now with the drain's error, as a
        timed-out drain's (uvicorn's second Ctrl-C). Idempotent."""
        with self._drain_lock:
            if self._forced:
                return
            self._forced = True
            self._drain_deadline = time.monotonic()
        self.scheduler.drain(0.0)

    def _finish(self) -> None:
        self.begin_drain()
        # HTTP is done (uvicorn waited for its connections); gRPC streams may still run:
        # they get the rest of `drain_s`, as HTTP's did, before what is left is aborted. A
        # second signal meanwhile ends them now.
        while not self.scheduler.idle and time.monotonic() < self._drain_deadline:
            if len(self._signals) > 1:
                self._force_drain()
            time.sleep(0.02)
        self.scheduler.stop(timeout_s=self.config.drain_s + 5)  # every sink has its last event
        if self.grpc_server is not None:
            # the streams write their last response or the drain's UNAVAILABLE within the
            # grace; what is left then (a health Watch) is cancelled
            self.grpc_server.stop(_TELL_S).wait(_TELL_S + 5)
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
        """Run the warm-up's requests through the engine (`serve.warmup`: every program a
        request runs compiles now, none on a user's), kept out of /metrics; its wall seconds.
        A model whose log probabilities are not finite on it is refused (`WseError`; hunt 62:
        weights that overflow, all finite, answered 500s, NaN in streamed JSON, and text of
        NUL characters)."""
        if self.engine.max_context < 2:  # hunt 62: the warm-up's 400 was read as the user's
            raise WseError(
                f"the model's context is {self.engine.max_context} token(s) (its config's "
                "max_position_embeddings): a request needs at least 2, one prompt token and "
                "one to make"
            )
        t0 = time.monotonic()
        scores = warm_up(self.scheduler, timeout_s=timeout_s)
        if bad := [v for v in scores if not math.isfinite(v)]:
            raise WseError(
                f"the model's log probabilities are not finite on a warm-up request ({bad[0]}): "
                "its weights hold NaN or inf, or overflow in the model's dtype; check the "
                "model's safetensors"
            )
        return time.monotonic() - t0

    def run(self, *, on_ready: Callable[[], None] | None = None) -> None:
        """Serve in the foreground until SIGTERM / SIGINT, then drain and return.

        The engine is warmed up (compiled) first when `config.warmup`; then `on_ready()`.
        """
        # Our handler covers the warm-up and the drain; uvicorn's (which counts with it) while
        # uvicorn runs. Either way the exit code stays 0.
        signals = (signal.SIGTERM, signal.SIGINT)
        previous = {sig: signal.signal(sig, self._note_signal) for sig in signals}
        try:
            self._start_engine_and_grpc()
            if self.config.warmup:
                self.warmup()
            _freeze_startup_objects()
            if on_ready is not None:
                on_ready()
            if not self._signals:
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
