"""The CLI refusals of session 78 (hunt 78, each fixed), as `hostile_cases.Case`s whose
commands and messages are those of their tests: apps/cli/tests/test_env_hunt78.py,
packages/systems/tests/test_gputrain_hunt78.py, packages/systems/tests/test_servplan_hunt78.py,
apps/cli/tests/test_cfd_cli_hunt78.py and apps/cli/tests/test_edges_hunt78.py. One case per
distinct refusal. Select them with `--only '(hunt 78)'`."""

from __future__ import annotations

from hostile_cases import Case, _const

_STENCIL = ("hpc", "stencil", "--kind", "jacobi", "--grid", "4", "4", "4", "--preset", "tiny",
            "--steps", "1")  # fmt: skip


def hunt78_cases() -> list[Case]:
    """Session 78's refusals: each ran, crashed or misled on the code before."""
    return [
        Case("hunt78", "JAX variable outside the table (hunt 78)", _const(*_STENCIL),
             env={"JAX_DEFAULT_MATMUL_PRECISION": "bogus"},
             message="JAX_DEFAULT_MATMUL_PRECISION must be one of",
             note="a 70-line traceback: Invalid value for JAX flag"),
        Case("hunt78", "XLA_FLAGS unknown flag (hunt 78)", _const(*_STENCIL),
             env={"XLA_FLAGS": "--nope"}, message="XLA_FLAGS: unknown flag '--nope'",
             note="XLA's fatal log, rc 1"),
        Case("hunt78", "XLA_FLAGS a bare word (hunt 78)", _const(*_STENCIL),
             env={"XLA_FLAGS": "ab"}, message="XLA_FLAGS starts with 'ab', no --flag",
             note="Could not open file \"ab --xla_llvm_disable_expensive_passes=true\""),
        Case("hunt78", "plan train --gpus prime, no split (hunt 78)", _const(
            "plan", "train", "--model", "llama3-8b", "--tokens", "1e9", "--gpus", "17",
            "--batch", "16"),
             message="use 16 or 32 GPUs",
             note="cannot train this model: use at least 2 GPUs"),
        Case("hunt78", "plan infer --stages under too few --wafers (hunt 78)", _const(
            "plan", "infer", "--model", "llama3-70b", "--wafers", "3", "--stages", "2"),
             message="give --wafers in [4, 80]",
             note="give --stages in [3, 80], which cannot run on 3 wafers"),
        Case("hunt78", "hpc cfd --output-every past int32 (hunt 78)", _const(
            "hpc", "cfd", "--grid", "16", "8", "1", "--steps", "5", "--output-every",
            "10000000000", "--out", "c3"),
             message="--output-every must be an integer in [0, 2147483647]",
             note="named the Python field output_every"),
        Case("hunt78", "float option 1e309 echoed as typed (hunt 78)", _const(
            "wafer", "defects", "-p", "tiny", "--defect-rate", "1e309"),
             message="got 1e309",
             note="got inf"),
    ]  # fmt: skip
