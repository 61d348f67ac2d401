"""Hunt 78: serving's holes. Before the fixes:

1. the mock engine had no `reset_metrics`, so the warm-up's drafted tokens, prefills and
   steps were on /metrics (`wse_spec_decode_num_draft_tokens_total 6.0` before any request;
   42 drafted tokens after 4 requests of 9 tokens, where 36 is right);
2. under speculation `wse_inter_token_latency_seconds` had one observation per token, each the
   step's gap over its tokens, where vLLM v1 (`IterationStats.update_from_output`) observes
   one per request per engine output, the whole gap;
4. `sample` refused JAX's typed keys (`jax.random.split(jax.random.key(0), 3)`): "vmap got
   inconsistent sizes".

Oracles: the mock's documented speculation (every step of a slot drafts k tokens, accepts j
and emits j + 1, the prefill's first token before), counted by hand; vLLM v1's definition of
the inter-token latency (one gap per engine output after the first, so a request's gaps sum
to its decode time); the raw-key path of `sample` for the same key's `key_data`, and
`draw(token_probs(...))` row by row.
"""

from __future__ import annotations

import math

import httpx
import jax
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families
from wse_inference.engine import SamplingParams
from wse_inference.mock import MockEngine
from wse_inference.sampling import draw, sample, token_probs
from wse_inference.serve.app import ServeConfig, Server
from wse_inference.serve.metrics import ServeMetrics
from wse_inference.serve.request import RequestHandle

pytestmark = pytest.mark.timeout(120)
K, J = 3, 2  # drafted and accepted tokens a step: --speculative-config's of the report
TOKENS, REQUESTS = 9, 4


def _families(server) -> dict:
    text = httpx.get(f"{server.http_url}/metrics", timeout=10).text
    return {f.name: f for f in text_string_to_metric_families(text)}


def _value(fams: dict, name: str, sample_name: str | None = None) -> float | None:
    f = fams.get(name)
    if f is None:
        return None
    return next(s.value for s in f.samples if s.name == (sample_name or f.samples[0].name))


def _complete(server, max_tokens: int) -> None:
    body = {"model": "mock", "prompt": "a", "max_tokens": max_tokens}
    r = httpx.post(f"{server.http_url}/v1/completions", json=body, timeout=30)
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == max_tokens


def _served(**engine_kw):
    return Server(MockEngine(spec_tokens=K, spec_accepted=J, **engine_kw),
                  ServeConfig(port=0, drain_s=2.0)).start()  # fmt: skip


# -- hole 1: the mock's counters start after the warm-up -------------------------------------
def test_reset_metrics_zeroes_the_counts_and_keeps_the_state():
    engine = MockEngine(spec_tokens=K, spec_accepted=J)
    state = engine.init_decode_state()
    prefix = engine.prefill(prompt_ids=[1, 2], sampling=SamplingParams(max_tokens=8))
    state = engine.insert(prefix=prefix, state=state, slot=0)
    state, _ = engine.generate(state=state)
    assert engine.metrics()["spec_draft_tokens"] == K
    engine.reset_metrics()
    m = engine.metrics()
    assert m["steps"] == m["prefills"] == m["spec_draft_tokens"] == m["spec_accepted_tokens"] == 0
    # the slot still holds its prompt (2), the prefill's token and a step's J + 1 tokens
    assert m["slots_in_use"] == 1 and m["kv_cache_tokens"] == 2 + 1 + (J + 1)
    state, _ = engine.generate(state=state)
    assert engine.metrics()["spec_draft_tokens"] == K and engine.metrics()["steps"] == 1


def test_the_warm_up_is_not_counted_by_the_mock_engine():
    server = _served()
    try:
        server.warmup()
        before = _families(server)
        assert _value(before, "wse_engine_prefills") == 0  # was 3
        assert _value(before, "wse_engine_steps") == 0  # was 2
        drafted = _value(before, "wse_spec_decode_num_draft_tokens")
        assert drafted in (None, 0)  # was 6: no speculative step has run for a user
        for _ in range(REQUESTS):  # one after another: each its own steps
            _complete(server, TOKENS)
        after = _families(server)
        steps = math.ceil((TOKENS - 1) / (J + 1))  # the prefill's token, then J + 1 a step
        assert _value(after, "wse_engine_prefills") == REQUESTS
        assert _value(after, "wse_engine_steps") == REQUESTS * steps
        assert _value(after, "wse_spec_decode_num_draft_tokens") == REQUESTS * steps * K == 36
        assert _value(after, "wse_spec_decode_num_accepted_tokens") == REQUESTS * steps * J
    finally:
        server.close()


# -- hole 2: one inter-token latency per request per engine step, the whole gap --------------
def test_one_inter_token_latency_per_step_of_the_whole_gap():
    step_s = 0.04  # the mock sleeps this long in each step: every gap is at least this
    server = _served(step_delay_s=step_s)
    try:
        server.warmup()
        for _ in range(REQUESTS):
            _complete(server, TOKENS)
        fams = _families(server)
    finally:
        server.close()
    itl, decode = "wse_inter_token_latency_seconds", "wse_request_decode_time_seconds"
    steps = math.ceil((TOKENS - 1) / (J + 1))
    assert _value(fams, itl, f"{itl}_count") == REQUESTS * steps  # was 32: one per token
    # every observation is a whole step's gap, none the gap over its J + 1 tokens (was 0.013)
    low = next(s.value for s in fams[itl].samples if s.labels.get("le") == "0.025")
    assert low == 0
    # a request's gaps, one per output after the first, add up to its decode time (vLLM's);
    # the decode time starts at first_token_s and the first gap at the first event's clock
    # read, after its text is decoded (scheduler._emit): tens of us later, 5 ms is a bound
    itl_sum = _value(fams, itl, f"{itl}_sum")
    assert itl_sum == pytest.approx(_value(fams, decode, f"{decode}_sum"), abs=REQUESTS * 5e-3)
    assert _value(fams, itl, f"{itl}_sum") >= REQUESTS * steps * step_s


def test_on_tokens_observes_the_gap_once_whatever_the_tokens():
    m = ServeMetrics("m")
    handle = RequestHandle(0, [1], SamplingParams(max_tokens=4), print, lambda: None)
    m.on_tokens(handle, 3, 0.3)
    m.on_tokens(handle, 1, 0.05)
    text = m.render().decode()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    samples = {s.name: s.value for s in fams["wse_inter_token_latency_seconds"].samples
               if "le" not in s.labels}  # fmt: skip
    assert samples["wse_inter_token_latency_seconds_count"] == 2
    assert samples["wse_inter_token_latency_seconds_sum"] == pytest.approx(0.35)


# -- hole 4: typed keys ----------------------------------------------------------------------------
@pytest.mark.parametrize("lead", [(), (3,), (2, 3)])
@pytest.mark.parametrize(("temperature", "top_k", "top_p"), [(1.0, 0, 1.0), (0.7, 5, 0.9),
                                                              (0.0, 0, 1.0)])  # fmt: skip
def test_typed_keys_draw_what_their_raw_data_draws(lead, temperature, top_k, top_p):
    n = math.prod(lead)
    logits = jax.random.normal(jax.random.PRNGKey(1), (*lead, 64))
    typed = jax.random.split(jax.random.key(0), max(n, 1)).reshape(lead)
    raw = jax.random.key_data(typed)
    assert raw.shape == (*lead, 2)
    got = sample(logits, temperature, top_k, top_p, typed)  # was a vmap ValueError
    want = sample(logits, temperature, top_k, top_p, raw)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    jitted = jax.jit(sample)(logits, temperature, top_k, top_p, typed)
    np.testing.assert_array_equal(np.asarray(jitted), np.asarray(want))
    # row by row, as the contract says: draw(token_probs(...), key)
    probs = token_probs(logits, temperature, top_k, top_p).reshape(-1, 64)
    rows = [int(draw(p, k)) for p, k in zip(probs, typed.reshape(-1), strict=True)]
    assert np.asarray(got).reshape(-1).tolist() == rows


def test_typed_keys_inside_vmap_as_reported():
    logits = jax.random.normal(jax.random.PRNGKey(2), (3, 5, 32))
    keys = jax.random.split(jax.random.key(0), 15).reshape(3, 5)
    one = jax.vmap(lambda z, k: sample(z, 1.0, 0, 1.0, k))
    got = one(logits, keys)
    want = one(logits, jax.random.key_data(keys))
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
