"""The two OpenAI endpoints `wse infer bench` loads, as vLLM's `vllm bench serve` sends them
(vllm/benchmarks/lib/endpoint_request_func.py): what each request sends and how each streamed
chunk is read.

Contract. `BACKENDS` maps vLLM's `--backend` names to their endpoint: `openai` (and its
alias `vllm`) POST /v1/completions, `openai-chat` POST /v1/chat/completions.
`request_body(backend, model, req, sampling, ignore_eos)` is vLLM's body for `req`
(`bench_data.BenchRequest`): completions send `prompt` and `max_tokens`; chat sends one user
message whose content is one text part, and `max_completion_tokens`; both stream with
`stream_options.include_usage`, send `temperature` (0, greedy, unless `Sampling` says
otherwise: vLLM's default), and `top_p` / `top_k` / `ignore_eos` only when set (vLLM's
`--top-p`, `--top-k`, `--ignore-eos`). A chat's prompt is text: token ids (the random
dataset) are a ValueError.

`read_chunk(backend, data)` is one `data:` payload as (`openai_replies.Chunk`, role-only):
the checks are `openai_replies.parse_chunk`'s (an error event, a malformed chunk or usage, an
integer past any count); a chat chunk's text is its choices' `delta.content`, and a chunk
whose deltas carry a role and no content (vLLM's server opens every chat stream with one) is
role-only: it is timed as vLLM times it (it is the first chunk with a choice: the TTFT) but
carries no token. Chat deltas are read from a second `json.loads` of a payload
`parse_chunk` already took whole, so its bounds hold for both.
"""

from __future__ import annotations

import json
from typing import NamedTuple

from wse_inference.demo.bench_data import BenchRequest
from wse_inference.demo.openai_replies import Chunk, parse_chunk

__all__ = ["BACKENDS", "CHAT", "Sampling", "read_chunk", "request_body"]

CHAT = "openai-chat"
# vLLM's --backend names this bench speaks -> the endpoint each posts to
BACKENDS = {"openai": "/v1/completions", "vllm": "/v1/completions", CHAT: "/v1/chat/completions"}


class Sampling(NamedTuple):
    """What each request samples with: vLLM's --temperature (default 0: greedy), --top-p and
    --top-k (None: not sent, the server's default)."""

    temperature: float = 0.0
    top_p: float | None = None
    top_k: int | None = None


def request_body(
    backend: str, model: str, req: BenchRequest, sampling: Sampling, ignore_eos: bool
) -> dict:
    """vLLM's streamed request body for `req` on `backend`'s endpoint (module docstring)."""
    if backend == CHAT:
        if not isinstance(req.prompt, str):
            raise ValueError("a chat request sends text; token ids go to /v1/completions")
        content = [{"type": "text", "text": req.prompt}]
        body = {"model": model, "messages": [{"role": "user", "content": content}],
                "max_completion_tokens": req.max_tokens}  # fmt: skip
    else:
        body = {"model": model, "prompt": req.prompt, "max_tokens": req.max_tokens}
    body.update(temperature=sampling.temperature, stream=True,
                stream_options={"include_usage": True})  # fmt: skip
    for key in ("top_p", "top_k"):
        if (value := getattr(sampling, key)) is not None:  # sent only when given, as vLLM's
            body[key] = value
    if ignore_eos:  # sent only when set, as vLLM's client does
        body["ignore_eos"] = True
    return body


def read_chunk(backend: str, data: str) -> tuple[Chunk, bool]:
    """One `data:` payload of `backend`'s stream: (the chunk, whether it is role-only)."""
    chunk = parse_chunk(data)  # every check; a chat's choices have no "text": ""
    if backend != CHAT or not chunk.choice:
        return chunk, False
    deltas = [c.get("delta") or {} for c in json.loads(data)["choices"]]
    if not all(isinstance(d, dict) and isinstance(d.get("content") or "", str) for d in deltas):
        raise ValueError(f"a chunk whose choices are not OpenAI chat's: {data[:80]!r}")
    text = "".join(d.get("content") or "" for d in deltas)
    role_only = not text and not chunk.finished and any("role" in d for d in deltas)
    return chunk._replace(text=text), role_only
