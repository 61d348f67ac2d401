"""The front-end rows of `bench_hostile.py`: one `wse infer serve` of a tiny model dir whose
`chat_template.jinja` is a bomb (two nested `range(100000)` loops), given hostile requests
one at a time while its process tree's resident memory is sampled, then a gRPC stream that
must complete after SIGTERM within `--drain-s` (issue 43). The bodies and the drain are
the soak's (`soak_traffic.hostile_body`, `soak_server.grpc_drain`).

Each row: the request, the status it got (HTTP code or gRPC status name) against the one
expected (400 / 413 / INVALID_ARGUMENT; OK and every token for the drain), whether the
refusal carries a one-line error message of at most `MESSAGE_CHARS`, its wall time and the
server's peak RSS."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

from hostile_cases import BOMB_MESSAGE, TEMPLATE_BOMB

HEALTHY_WITHIN_S = 300.0  # seconds a loaded machine may take to start the server (JAX import)
MESSAGE_CHARS = 1_000  # an error message echoes input as its head and length, never whole


def _sampler(pid: int, peak: list[int], stop: threading.Event, every_s: float) -> None:
    import psutil

    proc = psutil.Process(pid)
    while not stop.is_set():
        try:
            procs = [proc, *proc.children(recursive=True)]
            peak[0] = max(peak[0], max(p.memory_info().rss for p in procs))
        except psutil.Error:
            pass
        time.sleep(every_s)


def _grpc_garbage(target: str, stop: list[str] | None = None) -> tuple[str, str]:
    """Garbage bytes as a Generate request (or, with `stop`, a request with those stop
    strings): its status name and details."""
    import grpc
    from wse_inference.serve.proto import load_stubs

    pb2, _ = load_stubs()
    with grpc.insecure_channel(target) as channel:
        raw = channel.unary_stream(
            "/wse.inference.v1.Generation/Generate",
            request_serializer=lambda b: b,
            response_deserializer=pb2.GenerateResponse.FromString,
        )
        body = b"\xff\xfe garbage \x00" * 8
        if stop is not None:
            body = pb2.GenerateRequest(text="a", max_tokens=2, stop=stop).SerializeToString()
        try:
            list(raw(body, timeout=30))
            return "OK", ""
        except grpc.RpcError as e:
            return e.code().name, e.details() or ""


def _bad_content_length(port: int, raw: bytes = b"") -> tuple[int | None, str]:
    """A request h11 cannot parse (it never reaches the app): its status and JSON message;
    `raw` instead of the Content-Length of "abc" (half a head: the head timeout's answer)."""
    import json
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(
            raw or b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n{}"
        )
        answer = b""
        while chunk := s.recv(4096):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    try:
        return int(head.split()[1]), json.loads(body)["error"]["message"]
    except Exception:  # noqa: BLE001  not an OpenAI error body: the row fails
        return None, ""


def _body_after_413(port: int, most_bytes: int = 1 << 30) -> tuple[int | str | None, str]:
    """A Content-Length of 10**11 bytes, then up to `most_bytes` of body after the 413: the
    status and message when the server closed within RequestLimits' bounds (64 MiB, 10 s),
    else how much it took."""
    import json
    import socket

    head = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100000000000\r\n\r\n")  # fmt: skip
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(head)
        answer = b""
        while not answer.rstrip().endswith(b"}"):  # the 413's head and its JSON body
            answer += s.recv(65536) or b"}"
        sent, chunk = 0, b"x" * (1 << 20)
        try:
            while sent < most_bytes:
                s.sendall(chunk)
                sent += len(chunk)
        except OSError:  # closed: reset or a broken pipe
            pass
    status, _, rest = answer.partition(b"\r\n")
    try:
        code, message = int(status.split()[1]), json.loads(rest.partition(b"\r\n\r\n")[2])
    except (IndexError, ValueError):
        return None, answer[:200].decode(errors="replace")
    if sent >= most_bytes:
        return f"{code}, then {sent >> 20} MiB read", ""
    return code, message["error"]["message"]


def _stalled_bodies(port: int, clients: int = 80) -> tuple[int | None, str]:
    """`clients` connections each sending 2 MB of a 2 MB + 10 body, then nothing (hunt 58b:
    each was held whole, 650 MB for 300): the status and message of a refused one (429 once
    the bodies held pass `RequestLimits.max_body_bytes_in_flight`), None if none was."""
    import json
    import select
    import socket

    head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
    socks = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(clients)]
    try:
        for s in socks:
            s.sendall(head % (2_000_010,) + b" " * 2_000_000)
        ready, _, _ = select.select(socks, [], [], 10)
        for s in ready:
            answer = s.recv(65536)
            while answer.startswith(b"HTTP/1.1 429") and not answer.rstrip().endswith(b"}"):
                answer += s.recv(65536) or b"}"  # the head came alone: its JSON body follows
            status, _, rest = answer.partition(b"\r\n")
            if status.startswith(b"HTTP/1.1 429"):
                return 429, json.loads(rest.partition(b"\r\n\r\n")[2])["error"]["message"]
        return None, ""
    finally:
        for s in socks:
            s.close()


def serve_rows(model_dir: str, env: dict[str, str], wse: list[str], every_s: float) -> list[dict]:
    """Start the server on `model_dir` with the bomb template, send the hostile requests,
    SIGTERM it under a gRPC stream; one row per request."""
    from soak_server import free_port

    folder = Path(model_dir)
    (folder / "chat_template.jinja").write_text(TEMPLATE_BOMB)
    port, grpc_port = free_port(), free_port()
    cmd = [*wse, "infer", "serve", "--model-dir", model_dir, "--host", "127.0.0.1", "--port",
           str(port), "--grpc-port", str(grpc_port), "--drain-s", "30"]  # fmt: skip
    log = open(folder.parent / "serve.log", "w+")  # noqa: SIM115  read back on a failed start
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=log)
    try:
        from hostile_cases_hunt80 import hunt80_python_api_row

        rows = _rows(proc, log, port, grpc_port, every_s, bench=(wse, env))
        return [*rows, hunt80_python_api_row(env)]
    finally:  # a row that raised left the server running past the bench (hunt 60)
        if proc.poll() is None:
            proc.kill()
        log.close()


def _rows(proc, log, port: int, grpc_port: int, every_s: float, bench=None) -> list[dict]:
    """`serve_rows`' requests against the started server `proc` (and, with `bench` the
    `(wse, env)` to run it by, a `wse infer bench` every request of which it refuses)."""
    import httpx
    from hostile_cases_hunt80 import hunt80_requests
    from hostile_cases_hunt81 import hunt81_requests
    from soak_server import grpc_drain
    from soak_traffic import hostile_body

    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + HEALTHY_WITHIN_S
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.5)
    else:
        proc.kill()
        log.seek(0)
        why = (log.read().strip().splitlines() or ["no output"])[-1]
        return [_row("server start", None, "healthy", 0.0, 0, f"did not start: {why}")]
    model = httpx.get(url + "/v1/models", timeout=10).json()["data"][0]["id"]
    peak, stop = [0], threading.Event()
    threading.Thread(target=_sampler, args=(proc.pid, peak, stop, every_s), daemon=True).start()
    chat = {"model": model, "messages": [{"role": "user", "content": BOMB_MESSAGE}],
            "max_tokens": 2}  # fmt: skip
    requests = [
        ("chat template bomb (model dir)", "/v1/chat/completions",
         httpx.Request("POST", url, json=chat).content, 400),
        ("5 MB prompt", "/v1/completions", hostile_body("prompt_5mb", model), 413),
        ("body 100,000 deep", "/v1/completions", hostile_body("deep_100000", model), 400),
        ("bytes that are not JSON", "/v1/completions", hostile_body("not_json", model), 400),
        ("seed 2**70", "/v1/completions", hostile_body("seed_2_70", model), 400),
        ("1,000 stop strings", "/v1/completions", hostile_body("stop_1000", model), 400),
        ("temperature 1e308", "/v1/completions", httpx.Request("POST", url, json={
            "model": model, "prompt": "a", "max_tokens": 2, "temperature": 1e308}).content, 400),
        ("NaN literal (not JSON)", "/v1/completions",
         b'{"model": "%s", "prompt": "a", "top_p": NaN}' % model.encode(), 400),
        ("100 empty stop strings", "/v1/completions", httpx.Request("POST", url, json={
            "model": model, "prompt": "a", "max_tokens": 2, "stop": [""] * 100}).content, 400),
        # distinct ids: repeats are dropped, as vLLM drops them (hunt 81)
        ("100,000 stop_token_ids", "/v1/completions", httpx.Request("POST", url, json={
            "model": model, "prompt": "a", "max_tokens": 2,
            "stop_token_ids": list(range(100_000))}).content, 400),
        ("key given twice", "/v1/completions",
         b'{"model": "%s", "prompt": "a", "prompt": "b"}' % model.encode(), 400),
        ("tokenize return_token_strs (hunt 58)", "/tokenize", httpx.Request("POST", url, json={
            "model": model, "prompt": "a", "return_token_strs": True}).content, 400),
        ("tokenize prompt and messages (hunt 58)", "/tokenize", httpx.Request("POST", url, json={
            "model": model, "prompt": "a", "messages": chat["messages"]}).content, 400),
    ]  # fmt: skip
    requests += _hunt56_requests(model)
    requests += _hunt58b_requests(model)
    requests += [  # hunt 60: the method came back whole in the error (h11 takes any token)
        ("a 10,000-character method (hunt 60)", "/v1/models", b"", 405, "X" * 10_000,
         "application/json"),
        ("a 10,000-character method, no route (hunt 60)", "/nope", b"", 404, "X" * 10_000,
         "application/json"),
    ]  # fmt: skip
    long_stop = {"model": model, "prompt": "a", "max_tokens": 2, "stop": ["s" * 1_000_000]}
    requests += [("a stop string of 1,000,000 characters (hunt 59)", "/v1/completions",
                  httpx.Request("POST", url, json=long_stop).content, 400)]  # fmt: skip
    requests += hunt80_requests(model)
    requests += hunt81_requests(model)
    rows = []
    for name, path, body, want, *how in requests:
        method, ctype = how if how else ("POST", "application/json")
        # a content type, or the headers as a list of pairs (one given twice: review 80)
        headers = ctype if isinstance(ctype, list) else {"content-type": ctype}
        peak[0], t0 = 0, time.perf_counter()
        r = httpx.request(method, url + path, content=body, timeout=60, headers=headers)
        try:
            message = r.json()["error"]["message"]
        except Exception:  # noqa: BLE001  not an OpenAI error body: the row fails
            message = ""
        rows.append(_row(name, r.status_code, want, time.perf_counter() - t0, peak[0], message))
    peak[0], t0 = 0, time.perf_counter()
    code, message = _bad_content_length(port)
    rows.append(_row("Content-Length: abc", code, 400, time.perf_counter() - t0, peak[0], message))
    peak[0], t0 = 0, time.perf_counter()  # hunt 57: h11's words "Receive buffer too long"
    r = httpx.post(url + "/v1/completions", content=b"{}", headers={"x-big": "a" * 200_000})
    message = r.json()["error"]["message"] if r.status_code == 400 else r.text[:200]
    rows.append(_row("a 200 KB header", r.status_code, 400, time.perf_counter() - t0, peak[0],
                     message))  # fmt: skip
    peak[0], t0 = 0, time.perf_counter()  # hunt 58b: a 17 KB head in one write was taken
    code, message = _bad_content_length(port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                                        b"X-A: " + b"a" * 17_000 + b"\r\nContent-Length: 2"
                                        b"\r\nConnection: close\r\n\r\n{}")  # fmt: skip
    rows.append(_row("a 17 KB header in one write", code, 400, time.perf_counter() - t0,
                     peak[0], message))  # fmt: skip
    peak[0], t0 = 0, time.perf_counter()  # hunt 58b: read as chunked, connection kept open
    code, message = _bad_content_length(port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                                        b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n"
                                        b"\r\n2\r\n{}\r\n0\r\n\r\n")  # fmt: skip
    rows.append(_row("Transfer-Encoding and Content-Length both", code, 400,
                     time.perf_counter() - t0, peak[0], message))  # fmt: skip
    peak[0], t0 = 0, time.perf_counter()  # hunt 58b: a 404 for "PRI *", then a 400 for "SM"
    code, message = _bad_content_length(port, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
    rows.append(_row("HTTP/2 preface on the HTTP port", code, 400, time.perf_counter() - t0,
                     peak[0], message))  # fmt: skip
    peak[0], t0 = 0, time.perf_counter()
    code, message = _stalled_bodies(port)
    rows.append(_row("80 clients stalling 2 MB bodies", code, 429, time.perf_counter() - t0,
                     peak[0], message, bound_s=None))  # fmt: skip
    peak[0], t0 = 0, time.perf_counter()  # hunt 57: half a head was held forever (slowloris)
    code, message = _bad_content_length(port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
    rows.append(_row("half a head, then nothing (slowloris)", code, 400,
                     time.perf_counter() - t0, peak[0], message, bound_s=None))  # fmt: skip
    peak[0], t0 = 0, time.perf_counter()  # hunt 59: read to the end of a 10**11-byte body
    code, message = _body_after_413(port)
    rows.append(_row("413, then the body goes on (hunt 59)", code, 413, time.perf_counter() - t0,
                     peak[0], message))  # fmt: skip
    peak[0], t0 = 0, time.perf_counter()
    code, details = _grpc_garbage(f"127.0.0.1:{grpc_port}", stop=["s" * 1_000_000])
    rows.append(_row("gRPC stop string of 1,000,000 characters (hunt 59)", code,
                     "INVALID_ARGUMENT", time.perf_counter() - t0, peak[0], details))  # fmt: skip
    peak[0], t0 = 0, time.perf_counter()
    code, details = _grpc_garbage(f"127.0.0.1:{grpc_port}")
    rows.append(_row("gRPC garbage bytes", code, "INVALID_ARGUMENT", time.perf_counter() - t0,
                     peak[0], details))  # fmt: skip
    if bench is not None:  # hunt 61: each refusal printed, a JSON of nothing saved, exit 0
        peak[0], t0 = 0, time.perf_counter()
        code, message = _refused_bench(url, *bench)
        rows.append(_row("wse infer bench --model nope (hunt 61)", code, 2,
                         time.perf_counter() - t0, peak[0], message, bound_s=None))  # fmt: skip
    peak[0], t0 = 0, time.perf_counter()
    drain = grpc_drain(proc, f"127.0.0.1:{grpc_port}")
    done = drain.get("code") == "OK" and drain["tokens"] == drain["asked"]
    got = "OK" if done else f"{drain.get('code')} {drain['tokens']}/{drain['asked']}"
    rows.append(_row("gRPC stream after SIGTERM (--drain-s 30)", got, "OK",
                     time.perf_counter() - t0, peak[0], f"{drain['tokens']}/{drain['asked']}",
                     check_message=False, bound_s=None))  # fmt: skip
    stop.set()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
    return rows


def _refused_bench(url: str, wse: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Exit code and stderr of `wse infer bench` asking the server for a model it lacks."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run([*wse, "infer", "bench", "--url", url, "-n", "2", "--model", "nope",
                               "--out", f"{tmp}/b.json"], env=env, capture_output=True,
                              text=True, timeout=120)  # fmt: skip
        left = list(Path(tmp).iterdir())
    return (done.returncode if not left else -1), done.stderr.strip()


def _hunt56_requests(model: str) -> list[tuple]:
    """Hunt 56's served rows: fields a vLLM / OpenAI client may send that were taken (200) and
    ignored, a model not served (404 since hunt 77: OpenAI's status, code model_not_found), a
    body not declared JSON, a GET on a POST route: (name, path, body, expected status[, method,
    content type])."""
    import json

    def c(**fields) -> bytes:
        return json.dumps({"model": model, "prompt": "a", "max_tokens": 2, **fields}).encode()

    def chat(**fields) -> bytes:
        msgs = [{"role": "user", "content": "hi"}]
        return json.dumps({"model": model, "messages": msgs, "max_tokens": 2, **fields}).encode()

    cc, ch = "/v1/completions", "/v1/chat/completions"
    return [
        ("min_p 'x'", cc, c(min_p="x"), 400),
        ("guided_json (not honoured)", ch, chat(guided_json={"type": "object"}), 400),
        ("prompt_logprobs 99", cc, c(prompt_logprobs=99), 400),
        ("chat_template in the request", ch, chat(chat_template="{{ 7*7 }}"), 400),
        ("tool_choice required, no tools", ch, chat(tool_choice="required"), 400),
        ("stream_options without stream", cc, c(stream_options={"include_usage": True}), 400),
        ("user of 1,000,000 characters", cc, c(user="u" * 1_000_000), 400),
        ("logit_bias value 200", ch, chat(logit_bias={"5": 200}), 400),
        ("best_of 1 with n 3", cc, c(best_of=1, n=3), 400),
        ("messages name 5", ch, chat(messages=[{"role": "user", "content": "x", "name": 5}]), 400),
        ("tool message without tool_call_id", ch, chat(messages=[{"role": "tool",
         "content": "r"}]), 400),
        ("prompt [1, 'a']", cc, c(prompt=[1, "a"]), 400),
        ("model not served (model_not_found)", cc, c(model="gpt-4"), 404),
        ("body declared text/plain", cc, c(), 400, "POST", "text/plain"),
        ("body in UTF-16", cc, c().decode().encode("utf-16"), 400),
        ("GET on a POST route (405)", cc, b"", 405, "GET", "application/json"),
        ("messages name of 1,000,000 characters", ch, chat(messages=[{"role": "user",
         "content": "x", "name": "n" * 1_000_000}]), 400),  # hunt 57
    ]  # fmt: skip


def _hunt58b_requests(model: str) -> list[tuple]:
    """Hunt 58b's served rows: a body declared in another charset than UTF-8, numbers past a
    float or of thousands of digits (a short 400), an empty body (a 400 saying so), and
    FastAPI's /openapi.json (a JSON 404)."""
    import json

    def c(**fields) -> bytes:
        return json.dumps({"model": model, "prompt": "a", "max_tokens": 2, **fields}).encode()

    cc, latin = "/v1/completions", "application/json; charset=latin-1"
    return [
        ("body declared charset=latin-1", cc, c(), 400, "POST", latin),
        ("temperature 10**400 (was a 500)", cc, c(temperature=10**400), 400),
        ("max_tokens of 4,001 digits", cc, c(max_tokens=10**4000), 400),
        ("empty body", cc, b"", 400),
        ("GET /openapi.json (404)", "/openapi.json", b"", 404, "GET", "application/json"),
    ]


def _row(name, got, want, wall_s, peak, message, check_message=True, bound_s=2.0) -> dict:
    checks = {
        "status": got == want,
        "one_line": not check_message or (bool(message) and "\n" not in message.strip()),
        "short": len(message) <= MESSAGE_CHARS,  # hunt 60: a 10,000-character method echoed
        "rss": peak < 1 << 30,
    }
    return {
        "class": "front end (served)",
        "case": name,
        "expected_rc": want,
        "rc": got,
        "lines": 1 if message else 0,
        "output": message[:500],
        "wall_s": round(wall_s, 3),
        "within_2s": bound_s is None or wall_s <= bound_s,
        "peak_rss_mib": round(peak / 2**20, 1),
        "peak_process_rss_mib": round(peak / 2**20, 1),
        "left_behind": [],
        "checks": checks,
        "ok": all(checks.values()),
    }
