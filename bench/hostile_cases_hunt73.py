"""The CLI refusals of session 73 (hunt 73, each fixed), as `hostile_cases.Case`s whose
commands and messages are those of their tests: packages/trainer/tests/test_config_zoo_hunt73.py.
One case per distinct refusal. Select them with `--only '(hunt 73)'`."""

from __future__ import annotations

from hostile_cases import Case
from hostile_cases_hunt72 import _train  # `wse train tiny --validate-only` with overrides


def hunt73_cases() -> list[Case]:
    """Session 73's refusals: each ran, crashed or misled on the code before."""
    return [
        Case("hunt73", "train optimizer.betas out of range named as written (hunt 73)",
             _train("optimizer.betas=[0.9,1.5]"),
             message="optimizer.betas[1] must be in [0, 1), got 1.5",
             note="named optimizer.beta2, a key the user never wrote"),
        Case("hunt73", "train sgd with betas names betas (hunt 73)",
             _train("optimizer.optimizer_type=sgd", "optimizer.betas=[0.9,0.95]"),
             message="drop them (optimizer.betas=null",
             note="the hint named optimizer.beta2=null and came back after it was followed"),
    ]  # fmt: skip
