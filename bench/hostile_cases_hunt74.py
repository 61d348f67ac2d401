"""The CLI refusals of session 74 (hunt 74, each fixed), as `hostile_cases.Case`s whose
commands and messages are those of their tests: packages/trainer/tests/
test_config_eval_steps_hunt74.py and packages/inference/tests/test_serve_cors_hunt74.py.
One case per distinct refusal. Select them with `--only '(hunt 74)'`."""

from __future__ import annotations

from hostile_cases import Case, _const
from hostile_cases_hunt72 import _train  # `wse train tiny --validate-only` with overrides


def hunt74_cases() -> list[Case]:
    """Session 74's refusals: each ran, crashed or misled on the code before."""
    return [
        Case("hunt74", "train runconfig.eval_steps=0 named as written (hunt 74)",
             _train("runconfig.eval_steps=0"),
             message="runconfig.eval_steps must be positive",
             note="named eval_input.eval_steps, a key the user never wrote"),
        Case("hunt74", "serve --allowed-origins not JSON (hunt 74)", _const(
            "infer", "serve", "--model-dir", "mock", "--port", "0",
            "--allowed-origins", "http://localhost:3000"),
             message="--allowed-origins must be a JSON list of strings",
             note="no CORS option existed: a browser's preflight was a 405"),
        Case("hunt74", "serve --allowed-methods a JSON string (hunt 74)", _const(
            "infer", "serve", "--model-dir", "mock", "--port", "0",
            "--allowed-methods", '"GET"'),
             message="--allowed-methods must be a JSON list of strings"),
    ]  # fmt: skip
