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
`--top-p`, `--top-k`, `--ignore-eos`). A chat's prompt is text: token ids are a ValueError
(the random dataset's are made text first: `bench_data.random_text_sample`).

`read_chunk(backend, data)` is one `data:` payload as (`openai_replies.Chunk`, role-only):
`openai_replies.parse_chunk`'s, in one pass (an error event, a malformed chunk or usage, an
integer past any count); a chat chunk's text is its choices' `delta.content`, and a chunk
whose deltas carry a role and no content (vLLM's server opens every chat stream with one,
with the first token: so does `wse infer serve`) is role-only: it is timed as vLLM times it
(it is the first chunk with a choice: the TTFT) but carries no token.
"""

from __future__ import annotations

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
    chunk = parse_chunk(data, chat=backend == CHAT)
    return chunk, chunk.role_only
