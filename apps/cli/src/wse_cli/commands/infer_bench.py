"""`wse infer bench`: load-test an OpenAI-compatible server and report as vLLM's bench does.

`bench --url URL` (or vLLM's `--host` / `--port`, default 127.0.0.1:8000) runs
`wse_inference.demo.load_test` against a server (`wse infer serve`,
vLLM, ...) and prints request throughput, vLLM's token figures (input and generated tokens,
input / output / total tokens/s) and TTFT / TPOT / ITL / end-to-end percentiles (vLLM's
definitions), with vLLM's duration, concurrency, rate, goodput and peak rows
(`infer_bench_report`); the summary, the dataset's name, settings and seed in it, with vLLM's
`--save-result` keys and units (ms) beside ours (s; hunt 71: it had none of them), is saved
when asked: `--out FILE`, or vLLM's `--save-result` / `--result-dir` / `--result-filename`
(hunt 77: every run replaced ./wse_bench.json without a word). vLLM's `vllm bench serve`
spellings are taken: `--base-url`, `--max-concurrency`, `--num-prompts`, `--request-rate inf`
(its default: all at once), `--goodput`, `--percentile-metrics`, `--metric-percentiles`,
`--backend openai-chat` / `--endpoint /v1/chat/completions`, `--temperature`, `--top-p`,
`--top-k`, `--num-warmups`, `--label` and `--metadata KEY=VALUE ...` (saved in the JSON);
`--save-detailed` is refused in one line (no per-request lists).
The requests are vLLM's `--dataset-name random` or `sharegpt`, or the default `prompt`
(`--prompt` each time), with vLLM's options (`infer_bench_data`); a bad one is one line, exit
2, before any request, as is an --out that is the --dataset-path file (hunt 71: the dataset
was overwritten by the summary), a --burstiness below 0.001, and a --request-rate at which
-n requests take more than a day to send (hunt 71: 5e-324 waited forever). A URL's password
or lone token is never printed or saved (`user:****@`, `****@`: pip's way), nor the key of
--api-key (OPENAI_API_KEY), sent as a Bearer token; the server's text is shown escaped
(`printable`). A 404 or 401 of GET /v1/models says what to give (the base URL, a key); a
server that refuses every request, or cannot be reached, exits 2 with one line; one that
fails every request otherwise (it went away mid-run, it answers 5xx: a fault, not the
bench's settings) exits 1 with one line, and the file is left as it was (hunt 69: a server
killed mid-bench gave exit 0 and "saved b.json", a summary of nothing over a good earlier one).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import typer

from wse_cli.commands import infer_bench_data as bd
from wse_cli.commands import infer_bench_report as rp
from wse_cli.errors import UserInputError, fail, printable
from wse_cli.options import number, typed
from wse_cli.outputs import output_file

# The longest a run's sends may take (its last request goes at -n / --request-rate s, as
# vLLM's rescaled schedule: `bench_data.arrival_times`), --timeout-s's top: a day
# (hunt 71: --request-rate 5e-324 waited forever, inf s, for its second request)
MAX_SEND_SPAN_S = 86_400
# vLLM's --request-rate inf (its default): every request at once, as leaving it out
_FINITE_RATE = number(None, "--request-rate", gt=0, le=1e6, unit="requests/s")


def _rate(ctx: typer.Context, param: typer.CallbackParam, value: str | None) -> float | None:
    """--request-rate: +inf (vLLM's default), whatever its spelling, is None, all at once;
    anything else a finite rate, checked as `number` checks it (hunt 77: inf was refused as
    not finite). The parsed value decides, as vLLM's float(): hunt 78 refused 1e400, inf."""
    rate = None if value is None else _FINITE_RATE.parser(value)
    if rate is None or (isinstance(rate, float) and math.isinf(rate) and rate > 0):
        return None
    try:
        return _FINITE_RATE.callback(ctx, param, rate)
    except UserInputError as e:
        said = str(e).replace(" must be ", " must be inf (all at once) or ", 1)
        raise UserInputError(said) from None


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
    if parts.query or parts.fragment:  # hunt 69: `?x=1` was a 404 naming no setting
        fail(f"--url {shown(_redacted(url))} has a {'query' if parts.query else 'fragment'}; "
             "give the server's base URL, e.g. http://127.0.0.1:8000")  # fmt: skip


def _base_url(ctx: typer.Context, url: str | None, host: str, port: int) -> str:
    """--url, else vLLM's `http://{host}:{port}` (an IPv6 host bracketed, as vLLM's
    join_host_port); --url with --host or --port is one line (vLLM lets --base-url win
    silently)."""
    given = [f"--{n}" for n in ("host", "port") if typed(ctx, n)]
    if url is not None and given:
        fail(f"--url and {' and '.join(given)} each say where the server is; give --url, or "
             "--host and --port")  # fmt: skip
    if url is not None:
        return url
    if not host or any(c in host for c in "/@?#") or not host.isprintable() or " " in host:
        from wse_core.errors import shown

        fail(f"--host {shown(host)} must be a host name or address, e.g. 127.0.0.1")
    from wse_inference.serve.addresses import netloc

    return f"http://{netloc(host, port)}"


def _check_span(rate: float, n: int) -> None:
    """-n requests at `rate` a second must be sent within `MAX_SEND_SPAN_S` (the last goes at
    n / rate s)."""
    import math

    if (span_s := n / rate) <= MAX_SEND_SPAN_S:
        return
    least = n / MAX_SEND_SPAN_S
    digits = 10.0 ** (math.floor(math.log10(least)) - 2)  # 3 significant, rounded up
    over = f"{span_s:,.0f}" if span_s < 1e15 else f"{span_s:.3g}"  # inf, 3e+300
    fail(f"--request-rate {rate!r} sends {n:,} request{'s' * (n > 1)} over {over} s, "
         f"past a day ({MAX_SEND_SPAN_S:,} s); give at least "
         f"{math.ceil(least / digits) * digits:.3g} requests/s, or fewer requests")  # fmt: skip


def _one_line(e: BaseException) -> str:
    """An error's text on one line (httpx's say "\nFor more information check: ...")."""
    return " ".join(str(e).split())


def _redacted(url: str) -> str:
    """`url` as the bench prints and saves it, its userinfo masked as pip's `redact_netloc`
    masks it: a password as `user:****@`, a lone user (a token) as `****@` (hunt 61:
    `user:secret@` was echoed in every line; hunt 69: `sk-SECRET@` still was). Only the URL's
    parts are rewritten, never a message's text (hunt 69: replacing a password `4` in every
    message made "HTTP 404" "HTTP ****0****")."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    host = parts.netloc.rpartition("@")[2]
    user = "****" if parts.password is None else f"{parts.username}:****"
    return urlunsplit(parts._replace(netloc=f"{user}@{host}"))


def _failures(summary: dict) -> str:
    """How many requests failed, and why, in order (each reason once, its first 100
    characters): `40 of 40: RemoteProtocolError: ..., then ConnectError: ...`."""
    reasons = [e if len(e) <= 100 else e[:100] + "..." for e in summary["errors"]]
    counts = f"{summary['failed']:,} of {summary['num_requests']:,}"
    return f"{counts}: {', then '.join(reasons)}" if reasons else counts


_KEY_HINT = "give --api-key or set OPENAI_API_KEY"
_BAD_KEY = "the server refused the key of --api-key (or OPENAI_API_KEY)"


def _check_key(key: str) -> None:
    """An API key is ASCII letters, digits and punctuation (httpx sends a header's value as
    ASCII: a UnicodeError or an h11 error for anything else); the refusal never shows it."""
    for i, c in enumerate(key):
        if not " " < c <= "~":
            fail(f"--api-key (or OPENAI_API_KEY) holds a character other than ASCII letters, "
                 f"digits and punctuation (character {i}); give the key alone")  # fmt: skip


def _unserved(e, url: str, base: str, keyed: bool) -> str:
    """The line for a GET `base`/v1/models (`url`: as given, both masked) that gave no model
    (`e`: a ServerReplyError); a 404 and a 401/403 say what to do (hunt 69: "cannot reach",
    with httpx's MDN link)."""
    from urllib.parse import urlsplit, urlunsplit

    from wse_inference.demo.openai_replies import phrase

    if e.status is None:
        return f"{url} is not an OpenAI-compatible server: {_one_line(e)}"
    line = f"GET {base}/v1/models answered {e.status} {phrase(e.status)} ({e.reason})"
    parts = urlsplit(base)
    if e.status == 404 and parts.path:  # an endpoint pasted as --url (vLLM's --endpoint)
        root = urlunsplit(parts._replace(path="", query="", fragment=""))
        return f"{line}; --url is the server's base URL, e.g. {root}"
    if e.status == 404:
        return f"{line}; is --url an OpenAI-compatible server's base URL?"
    if e.status in (401, 403):
        return f"{line}; {_BAD_KEY if keyed else _KEY_HINT}"
    return line


def bench(
    ctx: typer.Context,
    url: str = typer.Option(
        None,
        "--url",
        "--base-url",
        help="Server base URL, e.g. http://127.0.0.1:8000 (default: http://--host:--port).",
    ),
    host: str = typer.Option(
        "127.0.0.1", "--host", help="Server host, when --url is not given (vLLM's)."
    ),
    port: int = number(
        8000, "--port", kind=int, ge=1, le=65535, help="Server port, when --url is not given."
    ),
    model: str = typer.Option(None, "--model", help="Model name (default: the server's first)."),
    num_requests: int = number(64, "--num-requests", "-n", kind=int, ge=1, le=1_000_000),
    num_prompts: int = bd.NUM_PROMPTS,
    concurrency: int = number(
        8,
        "--concurrency",
        "-c",
        "--max-concurrency",
        kind=int,
        ge=1,
        le=10_000,
        help="Requests in flight at most (vLLM's --max-concurrency; its default is no bound).",
    ),
    backend: str = bd.BACKEND,
    endpoint: str = bd.ENDPOINT,
    dataset_name: str = bd.DATASET_NAME,
    prompt: str = typer.Option(
        "The wafer-scale engine", "--prompt", help="--dataset-name prompt: the text sent."
    ),
    max_tokens: int = number(
        32, "--max-tokens", kind=int, ge=1, help="--dataset-name prompt: the output length."
    ),
    dataset_path: Path = bd.DATASET_PATH,
    sharegpt_output_len: int = bd.SHAREGPT_OUTPUT_LEN,
    random_input_len: int = bd.RANDOM_INPUT_LEN,
    random_output_len: int = bd.RANDOM_OUTPUT_LEN,
    random_range_ratio: float = bd.RANDOM_RANGE_RATIO,
    random_prefix_len: int = bd.RANDOM_PREFIX_LEN,
    random_vocab_size: int = bd.RANDOM_VOCAB_SIZE,
    ignore_eos: bool = bd.IGNORE_EOS,
    temperature: float = bd.TEMPERATURE,
    top_p: float = bd.TOP_P,
    top_k: int = bd.TOP_K,
    num_warmups: int = bd.NUM_WARMUPS,
    timeout_s: float = number(  # hunt 69: 5e-324 was taken, then "ConnectTimeout: "
        60.0, "--timeout-s", help="Per-request timeout.", ge=0.001, le=86_400, unit="s"
    ),
    api_key: str = typer.Option(
        None,
        "--api-key",
        envvar="OPENAI_API_KEY",
        show_default=False,
        help="Sent as 'Authorization: Bearer KEY' (default: $OPENAI_API_KEY, which vLLM's "
        "bench sends too); never printed or saved.",
    ),
    request_rate: str = typer.Option(  # a str: `number` refuses inf, vLLM's default
        None,
        "--request-rate",
        callback=_rate,
        show_default=False,
        metavar="<float|inf>",
        help="Send requests at this rate, gamma gaps (--burstiness) as vLLM's bench; inf "
        "(vLLM's default) or left out: all at once, at most --concurrency in flight. -n "
        "requests at this rate must take at most a day (the last is sent at -n / rate s, as "
        "vLLM's). (inf, or a finite number in (0, 1000000.0] (requests/s))",
    ),
    burstiness: float = number(  # hunt 71: 5e-324 was a ZeroDivisionError traceback
        1.0,
        "--burstiness",
        ge=0.001,
        le=1000,
        help="The gaps' gamma shape: 1 Poisson, below 1 burstier.",
    ),
    seed: int = number(
        0, "--seed", kind=int, ge=0, le=2**63 - 1, help="Seed of the arrivals and the dataset."
    ),
    goodput: list[str] = rp.GOODPUT,
    goodput_more: list[str] = rp.GOODPUT_MORE,
    label: str = rp.LABEL,
    metadata: list[str] = rp.METADATA,
    percentile_metrics: str = rp.PERCENTILE_METRICS,
    metric_percentiles: str = rp.METRIC_PERCENTILES,
    out: Path = output_file(  # hunt 71: nothing said the file was not vLLM's, nor its unit
        None,
        "--out",
        help="Where to save the JSON. It carries both schemas: ours (ttft_s, tpot_s, itl_s, "
        "e2e_s as {mean, p50, p90, p99, n} in seconds; request_throughput_per_s, "
        "output_tokens_per_s, ...) and, beside it, vLLM's --save-result keys in its units "
        "(mean_ttft_ms, median_ttft_ms, std_ttft_ms, p99_ttft_ms and the same for tpot, itl "
        "and e2el, in ms; request_throughput, request_goodput, output_throughput, "
        "total_token_throughput, max_output_tokens_per_s, max_concurrent_requests, duration, "
        "total_input_tokens, total_output_tokens, num_prompts, max_concurrency, date, "
        "backend, endpoint_type, model_id, tokenizer_id). "
        "max_output_tokens_per_s counts chunks, as vLLM's does (one token a chunk); ours, "
        "peak_output_tokens_per_s, counts tokens, null where chunks carried several "
        "(several_tokens_a_chunk: the requests that did). "
        'request_rate is "inf" (all at once), as vLLM writes it; errors lists each distinct '
        "reason once (at most five). Nothing is saved without --out, --save-result, "
        "--result-dir or --result-filename.",
    ),
    save_result: bool = rp.SAVE_RESULT,
    result_dir: Path = rp.RESULT_DIR,
    result_filename: Path = rp.RESULT_FILENAME,
    save_detailed: bool = rp.SAVE_DETAILED,
) -> None:
    """Load-test a server as vLLM's bench does: throughput, goodput, TTFT, TPOT, ITL and
    e2e percentiles; saved as JSON with --out or --save-result."""
    import httpx
    from rich.console import Console
    from wse_inference.demo.bench_data import DatasetError
    from wse_inference.demo.load_test import (
        LoadTestConfig,
        Sampling,
        ServerReplyError,
        run_load_test,
    )

    url = _base_url(ctx, url, host, port)
    _check_url(url)
    # hunt 71: --out sg.json over --dataset-path sg.json replaced the dataset with the summary
    save_to = rp.result_path(ctx.params, dataset_path)
    num_requests = bd.num_requests(ctx, num_requests, num_prompts)
    if model is not None and not model.strip():
        fail("--model must not be empty; leave it out to use the server's first model")
    dataset = bd.dataset_spec(ctx)  # None: the fixed --prompt
    backend = bd.backend(ctx)
    if not prompt and dataset is None:  # hunt 61: each request was the server's 400, exit 0
        fail("--prompt is empty; give the text each request sends")
    for name, text in (("--prompt", prompt), ("--model", model or "")):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:  # bytes of the shell that are not UTF-8 (hunt 58b)
            fail(f"{name} holds bytes that are not UTF-8 text (at character {e.start}); give text")
    if api_key:
        _check_key(api_key)
    if request_rate is None and dataset is None and (burstiness != 1.0 or seed != 0):
        fail("--burstiness and --seed shape the arrivals of --request-rate; give a finite "
             "--request-rate too (without it, or at inf, all are sent at once)")  # fmt: skip
    if request_rate is None and burstiness != 1.0:  # --seed seeds the dataset too
        fail("--burstiness shapes the arrivals of --request-rate; give a finite --request-rate "
             "too (without it, or at inf, every request is sent at once)")  # fmt: skip
    if request_rate is not None:
        _check_span(request_rate, num_requests)
    more_goodput, more_metadata = rp.split_more(goodput_more, goodput, metadata)
    slos = rp.goodput_slos(goodput, more_goodput)
    rp.check_label(label)
    metrics = rp.percentile_metrics(percentile_metrics)
    percentiles = rp.metric_percentiles(metric_percentiles)
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
        api_key=api_key or None,  # OPENAI_API_KEY="" gives none
        request_rate=request_rate,
        burstiness=burstiness,
        seed=seed,
        dataset=dataset,
        ignore_eos=ignore_eos,
        backend=backend,
        sampling=Sampling(0.0 if temperature is None else temperature, top_p, top_k),
        num_warmups=num_warmups,
        goodput_ms=slos,
        percentile_metrics=metrics,
        metric_percentiles=percentiles or (99.0,),  # vLLM's default
    )
    from wse_inference.demo.load_test import summary_keys

    extra = rp.metadata([*(metadata or ()), *more_metadata], summary_keys(cfg) | {"label"})
    url = _redacted(url)  # what is printed and saved from here on (no message is rewritten)
    try:
        summary = run_load_test(cfg)
    except httpx.HTTPError as e:
        fail(f"cannot reach {url}: {type(e).__name__}: {_one_line(e)}")
    except ServerReplyError as e:
        fail(_unserved(e, url, _redacted(base), bool(api_key)))
    except DatasetError as e:  # a vocabulary not listed, no /tokenize, nothing kept
        bd.dataset_failed(e, url)
    summary.update(url=url, label=label, **extra)  # vLLM's label (null without) and metadata
    _check_served(summary, url, bool(api_key), out)
    target = None
    if rp.saves(ctx.params):
        target = save_to or (result_dir or Path()) / rp.default_name(summary)
        replaced = target.exists()
        from wse_core.host.atomic import write_atomically

        write_atomically(target, json.dumps(summary, indent=2))
    Console().print(rp.table(summary, url, metrics, percentiles))
    for err in summary["errors"]:
        typer.echo(f"error: {printable(err)}", err=True)
    if target is None:
        typer.echo("not saved: give --out FILE, or vLLM's --save-result (its file name)")
    else:
        typer.echo(f"saved {target}" + (" (it replaced the file there)" if replaced else ""))


def _check_served(summary: dict, url: str, keyed: bool, out: Path | None) -> None:
    """Stop with one line where no request completed (nothing is saved): the server could not
    be reached or refused every request (exit 2), or failed every one (a fault: exit 1)."""
    errors = summary["errors"]
    if not summary["completed"] and errors and all(e.startswith("Connect") for e in errors):
        fail(f"cannot reach {url}: {errors[0]}")  # --model given: no /v1/models asked first
    if not summary["completed"] and errors and all(e.startswith("HTTP 4") for e in errors):
        # hunt 61: every request refused (--model nope, --max-tokens past the context) printed
        # the refusals, saved a JSON of nothing and exited 0
        keyless = errors[0].startswith(("HTTP 401", "HTTP 403"))
        fix = (_BAD_KEY if keyed else _KEY_HINT) if keyless else "fix the bench's settings"
        fail(f"{url} refused every request ({errors[0]}); {fix}")
    if not summary["completed"]:
        from wse_core.errors import RunFault

        kept = f", --out {out} is as it was" if out is not None else ""
        raise RunFault(f"{url} failed every request ({_failures(summary)}); nothing saved{kept}")


def register(app: typer.Typer) -> None:
    """Add `bench` to the `wse infer` group."""
    app.command("bench")(bench)
