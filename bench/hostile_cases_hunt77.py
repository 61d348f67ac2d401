"""The CLI refusals of session 77 (hunt 77, each fixed), as `hostile_cases.Case`s whose
commands and messages are those of their tests: packages/systems/tests/test_plan_hunt77.py,
apps/cli/tests/test_bench_hunt77.py, apps/cli/tests/test_cfd_cli_hunt77.py and
packages/trainer/tests/test_modelzoo_keys_hunt77.py. One case per
distinct refusal. Select them with `--only '(hunt 77)'`."""

from __future__ import annotations

from hostile_cases import Case, _const
from hostile_cases_hunt72 import _train  # `wse train tiny --validate-only` with overrides


def hunt77_cases() -> list[Case]:
    """Session 77's refusals: each ran, crashed or misled on the code before."""
    return [
        Case("hunt77", "plan infer a draft on too few wafers (hunt 77)", _const(
            "plan", "infer", "--model", "llama3-70b", "--draft", "llama3-8b", "--alpha", "0.8",
            "--wafers", "4"),
             message="hold the model and its draft llama3-8b but not one user's KV cache",
             note="users must be an integer >= 1, got 0"),
        Case("hunt77", "plan infer --stages below --wafers (hunt 77)", _const(
            "plan", "infer", "--model", "llama3-70b", "--stages", "5", "--wafers", "6"),
             message="give --stages in [6, 80], or --wafers 5",
             note="the pipeline's own words, naming no option"),
        Case("hunt77", "plan train --micro-batch none past SRAM (hunt 77)", _const(
            "plan", "train", "--model", "llama3-70b", "--tokens", "1e11", "--batch", "64",
            "--micro-batch", "none"),
             message="give --micro-batch 16 (the largest divisor",
             note="the SRAM ledger's raw words"),
        Case("hunt77", "plan train --gpus with no Megatron layout (hunt 77)", _const(
            "plan", "train", "--model", "llama3-8b", "--tokens", "1e12", "--gpus", "1000"),
             message="use 512 or 1024 GPUs",
             note="priced ranks of uneven batches as even"),
        Case("hunt77", "infer bench --goodput not KEY:ms (hunt 77)", _const(
            "infer", "bench", "--url", "http://127.0.0.1:9", "-n", "2", "--goodput",
            "ttft:abc"),
             message="is not KEY:ms; e.g. --goodput ttft:500 tpot:50",
             note="No such option: --goodput (Possible options: --out)"),
        Case("hunt77", "hpc stencil --boundary neumann (hunt 77)", _const(
            "hpc", "stencil", "--kind", "heat", "--grid", "8", "8", "8", "--boundary",
            "neumann"),
             message="Neumann walls are in the field equations' Python API",
             note="pointed at wse hpc cfd, which has no boundary option"),
        Case("hunt77", "train runconfig.num_epochs (hunt 77)", _train("runconfig.num_epochs=1"),
             message="no epochs here",
             note="did you mean 'num_steps'?"),
        Case("hunt77", "train runconfig.autoload_checkpoint false (hunt 77)",
             _train("runconfig.autoload_checkpoint=false"),
             message="to start fresh, leave the key out and give a new model_dir",
             note="did you mean 'save_initial_checkpoint'?",
             skip="hunt 79: runs where nothing would be resumed (a new model_dir, as here), as "
                  "ModelZoo's; refused only where the folder holds a step: "
                  "packages/trainer/tests/test_autoload_hunt79.py"),
    ]  # fmt: skip
