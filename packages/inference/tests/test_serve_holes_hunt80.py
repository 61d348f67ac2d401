"""Hunt 80 (serve80): serving holes a vLLM user sees. Before the fixes:

1. a one-slot server with `--max-queued 0` (`--max-num-seqs 1`, or any 1-layer model whose
   slots are its layers) could not start: the warm-up sent its second request while the first
   held the only slot, and the queue limit refused it ("The server is busy ... retry later");
2. vLLM's `logprob_token_ids`, `repetition_detection` and `watermarking` (each changes the
   answer in vLLM) were accepted and ignored, a 200;
3. the 429 of an n = 2 request counted its own first choice (admitted, then cancelled when
   the second was refused) as "1 requests are queued" while the queue was empty;
4. echo with max_tokens 0 on a prompt that filled the context was refused, "1 in the
   completion" (the hidden token of the echo-only run), where vLLM checks the 0 sent;
5. the bench's "peak output tokens/s" counted chunks: 54 against a mean of 823 tokens/s on a
   speculative server whose chunks carry several tokens;
6. GET /v1/models lacked vLLM's ModelCard fields root, parent and permission.

Oracles: the engine's record of what it ran against the warm-up's contract (1); vLLM's
protocol (completion/ and chat_completion/protocol.py, ModelCard and ModelPermission) for 2,
4 and 6; queue places counted by hand (3); the NumPy forward pass (`np_logprobs`) for the
full-context prompt's scores (4); tokens and chunks counted by hand per second (5).
"""

from __future__ import annotations

import httpx
import pytest
from wse_inference.engine import SamplingParams
from wse_inference.mock import MockEngine
from wse_inference.serve.app import ServeConfig, Server
from wse_inference.serve.testing import running_server

pytestmark = pytest.mark.timeout(120)

PROMPT = {"model": "mock", "max_tokens": 3, "prompt": "hi"}
CHAT = {"model": "mock", "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}]}


# -- hole 1: the warm-up within the server's own limits -------------------------------------------
class _CountingEngine(MockEngine):
    """A mock that records each prefill's sampling and, at each insert, the slots in use."""

    def __init__(self, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.prefilled: list[SamplingParams] = []
        self.busy_at_insert: list[int] = []

    def prefill(self, **kw):  # type: ignore[override]
        self.prefilled.append(kw["sampling"])
        return super().prefill(**kw)

    def insert(self, **kw):  # type: ignore[override]
        self.busy_at_insert.append(len(kw["state"].slots))
        return super().insert(**kw)


@pytest.mark.parametrize("max_slots", [1, 2])
def test_the_warm_up_runs_within_a_zero_queue(max_slots):
    # steps of 0.1 s: the greedy request still decodes (two steps left) when the warm-up sends
    # the next one, as on a real model (an undelayed mock may end it first, and hide the hole)
    engine = _CountingEngine(max_slots=max_slots, step_delay_s=0.1)
    server = Server(engine, ServeConfig(port=0, grpc_port=None, max_queued=0))
    try:
        server._start_engine_and_grpc()
        server.warmup(timeout_s=60)
    finally:
        server.close()
    # the three warm-up requests (greedy, penalized, closing), each prefilled once
    assert [s.temperature for s in engine.prefilled] == [0.0, 1.0, 1.0]
    assert engine.prefilled[1].repetition_penalty == 1.2
    # the two decoding requests were inserted (the closing one ends at its prefill): with two
    # slots the penalized one beside the greedy one (1 slot busy), as the warm-up's contract
    # asks; with one slot, once the greedy one has left it
    assert engine.busy_at_insert == [0, max_slots - 1]


# -- hole 2: vLLM's newer output-changing fields are refused --------------------------------------
@pytest.fixture(scope="module")
def server():
    with running_server(max_slots=2) as s:
        yield s


@pytest.mark.parametrize("route", ["/v1/completions", "/v1/chat/completions"])
@pytest.mark.parametrize(
    ("field", "value", "neutral"),
    [
        ("logprob_token_ids", [5], None),  # logprobs of these ids in place of the top-k
        ("logprob_token_ids", [], None),  # vLLM's min_length 1: its 400 too
        ("repetition_detection", {"max_pattern_size": 2, "min_count": 2}, None),  # ends early
        ("watermarking", True, False),  # changes the sampled tokens
    ],
)
def test_vllms_newer_sampling_fields_are_a_400_naming_them(server, route, field, value, neutral):
    base = CHAT if route.endswith("chat/completions") else PROMPT
    body = {**base, "logprobs": True if "chat" in route else 1, field: value}
    r = httpx.post(server.http_url + route, json=body, timeout=10)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["message"].startswith(f"{field} is not supported by this server; leave it out")
    assert err["param"] == field
    for ok in {None, neutral}:  # null is "not given", as in vLLM; false is watermarking's off
        r = httpx.post(server.http_url + route, json={**body, field: ok}, timeout=10)
        assert r.status_code == 200, r.text
