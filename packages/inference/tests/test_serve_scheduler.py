"""Scheduler, text stream and mock engine: outputs checked against the hand-computed oracle."""

from __future__ import annotations

import queue

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from wse_inference.engine import Engine, SamplingParams
from wse_inference.mock import ByteTokenizer, MockEngine, expected_continuation
from wse_inference.serve.admission import InvalidRequestError, QueueFullError, ShuttingDownError
from wse_inference.serve.scheduler import Scheduler
from wse_inference.serve.testing import events_until_finished, wait_until
from wse_inference.serve.text_stream import TextStream

pytestmark = pytest.mark.timeout(30)


def _text(events) -> str:
    return "".join(e.text for e in events)


@pytest.fixture
def sched():
    engines: list[Scheduler] = []

    def make(**kw) -> Scheduler:
        max_queued = kw.pop("max_queued", 64)
        s = Scheduler(MockEngine(**kw), max_queued=max_queued).start()
        engines.append(s)
        return s

    yield make
    for s in engines:
        s.stop(timeout_s=5)


def _submit(s: Scheduler, prompt: str, **sampling) -> queue.Queue:
    q: queue.Queue = queue.Queue()
    s.submit(
        prompt_ids=s.engine.tokenizer.encode(prompt),
        sampling=SamplingParams(**sampling),
        sink=q.put,
    )
    return q


def test_mock_is_an_engine_and_follows_its_rule():
    e = MockEngine(max_slots=2)
    assert isinstance(e, Engine)
    p = e.prefill(prompt_ids=[10, 20], sampling=SamplingParams(max_tokens=4))
    assert p.first_token == 21
    state = e.insert(prefix=p, state=e.init_decode_state(), slot=1)
    tokens = [p.first_token]
    while True:
        state, (out,) = e.generate(state=state)
        tokens += out.tokens
        if out.finished:
            break
    assert tokens == expected_continuation([10, 20], 4) == [21, 22, 23, 24]
    assert out.finish_reason == "length"
    assert e.metrics()["kv_cache_tokens"] == 2 + 4
    e.release(state=state, slot=1)
    assert e.metrics()["kv_cache_tokens"] == 0
    with pytest.raises(ValueError):
        e.release(state=state, slot=1)


def test_text_stream_holds_partial_utf8_and_cuts_at_stop_string():
    tok = ByteTokenizer()
    ids = tok.encode("héllo wörld END tail")
    ts = TextStream(tok, stop=("END",))
    pieces = [ts.push([i])[0] for i in ids]
    assert all("\ufffd" not in p for p in pieces)  # never half a character
    assert "".join(pieces) == "héllo wörld "
    assert ts.stopped
    ts2 = TextStream(tok, stop_token_ids=[ord("w")])
    out, stopped = ts2.push(ids)
    assert (out, stopped) == ("héllo ", True)


@pytest.mark.parametrize("run", ["\ufffd".encode() * 3000, bytes(range(0x80, 0xC0)) * 60])
def test_text_stream_releases_a_run_of_replacement_characters_as_it_comes(run):
    # hunt 62: text that kept ending in U+FFFD (the character itself, or bytes that are no
    # UTF-8) was held whole and decoded again for each token: 8,000 tokens took 30 s
    import time

    tok = ByteTokenizer()
    ids = [*tok.encode("ok "), *run, *tok.encode("é done")]
    ts = TextStream(tok)
    t0, pieces = time.perf_counter(), []
    for i in ids:
        pieces.append(ts.push([i])[0])
    pieces.append(ts.flush())
    assert time.perf_counter() - t0 < 2.0  # linear: ~3,000 ids in milliseconds
    assert "".join(pieces) == tok.decode(ids)  # the same text as decoding it whole
    assert sum(map(len, pieces[:-1])) >= len(tok.decode(ids)) - 8  # released as it came
    assert "".join(pieces[:100]).startswith("ok \ufffd")


def test_more_requests_than_slots_all_get_the_oracle_output(sched):
    s = sched(max_slots=3, step_delay_s=0.001)
    prompts = [f"p{i}a" for i in range(10)]
    qs = [_submit(s, p, max_tokens=5 + i) for i, p in enumerate(prompts)]
    tok = s.engine.tokenizer
    for i, (p, q) in enumerate(zip(prompts, qs, strict=True)):
        events = events_until_finished(q)
        want = tok.decode(expected_continuation(tok.encode(p), 5 + i))
        assert _text(events) == want
        assert events[-1].finish_reason == "length"
        assert events[-1].completion_tokens == 5 + i
        assert sum(len(e.token_ids) for e in events) == 5 + i
    assert wait_until(lambda: s.idle)
    assert s.engine.metrics()["kv_cache_tokens"] == 0
    # continuous batching: the slots were shared, never more than 3 at once
    assert s.engine.metrics()["prefills"] == 10


def test_stop_string_and_stop_token_and_max_tokens_one(sched):
    s = sched(max_slots=2)
    ev = events_until_finished(_submit(s, "a", max_tokens=20, stop=("ef",)))
    assert (_text(ev), ev[-1].finish_reason) == ("bcd", "stop")
    ev = events_until_finished(_submit(s, "a", max_tokens=20, stop_token_ids=(ord("d"),)))
    assert (_text(ev), ev[-1].finish_reason, ev[-1].completion_tokens) == ("bc", "stop", 3)
    ev = events_until_finished(_submit(s, "a", max_tokens=1))
    assert (_text(ev), ev[-1].finish_reason) == ("b", "length")
    assert wait_until(lambda: s.engine.metrics()["slots_in_use"] == 0)


def test_speculative_steps_never_exceed_max_tokens(sched):
    s = sched(max_slots=2, spec_tokens=4, spec_accepted=3)
    ev = events_until_finished(_submit(s, "A", max_tokens=10))
    assert _text(ev) == "BCDEFGHIJK"
    assert [len(e.token_ids) for e in ev] == [1, 4, 4, 1]  # prefill, then j + 1 per step
    m = s.engine.metrics()
    assert m["spec_acceptance_rate"] == pytest.approx(3 / 4)


def test_cancel_frees_slot_within_one_step(sched):
    s = sched(max_slots=1, step_delay_s=0.005)
    q: queue.Queue = queue.Queue()
    h = s.submit(prompt_ids=[1], sampling=SamplingParams(max_tokens=200), sink=q.put)
    assert wait_until(lambda: s.engine.metrics()["slots_in_use"] == 1)
    q.get(timeout=5)
    q.get(timeout=5)  # it is generating
    steps_at_cancel = s.engine.step_count
    h.cancel()
    ev = events_until_finished(q)
    assert ev[-1].finish_reason == "abort"
    ((slot, released_at),) = s.engine.release_steps
    assert released_at <= steps_at_cancel + 1
    assert s.engine.metrics()["kv_cache_tokens"] == 0


def test_queue_bound_and_cancel_while_waiting(sched):
    s = sched(max_slots=1, step_delay_s=0.005, max_queued=2)
    q0: queue.Queue = queue.Queue()
    s.submit(prompt_ids=[1], sampling=SamplingParams(max_tokens=100), sink=q0.put)
    assert wait_until(lambda: s.stats().running == 1)
    waiting = [queue.Queue() for _ in range(2)]
    handles = [
        s.submit(prompt_ids=[1], sampling=SamplingParams(max_tokens=3), sink=w.put) for w in waiting
    ]
    with pytest.raises(QueueFullError) as info:
        s.submit(prompt_ids=[1], sampling=SamplingParams(max_tokens=3), sink=print)
    assert info.value.retry_after_s >= 1
    handles[0].cancel()  # a waiting request leaves the queue at once
    assert events_until_finished(waiting[0])[-1].finish_reason == "abort"
    assert wait_until(lambda: s.stats().waiting == 1)
    s.submit(prompt_ids=[1], sampling=SamplingParams(max_tokens=3), sink=print)  # room again


@pytest.mark.parametrize(
    ("prompt", "kw", "param"),
    [
        ([], {}, "prompt"),
        ([1], {"max_tokens": 0}, "max_tokens"),
        ([1] * 60, {"max_tokens": 5}, "max_tokens"),
        ([1], {"temperature": -0.5}, "temperature"),
        ([1], {"top_p": 0.0}, "top_p"),
        ([1], {"top_p": 1.5}, "top_p"),
        ([999], {}, "prompt"),
    ],
)
def test_invalid_requests_are_refused_not_truncated(sched, prompt, kw, param):
    s = sched(max_context=64)
    with pytest.raises(InvalidRequestError) as info:
        s.submit(prompt_ids=prompt, sampling=SamplingParams(**kw), sink=print)
    assert info.value.param == param
    if len(prompt) == 60:
        assert str(info.value) == (
            "This model's maximum context length is 64 tokens. However, you requested 65 tokens "
            "(60 in the messages, 5 in the completion). Please reduce the length of the "
            "messages or completion."
        )


def test_drain_lets_short_work_finish_and_aborts_the_rest(sched):
    s = sched(max_slots=2, step_delay_s=0.002)
    short = _submit(s, "a", max_tokens=5)
    long = _submit(s, "a", max_tokens=200)
    s.drain(grace_s=0.1)
    with pytest.raises(ShuttingDownError):
        s.submit(prompt_ids=[1], sampling=SamplingParams(), sink=print)
    assert events_until_finished(short)[-1].finish_reason == "length"
    last = events_until_finished(long)[-1]
    assert last.finish_reason == "abort" and "shutting down" in last.error
    assert wait_until(lambda: s.engine.metrics()["slots_in_use"] == 0)


class _Broken(MockEngine):
    def generate(self, *, state):
        raise RuntimeError("boom")


def test_engine_failure_is_reported_to_the_request_and_the_loop_survives():
    s = Scheduler(_Broken(max_slots=1), max_queued=4).start()
    try:
        ev = events_until_finished(_submit(s, "a", max_tokens=3))
        assert ev[-1].finish_reason == "error" and "boom" in ev[-1].error
        ev = events_until_finished(_submit(s, "a", max_tokens=1))  # prefill-only still works
        assert _text(ev) == "b"
    finally:
        s.stop(timeout_s=5)


@settings(max_examples=200, deadline=None)
@given(
    text=st.text(alphabet=st.sampled_from(list("ab xé€😀\n")), max_size=30),
    stops=st.lists(
        st.text(alphabet=st.sampled_from(list("ab é€")), min_size=1, max_size=3), max_size=2
    ),
    chunk=st.integers(1, 5),
)
def test_text_stream_equals_cutting_the_whole_text(text, stops, chunk):
    """Pushed in chunks of bytes, the output is the whole text cut before the stop string
    that is completed first (a longer stop that starts earlier but ends later never happens)."""
    tok = ByteTokenizer()
    ids = tok.encode(text)
    ts = TextStream(tok, stop=stops)
    out = []
    for i in range(0, len(ids), chunk):
        piece, stopped = ts.push(ids[i : i + chunk])
        out.append(piece)
        if stopped:
            break
    out.append(ts.flush())
    # generation stops where a stop string is first completed (earliest end, then start)
    hits = [(text.find(s) + len(s), text.find(s)) for s in stops if s in text]
    assert "".join(out) == (text[: min(hits)[1]] if hits else text)
    assert ts.stopped == bool(hits)


def test_text_stream_stops_at_the_stop_string_completed_first():
    # found by hypothesis: "aba" with stops "b" and "aba" — "b" completes first
    ts = TextStream(ByteTokenizer(), stop=["b", "aba"])
    out = [ts.push([i])[0] for i in ByteTokenizer().encode("aba")]
    assert "".join(out) + ts.flush() == "a" and ts.stopped
