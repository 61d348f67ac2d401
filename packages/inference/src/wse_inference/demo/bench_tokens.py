"""What the server says while `wse infer bench` draws a dataset (`draw`, here): the
vocabulary it lists for a model (GET /v1/models, for the random dataset's ids), a text's
tokens (POST /tokenize, vLLM's, for ShareGPT's filter) and, for the random dataset sent to a
chat, ids as text and that text's ids (POST /detokenize and /tokenize without special
tokens, vLLM's: `text_codec`), each read within `timeout_s` and a byte cap, and checked,
not trusted.

Contract. `served_vocab_size(client, model, timeout_s)` is the model's `vocab_size`, else
`DatasetError` asking for --random-vocab-size. `tokenize_count(client, model, timeout_s)` is
`count(text)`: its tokens, or None for a text the filter drops unseen: one over
`MAX_TEXT_CHARS` (never sent: hunt 71, a 100 MB prompt was sent, the server closed that
request, and the bench said it "cannot reach" it), one the server refuses (400, 413) or closes
unanswered (a body cap), or one of more ids than the filter keeps. A refusal about the request
rather than the text, a model the server does not serve (hunt 71: each of 2,000 texts was
"refused", then vLLM's filter blamed), a server without /tokenize or one that fails, is
`DatasetError` at once.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

import httpx

from wse_inference.demo.bench_data import (
    MAX_TEXT_CHARS,
    MAX_TOKENIZE_BYTES,
    Count,
    DatasetError,
    Decode,
    Encode,
    RandomSpec,
    Sample,
    fixed,
    random_sample,
    random_text_sample,
    sharegpt_sample,
)
from wse_inference.demo.bench_endpoints import CHAT
from wse_inference.demo.openai_replies import (
    MAX_ERROR_BYTES,
    MAX_MODELS_BYTES,
    phrase,
    read_head,
    reason,
)

if TYPE_CHECKING:
    from wse_inference.demo.load_test import LoadTestConfig

__all__ = ["draw", "served_vocab_size", "text_codec", "tokenize_count"]

# Bytes a token may take in a reply: a /tokenize id (up to 10 digits, ", ") or a
# /detokenize token's text, JSON-escaped (\uXXXX: 6 bytes a character), 10 characters each
# on average at most: no vocabulary's tokens average more than ~4 (GPT-2's byte-level BPE)
REPLY_BYTES_PER_TOKEN = 64
REPLY_SLACK_BYTES = 1 << 16  # the reply's own keys and a short prompt's whole text


def tokenize_count(client: httpx.AsyncClient, model: str, timeout_s: float) -> Count:
    """`count(text)`: the tokens of `text` by the server's POST /tokenize (vLLM's), special
    tokens included; None where the text is over `MAX_TEXT_CHARS` (not sent), the server
    refuses it (400, 413; or closes the request unanswered: a body cap) or answers more ids
    than ShareGPT's filter keeps. A server without /tokenize, one that fails, or a refusal of
    the request's model is DatasetError."""

    async def count(text: str) -> int | None:
        if len(text) > MAX_TEXT_CHARS:
            return None
        asked = {"model": model, "prompt": text}
        try:
            status, body = await _post(client, "/tokenize", asked, MAX_TOKENIZE_BYTES, timeout_s)
        except (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError):
            # the request closed unanswered (the body past a cap): the text's refusal; a
            # server that went away fails the next text's connection ("cannot reach")
            return None
        if _model_refused(status, body[:MAX_ERROR_BYTES]):
            raise DatasetError(
                f"POST /tokenize answered {status} {phrase(status)} "
                f"({reason(body[:MAX_ERROR_BYTES])}); give --model as the server's GET "
                "/v1/models lists it, or leave --model out (its first model)"
            )
        if status in (400, 413):
            return None
        if status != 200:
            said = reason(body[:MAX_ERROR_BYTES])
            why = (
                f"POST /tokenize answered {status} {phrase(status)} ({said}); "
                "--dataset-name sharegpt counts tokens with the server's /tokenize (vLLM's)"
            )
            raise DatasetError(why, fault=status >= 500)
        return None if len(body) > MAX_TOKENIZE_BYTES else _count_of(body)

    return count


async def _post(
    client: httpx.AsyncClient, path: str, body: dict, cap: int, timeout_s: float
) -> tuple[int, bytes]:
    """(status, the reply's first `cap` + 1 bytes at most) of POST `path` with JSON `body`,
    read within `timeout_s` (DatasetError past it, the server's fault)."""
    try:
        async with asyncio.timeout(timeout_s), client.stream("POST", path, json=body) as r:
            return r.status_code, await read_head(r.aiter_bytes(), cap)
    except TimeoutError:
        raise DatasetError(f"POST {path} did not answer within {timeout_s:g} s",
                           fault=True) from None  # fmt: skip


def _model_refused(status: int, body: bytes) -> bool:
    """Whether a 4xx of /tokenize is about the model asked for, not the text: wse serve's
    `reason` model_not_found (its `code` is the status, 404, as vLLM's; an older wse serve's
    `code` string), param "model", or vLLM's 404 of `type` NotFoundError ("The model `x` does
    not exist."). A 404 of a server without /tokenize says no model: its type is the phrase
    "Not Found" (vLLM's and wse serve's) or its body Starlette's {"detail": "Not Found"}."""
    if status not in (400, 404):
        return False
    try:
        said = json.loads(body)
        error = said.get("error", said) if isinstance(said, dict) else None
    except (ValueError, RecursionError):
        error = None
    if not isinstance(error, dict):
        return False
    message = error.get("message")
    by_vllm = status == 404 and (
        error.get("type") == "NotFoundError"
        or (isinstance(message, str) and message.startswith("The model"))
    )
    named = "model_not_found" in (error.get("reason"), error.get("code"))
    return named or error.get("param") == "model" or by_vllm


def _count_of(body: bytes) -> int:
    try:
        n = json.loads(body).get("count")
    except (ValueError, AttributeError, RecursionError):
        n = None
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n < 2**63:
        raise DatasetError(f"POST /tokenize did not answer vLLM's {{\"count\": N, ...}} (got "
                           f"{body[:80].decode(errors='replace')!r})", fault=True)  # fmt: skip
    return n


def text_codec(client: httpx.AsyncClient, model: str, timeout_s: float) -> tuple[Decode, Encode]:
    """(decode, encode): ids -> text by the server's POST /detokenize, text -> ids by its POST
    /tokenize with add_special_tokens false (vLLM's RandomDataset encodes so); any refusal or
    reply not of vLLM's shape is `DatasetError` (the server's fault where it is a 5xx or the
    shape)."""

    async def ask(path: str, body: dict, tokens: int) -> Any:
        cap = REPLY_BYTES_PER_TOKEN * tokens + REPLY_SLACK_BYTES
        status, reply = await _post(client, path, body, cap, timeout_s)
        if status != 200:
            said = reason(reply[:MAX_ERROR_BYTES])
            raise DatasetError(
                f"POST {path} answered {status} {phrase(status)} ({said}); "
                "--dataset-name random with --backend openai-chat sends text, made with the "
                "server's /detokenize and /tokenize (vLLM's)",
                fault=status >= 500,
            )
        if len(reply) > cap:
            raise DatasetError(f"POST {path} answered more than {cap:,} bytes for {tokens:,} "
                               "tokens", fault=True)  # fmt: skip
        try:
            return json.loads(reply)
        except (ValueError, RecursionError):
            return None

    async def decode(ids: list[int]) -> str:
        said = await ask("/detokenize", {"model": model, "tokens": ids}, len(ids))
        text = said.get("prompt") if isinstance(said, dict) else None
        if not isinstance(text, str):
            raise DatasetError('POST /detokenize did not answer vLLM\'s {"prompt": text}',
                               fault=True)  # fmt: skip
        return text

    async def encode(text: str) -> list[int]:
        body = {"model": model, "prompt": text, "add_special_tokens": False}
        size = len(text.encode("utf-8", "surrogatepass"))
        said = await ask("/tokenize", body, size + 1)  # at most a token a byte (byte fallback)
        ids = said.get("tokens") if isinstance(said, dict) else None
        if not isinstance(ids, list) or not all(type(t) is int and t >= 0 for t in ids):
            raise DatasetError('POST /tokenize did not answer vLLM\'s {"tokens": [ids], ...}',
                               fault=True)  # fmt: skip
        return ids

    return decode, encode


async def served_vocab_size(client: httpx.AsyncClient, model: str, timeout_s: float) -> int:
    """The `vocab_size` GET /v1/models lists for `model` (wse serve lists it; vLLM does not:
    then DatasetError asking for --random-vocab-size)."""
    try:
        async with asyncio.timeout(timeout_s), client.stream("GET", "/v1/models") as r:
            body = await read_head(r.aiter_bytes(), MAX_MODELS_BYTES)
    except TimeoutError:
        raise httpx.ReadTimeout(f"GET /v1/models: no answer within {timeout_s:g} s") from None
    try:
        entries = json.loads(body)["data"] if r.status_code == 200 else []
        v = next((e.get("vocab_size") for e in entries if e.get("id") == model), None)
    except (ValueError, LookupError, TypeError, AttributeError, RecursionError):
        v = None
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v < 2**31:
        raise DatasetError(
            f"the server's GET /v1/models lists no vocab_size for {model!r} (wse serve lists "
            "it, vLLM does not); give --random-vocab-size, the model's config.json vocab_size"
        )
    return v


async def draw(cfg: LoadTestConfig, client: httpx.AsyncClient, model: str) -> Sample:
    """The `cfg.num_requests` requests of `cfg.dataset` (None: `cfg.prompt` for
    `cfg.max_tokens`, each time), seeded by `cfg.seed`, resolved against the server `client`
    talks to for `model` (its vocabulary, its /tokenize, `cfg.concurrency` texts at a time)."""
    spec, num, seed = cfg.dataset, cfg.num_requests, cfg.seed
    if spec is None:
        return fixed(cfg.prompt, cfg.max_tokens)
    if isinstance(spec, RandomSpec):
        spec.check_in_flight(cfg.concurrency)
        vocab = spec.vocab_size or await served_vocab_size(client, model, cfg.timeout_s)
        ids = random_sample(spec, num, seed, vocab)
        if cfg.backend != CHAT:  # sent as they are
            return ids
        decode, encode = text_codec(client, model, cfg.timeout_s)  # a chat's prompt is text
        return await random_text_sample(ids, decode, encode, num=num, width=cfg.concurrency)
    count = tokenize_count(client, model, cfg.timeout_s)
    return await sharegpt_sample(spec, count, num=num, seed=seed, width=cfg.concurrency)
