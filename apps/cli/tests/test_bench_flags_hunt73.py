"""Hunt 73: `wse infer bench` takes `vllm bench serve`'s spellings. Before: `--base-url`,
`--max-concurrency` and `--save-result` were "No such option" (exit 2), so a vLLM user's
command line did not run. They are `--url`, `-c` and a flag (hunt 77: it saves the summary,
which is saved only when asked).

Oracle: vLLM's documented meaning of each (the server's base URL; the most requests in
flight; save the result as JSON), read back from the summary the run saved, and the same run
spelt our way; one option under two spellings with two values is refused as any repeat is.
"""

from __future__ import annotations

import json

import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke
from wse_inference.serve.testing import running_server

pytestmark = pytest.mark.timeout(60)
ROOT = typer.main.get_command(app)
NO_KEY = {"OPENAI_API_KEY": None}


@pytest.fixture(scope="module")
def server():
    with running_server(max_slots=4) as s:
        yield s


def _saved(args: list[str], out) -> dict:
    code, text = invoke(ROOT, ["infer", "bench", *args, "-n", "4", "--max-tokens", "3",
                               "--out", out], NO_KEY)  # fmt: skip
    assert code == 0, text
    return json.loads(out.read_text())


def test_vllms_spellings_run_as_ours(server, tmp_path):
    theirs = _saved(["--base-url", server.http_url, "--max-concurrency", "2", "--save-result"],
                    tmp_path / "vllm.json")  # fmt: skip
    ours = _saved(["--url", server.http_url, "-c", "2"], tmp_path / "ours.json")
    for summary in (theirs, ours):
        assert summary["url"] == server.http_url and summary["completed"] == 4
        assert summary["concurrency"] == summary["max_concurrency"] == 2
        assert summary["output_tokens"] == 4 * 3


def test_two_spellings_with_two_values_are_refused(server, tmp_path):
    args = ["infer", "bench", "--url", server.http_url, "--base-url", "http://127.0.0.1:9",
            "--out", tmp_path / "b.json"]  # fmt: skip
    code, text = invoke(ROOT, args, NO_KEY)
    assert code == 2 and "given twice" in text and not (tmp_path / "b.json").exists()
