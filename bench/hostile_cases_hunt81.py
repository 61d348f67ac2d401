"""The hostile cases of session 81's hunts (/work/notes/s81/hunt_*.md), each checked on the
code before and after its fix: the CLI ones as `hostile_cases.Case`s, whose commands and
messages are those of their tests (apps/cli/tests/test_train_modelzoo_flags*.py,
packages/systems/tests/test_gpu_step_jobs17.py), the served ones as `hostile_serve`'s rows
(`hunt81_requests`: packages/inference/tests/test_serve_hunt81.py). Select the CLI cases with
`--only '(hunt 81)'`; the served rows run with the front end's (`--only 'front end'`, or the
whole set)."""

from __future__ import annotations

import json

from hostile_cases import Case, _const

_TRAIN = ("train", "tiny", "--validate-only")
_PLAN = ("plan", "infer", "-m", "llama3-8b", "--users", "1", "--assume")


def hunt81_cases() -> list[Case]:
    """Hunt 81's CLI cases: ModelZoo's run.py flags with no counterpart here (before: 'No such
    option' from click, exit 2 with usage lines), the NVLink and InfiniBand latencies out of
    their range (before: 'unknown assumption', the constants unregistered)."""
    return [
        Case("hunt81", "train --compile_only, ModelZoo's run.py flag (hunt 81)",
             _const(*_TRAIN, "--compile_only"), message="has no counterpart",
             note="'No such option: --compile_only'"),
        Case("hunt81", "train --logging DEBUG, ModelZoo's run.py flag (hunt 81)",
             _const(*_TRAIN, "--logging", "DEBUG"), message="leave --logging out, or give INFO",
             note="'No such option: --logging'"),
        Case("hunt81", "train --is_pretrained_checkpoint without a checkpoint (hunt 81)",
             _const(*_TRAIN, "--is_pretrained_checkpoint"),
             message="give the checkpoint with --checkpoint-path",
             note="'No such option: --is_pretrained_checkpoint'"),
        Case("hunt81", "plan infer --assume gpu.nvlink_latency_s=1, past its range (hunt 81)",
             _const(*_PLAN, "gpu.nvlink_latency_s=1"), message="must be in [0, 0.001]",
             note="'unknown assumption'"),
        Case("hunt81", "plan infer --assume gpu.ib_latency_s=-1 (hunt 81)",
             _const(*_PLAN, "gpu.ib_latency_s=-1"), message="must be in [0, 0.01]",
             note="'unknown assumption'"),
    ]  # fmt: skip


def hunt81_requests(model: str) -> list[tuple]:
    """Hunt 81's served rows in `hostile_serve`'s form (name, path, body, expected status,
    method, headers as a list of pairs). Each was answered 200 before (n greedy copies, the
    template's own names overridden) or refused for a repeated id (65 copies of one id)."""
    json_head = [("content-type", "application/json")]

    def body(**extra) -> bytes:
        return json.dumps({"model": model, "prompt": "hi", "max_tokens": 1, **extra}).encode()

    chat = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1,
            "chat_template_kwargs": {"add_generation_prompt": False}}  # fmt: skip
    return [
        ("n 2 with greedy sampling (hunt 81)", "/v1/completions",
         body(n=2, temperature=0), 400, "POST", json_head),
        ("chat_template_kwargs overriding add_generation_prompt (hunt 81)",
         "/v1/chat/completions", json.dumps(chat).encode(), 400, "POST", json_head),
        ("65 distinct stop_token_ids over the 64 limit (hunt 81)", "/v1/completions",
         body(stop_token_ids=list(range(3, 68))), 400, "POST", json_head),
    ]  # fmt: skip
