"""gRPC serving: server-streaming `Generate` and `HealthCheck` (proto/generation.proto), and
the standard grpc.health.v1.Health service (Check and Watch, `grpcio-health-checking`):
SERVING for "" and for wse.inference.v1.Generation, NOT_SERVING once the server drains.

`build_grpc_server(scheduler, host=..., port=..., model_names=...)` returns an unstarted
`grpc.Server`, its bound port (port 0 picks a free one; an IPv6 host is bracketed) and its
health service. Each `Generate` call submits to the
shared `Scheduler` and streams one response per engine step with output; the last carries
finish_reason, usage and time_info. Requests are checked by the same validator as HTTP's
(`wse_inference.serve.admission`: `check_sampling`, then `encode_prompt`, before anything is
tokenized); bytes that are not a GenerateRequest are INVALID_ARGUMENT (the deserializers
never raise, so gRPC's own INTERNAL "Exception deserializing request" cannot happen), and so
is a varint past int32 in an int32 field (protobuf keeps its low 32 bits: max_tokens 2**32 + 3
was read as 3), found by parsing the bytes again with every int32 field read as int64. A
message beyond `RequestLimits.max_body_bytes` is gRPC's RESOURCE_EXHAUSTED (its
`max_receive_message_length`). Status codes: INVALID_ARGUMENT for a bad request, NOT_FOUND
for a model name this server does not serve (HTTP's 404), UNAUTHENTICATED without one of the
server's API keys (`ServeConfig.api_keys`, vLLM's --api-key: `authorization: Bearer <key>`
metadata, as HTTP's 401), RESOURCE_EXHAUSTED when the admission queue is full, UNAVAILABLE
while draining, INTERNAL when the engine fails, and an "abort" finish told as UNAVAILABLE at
shutdown. A cancelled call (client cancel, deadline, disconnect) cancels its request, so its
slot and KV cache are freed within one engine step. Refusals are counted in /metrics'
wse_request_rejected_total by reason, as HTTP's; the final response carries vLLM's stop_reason
(`stop_string` or `stop_token_id`; neither for the model's EOS).

The thread pool has a worker for every slot and queue place plus spare ones and no limit of
concurrent calls is set, so admission is decided by the scheduler's bounded queue (its
RESOURCE_EXHAUSTED with retry-after), never by gRPC's own.
"""

from __future__ import annotations

import queue
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent import futures
from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from wse_inference.engine import SamplingParams
from wse_inference.generation_config import server_defaults
from wse_inference.serve.addresses import netloc
from wse_inference.serve.admission import (
    InvalidRequestError,
    ModelNotFoundError,
    QueueFullError,
    RequestLimits,
    ShuttingDownError,
    check_prompt_fits,
    check_sampling,
    seed_of,
)
from wse_inference.serve.api_keys import KeyCheck, refusal
from wse_inference.serve.metrics import ServeMetrics
from wse_inference.serve.prompt_ids import text_prompt
from wse_inference.serve.proto import load_stubs
from wse_inference.serve.request import StreamEvent
from wse_inference.serve.scheduler import Scheduler

__all__ = ["build_grpc_server", "sampling_from_request"]

pb2, pb2_grpc = load_stubs()
_SPARE_WORKERS = 16  # past slots + queue places: refusals and health checks
_ERROR_CODES = {"invalid": grpc.StatusCode.INVALID_ARGUMENT, "abort": grpc.StatusCode.UNAVAILABLE}


def _invalid_code(e: InvalidRequestError) -> grpc.StatusCode:
    """A refused request's status: NOT_FOUND for a model this server does not serve (HTTP's
    404, and gRPC's own mapping of it: grpc/doc/http-grpc-status-mapping.md; its status guide's
    "some requested entity was not found"; hunt 81: INVALID_ARGUMENT, which a client that
    retries or alerts by code could not tell from a bad sampling value), else
    INVALID_ARGUMENT."""
    if isinstance(e, ModelNotFoundError):
        return grpc.StatusCode.NOT_FOUND
    return grpc.StatusCode.INVALID_ARGUMENT


def sampling_from_request(
    req: Any, *, prompt_len: int, max_context: int, defaults: Mapping[str, Any] | None = None
) -> SamplingParams:
    """SamplingParams from a GenerateRequest; unset fields take `defaults` (the model's
    generation_config.json's: `generation_config.server_defaults`), else the OpenAI defaults;
    top_k 0 and -1 are off, as vLLM's and HTTP's (hunt 75: 0 took the file's top_k); max_tokens
    at most the rest of the context (hunt 69: gRPC read none of the file's defaults, as HTTP
    did not before it)."""
    d = defaults or {}
    rest = max(1, max_context - prompt_len)
    max_tokens = (
        req.max_tokens if req.HasField("max_tokens") else min(d.get("max_tokens", rest), rest)
    )

    def given(field: str, default: float) -> Any:
        return getattr(req, field) if req.HasField(field) else d.get(field, default)

    top_k = given("top_k", 0)
    return SamplingParams(
        max_tokens=max_tokens,
        temperature=given("temperature", 1.0),
        top_p=given("top_p", 1.0),
        top_k=0 if top_k == -1 else top_k,  # -1: off, as vLLM's
        seed=seed_of(req.seed) if req.HasField("seed") else None,  # -1: none, as vLLM's
        stop=tuple(req.stop),  # empty ones too: check_sampling counts and refuses them
        stop_token_ids=tuple(dict.fromkeys(req.stop_token_ids)),  # vLLM's: each id once
        ignore_eos=req.ignore_eos,
        logprobs=req.logprobs if req.HasField("logprobs") else None,
        presence_penalty=req.presence_penalty,
        frequency_penalty=req.frequency_penalty,
        repetition_penalty=given("repetition_penalty", 1.0),
        min_tokens=req.min_tokens,
        include_stop_str_in_output=req.include_stop_str_in_output,
    )


_NOT_THE_MESSAGE = "The request bytes are not this method's protobuf message: "
_INT32 = (-(2**31), 2**31 - 1)


class _Undecodable:
    """What the deserializer returns for bytes it refuses: `message` says why."""

    def __init__(self, message: str) -> None:
        self.message = message


def _lenient(parse: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def deserialize(data: bytes) -> Any:
        try:
            return parse(data)
        except (DecodeError, ValueError) as e:  # garbage, or a string that is not UTF-8
            return _Undecodable(_NOT_THE_MESSAGE + (" ".join(str(e).split()) or type(e).__name__))

    return deserialize


def _int64_mirror(message: Any) -> Any:
    """The class of `message` with every int32 field read as int64 (in a pool of its own)."""
    proto = descriptor_pb2.FileDescriptorProto()
    message.DESCRIPTOR.file.CopyToProto(proto)
    for kind in proto.message_type:
        for field in kind.field:
            if field.type == field.TYPE_INT32:
                field.type = field.TYPE_INT64
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(message.DESCRIPTOR.full_name))


def _past_int32(mirrored: Any, descriptor: Any, where: tuple[str, str] = ("", "")) -> str | None:
    """The first int32 field of `descriptor` whose value in `mirrored` (read as int64) is past
    int32, named with its number and value; None when every one fits."""
    for field, value in mirrored.ListFields():
        own = descriptor.fields_by_name[field.name]
        number, name = f"{where[0]}{own.number}", f"{where[1]}{own.name}"
        if own.message_type is not None:  # token_ids: its ids are int32 too
            found = _past_int32(value, own.message_type, (f"{number}.", f"{name}."))
            if found:
                return found
        elif own.type == own.TYPE_INT32:
            values = [value] if isinstance(value, int) else list(value)
            bad = next((v for v in values if not _INT32[0] <= v <= _INT32[1]), None)
            if bad is not None:
                return (
                    f"field {number} ({name}) holds {bad}, past int32 ({_INT32[0]}.."
                    f"{_INT32[1]}); send a value in that range."
                )
    return None


def _int32_checked(message: Any) -> Callable[[bytes], Any]:
    """`message.FromString`, refusing a varint past int32 in an int32 field (hunt 65:
    protobuf keeps its low 32 bits, so max_tokens 2**32 + 3 ran as 3 and token id 2**32 + 65
    as 65, a request silently changed)."""
    mirror = _int64_mirror(message)

    def parse(data: bytes) -> Any:
        request = message.FromString(data)
        why = _past_int32(mirror.FromString(data), message.DESCRIPTOR)
        return request if why is None else _Undecodable(why)

    return parse


def _misread_field(request: Any) -> str | None:
    """A field of the message sent with another wire type (max_tokens as bytes...): protobuf
    keeps it as an unknown field and leaves the field unset, a request silently changed
    (hunt 56). Unknown field numbers are ignored, protobuf's rule for a newer client."""
    from google.protobuf import unknown_fields

    known = request.DESCRIPTOR.fields_by_number
    for f in unknown_fields.UnknownFieldSet(request):
        if f.field_number in known:
            name = known[f.field_number].name
            return f"field {f.field_number} ({name}) has wire type {f.wire_type}, not its own"
    return None


def _undecodable(request: Any) -> str | None:
    """Why `request` is not its method's message (None when it is)."""
    if isinstance(request, _Undecodable):
        return request.message
    why = _misread_field(request)
    return None if why is None else _NOT_THE_MESSAGE + why


def _refuse_undecodable(request: Any, context: grpc.ServicerContext) -> None:
    if (why := _undecodable(request)) is not None:
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, why)


class _Generation(pb2_grpc.GenerationServicer):  # type: ignore[name-defined]
    def __init__(
        self,
        scheduler: Scheduler,
        model_names: Sequence[str],
        limits: RequestLimits,
        metrics: ServeMetrics | None = None,
        api_keys: Sequence[str] = (),
    ) -> None:
        self.metrics = metrics  # refusals counted by reason, as HTTP's (hunt 75)
        self.keys = KeyCheck(api_keys) if api_keys else None  # vLLM's --api-key, as HTTP's
        self.scheduler = scheduler
        self.model_names = tuple(model_names)
        self.limits = limits
        self.defaults = server_defaults(scheduler.engine)  # generation_config.json's

    def _prompt_ids(self, req: Any) -> list[int]:
        max_context = self.scheduler.engine.max_context
        if req.WhichOneof("prompt") == "token_ids":
            return list(req.token_ids.ids)
        # with the tokenizer's BOS, as /v1/completions (hunt 69); a tokenizer error is the
        # client's INVALID_ARGUMENT
        return text_prompt(self.scheduler.engine.tokenizer, req.text, max_context=max_context)

    def _submit(self, req: Any, sink: Any, context: grpc.ServicerContext) -> Any:
        try:
            if req.model and req.model not in self.model_names:  # its name cut, its length said
                raise ModelNotFoundError(req.model, self.model_names)
            max_context = self.scheduler.engine.max_context
            sampling = sampling_from_request(req, prompt_len=0, max_context=max_context,
                                             defaults=self.defaults)  # fmt: skip
            check_sampling(sampling, limits=self.limits)  # before anything is tokenized
            ids = self._prompt_ids(req)
            if not req.HasField("max_tokens"):  # the rest of the context: is there any?
                check_prompt_fits(len(ids), max_context, param="prompt")  # as HTTP's, vLLM's
                sampling = sampling_from_request(req, prompt_len=len(ids), max_context=max_context,
                                                 defaults=self.defaults)  # fmt: skip
            handle = self.scheduler.submit(prompt_ids=ids, sampling=sampling, sink=sink)
            if self.metrics is not None:
                self.metrics.on_admitted(1)  # one choice a call
            return handle
        except InvalidRequestError as e:  # a model not served: NOT_FOUND (HTTP's 404)
            self._reject("invalid")
            context.abort(_invalid_code(e), str(e))
        except QueueFullError as e:
            self._reject("queue_full")
            context.set_trailing_metadata((("retry-after", str(e.retry_after_s)),))
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(e))
        except ShuttingDownError as e:
            self._reject("shutting_down")
            context.abort(grpc.StatusCode.UNAVAILABLE, str(e))

    def _reject(self, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.reject(reason)

    def _refuse_keyless(self, context: grpc.ServicerContext) -> None:
        """UNAUTHENTICATED unless the call's `authorization` metadata is `Bearer <key>` of
        the server's keys (none given: nothing asked), as HTTP's 401."""
        if self.keys is None:
            return
        sent = [v for k, v in context.invocation_metadata() if k == "authorization"]
        if not self.keys.allows(sent[0] if sent else None):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, refusal(bool(sent)))

    def Generate(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:  # noqa: N802
        self._refuse_keyless(context)
        if _undecodable(request) is not None:
            self._reject("invalid")
        _refuse_undecodable(request, context)
        events: queue.Queue[StreamEvent] = queue.Queue()
        handle = self._submit(request, events.put, context)
        context.add_callback(handle.cancel)  # runs when the call ends, cancelled or not
        while True:
            try:
                ev = events.get(timeout=0.25)
            except queue.Empty:
                if not context.is_active():
                    handle.cancel()
                    return
                continue
            if ev.error is not None:
                context.abort(
                    _ERROR_CODES.get(ev.finish_reason, grpc.StatusCode.INTERNAL), ev.error
                )
            yield self._response(ev, handle)
            if ev.finish_reason is not None:
                return

    @staticmethod
    def _response(ev: StreamEvent, handle: Any) -> Any:
        lps = [
            pb2.TokenLogprob(
                token_id=x.token,
                logprob=x.logprob,
                top=[pb2.TopLogprob(token_id=t, logprob=lp) for t, lp in x.top],
            )
            for x in ev.logprobs or ()
        ]
        if ev.finish_reason is None:
            return pb2.GenerateResponse(text=ev.text, token_ids=list(ev.token_ids), logprobs=lps)
        usage = pb2.Usage(
            prompt_tokens=ev.prompt_tokens,
            completion_tokens=ev.completion_tokens,
            total_tokens=ev.prompt_tokens + ev.completion_tokens,
        )
        # vLLM's stop_reason, as HTTP's (hunt 75: gRPC had none); neither for the model's EOS
        why = ev.stop_reason
        stop = {"stop_string": why} if isinstance(why, str) else {}
        stop = {"stop_token_id": why} if isinstance(why, int) else stop
        return pb2.GenerateResponse(
            text=ev.text,
            token_ids=list(ev.token_ids),
            finish_reason=ev.finish_reason,
            usage=usage,
            time_info=pb2.TimeInfo(**handle.timing.time_info()),
            logprobs=lps,
            **stop,
        )

    def HealthCheck(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        _refuse_undecodable(request, context)
        s = self.scheduler.stats()
        status = (
            pb2.HealthCheckResponse.NOT_SERVING if s.draining else pb2.HealthCheckResponse.SERVING
        )
        return pb2.HealthCheckResponse(
            status=status,
            models=list(self.model_names),
            running=s.running,
            waiting=s.waiting,
            max_slots=s.max_slots,
        )


def _handlers(servicer: _Generation) -> grpc.GenericRpcHandler:
    """The Generation service's methods (as the generated `add_GenerationServicer_to_server`
    registers them) with deserializers that never raise."""
    service = pb2.DESCRIPTOR.services_by_name["Generation"]
    methods = {
        "Generate": grpc.unary_stream_rpc_method_handler(
            servicer.Generate,
            request_deserializer=_lenient(_int32_checked(pb2.GenerateRequest)),
            response_serializer=pb2.GenerateResponse.SerializeToString,
        ),
        "HealthCheck": grpc.unary_unary_rpc_method_handler(
            servicer.HealthCheck,
            request_deserializer=_lenient(pb2.HealthCheckRequest.FromString),
            response_serializer=pb2.HealthCheckResponse.SerializeToString,
        ),
    }
    assert set(methods) == {m.name for m in service.methods}, "a method of the proto is missing"
    return grpc.method_handlers_generic_handler(service.full_name, methods)


def build_grpc_server(
    scheduler: Scheduler,
    *,
    host: str,
    port: int,
    model_names: Sequence[str],
    limits: RequestLimits | None = None,  # None: the scheduler's
    metrics: ServeMetrics | None = None,
    api_keys: Sequence[str] = (),  # Generate needs `authorization: Bearer <one of them>`
) -> tuple[grpc.Server, int, health.HealthServicer]:
    """An unstarted gRPC server bound to host:port, the port it got, and its standard
    grpc.health.v1 service (`enter_graceful_shutdown()` when draining).

    No `maximum_concurrent_rpcs` (hunt 75: a burst was refused with gRPC's own "Concurrent
    RPC limit exceeded!", no retry-after, health checks too): every call reaches a worker, and
    the pool has one for every slot and queue place plus spare ones, so a refusal is the
    scheduler's and a health check never waits behind streams (Watch holds no worker)."""
    limits = scheduler.limits if limits is None else limits
    workers = scheduler.engine.max_slots + scheduler.max_queued + _SPARE_WORKERS
    pool = futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="wse-grpc")
    server = grpc.server(pool, options=[("grpc.max_receive_message_length", limits.max_body_bytes)])
    server.add_generic_rpc_handlers(
        (_handlers(_Generation(scheduler, model_names, limits, metrics, api_keys)),)
    )
    checks = health.HealthServicer(experimental_non_blocking=True)
    for service in ("", pb2.DESCRIPTOR.services_by_name["Generation"].full_name):
        checks.set(service, health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(checks, server)
    address = netloc(host, port)  # an IPv6 host in brackets
    try:
        bound = server.add_insecure_port(address)
    except RuntimeError:  # grpcio >= 1.60 raises "Failed to bind" where it returned 0
        bound = 0
    if bound == 0:
        raise OSError(f"cannot bind gRPC to {address}")
    return server, bound, checks
