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
import numpy as np
import pytest
from wse_inference.demo.load_tally import RequestResult, Tally
from wse_inference.demo.load_test import LoadTestConfig, run_load_test
from wse_inference.engine import SamplingParams
from wse_inference.mock import MockEngine
from wse_inference.serve.admission import QueueFullError
from wse_inference.serve.app import ServeConfig, Server
from wse_inference.serve.scheduler import Scheduler
from wse_inference.serve.testing import running_server, wait_until

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


# -- hole 3: the 429 of an n > 1 request says what is true ----------------------------------------
def _sampling() -> SamplingParams:
    return SamplingParams(max_tokens=2)


def _submit(scheduler: Scheduler, n: int) -> None:
    scheduler.submit_choices(prompt_ids=[97], samplings=[_sampling()] * n,
                             sinks=[lambda ev: None] * n)  # fmt: skip


def test_a_requests_choices_are_admitted_together_and_counted_as_its_own():
    """Not started, the scheduler admits nothing: queued requests take the free slots first.
    2 slots, queue limit 1, one request waiting: 1 slot spare, 0 requests queued for one; n = 3
    needs 3 - 1 = 2 queue places (> 1: refused, nothing of it left), n = 2 needs 1 (admitted)."""
    scheduler = Scheduler(MockEngine(max_slots=2), max_queued=1)
    _submit(scheduler, 1)
    with pytest.raises(QueueFullError) as info:
        _submit(scheduler, 3)
    assert str(info.value) == (
        "The server is busy: 1 of its 2 slots is free and 0 requests are queued for one "
        "(limit 1); this request's n = 3 choices need 2 places in the queue; retry later."
    )
    assert scheduler.stats().waiting == 1  # no choice of the refused request was admitted
    _submit(scheduler, 2)
    assert scheduler.stats().waiting == 3


def test_one_slot_and_one_request_are_said_in_the_singular():
    scheduler = Scheduler(MockEngine(max_slots=1), max_queued=1)
    _submit(scheduler, 1)  # takes the free slot
    _submit(scheduler, 1)  # queued for one
    with pytest.raises(QueueFullError) as info:
        _submit(scheduler, 1)
    assert str(info.value) == (
        "The server is busy: its 1 slot is taken and 1 request is queued for one (limit 1); "
        "retry later."
    )


def test_the_429_of_an_n_2_request_on_a_running_server_counts_no_ghost():
    """The hunt's case: 2 slots busy with an n = 2 request, queue limit 1, empty queue."""
    with running_server(max_slots=2, max_queued=1, step_delay_s=0.02) as s:
        long = {**PROMPT, "max_tokens": 200, "n": 2, "stream": True}
        with httpx.stream("POST", s.http_url + "/v1/completions", json=long, timeout=30) as r:
            lines = r.iter_lines()  # held: a generator dropped closes the stream (a cancel)
            assert next(lines).startswith("data: {")
            assert wait_until(lambda: s.scheduler.stats().running == 2, 10)
            busy = httpx.post(s.http_url + "/v1/completions", json={**PROMPT, "n": 2}, timeout=10)
            assert busy.status_code == 429, busy.text
            assert busy.json()["error"]["message"] == (
                "The server is busy: all 2 slots are taken and 0 requests are queued for one "
                "(limit 1); this request's n = 2 choices need 2 places in the queue; retry later."
            )
            assert s.scheduler.stats().waiting == 0


# -- hole 4: echo with max_tokens 0 scores a prompt that fills the context ------------------------
def _engine(kind: str, context: int):
    """A served engine over a tiny llama (the speculative one drafting with a 1-layer one)."""
    from wse_core import preset
    from wse_inference.pipeline.engine import PipelineEngine
    from wse_inference.speculative.engine import SpeculativeEngine
    from wse_inference.testing import tiny_model

    model = tiny_model("llama")
    if kind == "pipeline":
        return model, PipelineEngine(model, spec=preset("wse3"), stages=2, max_context=context)
    draft = tiny_model("llama", n_layers=1, seed=1)
    return model, SpeculativeEngine(model, draft, gamma=3, spec=preset("wse3"),
                                    max_context=context)  # fmt: skip


def test_a_one_token_request_may_fill_the_context():
    """Its token is never fed back, so it needs no cache place (vLLM's engine makes one from
    a prompt of max_model_len); two tokens still need the second's."""
    from wse_inference.engine import SamplingError, validate_sampling

    one, two = SamplingParams(max_tokens=1), SamplingParams(max_tokens=2)
    validate_sampling(one, vocab_size=10, max_context=8, prompt_len=8)
    for sampling, prompt_len, top in ((one, 9, 8), (two, 8, 7)):
        with pytest.raises(SamplingError, match=f"shorten it to at most {top} tokens"):
            validate_sampling(sampling, vocab_size=10, max_context=8, prompt_len=prompt_len)


@pytest.mark.parametrize("kind", ["pipeline", "speculative"])
def test_echo_alone_scores_a_prompt_that_fills_the_context(kind):
    from wse_inference.testing import np_logprobs

    context = 48
    model, engine = _engine(kind, context)
    ids = [int(t) for t in np.random.default_rng(0).integers(0, 256, context)]
    server = Server(engine, ServeConfig(port=0, grpc_port=None)).start()
    try:
        url = server.http_url + "/v1/completions"
        body = {"prompt": ids, "max_tokens": 0, "echo": True, "logprobs": 1}
        r = httpx.post(url, json=body, timeout=120)
        assert r.status_code == 200, r.text
        choice, usage = r.json()["choices"][0], r.json()["usage"]
        assert (usage["prompt_tokens"], usage["completion_tokens"]) == (context, 0)
        got = choice["logprobs"]["token_logprobs"]
        assert got[0] is None and len(got) == context  # the first token has no context
        want = np_logprobs(model, ids[:1], ids[1:])[np.arange(context - 1), ids[1:]]
        # float32 forward against float64 NumPy over 2 layers: ~5e-7 seen, 1e-5 allowed
        np.testing.assert_allclose(got[1:], want, atol=1e-5)
        # past the context, vLLM's count of what was sent: 0 in the completion
        r = httpx.post(url, json={**body, "prompt": [*ids, 1]}, timeout=30)
        assert r.status_code == 400
        assert f"you requested {context + 1} tokens ({context + 1} in the messages, 0 in the "\
            "completion)" in r.json()["error"]["message"]  # fmt: skip
        # a token asked for still needs its place, as vLLM's check of the max_tokens sent
        r = httpx.post(url, json={**body, "max_tokens": 1}, timeout=30)
        assert r.status_code == 400
        assert f"({context} in the messages, 1 in the completion)" in r.json()["error"]["message"]
    finally:
        server.close()


# -- hole 5: the bench's peak counts tokens where they are known ----------------------------------
def _tally(results: list[RequestResult]) -> dict:
    tally = Tally()
    for r in results:
        tally.add(r)
    return tally.vllm_keys({"model": "m", "num_requests": len(results), "concurrency": 1,
                            "wall_s": 3.0, "input_tokens": None, "output_tokens": 0,
                            "request_throughput_per_s": 0, "output_tokens_per_s": 0,
                            "total_tokens_per_s": None, "good_requests": None},
                           LoadTestConfig(url="http://x", percentile_metrics=())) | tally._ours(
        3.0, LoadTestConfig(url="http://x"), "m", None)  # fmt: skip


def test_the_peak_counts_tokens_not_a_chats_role_chunk():
    # a chat's stream: its role chunk (no token) at 0.1 s, then 3 tokens at 0.3, 0.6 and 1.2 s;
    # a completion's: 2 tokens at 0.5 and 0.9 s. Second 0 holds 5 chunks, 4 of them tokens
    chat = RequestResult(True, 0.1, 1.2, 3, None, (0.2, 0.3, 0.6), 5, 0.0,
                         (False, True, True, True))  # fmt: skip
    plain = RequestResult(True, 0.5, 0.9, 2, None, (0.4,), 5, 0.0, (True, True))
    s = _tally([chat, plain])
    assert s["max_output_tokens_per_s"] == 5.0  # vLLM's: one a chunk
    assert s["peak_output_tokens_per_s"] == 4
    assert s["several_tokens_a_chunk"] == 0


def test_the_peak_of_chunks_of_several_tokens_is_not_told_as_tokens():
    # 8 tokens (usage) in 2 chunks: which chunk carried how many is not known
    spec = RequestResult(True, 0.2, 0.4, 8, None, (0.2,), 5, 0.0, (True, True))
    s = _tally([spec])
    assert s["max_output_tokens_per_s"] == 2.0
    assert s["peak_output_tokens_per_s"] is None
    assert s["several_tokens_a_chunk"] == 1


def test_a_speculative_servers_chunks_are_seen_as_several_tokens():
    """The mock with speculation makes 4 tokens a step (3 drafted, all accepted): a chunk
    carries 4 (or more, merged for a slow reader), so the tokens' peak is not known; vLLM's
    figure stays one a chunk, at most the 2 x 3 chunks of the two requests' 9 tokens."""
    with running_server(max_slots=2, spec_tokens=3, spec_accepted=3) as s:
        cfg = LoadTestConfig(url=s.http_url, num_requests=2, concurrency=2, max_tokens=9)
        summary = run_load_test(cfg)
    assert summary["completed"] == 2 and summary["output_tokens"] == 18
    assert summary["several_tokens_a_chunk"] == 2
    assert summary["peak_output_tokens_per_s"] is None
    assert summary["max_output_tokens_per_s"] <= 6


# -- hole 6: GET /v1/models carries vLLM's ModelCard ----------------------------------------------
# vLLM's ModelCard and ModelPermission (vllm/entrypoints/openai/protocol.py), their defaults
CARD = {"id", "object", "created", "owned_by", "root", "parent", "max_model_len", "permission"}
PERMISSION = {"object": "model_permission", "allow_create_engine": False, "allow_sampling": True,
              "allow_logprobs": True, "allow_search_indices": False, "allow_view": True,
              "allow_fine_tuning": False, "organization": "*", "group": None,
              "is_blocking": False}  # fmt: skip


def test_models_carry_vllms_model_card(server):
    listed = httpx.get(server.http_url + "/v1/models", timeout=10).json()["data"]
    one = httpx.get(server.http_url + "/v1/models/mock", timeout=10).json()
    for card in (*listed, one):
        assert set(card) == CARD | {"vocab_size"}  # vocab_size: ours, beside vLLM's
        assert (card["id"], card["root"], card["parent"]) == ("mock", "mock", None)
        (perm,) = card["permission"]
        assert set(perm) == {"id", "created", *PERMISSION}
        assert {k: perm[k] for k in PERMISSION} == PERMISSION
        assert perm["id"].startswith("modelperm-") and isinstance(perm["created"], int)
