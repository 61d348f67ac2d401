"""Hunt 69, `wse plan infer`'s output. Broken before: at the last users that fit a wafer, the
aggregate fell 11% (llama3-8b, 16-token prompts, 8 output tokens: 35,040 tokens/s at 2,048
users, 31,055 at 3,250) because their KV cache leaves the prompts blocks of 2 tokens, not 16,
and only the JSON said so; a second GPU user of a 4,096-token prompt and one output token was
refused (the step budget taken as a limit on users, not a queue)."""

from __future__ import annotations

import json

from typer.testing import CliRunner
from wse_cli.app import app

runner = CliRunner()
WIDE = {"COLUMNS": "400"}  # one table row a line
ARGS = ["plan", "infer", "-m", "llama3-8b", "--prompt-tokens", "16", "--output-tokens", "8"]


def _run(args: list[str]) -> str:
    r = runner.invoke(app, args, env=WIDE)
    assert r.exit_code == 0, r.output
    return r.output


def _row(out: str, label: str) -> str:
    return next(line for line in out.splitlines() if line.lstrip("│ ").startswith(label))


def test_the_table_names_the_prompt_block_the_json_holds():
    blocks = []
    for users in ("2048", "3250"):
        d = json.loads(_run([*ARGS, "--users", users, "--json"]))
        block = d["wafer"]["point"]["layout"]["prompt_block_tokens"]
        row = _row(_run([*ARGS, "--users", users]), "prompts run in")
        assert f"blocks of {block:,} tokens" in row and "steps of 8,192 tokens" in row
        blocks.append(block)
    # more users leave no larger block (16 and 2 before hunt 81's footprints and program
    # reserve, 16 and 16 since)
    assert blocks[1] <= blocks[0]


def test_a_gpu_prompt_past_the_budget_queues_and_the_table_says_the_wait():
    args = ["plan", "infer", "-m", "llama3-1b", "--gpus", "1", "--prompt-tokens", "4096",
            "--output-tokens", "1", "--users", "8"]  # fmt: skip
    d = json.loads(_run([*args, "--json"]))
    wait = d["gpu"]["point"]["layout"]["admission_wait_s"]
    assert wait > 0 and d["gpu"]["max_users"] > 500  # was refused at 2 users
    assert "none" not in _row(_run(args), "of it, waiting to be admitted").split("│")[3]
