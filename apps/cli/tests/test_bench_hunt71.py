"""`wse infer bench` (vLLM's `vllm bench serve`), hunt 71. Before:

- `--out sg.json` naming the `--dataset-path` file (or a link to it) replaced the dataset
  with the bench's summary, exit 0;
- `--burstiness 5e-324` was a ZeroDivisionError traceback; `--request-rate 5e-324` (or 1e-300)
  waited forever for its second request (`asyncio.sleep(inf)`), --timeout-s bounding nothing;
- a lone surrogate in a ShareGPT text, or an integer of more than 4,300 digits in the file,
  was a traceback of 99 or 76 lines;
- a ShareGPT prompt past the server's body cap ended the run as "cannot reach" (ReadError, no
  reason) a server that was up;
- `--model nope` tokenized the whole file, then blamed vLLM's filter;
- `--sharegpt-output-len 2045` (no prompt of 4 tokens fits vLLM's 2,048 in all) was refused
  only after every conversation was tokenized, naming no option.

Oracles: the exact refusal line and exit 2 (`refused_in_one_line`), the dataset's bytes, the
saved JSON against the file's conversations, the mock server's tokens (UTF-8 bytes).
"""

from __future__ import annotations

import json
import os
import random
import time

import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke, refused_in_one_line
from wse_inference.serve.admission import RequestLimits
from wse_inference.serve.testing import running_server
from wse_inference.testing import fake_openai_server

pytestmark = pytest.mark.timeout(60)
ROOT = typer.main.get_command(app)
NO_KEY = {"OPENAI_API_KEY": None}
DEAD = "http://127.0.0.1:9"  # every refusal below comes before a request
MODELS = b'{"object": "list", "data": [{"id": "m"}]}'
ONE = (b'data: {"choices": [{"text": "a"}]}\n\n'
       b'data: {"choices": [], "usage": {"completion_tokens": 1}}\n\ndata: [DONE]\n\n')  # fmt: skip


def _sharegpt(tmp_path, prompts=None, name: str = "sg.json"):
    prompts = prompts or [f"hello there number {i}" for i in range(20)]
    path = tmp_path / name
    path.write_text(json.dumps([{"conversations": [{"from": "human", "value": p},
                                                   {"from": "gpt", "value": "a reply"}]}
                                for p in prompts]))  # fmt: skip
    return path


def _bench(url: str, out, *extra) -> list[str]:
    return ["infer", "bench", "--url", url, "-c", "2", "--out", out, *extra]


@pytest.fixture(scope="module")
def server():
    with running_server(max_slots=2, max_context=4096) as srv:  # tokens: UTF-8 bytes
        yield srv


# -- hole 3: --out over the dataset ------------------------------------------------------------
@pytest.mark.parametrize("how", ["same", "symlink", "hardlink"])
def test_out_naming_the_dataset_is_refused_and_the_dataset_kept(tmp_path, server, how):
    sg = _sharegpt(tmp_path)
    before, out = sg.read_bytes(), tmp_path / "out.json"
    if how == "same":
        out = sg
    elif how == "symlink":
        out.symlink_to(sg)
    else:
        os.link(sg, out)
    args = _bench(server.http_url, out, "--dataset-name", "sharegpt", "--dataset-path", sg, "-n", 2)
    line = refused_in_one_line(ROOT, args, "", NO_KEY)
    assert line == (f"Error: --out {out} is the input --dataset-path; writing it would destroy "
                    "the input: give another name")  # fmt: skip
    assert sg.read_bytes() == before


# -- hole 6: arrivals that overflow or never come ----------------------------------------------
REFUSED = [
    (["--request-rate", "0.5", "--burstiness", "5e-324"],
     "--burstiness must be a finite number in [0.001, 1000], got 5e-324"),
    (["--request-rate", "5e-324", "-n", "3"],
     "--request-rate 5e-324 sends 3 requests over inf s, past a day (86,400 s); "
     "give at least 3.48e-05 requests/s, or fewer requests"),
    (["--request-rate", "1e-300", "-n", "3"],
     "--request-rate 1e-300 sends 3 requests over 3e+300 s, past a day"),
    (["--request-rate", "1e-05", "-n", "1"],
     "--request-rate 1e-05 sends 1 request over 100,000 s, past a day (86,400 s); "
     "give at least 1.16e-05 requests/s"),
]  # fmt: skip


@pytest.mark.parametrize("extra, message", REFUSED, ids=[m[:30] for _, m in REFUSED])
def test_arrivals_past_a_day_or_a_burstiness_below_the_floor_are_one_line(tmp_path, extra,
                                                                         message):  # fmt: skip
    out, t0 = tmp_path / "b.json", time.monotonic()
    line = refused_in_one_line(ROOT, _bench(DEAD, out, *extra), message, NO_KEY)
    assert line.startswith(f"Error: {message}") and time.monotonic() - t0 < 10
    assert not out.exists()
    assert 3.47e-05 * 86_400 < 3 <= 3.48e-05 * 86_400  # the rate said is n / a day, rounded up
    assert 1.15e-05 * 86_400 < 1 <= 1.16e-05 * 86_400


def test_the_floors_themselves_run(tmp_path):
    from wse_cli.commands.infer_bench import _check_span

    # the rate floor is taken; its one request would be sent at 1 / rate = 86,207 s, as vLLM's
    # schedule sends the last of n at n / rate (hunt 82), so the run here is at a faster rate
    _check_span(1.16e-05, 1)
    out = tmp_path / "b.json"
    with fake_openai_server(MODELS, ONE) as url:
        code, text = invoke(ROOT, [str(a) for a in _bench(url, out, "-n", "1", "--request-rate",
                                                          "20")], NO_KEY)  # fmt: skip
        assert code == 0, text
        bursty = _bench(url, out, "-n", "3", "--request-rate", "50", "--burstiness", "0.001")
        code, text = invoke(ROOT, [str(a) for a in bursty], NO_KEY)
    assert code == 0, text
    assert json.loads(out.read_text())["completed"] == 3


# -- holes 1, 2 and 12: refused before any request, naming the place or the option -------------
def test_a_lone_surrogate_or_a_4301_digit_integer_is_one_line(tmp_path):
    bad = tmp_path / "s.json"
    bad.write_text('[{"conversations":[{"from":"human","value":"hello there \\ud800 friend"},'
                   '{"from":"gpt","value":"a reply of some words"}]}]')  # fmt: skip
    args = _bench(DEAD, tmp_path / "b.json", "--dataset-name", "sharegpt", "--dataset-path", bad)
    line = refused_in_one_line(ROOT, args, "", NO_KEY)
    assert line == (f"Error: --dataset-path {str(bad)!r}: turn 0 of entry 0 holds a lone "
                    "UTF-16 surrogate (\\ud800 at character 12), half of a character, not text; "
                    "mend or drop the entry (a character past U+FFFF is a pair, e.g. "
                    "\\ud83d\\ude00)")  # fmt: skip
    text = '[{"conversations":[{"value":"hello"},{"value":"a reply"}],"id":%s}]' % ("7" * 4301)  # noqa: UP031
    bad.write_text(text)
    line = refused_in_one_line(ROOT, args, "", NO_KEY)
    assert line.startswith(f"Error: --dataset-path {str(bad)!r}: entry 0 holds an integer of "
                           f"4,301 digits (at character {text.index('7'):,}), past the 4,300 "
                           "Python's JSON reader makes; expected a JSON list of")  # fmt: skip


def test_an_output_len_no_prompt_fits_beside_is_refused_naming_the_bound(tmp_path):
    sg = _sharegpt(tmp_path)
    before, out = sg.read_bytes(), tmp_path / "b.json"
    base = ["--dataset-name", "sharegpt", "--dataset-path", sg, "--sharegpt-output-len"]
    refused_in_one_line(ROOT, _bench(DEAD, out, *base, "2045"), "--sharegpt-output-len must be "
                        "an integer in [1, 2044] (tokens), got 2045", NO_KEY)  # fmt: skip
    # 2,044 passes the option (4 + 2,044 = vLLM's 2,048): the run goes on to the server
    refused_in_one_line(ROOT, _bench(DEAD, out, *base, "2044"), "cannot reach", NO_KEY)
    assert sg.read_bytes() == before and not out.exists()


# -- holes 7 and 8: what the server's /tokenize answers ----------------------------------------
def test_a_prompt_past_the_servers_body_cap_is_dropped_not_cannot_reach(tmp_path):
    prompts = ["word " * 2_000_000, "one two three four five", "x" * 300_000, "six seven eight"]
    sg, out = _sharegpt(tmp_path, prompts), tmp_path / "b.json"
    limits = RequestLimits(max_body_bytes=4096, max_discard_bytes=4096)  # 10 MB: a reset
    with running_server(max_slots=2, max_context=4096, limits=limits) as srv:
        code, text = invoke(ROOT, [str(a) for a in _bench(
            srv.http_url, out, "--dataset-name", "sharegpt", "--dataset-path", sg, "-n", "4",
            "--seed", "1")], NO_KEY)  # fmt: skip
    assert code == 0, text
    s = json.loads(out.read_text())
    assert (s["completed"], s["dataset"]["kept"], s["dataset"]["tokenized"]) == (4, 2, 4)
    order = list(range(4))
    random.Random(1).shuffle(order)  # vLLM's order, then its oversampling of the two kept
    kept, extra = [k for k in order if k in (1, 3)], random.Random(1)
    sent = kept + [kept[extra.randrange(2)] for _ in range(2)]
    assert s["input_tokens"] == sum(len(prompts[k].encode()) for k in sent)  # the mock's tokens


def test_a_model_the_server_does_not_serve_stops_at_the_first_tokenize(tmp_path, server):
    sg = _sharegpt(tmp_path, [f"hello there number {i}" for i in range(2000)])
    args = _bench(server.http_url, tmp_path / "b.json", "--model", "nope", "--dataset-name",
                  "sharegpt", "--dataset-path", sg, "-n", "1")  # fmt: skip
    line = refused_in_one_line(ROOT, args, "", NO_KEY)
    assert line == ("Error: POST /tokenize answered 404 Not Found (The model 'nope' does not "
                    "exist; this server serves ['mock'].); give --model as the server's GET "
                    "/v1/models lists it, or leave --model out (its first model)")  # fmt: skip
