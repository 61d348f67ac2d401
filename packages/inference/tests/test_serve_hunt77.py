"""Hunt 77 (a vLLM user load-testing `wse infer serve`), the holes fixed:

1. `--warmup` left the decode path to the first users: the first load test after a start ran
   up to 5x slower, its first request stalling 3 s between token 1 and 2, since `prime` was
   traced again on the state `cycle` returned (another sharding) and the release compiled;
2. a request with presence / frequency / repetition penalties compiled its first token (and,
   its neutral penalties being weak-typed, `prime` again) on the first user's request;
3. a model not served was a 400 model_not_found; OpenAI and vLLM answer 404
   (`openai.NotFoundError`); gRPC keeps INVALID_ARGUMENT (`test_serve_grpc`);
4. /metrics lacked vLLM's per-request histograms (time per output token, prompt and
   generation tokens, prefill / decode / inference time, max_tokens, n) and the tokens per
   engine iteration, and the inter-token latency had the first token's bucket edges and the
   HELP "Time per output token.".

Oracles: JAX's own compile events (`jax.monitoring`), the openai client's status mapping,
vLLM's bucket edges and definitions (vllm/v1/metrics/loggers.py, stats.py: decode time over
the tokens after the first; `build_1_2_5_buckets(100)` is its docstring's example), the mock
engine's sleeps (a wall-clock floor) and identities between the histograms' sums.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path

import grpc
import httpx
import jax
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families
from wse_core import preset
from wse_inference.serve.app import ServeConfig, Server
from wse_inference.serve.metrics import NOT_SERVED, one_two_five_buckets
from wse_inference.serve.proto import load_stubs
from wse_inference.serve.testing import running_server

pytestmark = pytest.mark.timeout(300)
ROOT = Path(__file__).resolve().parents[3]
COMPILE_EVENTS = ("/jax/core/compile/backend_compile_duration",
                  "/jax/core/compile/jaxpr_trace_duration")  # fmt: skip

# vLLM's bucket edges, vllm/v1/metrics/loggers.py
VLLM_TTFT = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
             7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]  # fmt: skip
VLLM_TOKEN_GAP = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
                  7.5, 10.0, 20.0, 40.0, 80.0]  # fmt: skip
VLLM_REQUEST = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0]  # fmt: skip
VLLM_ITERATION = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]


# -- holes 1 and 2: nothing compiles after the warm-up --------------------------------------------
def _bodies(model: str) -> list[tuple[str, dict]]:
    """What a load test and its users send: plain, sampled, penalized (the first penalized
    request stalled 5 s), logprobs and echo, a prompt past the prefill chunk, n=2, stop
    strings, chat."""
    base = {"model": model, "prompt": "The wafer-scale engine", "max_tokens": 6}
    pen = {"presence_penalty": 0.5, "frequency_penalty": 0.3, "repetition_penalty": 1.2}
    long = "hello world the quick brown fox " * 2  # 64 bytes: two prefill chunks of 32
    return [
        ("completions", base),
        ("completions", {**base, "temperature": 0.8, "seed": 5, "top_k": 7, "top_p": 0.9}),
        ("completions", {**base, **pen}),
        ("completions", {**base, **pen, "temperature": 0.0, "logprobs": 3, "stream": True}),
        ("completions", {**base, "echo": True, "logprobs": 1, "max_tokens": 2}),
        ("completions", {**base, "prompt": long, **pen, "seed": 9}),
        ("completions", {**base, "n": 2, "stop": ["zz"]}),
        ("completions", {**base, "max_tokens": 1}),
        ("chat/completions", {"model": model, "max_tokens": 5,
                              "messages": [{"role": "user", "content": "hi"}]}),
    ] * 2  # fmt: skip


def test_no_request_compiles_after_the_warm_up():
    from wse_inference.pipeline.engine import PipelineEngine
    from wse_inference.testing import tiny_model

    engine = PipelineEngine(tiny_model("gpt2"), spec=preset("wse3"), stages=2, max_context=96)
    server = Server(engine, ServeConfig(port=0, grpc_port=0, drain_s=5)).start()
    compiled: list[str] = []

    def listener(event: str, _duration: float, **_: object) -> None:
        if event in COMPILE_EVENTS:
            compiled.append(event)

    try:
        server.warmup()
        jax.monitoring.register_event_duration_secs_listener(listener)
        bodies, codes = _bodies(engine.model_name), []

        def user(part: list[tuple[str, dict]]) -> None:  # 4 users: admissions under load
            for route, body in part:
                r = httpx.post(f"{server.http_url}/v1/{route}", json=body, timeout=120)
                codes.append(r.status_code if r.status_code == 200 else r.text)

        users = [threading.Thread(target=user, args=(bodies[i::4],)) for i in range(4)]
        for t in users:
            t.start()
        pb2, pb2_grpc = load_stubs()
        with grpc.insecure_channel(server.grpc_target) as ch:
            req = pb2.GenerateRequest(text="gRPC too", max_tokens=4, presence_penalty=0.4)
            assert list(pb2_grpc.GenerationStub(ch).Generate(req, timeout=120))
        for t in users:
            t.join(200)
        assert codes == [200] * len(bodies)
        assert compiled == [], f"{len(compiled)} compile events after the warm-up"
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
        server.close()


# -- hole 3: a model not served is a 404 ----------------------------------------------------------
def test_a_model_not_served_is_openais_404_not_found():
    with running_server() as server:
        client = openai.OpenAI(base_url=server.http_url + "/v1", api_key="x", max_retries=0)
        with pytest.raises(openai.NotFoundError) as e:
            client.completions.create(model="nope", prompt="a", max_tokens=1)
        assert e.value.status_code == 404 and e.value.body["code"] == 404  # vLLM's: the status
        assert e.value.body["reason"] == "model_not_found"
        with pytest.raises(openai.NotFoundError):
            client.chat.completions.create(
                model="gpt-4", messages=[{"role": "user", "content": "hi"}], max_tokens=1
            )
        for route, body in [("/tokenize", {"model": "nope", "prompt": "a"}),
                            ("/detokenize", {"model": "nope", "tokens": [1]})]:  # fmt: skip
            r = httpx.post(server.http_url + route, json=body, timeout=10)
            error = r.json()["error"]
            assert r.status_code == 404, r.text
            assert set(error) == {"message", "type", "param", "code", "reason"}
            assert error["reason"] == "model_not_found" and "nope" in error["message"]
        # a missing model is the served one, as in vLLM (hunt 79: a 400); test_serve_hunt79
        r = httpx.post(server.http_url + "/v1/completions", json={"prompt": "a"}, timeout=10)
        assert r.status_code == 200 and r.json()["model"] == "mock"


# -- hole 4: vLLM's metrics -----------------------------------------------------------------------
def _families(server) -> dict:
    text = httpx.get(f"{server.http_url}/metrics", timeout=10).text
    return {f.name: f for f in text_string_to_metric_families(text)}


def _hist(families: dict, name: str) -> dict:
    """{"sum", "count", "edges"} of a histogram (its +Inf edge left out)."""
    f = families[name]
    out = {"edges": []}
    for s in f.samples:
        if s.name.endswith("_bucket") and s.labels["le"] != "+Inf":
            out["edges"].append(float(s.labels["le"]))
        elif s.name.endswith("_sum"):
            out["sum"] = s.value
        elif s.name.endswith("_count"):
            out["count"] = s.value
    return out


def test_one_two_five_buckets_are_vllms():
    assert one_two_five_buckets(100) == (1, 2, 5, 10, 20, 50, 100)  # vLLM's docstring example
    assert one_two_five_buckets(2048) == (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000)
    assert one_two_five_buckets(1) == (1,)


def test_per_request_histograms_are_vllms():
    step_s, prefill_s, max_tokens = 0.02, 0.03, 5
    with running_server(max_slots=2, max_context=200, step_delay_s=step_s,
                        prefill_delay_s=prefill_s) as server:  # fmt: skip
        server.warmup()
        fams = _families(server)
        assert _hist(fams, "wse_iteration_tokens_total")["count"] == 0  # warm-up not counted
        assert _hist(fams, "wse_request_params_n")["count"] == 0
        usages, ns = [], [1, 2, 1]
        for n, prompt in zip(ns, ["abc", "hello there", "x"], strict=True):
            body = {"model": "mock", "prompt": prompt, "max_tokens": max_tokens, "n": n}
            r = httpx.post(f"{server.http_url}/v1/completions", json=body, timeout=30)
            assert r.status_code == 200, r.text
            usages.append((r.json()["usage"], n))
        fams = _families(server)
    choices = sum(ns)
    h = {name: _hist(fams, f"wse_{name}") for name in (
        "time_to_first_token_seconds", "inter_token_latency_seconds",
        "request_time_per_output_token_seconds", "e2e_request_latency_seconds",
        "request_queue_time_seconds", "request_prefill_time_seconds",
        "request_decode_time_seconds", "request_inference_time_seconds",
        "request_prompt_tokens", "request_generation_tokens", "request_params_max_tokens",
        "request_params_n", "iteration_tokens_total")}  # fmt: skip
    # vLLM's edges
    assert h["time_to_first_token_seconds"]["edges"] == VLLM_TTFT
    for name in ("inter_token_latency_seconds", "request_time_per_output_token_seconds"):
        assert h[name]["edges"] == VLLM_TOKEN_GAP
    for name in ("e2e_request_latency_seconds", "request_queue_time_seconds",
                 "request_prefill_time_seconds", "request_decode_time_seconds",
                 "request_inference_time_seconds"):  # fmt: skip
        assert h[name]["edges"] == VLLM_REQUEST
    sizes = [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0]  # build_1_2_5_buckets(200)
    for name in ("request_prompt_tokens", "request_generation_tokens"):
        assert h[name]["edges"] == sizes, name
    assert h["request_params_max_tokens"]["edges"] == sizes
    assert h["request_params_n"]["edges"] == [1.0, 2.0, 5.0, 10.0, 20.0]
    assert h["iteration_tokens_total"]["edges"] == list(map(float, VLLM_ITERATION))
    assert fams["wse_inter_token_latency_seconds"].documentation == (
        "Histogram of inter-token latency in seconds."
    )
    # counts: one a choice (n choices are n requests, as vLLM's children), n once a request
    for name in ("request_time_per_output_token_seconds", "request_prefill_time_seconds",
                 "request_decode_time_seconds", "request_prompt_tokens",
                 "request_generation_tokens", "request_params_max_tokens"):  # fmt: skip
        assert h[name]["count"] == choices, name
    assert (h["request_params_n"]["count"], h["request_params_n"]["sum"]) == (len(ns), sum(ns))
    assert h["request_params_max_tokens"]["sum"] == max_tokens * choices
    prompt = sum(u["prompt_tokens"] * n for u, n in usages)  # usage counts the prompt once
    made = sum(u["completion_tokens"] for u, _ in usages)
    assert h["request_prompt_tokens"]["sum"] == prompt
    assert h["request_generation_tokens"]["sum"] == made == max_tokens * choices
    # every token in exactly one engine iteration (vLLM's prompt + generation per step)
    assert h["iteration_tokens_total"]["sum"] == prompt + made
    # vLLM's definitions: inference = prefill + decode; TPOT = decode / (tokens - 1)
    inference = h["request_prefill_time_seconds"]["sum"] + h["request_decode_time_seconds"]["sum"]
    assert h["request_inference_time_seconds"]["sum"] == pytest.approx(inference, rel=1e-9)
    tpot = h["request_decode_time_seconds"]["sum"] / (max_tokens - 1)
    assert h["request_time_per_output_token_seconds"]["sum"] == pytest.approx(tpot, rel=1e-9)
    # the mock's sleeps are floors: a prefill of prefill_s, a decode step of step_s a token
    assert h["request_prefill_time_seconds"]["sum"] >= choices * prefill_s
    assert h["request_time_per_output_token_seconds"]["sum"] >= choices * step_s
    assert h["e2e_request_latency_seconds"]["sum"] >= (
        h["request_queue_time_seconds"]["sum"] + h["request_inference_time_seconds"]["sum"]
    )


def test_a_one_token_request_decodes_for_no_time():
    """vLLM's: the prefill's token is the first and the last, TPOT and decode time 0."""
    with running_server(step_delay_s=0.01) as server:
        body = {"model": "mock", "prompt": "a", "max_tokens": 1}
        assert httpx.post(f"{server.http_url}/v1/completions", json=body, timeout=10).is_success
        fams = _families(server)
    for name in ("request_decode_time_seconds", "request_time_per_output_token_seconds"):
        assert (_hist(fams, f"wse_{name}")["count"], _hist(fams, f"wse_{name}")["sum"]) == (1, 0)


def test_the_metrics_not_served_are_said_and_not_served():
    from wse_cli.commands.infer_serve import SERVE_HELP

    docs = (ROOT / "docs" / "cli.md").read_text()
    with running_server() as server:
        text = httpx.get(f"{server.http_url}/metrics", timeout=10).text
    served = set(re.findall(r"^# TYPE wse_(\w+) ", text, re.M))
    for name in NOT_SERVED:
        assert name in SERVE_HELP and f"`{name}`" in docs, name
        assert name.removesuffix("_total") not in served, name


@pytest.mark.parametrize("mesh_rows", [1, 2])
def test_the_engines_programs_trace_once(mesh_rows):
    """A no-recompile check of the pipelined engine's step functions: after one round of
    prefill / insert / generate / release, with and without penalties, a second round on the
    state the first returned, and one on a fresh state, trace nothing (hunt 77: `prime`
    traced again on the state `cycle` returned, and on a penalized request's insert)."""
    from wse_inference.engine import SamplingParams
    from wse_inference.pipeline.engine import PipelineEngine
    from wse_inference.testing import tiny_model

    engine = PipelineEngine(
        tiny_model(), spec=preset("wse3"), stages=2, max_context=48, mesh_rows=mesh_rows
    )
    plain = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)
    penalized = SamplingParams(max_tokens=8, seed=3, ignore_eos=True, presence_penalty=0.5,
                               frequency_penalty=0.2, repetition_penalty=1.3)  # fmt: skip

    def round_on(state):
        for slot, sampling in enumerate((plain, penalized)):
            prefix = engine.prefill(prompt_ids=[5, 6, 7], sampling=sampling)
            state = engine.insert(prefix=prefix, state=state, slot=slot)
            state, _ = engine.generate(state=state)
        state, _ = engine.generate(state=state)
        for slot in (0, 1):
            state = engine.release(state=state, slot=slot)
        return state

    compiled: list[str] = []

    def listener(event: str, _duration: float, **_: object) -> None:
        if event in COMPILE_EVENTS:
            compiled.append(event)

    used = round_on(engine.init_decode_state())
    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        round_on(used)
        round_on(engine.init_decode_state())
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    assert compiled == []
