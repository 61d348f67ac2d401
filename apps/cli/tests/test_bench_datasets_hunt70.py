"""`wse infer bench --dataset-name random | sharegpt` and vLLM's options (hunt 70). Before, the
bench had only `--prompt` (one fixed text N times): no `--dataset-name`, `--dataset-path`,
`--num-prompts`, `--random-*`, `--sharegpt-output-len` or `--ignore-eos`, and its table and
JSON had no input tokens, no input / total token throughput and no record of the dataset.

Oracles: the one-line refusal and exit 2 (`refused_in_one_line`), --out left unmade, and
the saved JSON against the requests a fake server answered.
"""

from __future__ import annotations

import json

import pytest
import typer
from wse_cli.app import app
from wse_cli.commands import infer_bench_data
from wse_cli.testing import invoke, refused_in_one_line
from wse_inference.demo import bench_data
from wse_inference.testing import fake_openai_server

pytestmark = pytest.mark.timeout(60)
ROOT = typer.main.get_command(app)
NO_KEY = {"OPENAI_API_KEY": None}
MODELS = b'{"object": "list", "data": [{"id": "m", "vocab_size": 100}]}'
ONE = (b'data: {"choices": [{"text": "a"}]}\n\n'
       b'data: {"choices": [], "usage": {"completion_tokens": 1}}\n\ndata: [DONE]\n\n')  # fmt: skip
DEAD = "http://127.0.0.1:9"  # every refusal below comes before a request


def _sharegpt(tmp_path) -> str:
    path = tmp_path / "sg.json"
    turns = [{"from": "human", "value": "one two three four five"}, {"from": "gpt", "value": "x"}]
    path.write_text(json.dumps([{"conversations": turns}]))
    return str(path)


REFUSED = [
    (["--dataset-name", "nope"], "--dataset-name must be one of prompt, random, sharegpt"),
    (["--dataset-name", "random", "--prompt", "hi"],
     "--prompt is an option of --dataset-name prompt; leave it out with --dataset-name random"),
    (["--dataset-name", "random", "--max-tokens", "4"], "--max-tokens is an option of"),
    (["--dataset-path", "{sg}"], "--dataset-path is an option of --dataset-name sharegpt"),
    (["--dataset-name", "sharegpt", "--random-input-len", "8", "--dataset-path", "{sg}"],
     "--random-input-len is an option of --dataset-name random"),
    (["--sharegpt-output-len", "8"], "--sharegpt-output-len is an option of --dataset-name"),
    (["--dataset-name", "sharegpt"], "--dataset-name sharegpt needs --dataset-path FILE.json"),
    (["--dataset-name", "sharegpt", "--dataset-path", "{tmp}/none.json"], "does not exist"),
    (["--dataset-name", "sharegpt", "--dataset-path", "{tmp}"], "is a folder, not a regular"),
    (["-n", "5", "--num-prompts", "6"], "-n/--num-requests 5 and --num-prompts 6 differ"),
    (["--dataset-name", "random", "--random-range-ratio", "1"],
     "--random-range-ratio must be a finite number in [0, 1), got 1"),
    (["--dataset-name", "random", "--random-input-len", "0"], "--random-input-len must be"),
    (["--dataset-name", "random", "--random-output-len", str((1 << 20) + 1)],
     "--random-output-len must be an integer in [1, 1048576]"),
    (["--dataset-name", "random", "--random-input-len", "1", "--random-range-ratio", "0.5"],
     "may draw an empty prompt"),
    (["--dataset-name", "random", "--random-vocab-size", "0"], "--random-vocab-size must be"),
    (["--dataset-name", "random", "--random-input-len", "1048576", "-c", "200"],
     "--concurrency 200 requests of up to 1,048,576 prompt tokens hold 209,715,200 token ids"),
    (["--dataset-name", "random", "--burstiness", "0.5"],
     "--burstiness shapes the arrivals of --request-rate"),
]  # fmt: skip


@pytest.mark.parametrize("extra, message", REFUSED, ids=[m[:40] for _, m in REFUSED])
def test_a_bad_dataset_setting_is_one_line_and_nothing_is_written(tmp_path, extra, message):
    sg, out = _sharegpt(tmp_path), tmp_path / "b.json"
    extra = [a.format(sg=sg, tmp=tmp_path) for a in extra]
    refused_in_one_line(ROOT, ["infer", "bench", "--url", DEAD, "--out", out, *extra], message,
                        NO_KEY)  # fmt: skip
    assert not out.exists()


def test_a_file_that_is_not_sharegpt_is_refused_naming_the_shape(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"conversations": []}')
    args = ["infer", "bench", "--url", DEAD, "--dataset-name", "sharegpt", "--dataset-path", bad]
    line = refused_in_one_line(ROOT, args, "is not a JSON list", NO_KEY)
    assert 'expected a JSON list of {"conversations": [{"from": "human"' in line


def _bench(url: str, out, *extra) -> tuple[int, str]:
    args = ["infer", "bench", "--url", url, "-c", "2", "--out", out, *extra]
    return invoke(ROOT, [str(a) for a in args], NO_KEY)


def test_a_random_run_saves_and_shows_vllms_token_figures(tmp_path):
    out = tmp_path / "b.json"
    with fake_openai_server(MODELS, ONE) as url:
        code, text = _bench(url, out, "--dataset-name", "random", "--random-input-len", "12",
                            "--random-range-ratio", "0.25", "--num-prompts", "6", "--seed",
                            "3")  # fmt: skip
    assert code == 0, text
    s = json.loads(out.read_text())
    drawn = bench_data.random_sample(bench_data.RandomSpec(input_len=12, range_ratio=0.25), 6, 3,
                                     100)  # fmt: skip
    assert s["input_tokens"] == sum(drawn.request(i).prompt_len for i in range(6))
    assert (s["num_requests"], s["output_tokens"], s["ignore_eos"]) == (6, 6, True)
    assert s["dataset"]["name"] == "random" and s["dataset"]["seed"] == 3
    assert s["dataset"]["random_vocab_size"] == 100  # the server's GET /v1/models
    for row in ("input tokens", "generated tokens", "input tokens/s", "total tokens/s"):
        assert row in text, text
    assert f"{s['input_tokens']:,}" in text


def test_n_and_num_prompts_agreeing_is_one_setting(tmp_path):
    out = tmp_path / "b.json"
    with fake_openai_server(MODELS, ONE) as url:
        code, text = _bench(url, out, "-n", "3", "--num-prompts", "3", "--ignore-eos")
    assert code == 0, text
    s = json.loads(out.read_text())
    assert (s["num_requests"], s["ignore_eos"], s["input_tokens"]) == (3, True, None)
    assert "- (not counted)" in text  # the fixed prompt's tokens: no tokenizer here


def test_a_server_without_a_vocabulary_or_tokenize_leaves_out_unwritten(tmp_path):
    out, sg = tmp_path / "b.json", _sharegpt(tmp_path)
    models = b'{"object": "list", "data": [{"id": "m"}]}'  # vLLM's: no vocab_size
    with fake_openai_server(models, ONE) as url:
        code, text = _bench(url, out, "--dataset-name", "random")
        assert code == 2 and "give --random-vocab-size" in text, text
        # POST /tokenize answered with a completion's stream: the server's fault, exit 1
        code, text = _bench(url, out, "--dataset-name", "sharegpt", "--dataset-path", sg)
    assert code == 1 and "POST /tokenize did not answer vLLM's" in text, text
    assert len(text.strip().splitlines()) == 1 and not out.exists()


def test_the_clis_length_bound_is_the_datasets():
    assert infer_bench_data.MAX_LEN == bench_data.MAX_LEN
    assert infer_bench_data.MAX_SHAREGPT_OUTPUT_LEN == bench_data.MAX_SHAREGPT_OUTPUT_LEN
