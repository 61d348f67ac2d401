"""The CLI refusals of session 79 (hunt 79, each fixed), as `hostile_cases.Case`s whose
commands and messages are those of their tests: apps/cli/tests/test_env_hunt79.py,
apps/cli/tests/test_options_hunt79.py and packages/trainer/tests/test_modelzoo_file_hunt79.py.
One case per distinct refusal. Select them with `--only '(hunt 79)'`."""

from __future__ import annotations

from hostile_cases import Case, _const
from hostile_cases_hunt72 import _train  # `wse train tiny --validate-only` with overrides

_STENCIL = ("hpc", "stencil", "--kind", "jacobi", "--grid", "4", "4", "4", "--preset", "tiny",
            "--steps", "1")  # fmt: skip


def hunt79_cases() -> list[Case]:
    """Session 79's refusals: each ran, crashed or misled on the code before."""
    return [
        Case("hunt79", "XLA_FLAGS the stack's own flag a bad bool (hunt 79)", _const(*_STENCIL),
             env={"XLA_FLAGS": "--xla_llvm_disable_expensive_passes=maybe"},
             message="--xla_llvm_disable_expensive_passes must be true or false",
             note="XLA's 94-line fatal log, rc 1"),
        Case("hunt79", "XLA_FLAGS starting with a vertical tab (hunt 79)", _const(*_STENCIL),
             env={"XLA_FLAGS": "\v--xla_dump_to=/tmp/x"},
             message="a space XLA does not skip",
             note="called the valid flag after it 'no flag'"),
        Case("hunt79", "XLA_FLAGS --xla_dump_to no folder (hunt 79)", _const(*_STENCIL),
             env={"XLA_FLAGS": "--xla_dump_to=/proc/nope/x"},
             message="is no folder XLA can make or write",
             note="rc 0, 16 C++ error lines, nothing dumped"),
        Case("hunt79", "JAX_DEFAULT_DEVICE a backend not here (hunt 79)", _const(*_STENCIL),
             env={"JAX_DEFAULT_DEVICE": "gpu"},
             message="names a backend JAX will not start here",
             note="a 93-line traceback at the first device use"),
        Case("hunt79", "float option 1e5 echoed as typed (hunt 79)", _const(
            "wafer", "defects", "-p", "tiny", "--defect-rate", "1e5"),
             message="got 1e5",
             note="got 100000.0"),
        Case("hunt79", "float option 1e-400 echoed as typed (hunt 79)", _const(
            "plan", "train", "-m", "gpt2-124m", "--tokens", "1e9", "--mfu", "1e-400"),
             message="got 1e-400",
             note="got 0.0"),
        Case("hunt79", "train a static loss scale (hunt 79)",
             _train("optimizer.loss_scaling_factor=128.0"),
             message="is a static loss scale",
             note="refused as an unknown key, with no word of what it is"),
        Case("hunt79", "train persistent_workers not a bool (hunt 79)",
             _train("train_input.persistent_workers=2"),
             message="must be true or false",
             note="refused as an unknown key (the key means nothing here: now a note)"),
    ]  # fmt: skip
