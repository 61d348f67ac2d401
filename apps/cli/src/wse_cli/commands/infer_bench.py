"""`wse infer bench`: load-test an OpenAI-compatible server and save its JSON summary.

`bench --url URL` runs `wse_inference.demo.load_test` against a server (`wse infer serve`,
vLLM, ...) and prints request throughput, output tokens/s and TTFT / TPOT / end-to-end
percentiles, then saves the summary (`--out`). A URL's password is never printed or saved
(****); a server that refuses every request, or cannot be reached, exits 2 with one line.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from wse_cli.errors import fail
from wse_cli.options import number
from wse_cli.outputs import output_file


def _ms(stats: dict) -> str:
    vals = [stats[k] for k in ("mean", "p50", "p90", "p99")]
    if vals[0] is None:
        return "-"
    return " / ".join(f"{v * 1e3:.1f}" for v in vals)


def _check_url(url: str) -> None:
    """An http(s) URL with a host and a port in range (httpx raised InvalidURL, and the
    socket layer an OverflowError, as tracebacks)."""
    from urllib.parse import urlsplit

    from wse_core.errors import shown

    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (raises ValueError for a port out of range or not a number)
    except ValueError as e:
        fail(f"--url {shown(url)} is not a URL: {e}; e.g. http://127.0.0.1:8000")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        fail(f"--url {shown(url)} must be http(s)://HOST[:PORT], e.g. http://127.0.0.1:8000")


def _one_line(e: BaseException) -> str:
    """An error's text on one line (httpx's say "\nFor more information check: ...")."""
    return " ".join(str(e).split())


def _redacted(url: str) -> str:
    """`url` as the bench prints and saves it: a password in it as **** (pip's and curl's
    way; hunt 61: `--url http://user:secret@host` echoed the secret in every line)."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username}:****@{host}"))


def _hide(text: str, secret: str | None) -> str:
    """`text` (an error of the client) with the URL's password, if any, as ****."""
    return text.replace(secret, "****") if secret else text


def bench(
    url: str = typer.Option(..., "--url", help="Server base URL, e.g. http://127.0.0.1:8000."),
    model: str = typer.Option(None, "--model", help="Model name (default: the server's first)."),
    num_requests: int = number(64, "--num-requests", "-n", kind=int, ge=1, le=1_000_000),
    concurrency: int = number(8, "--concurrency", "-c", kind=int, ge=1, le=10_000),
    prompt: str = typer.Option("The wafer-scale engine", "--prompt"),
    max_tokens: int = number(32, "--max-tokens", kind=int, ge=1),
    timeout_s: float = number(
        60.0, "--timeout-s", help="Per-request timeout.", gt=0, le=86_400, unit="s"
    ),
    out: Path = output_file(Path("wse_bench.json"), "--out", help="Where to save the JSON."),
) -> None:
    """Load-test a server: request throughput, output tokens/s, TTFT and TPOT percentiles."""
    from urllib.parse import urlsplit

    import httpx
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table
    from wse_inference.demo.load_test import LoadTestConfig, ServerReplyError, run_load_test

    _check_url(url)
    if model is not None and not model.strip():
        fail("--model must not be empty; leave it out to use the server's first model")
    if not prompt:  # hunt 61: each request was the server's 400, then exit 0 and a JSON
        fail("--prompt is empty; give the text each request sends")
    for name, text in (("--prompt", prompt), ("--model", model or "")):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:  # bytes of the shell that are not UTF-8 (hunt 58b)
            fail(f"{name} holds bytes that are not UTF-8 text (at character {e.start}); give text")
    base = url.rstrip("/")  # OpenAI's base URL convention ends in /v1 (OPENAI_BASE_URL): the
    base = base.removesuffix("/v1")  # bench asks /v1/... itself (hunt 62: /v1/v1/models, 404)
    cfg = LoadTestConfig(
        url=base,
        model=model,
        num_requests=num_requests,
        concurrency=concurrency,
        prompt=prompt,
        max_tokens=max_tokens,
        timeout_s=timeout_s,
    )
    secret = urlsplit(url).password
    url = _redacted(url)  # what is printed and saved from here on
    try:
        summary = run_load_test(cfg)
    except httpx.HTTPError as e:
        fail(f"cannot reach {url}: {type(e).__name__}: {_hide(_one_line(e), secret)}")
    except ServerReplyError as e:
        fail(f"{url} is not an OpenAI-compatible server: {_hide(_one_line(e), secret)}")
    summary["url"] = url
    summary["errors"] = [_hide(e, secret) for e in summary["errors"]]
    errors = summary["errors"]
    if not summary["completed"] and errors and all(e.startswith("Connect") for e in errors):
        fail(f"cannot reach {url}: {errors[0]}")  # --model given: no /v1/models asked first
    if not summary["completed"] and errors and all(e.startswith("HTTP 4") for e in errors):
        # hunt 61: every request refused (--model nope, --max-tokens past the context) printed
        # the refusals, saved a JSON of nothing and exited 0
        fail(f"{url} refused every request ({errors[0]}); fix the bench's settings")
    from wse_core.host.atomic import write_atomically

    write_atomically(out, json.dumps(summary, indent=2))  # the model's name: text, not markup
    t = Table(title=escape(f"{summary['model']} at {url}"), show_header=False)
    t.add_row("requests", f"{summary['completed']} completed, {summary['failed']} failed")
    t.add_row("request throughput", f"{summary['request_throughput_per_s']:.2f} req/s")
    t.add_row("output tokens/s", f"{summary['output_tokens_per_s']:.1f}")
    t.add_row("TTFT ms (mean / p50 / p90 / p99)", _ms(summary["ttft_s"]))
    t.add_row("TPOT ms (mean / p50 / p90 / p99)", _ms(summary["tpot_s"]))
    t.add_row("e2e ms (mean / p50 / p90 / p99)", _ms(summary["e2e_s"]))
    Console().print(t)
    for err in summary["errors"]:
        typer.echo(f"error: {err}", err=True)
    typer.echo(f"saved {out}")


def register(app: typer.Typer) -> None:
    """Add `bench` to the `wse infer` group."""
    app.command("bench")(bench)
