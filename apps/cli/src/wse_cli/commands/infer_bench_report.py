"""`wse infer bench`'s reporting options, vLLM's (`vllm bench serve`): what the summary holds,
where it is saved, and the table printed.

- `--goodput KEY:ms ...` (ttft, tpot, e2el; vLLM's `nargs="+"`: the pairs after the first
  come as the command's arguments, `goodput_more`), `--percentile-metrics` and
  `--metric-percentiles` are checked by `goodput_slos`, `percentile_metrics` and
  `metric_percentiles`, each refusal one line (exit 2) before any request.
- Saving (`result_path`): as vLLM's, only when asked. `--out FILE` (ours) or vLLM's
  `--save-result` (the name `{backend}-{rate}qps-concurrency{c}-{model}-{YYYYmmdd-HHMMSS}.json`
  made once the run ends, vLLM's, in `--result-dir`, else the current folder),
  `--result-filename NAME` (in `--result-dir`) or `--result-dir DIR` alone ask for it (vLLM
  saves nothing without --save-result there, and says nothing: a name given is a file
  wanted). Nothing asked: nothing saved, and the last line says how to save (hunt 77: every
  run replaced ./wse_bench.json without a word). A file replaced is said.
- `--label` (the saved name's prefix and the JSON's `label`, vLLM's) and `--metadata KEY=VALUE
  ...` (top-level keys of the JSON, vLLM's; a key the summary holds is refused before any
  request: `metadata`); the pairs after --goodput or --metadata (vLLM's nargs) are told apart
  by their `=` (`split_more`).
- `table(summary, url, metrics, ps)` is the summary as a rich Table: ours and vLLM's rows
  (the benchmark duration, the concurrency and rate, goodput, the peaks), the latencies of
  --percentile-metrics at --metric-percentiles.
"""

from __future__ import annotations

import math
from pathlib import Path

import typer

from wse_cli.errors import fail, printable
from wse_cli.outputs import check_writable, output_dir, output_file, refuse_overlap

__all__ = ["check_label", "default_name", "goodput_slos", "metadata", "metric_percentiles",
           "percentile_metrics", "result_path", "saves", "split_more", "table"]  # fmt: skip

METRICS = ("ttft", "tpot", "itl", "e2el")  # load_tally.METRICS (not imported: httpx at --help)
GOODPUT_METRICS = ("ttft", "tpot", "e2el")  # load_tally's too (a test checks the two agree)
_EXAMPLE = "e.g. --goodput ttft:500 tpot:50 (keys ttft, tpot, e2el; SLOs in ms)"

GOODPUT: list[str] = typer.Option(
    None,
    "--goodput",
    show_default=False,
    help="vLLM's SLOs for goodput, KEY:ms pairs of ttft, tpot and e2el, e.g. --goodput "
    "ttft:500 tpot:50: a completed request is good when each SLO is at least its figure (a "
    "request of one token has a TPOT of 0). Prints the request goodput and saves vLLM's "
    "request_goodput, good requests / duration in req/s (null without --goodput).",
)
GOODPUT_MORE: list[str] = typer.Argument(
    None, show_default=False, metavar="KEY:ms|KEY=VALUE",
    help="More --goodput KEY:ms pairs or --metadata KEY=VALUE pairs, after the option (vLLM's "
    "--goodput ttft:500 tpot:50, --metadata version=0.3.3 tp=1).",
)  # fmt: skip
LABEL: str = typer.Option(
    None,
    "--label",
    help="vLLM's: the saved file's name prefix in place of --backend's "
    "({label}-{rate}qps-...json) and the saved JSON's label (null without it).",
)
METADATA: list[str] = typer.Option(
    None,
    "--metadata",
    metavar="KEY=VALUE",
    show_default=False,
    help="vLLM's: KEY=VALUE pairs saved as top-level keys of the JSON (values as strings), "
    "e.g. --metadata version=0.3.3 tp=1; a key the summary holds itself is refused.",
)
PERCENTILE_METRICS: str = typer.Option(
    None,
    "--percentile-metrics",
    help="vLLM's: the metrics, of ttft,tpot,itl,e2el, whose mean, median, std and "
    "--metric-percentiles the saved vLLM keys carry and the table shows (default: all four; "
    "vLLM's: ttft,tpot,itl).",
)
METRIC_PERCENTILES: str = typer.Option(
    None,
    "--metric-percentiles",
    help="vLLM's: the percentiles saved as p{P}_{metric}_ms (p99_ttft_ms, p99.9_ttft_ms), "
    "e.g. 50,90,99 (default 99, vLLM's), each in [0, 100]; the table shows the mean, median "
    "and these (default: mean, p50, p90, p99).",
)
SAVE_RESULT = typer.Option(
    False,
    "--save-result",
    help="vLLM's: save the summary as {backend}-{rate}qps-concurrency{c}-{model}-"
    "{YYYYmmdd-HHMMSS}.json (vLLM's name) in --result-dir, else the current folder.",
)
RESULT_DIR: Path = output_dir(
    None, "--result-dir",
    help="vLLM's: the folder the summary is saved in (made if missing); saves it.",
)  # fmt: skip
RESULT_FILENAME: Path = output_file(
    None, "--result-filename",
    help="vLLM's: the summary's file name, in --result-dir if given; saves it.",
)  # fmt: skip
SAVE_DETAILED = typer.Option(
    False,
    "--save-detailed",
    help="vLLM's per-request lists (texts, TTFTs, ITLs, errors): not kept, so refused; the "
    "summary's errors lists each distinct reason once (at most five).",
)


def split_more(
    more: list[str] | None, goodput: list[str] | None, metadata: list[str] | None
) -> tuple[list[str], list[str]]:
    """The arguments after the options (`more`: vLLM's nargs lists, --goodput ttft:500
    tpot:50 and --metadata a=1 b=2) as (goodput pairs, metadata pairs): one with `=` is
    --metadata's, one without is --goodput's, each only where that option is given; anything
    else is one line naming it."""
    from wse_core.errors import shown

    pairs: tuple[list[str], list[str]] = ([], [])
    for item in more or ():
        side = int("=" in item)
        if not (metadata if side else goodput):
            fail(f"unexpected argument {shown(item)}: bench takes options, and --goodput's "
                 "KEY:ms or --metadata's KEY=VALUE pairs after them, e.g. --goodput ttft:500 "
                 "tpot:50 or --metadata version=0.3.3 tp=1")  # fmt: skip
        pairs[side].append(item)
    return pairs


def goodput_slos(pairs: list[str] | None, more: list[str] | None) -> dict[str, float]:
    """--goodput's pairs (`more`: those after its first) as {metric: SLO ms}."""
    from wse_core.errors import shown

    slos: dict[str, float] = {}
    for pair in [*(pairs or ()), *(more or ())]:
        key, _, text = pair.partition(":")
        if key not in GOODPUT_METRICS or not _plain(text):
            fail(f"--goodput {shown(pair)} is not KEY:ms; {_EXAMPLE}")
        ms = float(text)
        if not (math.isfinite(ms) and ms >= 0):
            fail(f"--goodput {shown(pair)}: an SLO is a finite number of ms >= 0; {_EXAMPLE}")
        if slos.get(key, ms) != ms:
            fail(f"--goodput {key} is given twice ({slos[key]:g} and {ms:g} ms); give it once")
        slos[key] = ms
    return slos


def metadata(pairs: list[str], reserved: frozenset[str]) -> dict[str, str]:
    """--metadata's KEY=VALUE pairs as vLLM reads them (split at the first `=`, each side
    stripped, values strings); a pair without `=` or an empty key, a key given twice with
    two values, or one of `reserved` (the summary's own keys, which it would replace or be
    replaced by: vLLM lets its figures win silently) is one line."""
    from wse_core.errors import shown

    out: dict[str, str] = {}
    for pair in pairs:
        key, eq, value = (part.strip() for part in pair.partition("="))
        if not eq or not key:
            fail(f"--metadata {shown(pair)} is not KEY=VALUE; e.g. --metadata version=0.3.3 tp=1")
        if key in reserved:
            fail(f"--metadata {shown(key)} is a key the summary holds itself; give another name")
        if out.get(key, value) != value:
            fail(f"--metadata {shown(key)} is given twice ({shown(out[key])} and {shown(value)}); "
                 "give it once")  # fmt: skip
        out[key] = value
    return out


def check_label(label: str | None) -> None:
    """--label, the saved file's name prefix: not empty, no path separator, printable."""
    if label is None:
        return
    from wse_core.errors import shown

    if not label.strip() or "/" in label or "\\" in label or not label.isprintable():
        fail(f"--label {shown(label)} is the saved file's name prefix: give a non-empty name "
             "without '/' or control characters")  # fmt: skip


def _plain(text: str) -> bool:
    """A decimal number as typed: ASCII, no `_` grouping (the house's `options.number`)."""
    try:
        float(text)
    except ValueError:
        return False
    return text.isascii() and "_" not in text and text == text.strip()


def _items(option: str, text: str) -> list[str]:
    items = [item.strip() for item in text.split(",")]
    if not all(items):
        from wse_core.errors import shown

        fail(f"{option} {shown(text)} has an empty item; give a comma-separated list")
    return items


def percentile_metrics(text: str | None) -> tuple[str, ...]:
    """--percentile-metrics as metric names, in vLLM's order (all four when not given)."""
    if text is None:
        return METRICS
    from wse_core.errors import shown

    items = _items("--percentile-metrics", text)
    for item in items:
        if item not in METRICS:
            fail(f"--percentile-metrics names {shown(item)}; the metrics are "
                 f"{','.join(METRICS)} (vLLM's)")  # fmt: skip
    return tuple(m for m in METRICS if m in items)


def metric_percentiles(text: str | None) -> tuple[float, ...] | None:
    """--metric-percentiles as floats in [0, 100], as given, each once (None: not given)."""
    if text is None:
        return None
    from wse_core.errors import shown

    out: list[float] = []
    for item in _items("--metric-percentiles", text):
        if not _plain(item) or not 0 <= float(item) <= 100:
            fail(f"--metric-percentiles {shown(text)}: {shown(item)} is not a percentile; "
                 "give numbers in [0, 100], e.g. 50,90,99 or 99.9")  # fmt: skip
        out += [float(item)] if float(item) not in out else []
    return tuple(out)


def saves(given: dict) -> bool:
    """Whether the command's parameters `given` (ctx.params) ask for the summary saved."""
    keys = ("out", "result_dir", "result_filename")
    return given["save_result"] or any(given[k] is not None for k in keys)


def result_path(given: dict, dataset_path: Path | None) -> Path | None:
    """The file the summary is saved to, where the command's parameters `given` (ctx.params)
    name one (--out; --result-filename, in --result-dir), checked before any request; None:
    vLLM's name (`default_name`) made at the end, in --result-dir or the current folder, or
    nothing saved (`saves`)."""
    out, folder, name = given["out"], given["result_dir"], given["result_filename"]
    if given["save_detailed"]:
        fail("--save-detailed: vLLM's per-request lists are not kept (a run's memory does not "
             "grow with it); leave it out: the summary's errors list each reason once")  # fmt: skip
    if out is not None and (folder is not None or name is not None):
        fail("--out and --result-dir / --result-filename each say where the summary goes; "
             "give --out FILE alone, or vLLM's --result-dir / --result-filename")  # fmt: skip
    path = out if out is not None else name
    if name is not None and folder is not None and not name.is_absolute():
        path = folder / name  # vLLM's os.path.join
        check_writable(path, kind="file", name="--result-filename")
    if path is None and folder is None and given["save_result"]:
        check_writable(Path("."), kind="dir", name="--save-result (the current folder)")
    option = "--out" if out is not None else "--result-filename"
    refuse_overlap({"--dataset-path": dataset_path}, {option: path})
    return path


def default_name(summary: dict) -> str:
    """vLLM's --save-result name for `summary`: {label}-{rate}qps-concurrency{c}-{model}-
    {date}.json, the label --label's, else the backend (vLLM's `label or args.backend`), the
    model's last path part, characters other than letters, digits and `._+-` as `_` (a name
    from the server), at most 100 of them."""
    rate = summary["request_rate"]
    rate = "inf" if rate == "inf" else str(float(rate))
    model = summary["model"].split("/")[-1]
    model = "".join(c if c.isascii() and (c.isalnum() or c in "._+-") else "_" for c in model)
    label = summary.get("label") or summary["backend"]
    return (f"{label}-{rate}qps-concurrency{summary['concurrency']}-"
            f"{model[:100] or 'model'}-{summary['date']}.json")  # fmt: skip


_TIMES = (("ttft", "TTFT", "ttft_s"), ("tpot", "TPOT", "tpot_s"), ("itl", "ITL", "itl_s"),
          ("e2el", "e2e", "e2e_s"))  # fmt: skip


def _figures(values_ms: list, n: int, of: int | None) -> str:
    """Figures in ms, "-" when there are none; `of`: the completed requests, said when the
    figures are over fewer (a request of one token has no TPOT: hunt 69, none is left out
    unseen)."""
    if values_ms[0] is None:
        return "-" if of is None else f"- (0 of {of} requests)"
    text = " / ".join(f"{v:.1f}" for v in values_ms)
    return text if of is None or n == of else f"{text} ({n} of {of} requests)"


def latency_rows(t, summary: dict, metrics: tuple[str, ...], ps: tuple[float, ...] | None):
    """TTFT, TPOT, ITL and e2e rows of `metrics`: mean / p50 / p90 / p99 (ours), or with
    --metric-percentiles `ps` the mean, median and those (vLLM's keys)."""
    from wse_inference.demo.load_tally import percentile_key

    for name, label, ours in (row for row in _TIMES if row[0] in metrics):
        s, of = summary[ours], None if name == "itl" else summary["completed"]
        if ps is None:
            heads = ("mean", "p50", "p90", "p99")
            values = [None if s[k] is None else s[k] * 1e3 for k in heads]
        else:
            heads = ("mean", "median", *(f"p{p:g}" for p in ps))
            keys = (f"mean_{name}_ms", f"median_{name}_ms", *(percentile_key(p, name) for p in ps))
            values = [summary[k] for k in keys]
        t.add_row(f"{label} ms ({' / '.join(heads)})", _figures(values, s["n"], of))


def _peak_row(t, summary: dict) -> None:
    """The most output tokens in one second, where each chunk's tokens are known (`load_tally`);
    else vLLM's figure, which counts chunks, said as chunks (hunt 80: a speculative server's
    "peak output tokens/s" of 54 stood below its mean output tokens/s of 823)."""
    if (tokens := summary["peak_output_tokens_per_s"]) is not None:
        t.add_row("peak output tokens/s", f"{tokens:.0f}")
        return
    several, of = summary["several_tokens_a_chunk"], summary["completed"]
    t.add_row("peak output chunks/s", f"{summary['max_output_tokens_per_s']:.0f} (vLLM's "
              f"max_output_tokens_per_s; {several} of {of} requests streamed several tokens "
              "a chunk)")  # fmt: skip


def table(summary: dict, url: str, metrics: tuple[str, ...], ps: tuple[float, ...] | None):
    """The run's table (a rich Table): ours and vLLM's figures (module docstring)."""
    from rich.markup import escape
    from rich.table import Table

    from wse_cli.commands.infer_bench_data import token_rows

    # the server's text (its model's name, its errors) as `fail` shows text: no markup, and
    # no ESC or newline reaching the terminal (hunt 69: a model id cleared the screen)
    t = Table(title=escape(printable(f"{summary['model']} at {url}")), show_header=False)
    t.add_row("requests", f"{summary['completed']} completed, {summary['failed']} failed")
    if summary["num_warmups"]:
        t.add_row("warm-up requests", f"{summary['num_warmups']} (not counted)")
    t.add_row("endpoint", f"{summary['endpoint']} ({summary['backend']})")
    t.add_row("maximum request concurrency", str(summary["concurrency"]))
    rate = summary["request_rate"]
    t.add_row("request rate", "inf (all at once)" if rate == "inf" else f"{rate:g} req/s")
    t.add_row("benchmark duration", f"{summary['wall_s']:.2f} s")
    token_rows(t, summary)
    if summary["request_goodput"] is not None:
        slos = ", ".join(f"{k[:-3]} {v:g}" for k, v in summary["goodput_slos"].items())
        good = f"{summary['good_requests']} of {summary['completed']} within {slos} ms"
        t.add_row("request goodput", f"{summary['request_goodput']:.2f} req/s ({good})")
    if summary["max_output_tokens_per_s"] is not None:
        _peak_row(t, summary)
        t.add_row("peak concurrent requests", str(summary["max_concurrent_requests"]))
    latency_rows(t, summary, metrics, ps)
    return t
