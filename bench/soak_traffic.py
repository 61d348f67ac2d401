"""The clients of the soak (`bench_soak.py`): waves of concurrent `/v1/completions` streams,
each request one of `KINDS` drawn with `WEIGHTS` - a normal stream read to `data: [DONE]`, a
cancel, a disconnect mid-stream, an oversize request (must be a 4xx with an error body), or a
hostile client sending three of `HOSTILE` (each must be `refused`: a 4xx with an error body).

Each request gives a record: kind, start and end (monotonic s), ttft_s and its outcome (`ok`,
`cancelled`, `disconnected`, `refused`, or an error by kind: `http_5xx`, `no_done`,
`exception:<type>`, ...).
"""

from __future__ import annotations

import asyncio
import json
import random
import time

import httpx

PROMPTS = ["def ", "import os\n", "class Wafer:\n", "for i in range(", "return self.", "# The "]
KINDS = ("normal", "cancel", "disconnect", "oversize", "hostile")
WEIGHTS = (0.6, 0.1, 0.1, 0.1, 0.1)
HOSTILE = (
    "prompt_5mb", "prompt_1_5mb", "deep_2000", "deep_100000", "seed_2_70", "stop_1000",
    "not_json", "n_99", "logprobs_99", "content_length_10gb", "template_bomb",
)  # fmt: skip
HEAVY = ("prompt_5mb", "deep_2000", "deep_100000")  # /health is timed while these are refused


def hostile_body(what: str, model: str) -> bytes:
    base = {"model": model, "prompt": "def ", "max_tokens": 8}
    if what.startswith("deep_"):
        depth = int(what.split("_")[1])
        return b'{"model": "%s", "prompt": %s}' % (model.encode(), b"[" * depth + b"]" * depth)
    if what == "not_json":
        return b"\xff\xfe{garbage" * 10
    extra = {
        "prompt_5mb": {"prompt": "x = 1\n" * (5_000_000 // 6)},
        "prompt_1_5mb": {"prompt": "x = 1\n" * (1_500_000 // 6)},
        "seed_2_70": {"seed": 2**70},
        "stop_1000": {"stop": [f"s{i}" for i in range(1000)]},
        "n_99": {"n": 99},
        "logprobs_99": {"logprobs": 99},
    }[what]
    return json.dumps({**base, **extra}).encode()


async def _lying_content_length(url: str) -> int | None:
    """A POST whose Content-Length says 10 GB with 100 bytes behind it: the status code the
    server answers before reading the body, or None if it does not within 10 s."""
    host, port = url.split("//")[1].split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 10000000000\r\n\r\n" + b"{" * 100
        )
        await writer.drain()
        line = await asyncio.wait_for(reader.readline(), timeout=10)
        return int(line.split()[1]) if line.startswith(b"HTTP/") else None
    except (TimeoutError, OSError, ValueError, IndexError):
        return None
    finally:
        writer.close()


async def _hostile(client: httpx.AsyncClient, model: str, rng: random.Random) -> list[dict]:
    """Three hostile requests one after the other; a record each (outcome `refused` when
    the answer is a 4xx with an error body)."""
    recs = []
    for what in rng.sample(HOSTILE, 3):
        rec = {"kind": f"hostile:{what}", "start": time.monotonic(), "ttft_s": None}
        try:
            if what == "template_bomb":
                r = await client.post(
                    "/v1/chat/completions",
                    json={"model": model, "messages": [{"role": "user", "content": "bomb"}]},
                )
                ok = r.status_code == 400 and "error" in r.json()
                rec["outcome"] = "refused" if ok else f"http_{r.status_code}"
            elif what == "content_length_10gb":
                status = await _lying_content_length(str(client.base_url).rstrip("/"))
                rec["outcome"] = "refused" if status == 413 else f"http_{status}"
            else:
                r = await client.post(
                    "/v1/completions",
                    content=hostile_body(what, model),
                    headers={"content-type": "application/json"},
                )
                ok = 400 <= r.status_code < 500 and "error" in r.json()
                rec["outcome"] = "refused" if ok else f"http_{r.status_code}"
        except Exception as e:  # noqa: BLE001 -- counted by kind, none ends the soak
            rec["outcome"] = f"exception:{type(e).__name__}"
        rec["end"] = time.monotonic()
        recs.append(rec)
    return recs


async def _request(client: httpx.AsyncClient, model: str, kind: str, rng: random.Random) -> dict:
    """One client request of `kind`; returns its record (outcome, ttft_s, start)."""
    start = time.monotonic()
    rec = {"kind": kind, "start": start, "ttft_s": None, "outcome": None}
    prompt = rng.choice(PROMPTS) * rng.randint(1, 4)
    body = {"model": model, "prompt": prompt, "max_tokens": rng.randint(8, 48), "stream": True}
    if kind == "oversize":
        if rng.random() < 0.5:
            body["prompt"] = "x = 1\n" * 2000  # far beyond the context
        else:
            body["max_tokens"] = 100_000
    stop_after = rng.randint(1, 4)  # chunks a disconnecting client reads
    cancel_s = rng.uniform(0.05, 2.0)
    try:
        task = _stream(client, body, rec, kind, stop_after)
        if kind == "cancel":
            try:
                await asyncio.wait_for(task, timeout=cancel_s)
            except TimeoutError:
                rec["outcome"] = "cancelled"
        else:
            await task
    except Exception as e:  # noqa: BLE001 -- every failure is counted by kind, none ends the soak
        rec["outcome"] = f"exception:{type(e).__name__}"
    rec["end"] = time.monotonic()
    return rec


async def _stream(client, body, rec, kind, stop_after) -> None:
    async with client.stream("POST", "/v1/completions", json=body) as r:
        if r.status_code != 200:
            text = (await r.aread()).decode(errors="replace")
            try:
                message = json.loads(text)["error"]["message"]
            except (ValueError, KeyError, TypeError):
                message = None
            if 400 <= r.status_code < 500 and message:
                rec["outcome"] = "refused" if kind == "oversize" else f"refused_{r.status_code}"
            else:
                rec["outcome"] = f"http_{r.status_code}"
            return
        chunks, done = 0, False
        async for line in r.aiter_lines():
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                done = True
                break
            payload = json.loads(line[6:])
            if "error" in payload:
                rec["outcome"] = "stream_error"
                return
            if rec["ttft_s"] is None and payload.get("choices"):
                rec["ttft_s"] = time.monotonic() - rec["start"]
            chunks += 1
            if kind == "disconnect" and chunks >= stop_after:
                rec["outcome"] = "disconnected"
                return  # leaving the block closes the connection mid-stream
        if kind == "oversize":
            rec["outcome"] = "oversize_accepted"
        else:
            rec["outcome"] = "ok" if done else "no_done"


async def wave(url: str, model: str, n: int, rng: random.Random) -> list[dict]:
    limits = httpx.Limits(max_connections=n + 8)
    async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as client:
        kinds = rng.choices(KINDS, WEIGHTS, k=n)
        hostile = [_hostile(client, model, rng) for k in kinds if k == "hostile"]
        normal = [_request(client, model, k, rng) for k in kinds if k != "hostile"]
        done = await asyncio.gather(*normal, *hostile)
        return [r for d in done for r in (d if isinstance(d, list) else [d])]
