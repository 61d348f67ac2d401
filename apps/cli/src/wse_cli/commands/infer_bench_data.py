"""`wse infer bench`'s dataset options, vLLM's (`vllm bench serve`): what each request sends.

`--dataset-name` is `prompt` (the default, this bench's own: `--prompt` for `--max-tokens`
each time; vLLM's default is random and it has no fixed prompt), `random` or `sharegpt`
(`wse_inference.demo.bench_data`), with vLLM's options and defaults (`--random-input-len`
1024, `--random-output-len` 128, `--random-range-ratio` 0, `--random-prefix-len` 0,
`--dataset-path`, `--sharegpt-output-len`, `--ignore-eos`; `--num-prompts` is -n). Not vLLM's:
`--random-vocab-size`, where vLLM reads its tokenizer's (a server lists its own in GET
/v1/models where it is wse serve). `dataset_spec(ctx)` checks them before the first request:
an option of another dataset given (vLLM ignores it without a word), a sharegpt without its
file, a bad value or file is one line and exit 2. `token_rows` adds the dataset and vLLM's
token figures to the summary's table.

How each request is sent, vLLM's too: `--backend` openai (or vllm) posts to /v1/completions,
openai-chat to /v1/chat/completions, `--endpoint` the one or the other (the endpoint alone
picks the backend; the two disagreeing, another path or backend is refused by
`backend(ctx)`; a chat of the random dataset sends each prompt's ids as text, decoded and
encoded again by the server's /detokenize and /tokenize as vLLM's RandomDataset decodes and
encodes them with its tokenizer: `bench_data.random_text_sample`); `--temperature` (default
0, greedy), `--top-p` and `--top-k` (sent only when given); `--num-warmups`.
"""

from __future__ import annotations

from pathlib import Path

import typer

from wse_cli.errors import fail, printable
from wse_cli.options import number, typed

__all__ = ["DATASETS", "backend", "dataset_failed", "dataset_spec", "num_requests", "token_rows"]

DATASETS = ("prompt", "random", "sharegpt")
# wse_inference.demo.bench_data.MAX_LEN, the most tokens of a prompt or output (not imported:
# it would load httpx for `wse --help`; a test checks the two agree)
MAX_LEN = 1 << 20
# each dataset's own options (parameter, option): refused with another dataset
_OWN = {
    "prompt": (("prompt", "--prompt"), ("max_tokens", "--max-tokens")),
    "random": (("random_input_len", "--random-input-len"),
               ("random_output_len", "--random-output-len"),
               ("random_range_ratio", "--random-range-ratio"),
               ("random_prefix_len", "--random-prefix-len"),
               ("random_vocab_size", "--random-vocab-size")),
    "sharegpt": (("dataset_path", "--dataset-path"),
                 ("sharegpt_output_len", "--sharegpt-output-len")),
}  # fmt: skip
_WHAT = {
    "prompt": "--prompt's text each time",
    "random": "random token ids of varied lengths",
    "sharegpt": "the conversations of --dataset-path",
}

NUM_PROMPTS = number(None, "--num-prompts", kind=int, ge=1, le=1_000_000, help="vLLM's -n.")
DATASET_NAME = typer.Option(
    "prompt",
    "--dataset-name",
    help="prompt: --prompt's text each time (this bench's default; vLLM's is random); random: "
    "random token ids of varied lengths, each request generating exactly its output length "
    "(ignore_eos, as vLLM's); sharegpt: the prompts and output lengths of the conversations "
    "of --dataset-path (vLLM's).",
)
DATASET_PATH: Path = typer.Option(
    None,
    "--dataset-path",
    help="--dataset-name sharegpt: a local ShareGPT JSON file (vLLM's: a list of "
    '{"conversations": [{"from": "human", "value": ...}, {"from": "gpt", ...}]}, e.g. '
    "ShareGPT_V3_unfiltered_cleaned_split.json; never downloaded). Tokens are counted by the "
    "server's /tokenize, and vLLM's filter applied (a prompt of 4 to 1,024 tokens, an output "
    "of at least 4, at most 2,048 in all).",
)
# bench_data.MAX_SHAREGPT_OUTPUT_LEN (not imported, as MAX_LEN; a test checks the two agree):
# vLLM's filter keeps 2,048 tokens in all, a prompt of 4 or more (hunt 71: 2,045 was refused
# only once every conversation had been tokenized)
MAX_SHAREGPT_OUTPUT_LEN = 2044
SHAREGPT_OUTPUT_LEN = number(
    None, "--sharegpt-output-len", kind=int, ge=1, le=MAX_SHAREGPT_OUTPUT_LEN, unit="tokens",
    help="--dataset-name sharegpt: every request's output length (default: the tokens of "
    "each conversation's reply); vLLM's filter keeps at most 2,048 tokens in all, a prompt "
    "of at least 4.",
)  # fmt: skip
RANDOM_INPUT_LEN = number(
    None, "--random-input-len", kind=int, ge=1, le=MAX_LEN, unit="tokens",
    help="--dataset-name random: prompt tokens (default 1024, vLLM's).",
)  # fmt: skip
RANDOM_OUTPUT_LEN = number(
    None, "--random-output-len", kind=int, ge=1, le=MAX_LEN, unit="tokens",
    help="--dataset-name random: output tokens (default 128, vLLM's).",
)  # fmt: skip
RANDOM_RANGE_RATIO = number(
    None, "--random-range-ratio", ge=0, lt=1,
    help="--dataset-name random: each length drawn uniformly from the integers of "
    "[len x (1 - r), len x (1 + r)] (default 0, vLLM's).",
)  # fmt: skip
RANDOM_PREFIX_LEN = number(
    None, "--random-prefix-len", kind=int, ge=0, le=MAX_LEN, unit="tokens",
    help="--dataset-name random: random ids before every prompt, the same for all (default "
    "0, vLLM's).",
)  # fmt: skip
RANDOM_VOCAB_SIZE = number(
    None, "--random-vocab-size", kind=int, ge=1, le=2**31 - 1,
    help="--dataset-name random: ids are drawn from [0, V) (default: the vocab_size the "
    "server lists for the model in GET /v1/models, as wse serve does; a vLLM server lists "
    "none: give the model's config.json vocab_size. vLLM's bench reads its tokenizer's).",
)  # fmt: skip
IGNORE_EOS = typer.Option(
    False,
    "--ignore-eos",
    help="Send ignore_eos: each request generates its full output length (vLLM's; always on "
    "for --dataset-name random, as in vLLM).",
)


# vLLM's --backend names this bench speaks, and their endpoints
# (wse_inference.demo.bench_endpoints.BACKENDS: not imported, it loads httpx for --help)
BACKENDS = {"openai": "/v1/completions", "vllm": "/v1/completions",
            "openai-chat": "/v1/chat/completions"}  # fmt: skip
BACKEND = typer.Option(
    "openai",
    "--backend",
    help="vLLM's: openai (or vllm) posts each request to /v1/completions; openai-chat to "
    "/v1/chat/completions, its prompt one user message of text (--dataset-name random: its "
    "ids as text, by the server's /detokenize and /tokenize, as vLLM's).",
)
ENDPOINT = typer.Option(
    None,
    "--endpoint",
    help="vLLM's: /v1/completions or /v1/chat/completions, under --url (default: "
    "--backend's; given alone, it picks the backend).",
)
TEMPERATURE = number(
    None, "--temperature", ge=0,
    help="Sent as each request's temperature (default 0: greedy, vLLM's default).",
)  # fmt: skip
TOP_P = number(None, "--top-p", gt=0, le=1, help="Sent as top_p, only when given (vLLM's).")
TOP_K = number(
    None, "--top-k", kind=int, ge=-1, le=2**31 - 1,
    help="Sent as top_k, only when given (vLLM's; -1: every token).",
)  # fmt: skip
NUM_WARMUPS = number(
    0, "--num-warmups", kind=int, ge=0, le=1_000_000,
    help="Copies of the first request sent before the run, at most --concurrency at once, "
    "not counted (vLLM's).",
)  # fmt: skip


def backend(ctx: typer.Context) -> str:
    """--backend and --endpoint as one backend name (module docstring)."""
    from wse_core.errors import shown

    name, endpoint = ctx.params["backend"], ctx.params["endpoint"]
    paths = {"/v1/completions": "openai", "/v1/chat/completions": "openai-chat"}
    if name not in BACKENDS:
        fail(f"--backend must be openai or vllm (POST /v1/completions) or openai-chat (POST "
             f"/v1/chat/completions), got {shown(name)}: OpenAI's API only")  # fmt: skip
    if endpoint is not None and endpoint not in paths:
        fail(f"--endpoint must be /v1/completions or /v1/chat/completions (a path under "
             f"--url), got {shown(endpoint)}")  # fmt: skip
    if endpoint is not None and not typed(ctx, "backend"):
        name = paths[endpoint]
    elif endpoint is not None and BACKENDS[name] != endpoint:
        fail(f"--backend {name} posts to {BACKENDS[name]}, not --endpoint {endpoint}; give "
             f"--backend {paths[endpoint]} with it, or leave one out")  # fmt: skip
    return name


def num_requests(ctx: typer.Context, n: int, num_prompts: int | None) -> int:
    """-n/--num-requests and vLLM's --num-prompts: one setting, given either way."""
    if num_prompts is None:
        return n
    if typed(ctx, "num_requests") and n != num_prompts:
        fail(f"-n/--num-requests {n} and --num-prompts {num_prompts} differ: they are one "
             "setting (--num-prompts is vLLM's name); give one")  # fmt: skip
    return num_prompts


def _refuse_others(ctx: typer.Context, name: str) -> None:
    """An option of another dataset than `name`, given on the command line (vLLM's bench
    ignores it without a word)."""
    for other, options in _OWN.items():
        for param, option in options if other != name else ():
            if typed(ctx, param):
                fail(f"{option} is an option of --dataset-name {other}; leave it out with "
                     f"--dataset-name {name} ({_WHAT[name]})")  # fmt: skip


def dataset_spec(ctx: typer.Context):
    """--dataset-name's spec (`wse_inference.demo.bench_data`), its options checked, from
    the command's parameters (`ctx.params`); None for the fixed --prompt."""
    from wse_core.errors import shown
    from wse_inference.demo.bench_data import DatasetError, RandomSpec, sharegpt

    given, name = ctx.params, ctx.params["dataset_name"]
    if name not in DATASETS:
        fail(f"--dataset-name must be one of {', '.join(DATASETS)} (vLLM's names for random "
             f"and sharegpt), got {shown(name)}")  # fmt: skip
    _refuse_others(ctx, name)
    if name == "sharegpt" and given["dataset_path"] is None:
        fail("--dataset-name sharegpt needs --dataset-path FILE.json, a local ShareGPT file "
             "(e.g. ShareGPT_V3_unfiltered_cleaned_split.json; never downloaded)")  # fmt: skip
    try:
        if name == "random":
            keys = ("input_len", "output_len", "range_ratio", "prefix_len", "vocab_size")
            spec = RandomSpec(**{k: given[f"random_{k}"] for k in keys
                                 if given[f"random_{k}"] is not None})  # fmt: skip
            spec.check_in_flight(given["concurrency"])
            return spec
        if name == "sharegpt":
            return sharegpt(given["dataset_path"], given["sharegpt_output_len"])
    except DatasetError as e:
        fail(str(e))
    return None


def dataset_failed(e, url: str) -> None:
    """A dataset the server could not give (`bench_data.DatasetError` `e`: no vocabulary
    listed, no /tokenize, nothing kept): its fault (exit 1) or the settings' (exit 2)."""
    if e.fault:
        from wse_core.errors import RunFault

        raise RunFault(f"{url}: {e}; nothing saved")
    fail(str(e))


def token_rows(t, summary: dict) -> None:
    """The dataset and vLLM's token figures (inputs, outputs, their throughputs) as rows of
    the summary's table `t` (a rich Table)."""
    from rich.markup import escape

    d = summary["dataset"]  # random_input_len 1024 shown as input_len 1024
    shown = {k.removeprefix(f"{d['name']}_"): v for k, v in d.items() if v is not None}
    params = ", ".join(f"{k} {v}" for k, v in shown.items() if k not in ("name", "dataset_path"))
    t.add_row("dataset", escape(printable(f"{d['name']} ({params})")))
    t.add_row("request throughput", f"{summary['request_throughput_per_s']:.2f} req/s")
    n_in = summary["input_tokens"]
    t.add_row("input tokens", "- (not counted)" if n_in is None else f"{n_in:,}")
    t.add_row("generated tokens", f"{summary['output_tokens']:,}")
    for name in ("input", "output", "total"):
        v = summary[f"{name}_tokens_per_s"]
        t.add_row(f"{name} tokens/s", "-" if v is None else f"{v:.1f}")
