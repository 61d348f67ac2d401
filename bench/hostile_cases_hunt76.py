"""The CLI refusals of session 76 (hunt 76, each fixed), as `hostile_cases.Case`s whose
commands and messages are those of their tests: packages/systems/tests/test_plan_hunt76.py,
apps/cli/tests/test_experiments_hunt76.py, packages/trainer/tests/test_modelzoo_hunt76.py and
packages/hpc_kernels/tests/test_tlrmvm_hunt76.py. One case per distinct refusal. Select them
with `--only '(hunt 76)'`."""

from __future__ import annotations

from hostile_cases import Case, _const
from hostile_cases_hunt72 import _train  # `wse train tiny --validate-only` with overrides


def hunt76_cases() -> list[Case]:
    """Session 76's refusals: each ran, crashed or misled on the code before."""
    return [
        Case("hunt76", "plan infer --stages below the wafers needed (hunt 76)", _const(
            "plan", "infer", "--model", "llama3-70b", "--stages", "3"),
             message="the model needs at least 4 wse3 wafers",
             note="no number of wse3 wafers up to 80 holds the model"),
        Case("hunt76", "experiments run an unknown name (hunt 76)", _const(
            "experiments", "run", "nosuch"),
             message="known: wafer-yield, cost-model-calibration",
             note="named no experiment"),
        Case("hunt76", "experiments --sweep a key nothing reads (hunt 76)", _const(
            "experiments", "run", "wafer-yield", "--sweep", "clock_hz"),
             message="does not read it, so it would move nothing it prices",
             note="exit 0 with a table of +0.0%"),
        Case("hunt76", "train a negative checkpoint_steps (hunt 76)",
             _train("runconfig.checkpoint_steps=-1"),
             message="must be >= 0 (0: no periodic checkpoint",
             note="0 and null, ModelZoo's off, were refused as not positive"),
        Case("hunt76", "hpc tlrmvm compress --nb past the matrix (hunt 76)", _const(
            "hpc", "tlrmvm", "compress", "--n", "100", "--out", "s76.npz"),
             message="--nb 128 is larger than the matrix (100 x 100); give --nb 100 or less",
             note="tile size nb must be an integer in 1..100"),
    ]  # fmt: skip
