"""Cross-origin requests (CORS): which web pages' scripts may call the server, as vLLM's.

vLLM's server wraps its app in Starlette's `CORSMiddleware` with `--allowed-origins`,
`--allowed-methods` and `--allowed-headers` (each a JSON list, default `["*"]`) and
`--allow-credentials` (default false); `CorsConfig` holds the same four settings with the
same defaults, and `add_cors(app, cors)` applies them the same way, so a browser app that
calls vLLM calls this server unchanged (hunt 74: no response carried
Access-Control-Allow-Origin and a preflight OPTIONS was a 405). What the headers are, for a
preflight and for a request with an Origin, is Starlette's (its documented behaviour: a
preflight's Origin, method or headers not allowed is a 400 "Disallowed CORS ..."; with
credentials allowed, "*" answers with the request's own Origin).

`json_list(text, option)` reads one of the list options as vLLM does (`json.loads`), and
refuses, in one line naming the option, anything that is not a JSON list of strings
(`WseError`; the CLI's exit 2).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from wse_core.errors import WseError, shown

__all__ = ["CorsConfig", "add_cors", "json_list"]

ANY = ("*",)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CorsConfig:
    """vLLM's four CORS settings, its defaults: every origin, method and header, no
    credentials."""

    allowed_origins: tuple[str, ...] = ANY
    allowed_methods: tuple[str, ...] = ANY
    allowed_headers: tuple[str, ...] = ANY
    allow_credentials: bool = False


def json_list(text: str, option: str, example: str = '["*"]') -> tuple[str, ...]:
    """`text` as a JSON list of strings (`'["*"]'`, `'["http://localhost:3000"]'`), else a
    one-line `WseError` naming `option` and what would be right (`example`, a list)."""
    example = f"e.g. '{example}'"
    try:
        value: Any = json.loads(text)
    except (ValueError, RecursionError) as e:  # JSONDecodeError, too deep, too many digits
        where = f" at character {e.pos + 1}" if isinstance(e, json.JSONDecodeError) else ""
        raise WseError(
            f"{option} must be a JSON list of strings, {example}; {shown(text)} is not JSON{where}"
        ) from None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise WseError(f"{option} must be a JSON list of strings, {example}; got {shown(text)}")
    return tuple(value)


def add_cors(app: Any, cors: CorsConfig) -> None:
    """Wrap `app` (FastAPI) in Starlette's CORSMiddleware with `cors`' settings, as vLLM's
    `build_app` does."""
    from starlette.middleware.cors import CORSMiddleware

    app.add_middleware(
        CORSMiddleware,
        allow_origins=list(cors.allowed_origins),
        allow_credentials=cors.allow_credentials,
        allow_methods=list(cors.allowed_methods),
        allow_headers=list(cors.allowed_headers),
    )
