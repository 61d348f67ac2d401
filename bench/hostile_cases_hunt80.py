"""The hostile cases of review 80 (/work/notes/s80/hunt_review80.md), each checked on the
code before and after its fix: the CLI ones as `hostile_cases.Case`s, whose commands and
messages are those of their tests (packages/systems/tests/test_no_layout_cause_review80.py,
packages/wse_core/tests/test_dump_folder_review80.py,
packages/trainer/tests/test_modelzoo_values_review80.py), the served ones as
`hostile_serve`'s rows (`hunt80_requests`), and the Python API's start as a row of its own
(`hunt80_python_api_row`: packages/inference/tests/test_serve_limits_hunt80.py). Select the
CLI cases with `--only '(review 80)'`; the served rows run with the front end's
(`--only 'front end'`, or the whole set)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from hostile_cases import Case, _const
from hostile_cases_hunt72 import _train  # `wse train tiny --validate-only` with overrides

_STENCIL = ("hpc", "stencil", "--kind", "jacobi", "--grid", "4", "4", "4", "--preset", "tiny",
            "--steps", "1")  # fmt: skip


def _dangling(fx, tmp) -> list[str]:
    """The stencil run, in a folder holding `dangling`, a link to a path that does not exist
    (the case's XLA_FLAGS names it relative to the folder the case runs in)."""
    os.symlink("/nonexistent/zzz", tmp / "dangling")
    return list(_STENCIL)


def hunt80_cases() -> list[Case]:
    """Review 80's CLI cases: four failed before (holes 2, 4, 5, 6), three passed."""
    return [
        Case("review80", "stop limit lowered: 3 stops over WSE_LIMIT_SERVE_STOP_STRINGS=2 "
             "(review 80)", _const("infer", "generate", "--model-dir", "/nonexistent",
                                   "--prompt", "hi", "--stop", "a", "--stop", "b", "--stop",
                                   "c"),
             env={"WSE_LIMIT_SERVE_STOP_STRINGS": "2"}, message="give at most 2 stop strings",
             note="passed before"),
        Case("review80", "XLA_FLAGS --xla_dump_to a dangling symlink (review 80)", _dangling,
             env={"XLA_FLAGS": "--xla_dump_to=dangling"}, message="symbolic link",
             note="'it is a file, not a folder'"),
        Case("review80", "XLA_FLAGS own bool flag empty value (review 80)", _const(*_STENCIL),
             env={"XLA_FLAGS": "--xla_llvm_disable_expensive_passes="},
             message="must be true or false", note="passed before"),
        Case("review80", "JAX_DEFAULT_DEVICE gpu under JAX_PLATFORMS=cpu (review 80)",
             _const(*_STENCIL), env={"JAX_DEFAULT_DEVICE": "gpu", "JAX_PLATFORMS": "cpu"},
             message="JAX_PLATFORMS='cpu' starts cpu", note="passed before"),
        Case("review80", "train loss_scaling_factor negative (review 80)",
             _train("optimizer.loss_scaling_factor=-1"), message="must be a positive number",
             note="'-1 is a static loss scale'"),
        Case("review80", "train prefetch_factor a whole float (review 80)",
             _train("train_input.prefetch_factor=2.0"), rc=0,
             note="refused: 'must be a count >= 1, got 2.0 (ignored here: ...: ignored)'",
             skip="runs (rc 0, with the loader note), as ModelZoo's pydantic int field takes "
                  "2.0; the bench checks refusals: "
                  "packages/trainer/tests/test_modelzoo_values_review80.py"),
        Case("review80", "train prefetch_factor 0 (review 80)",
             _train("train_input.prefetch_factor=0"), message="must be a count >= 1 as "
             "ModelZoo requires, got 0 (a PyTorch DataLoader setting",
             note="'(ignored here: ...: ignored)' in a refusal"),
        Case("review80", "plan train 70B on 24 H100s: splits exist, none fits (review 80)",
             _const("plan", "train", "-m", "llama3-70b", "--tokens", "1e9", "--gpus", "24",
                    "--batch", "48", "--seq-len", "8192"),
             message="memory", note="a divisibility line: 'data-parallel ranks that divide it'"),
    ]  # fmt: skip


def hunt80_requests(model: str) -> list[tuple]:
    """Review 80's served rows in `hostile_serve`'s form (name, path, body, expected status,
    method, headers as a list of pairs: a header given twice). Both passed before."""
    chat = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1,
            "stream": True}  # fmt: skip
    completion = json.dumps({"model": model, "prompt": "hi", "max_tokens": 1}).encode()
    two_types = [("content-type", "application/json"),
                 ("content-type", "application/x-www-form-urlencoded")]  # fmt: skip
    long_id = [("content-type", "application/json"), ("x-request-id", "x" * 257)]
    return [
        ("two Content-Type headers that differ (review 80)", "/v1/completions", completion,
         400, "POST", two_types),
        ("X-Request-Id of 257 characters, streamed chat (review 80)", "/v1/chat/completions",
         json.dumps(chat).encode(), 400, "POST", long_id),
    ]  # fmt: skip


_API_SERVER = """
import httpx
from wse_core.errors import WseError
from wse_inference.mock import MockEngine
from wse_inference.serve.app import ServeConfig, Server
try:
    server = Server(MockEngine(max_slots=2), ServeConfig(port=0)).start()
except WseError as e:
    print(e)
    raise SystemExit(2)
try:
    r = httpx.post(server.http_url + "/v1/completions", json={"prompt": "hi", "max_tokens": 2})
    print(f"{r.status_code} {r.text[:300]}")
finally:
    server.close()
"""


def hunt80_python_api_row(env: dict[str, str]) -> dict:
    """`Server(MockEngine(), ServeConfig(port=0))` built under WSE_LIMIT_SERVE_STOP_STRINGS=abc
    in a child process: refused there, with the one-line WseError (exit 2 here), where before
    it started and answered every request 500 (review 80, hole 1)."""
    from hostile_serve import _row

    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _API_SERVER], capture_output=True, text=True,
                          env={**env, "WSE_LIMIT_SERVE_STOP_STRINGS": "abc"}, timeout=120,
                          check=False)  # fmt: skip
    said = done.stdout.strip()
    got = 2 if done.returncode == 2 else (said.split(" ", 1)[0] if said else done.returncode)
    return _row("Python API: WSE_LIMIT_SERVE_STOP_STRINGS=abc, Server refused at start "
                "(review 80)", got, 2, time.perf_counter() - t0, 0, said[:500],
                bound_s=None)  # fmt: skip
