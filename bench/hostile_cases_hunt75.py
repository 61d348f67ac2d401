"""The CLI refusals of session 75 (hunt 75, each fixed), as `hostile_cases.Case`s whose
commands and messages are those of their tests: apps/cli/tests/test_cli_hpc_hunt75.py,
test_infer_stages_hunt75c.py, test_plan_memoryx_hunt75.py and packages/trainer/tests/
test_data_sources_hunt75.py, test_modelzoo_keys_hunt75.py. One case per distinct refusal.
Select them with `--only '(hunt 75)'`."""

from __future__ import annotations

from hostile_cases import Case, _const
from hostile_cases_hunt72 import _train  # `wse train tiny --validate-only` with overrides


def hunt75_cases() -> list[Case]:
    """Session 75's refusals: each ran, crashed or misled on the code before."""
    return [
        Case("hunt75", "hpc stencil bicgstab --dtype fp16 (hunt 75)", _const(
            "hpc", "stencil", "--kind", "bicgstab", "--grid", "8", "8", "8", "--preset",
            "small", "--dtype", "fp16"),
             message="--dtype fp16 is for jacobi/heat; bicgstab takes fp32 or mixed",
             note="ran the mixed scheme labelled fp16"),
        Case("hunt75", "plan infer --stages past the layers (hunt 75)", _const(
            "plan", "infer", "--model", "llama3-8b", "--stages", "33"),
             message="give --stages in [1, 32]", note="no --stages existed"),
        Case("hunt75", "train activation_stride past the layers (hunt 75)",
             _train("runconfig.activation_stride=100"),
             message="is more than the model's 4 layers",
             note="accepted, printed as kept every 100 layer(s)"),
        Case("hunt75", "train a missing relative data folder (hunt 75)",
             _train("train_input.data_dir=mydata_typo"),
             message="no such file or folder",
             note="27 s of Hub retries and 11 lines; --validate-only passed it"),
        Case("hunt75", "train a ModelZoo 2.x trainer section (hunt 75)",
             _train("trainer.init.seed=1"),
             message="ModelZoo 2.x's trainer: format is not read",
             note="did you mean 'train_input'?"),
        Case("hunt75", "train ModelZoo's train_input.shuffle (hunt 75)",
             _train("train_input.shuffle=false"),
             message="always draws its batches in a seeded shuffle"),
    ]  # fmt: skip
