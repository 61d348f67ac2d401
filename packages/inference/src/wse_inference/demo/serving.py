"""The serving part of `wse demo`: the model the demo trained, then the mock, over HTTP and gRPC.

`part(console, out_dir=..., quick=...)` first serves the model the training part just wrote
(`out_dir/train/model_dir`, loaded with `load.load_engine` as `wse infer serve --model-dir`
does; run alone, the part makes the same tiny random model the inference part falls back
to) and asks it, with the official `openai` client, for a chat completion and a streamed
completion, over gRPC for a `Generate`, and a few concurrent streaming clients; its answers
are the trained model's text. It then serves `MockEngine` (8 slots, 2 ms per step, emulated
speculative decoding: 3 drafted, 2 accepted per step), whose rule (next token = last + 1)
makes every answer checkable: a chat completion checked against the rule, a refused request
(vLLM's context-length message), a load test of 32 streaming clients (saved to
`out_dir/serve_bench.json`) and a look at /metrics. Each server is drained and closed; the
output names which engine each line comes from.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from wse_core.hw.spec import WaferSpec

__all__ = ["part"]


def _ms(time_info: dict) -> str:
    keys = ("queue_time", "prompt_time", "completion_time", "total_time")
    return ", ".join(f"{k.split('_')[0]} {time_info[k] * 1e3:.2f}" for k in keys)


def _chat(console: Any, url: str) -> None:
    import openai

    from wse_inference.mock import ByteTokenizer, expected_continuation

    client = openai.OpenAI(base_url=url + "/v1", api_key="none", timeout=10, max_retries=0)
    msgs = [{"role": "user", "content": "Count after the colon"}]
    r = client.chat.completions.create(model="mock", messages=msgs, max_tokens=12)
    tok = ByteTokenizer()
    want = tok.decode(
        expected_continuation(tok.encode("user: Count after the colon\nassistant:"), 12)
    )
    ok = "matches" if r.choices[0].message.content == want else "DIFFERS from"
    console.print(
        f"mock, openai chat: {r.choices[0].message.content!r} ({ok} the mock's rule); "
        f"usage {r.usage.prompt_tokens}+{r.usage.completion_tokens} tokens; "
        f"time_info (ms) {_ms(r.model_extra['time_info'])}"
    )
    chunks = list(
        client.completions.create(
            model="mock",
            prompt="abc",
            max_tokens=9,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    console.print(
        f"mock, openai stream: {len(chunks)} chunks -> {text!r}, usage chunk "
        f"{chunks[-1].usage.completion_tokens} tokens"
    )
    try:
        client.completions.create(model="mock", prompt="x" * 200, max_tokens=100)
    except openai.BadRequestError as e:
        console.print(f"mock, refused (400): {e.body['message']}")


def _grpc(console: Any, target: str) -> None:
    import grpc

    from wse_inference.serve.proto import load_stubs

    pb2, pb2_grpc = load_stubs()
    with grpc.insecure_channel(target) as channel:
        stub = pb2_grpc.GenerationStub(channel)
        out = list(stub.Generate(pb2.GenerateRequest(text="gRPC ", max_tokens=6), timeout=10))
        health = stub.HealthCheck(pb2.HealthCheckRequest(), timeout=10)
    console.print(
        f"mock, gRPC Generate: {''.join(r.text for r in out)!r} in {len(out)} messages, "
        f"finish {out[-1].finish_reason}; health "
        f"{pb2.HealthCheckResponse.Status.Name(health.status)}"
    )


def _metrics(console: Any, url: str) -> None:
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(url + "/metrics", timeout=10).text
    values = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
    n = values["wse_time_to_first_token_seconds_count"]
    mean_ttft_ms = values["wse_time_to_first_token_seconds_sum"] / n * 1e3
    console.print(
        f"mock /metrics: {n:.0f} requests, mean TTFT {mean_ttft_ms:.1f} ms, running "
        f"{values['wse_num_requests_running']:.0f}, speculative acceptance "
        f"{values['wse_spec_decode_draft_acceptance_rate']:.2f}"
    )


def _trained_grpc(console: Any, who: str, target: str) -> None:
    """A greedy gRPC `Generate` from the served model."""
    import grpc

    from wse_inference.serve.proto import load_stubs

    pb2, pb2_grpc = load_stubs()
    with grpc.insecure_channel(target) as channel:
        stub = pb2_grpc.GenerationStub(channel)
        req = pb2.GenerateRequest(text="class ", max_tokens=8, temperature=0)
        out = list(stub.Generate(req, timeout=120))
    console.print(
        f"{who}, gRPC Generate: {''.join(m.text for m in out)!r}, finish {out[-1].finish_reason}",
        markup=False,
    )


def _trained(console: Any, out_dir: Path, quick: bool, *, spec: WaferSpec) -> None:
    """Serve the model the demo trained (its engine priced on `spec`) and ask it over every
    client path."""
    import openai

    from wse_inference.demo.generation import demo_model_dir
    from wse_inference.demo.load_test import LoadTestConfig, run_load_test
    from wse_inference.load import load_engine
    from wse_inference.serve.app import ServeConfig, Server

    model_dir = demo_model_dir(console, out_dir)
    engine = load_engine(str(model_dir), spec=spec, max_slots=4)
    cfg = ServeConfig(port=0, grpc_port=0, max_queued=64, drain_s=2)
    server = Server(engine, cfg).start()
    name = engine.model_name
    trained = model_dir == out_dir / "train" / "model_dir"
    who = "trained model" if trained else "random model"
    try:
        console.print(
            f"[bold]engine: {'the model the demo trained' if trained else 'a tiny random model'}"
            f"[/] ({model_dir}), served as {name!r} on {server.http_url} (HTTP) and "
            f"{server.grpc_target} (gRPC)"
        )
        client = openai.OpenAI(
            base_url=server.http_url + "/v1", api_key="none", timeout=120, max_retries=0
        )
        msgs = [{"role": "user", "content": "def main():"}]
        r = client.chat.completions.create(model=name, messages=msgs, max_tokens=16, seed=0)
        console.print(
            f"{who}, openai chat: {r.choices[0].message.content!r} "
            f"({r.usage.prompt_tokens}+{r.usage.completion_tokens} tokens)",
            markup=False,
        )
        chunks = list(
            client.completions.create(
                model=name, prompt="import os\n", max_tokens=16, stream=True, temperature=0
            )
        )
        text = "".join(c.choices[0].text for c in chunks if c.choices)
        console.print(f"{who}, openai stream: {len(chunks)} chunks -> {text!r}", markup=False)
        _trained_grpc(console, who, server.grpc_target)
        n = 4 if quick else 16
        summary = run_load_test(
            LoadTestConfig(url=server.http_url, num_requests=n, concurrency=4, max_tokens=16)
        )
        console.print(
            f"{who}, {n} requests from 4 streaming clients: {summary['completed']}/{n} "
            f"completed, {summary['output_tokens_per_s']:.0f} output tokens/s, TTFT p50 "
            f"{summary['ttft_s']['p50'] * 1e3:.0f} ms"
        )
    finally:
        server.close()


def part(console: Any, *, out_dir: Path, quick: bool) -> None:
    """Serve the trained model, then the mock; see the module docstring."""
    from wse_core import preset

    from wse_inference.demo.load_test import LoadTestConfig, run_load_test
    from wse_inference.mock import MockEngine
    from wse_inference.serve.app import ServeConfig, Server

    _trained(console, out_dir, quick, spec=preset("wse3"))  # the demo is an edge: resolved once
    engine = MockEngine(
        max_slots=8, max_context=256, step_delay_s=0.002, spec_tokens=3, spec_accepted=2
    )
    server = Server(engine, ServeConfig(port=0, grpc_port=0, max_queued=64, drain_s=2)).start()
    try:
        console.print(
            f"[bold]engine: the mock[/] (next token = last + 1, so answers are checkable), "
            f"served as 'mock' on {server.http_url} (HTTP) and {server.grpc_target} (gRPC)"
        )
        _chat(console, server.http_url)
        _grpc(console, server.grpc_target)
        n = 32 if quick else 96
        summary = run_load_test(
            LoadTestConfig(url=server.http_url, num_requests=n, concurrency=32, max_tokens=32)
        )
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "serve_bench.json").write_text(json.dumps(summary, indent=2))
        console.print(
            f"mock, load test of 32 streaming clients: {summary['completed']}/{n} completed, "
            f"{summary['request_throughput_per_s']:.1f} req/s, "
            f"{summary['output_tokens_per_s']:.0f} output tokens/s, TTFT p50/p99 "
            f"{summary['ttft_s']['p50'] * 1e3:.1f}/{summary['ttft_s']['p99'] * 1e3:.1f} ms, "
            f"TPOT p50 {summary['tpot_s']['p50'] * 1e3:.2f} ms"
        )
        _metrics(console, server.http_url)
    finally:
        server.close()
    console.print(
        f"mock slots in use after close: {engine.metrics()['slots_in_use']:.0f}; "
        f"load-test JSON: {out_dir / 'serve_bench.json'}"
    )
