"""API keys: which requests must carry `Authorization: Bearer <key>`, as vLLM's `--api-key`.

vLLM's server, given `--api-key` (one or more keys; else its VLLM_API_KEY variable), wraps its
app in an `AuthenticationMiddleware` (vllm/entrypoints/serve/utils/server_utils.py): every
route it serves needs one of the keys as a Bearer token, except its public endpoints
(/health, /ping, /load, /version, /metrics and the API docs) and a CORS preflight (OPTIONS);
a guarded URL that matches no route (under /v1) needs it too, so a 401 comes before a 404.
`add_api_keys(app, keys)` does the same here: /v1/*, /tokenize and /detokenize are guarded;
/health, /metrics and /version are open (`PUBLIC_PATHS`), as is a URL outside every guarded
prefix (its 404 lists the routes). The keys are compared as vLLM compares them: each one's
SHA-256, with `secrets.compare_digest`, every key tried, so the time taken says nothing of
which key or how much of it matched; the scheme `Bearer` in any case (RFC 6750).

A request without a key, or with another, is answered 401 with this server's error body
(`openai_response.error_body`: {"error": {"message", "type": "Unauthorized", "code": 401,
"reason": "invalid_api_key"}}, OpenAI's code string) and `WWW-Authenticate: Bearer` (RFC
6750). vLLM's middleware sends the bare {"error": "Unauthorized"}; the object is kept here
because every other error of this server is one and clients read `error.message` (the
`openai` client, this stack's bench). The keys themselves never appear in an answer.

gRPC's Generate asks the same of its `authorization` metadata (gRPC's convention for a
Bearer token; UNAUTHENTICATED otherwise, with the same line: `KeyCheck`, `refusal`); its
HealthCheck and grpc.health.v1 stay open, as /health does.

`check_key(key, option)` refuses a key a client could not send in a header (empty, or not
printable ASCII without spaces: RFC 6750's token characters are a subset), in one line naming
the option and the character's position, never the key (`WseError`; the CLI's exit 2).
Starlette is imported only when a request is checked, so the CLI checks its option before the
front end is imported.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence
from typing import Any

from wse_core.errors import WseError

__all__ = ["PUBLIC_PATHS", "GUARDED_PREFIXES", "KeyCheck", "add_api_keys", "check_key",
           "guarded_prefixes", "refusal"]  # fmt: skip

# vLLM's PUBLIC_ENDPOINTS that this server has (its /ping, /load and docs it has not)
PUBLIC_PATHS = ("/health", "/metrics", "/version")
# vLLM's MIN_GUARDED_PREFIXES that this server's URLs fall under (its /v2, /inference and
# /cohere it has not); every other route's path is guarded too
GUARDED_PREFIXES = ("/v1",)


def check_key(key: str, option: str) -> str:
    """`key` when a client can send it as `Authorization: Bearer <key>`, else a one-line
    `WseError` naming `option` (never the key)."""
    if not key:
        raise WseError(f"{option} is empty; give a key (clients send it as a Bearer token)")
    for i, c in enumerate(key):
        if not " " < c <= "~":
            raise WseError(
                f"{option} holds a character other than ASCII letters, digits and punctuation "
                f"(character {i}); a client sends the key in an HTTP header"
            )
    return key


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).digest()


def _public(path: str) -> bool:
    """Whether `path` is a public endpoint, on a segment boundary (/healthz is not /health)."""
    return any(path == p or path.startswith(p + "/") for p in PUBLIC_PATHS)


def guarded_prefixes(routes: Sequence[Any]) -> tuple[str, ...]:
    """`GUARDED_PREFIXES` and each route's path that is not public, cut before its first
    path parameter (/v1/models/{model} guards /v1/models/), as vLLM derives them."""
    prefixes = set(GUARDED_PREFIXES)
    for route in routes:
        path = getattr(route, "path", None)
        if isinstance(path, str) and path and not _public(path):
            prefixes.add(path.split("{", 1)[0] or "/")
    return tuple(sorted(prefixes))


class KeyCheck:
    """Whether an `Authorization` value (an HTTP header, gRPC's `authorization` metadata)
    is `Bearer <one of keys>`, compared as vLLM compares it (module docstring)."""

    def __init__(self, keys: Sequence[str]) -> None:
        self._digests = [_digest(k) for k in keys]

    def allows(self, authorization: str | None) -> bool:
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer":
            return False
        given, match = _digest(token), False
        for digest in self._digests:  # every key compared: no early exit
            match |= secrets.compare_digest(given, digest)
        return match


def refusal(given: bool) -> str:
    """The 401's (UNAUTHENTICATED's) line: no key sent (`given` false), or another one."""
    why = ("the API key given is not one of this server's" if given else
           "this server requires an API key: send 'Authorization: Bearer <key>'")  # fmt: skip
    return f"Unauthorized: {why}."


class _RequireKey:
    """Pure ASGI middleware (as vLLM's): a guarded request without one of `keys` is a 401."""

    def __init__(self, app: Any, keys: Sequence[str], routes: Any) -> None:
        self.app = app
        self._check = KeyCheck(keys)
        self._routes = routes  # the app's route list, read once the app is built
        self._guarded: tuple[str, ...] | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("method") == "OPTIONS":
            return await self.app(scope, receive, send)
        if self._guarded is None:
            self._guarded = guarded_prefixes(self._routes)
        path = scope["path"].removeprefix(scope.get("root_path", ""))
        from starlette.datastructures import Headers

        header = Headers(scope=scope).get("authorization")
        if _public(path) or not path.startswith(self._guarded) or self._check.allows(header):
            return await self.app(scope, receive, send)
        from wse_inference.serve.openai_response import error_response

        response = error_response(401, refusal(header is not None), reason="invalid_api_key",
                                  headers={"WWW-Authenticate": "Bearer"})  # fmt: skip
        return await response(scope, receive, send)


def add_api_keys(app: Any, keys: Sequence[str]) -> None:
    """Require one of `keys` on `app`'s (FastAPI) guarded routes (module docstring); no keys:
    nothing is required, as vLLM without --api-key."""
    if keys:
        app.add_middleware(_RequireKey, keys=tuple(keys), routes=app.routes)
