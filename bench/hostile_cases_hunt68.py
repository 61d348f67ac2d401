"""The CLI refusals of session 68 (hunts 68, each fixed), as `hostile_cases.Case`s whose
commands and messages are those of their tests: apps/cli/tests/test_plan_gpu_assume_hunt68.py,
test_cli_serve_hunt68.py, test_cli_md_hunt68.py, test_cli_fields_hunt68b.py and
test_cli_launch_hunt68b.py. One case per distinct refusal, each
writing the files it needs into its own temporary folder. Select them with
`--only '(hunt 68)'`."""

from __future__ import annotations

from hostile_cases import Case, _const

_MD = ["hpc", "md", "--lattice", "fcc", "--element", "Cu", "--a", "3.615", "--cells", "4", "4",
       "4", "--preset", "small", "--steps", "1", "--potential", "x.eam.alloy"]  # fmt: skip


def hunt68_cases() -> list[Case]:
    """Session 68's refusals: each ran, was ignored or crashed on the code before (the note)."""
    return [
        Case("hunt68", "plan train --assume gpu.kernel_s=1 (hunt 68)", _const(
            "plan", "train", "-m", "tiny-gpt2", "--tokens", "1e6", "--assume",
            "gpu.kernel_s=1"),  # read since hunt 76 (the GPU step's kernel floor): in range
            message="assumption gpu.kernel_s must be in [0, 0.001] s/kernel",
            note="no such key: the GPU kernel cost was no assumption"),
        Case("hunt68", "experiments run wafer-yield --assume gpu.kernel_s=1 (hunt 68)", _const(
            "experiments", "run", "wafer-yield", "--assume", "gpu.kernel_s=1"),
            message="assumption gpu.kernel_s must be in [0, 0.001] s/kernel",
            note="no such key"),
        Case("hunt68", "infer serve --chat-template-content-format bogus (hunt 68)", _const(
            "infer", "serve", "--model-dir", "mock", "--port", "0", "--no-warmup",
            "--chat-template-content-format", "bogus"),
            message="--chat-template-content-format must be one of auto, string, openai",
            note="no option: a template over content parts rendered every chat empty"),
        Case("hunt68", "hpc md --out t.lammpstrj (hunt 68)", _const(*_MD, "--out", "t.lammpstrj"),
             message="wse writes extended XYZ: name it *.xyz or *.extxyz",
             note="extended XYZ written under a LAMMPS dump's name"),
        Case("hunt68", "hpc md --create-velocities without --temperature-K (hunt 68)",
             _const(*_MD, "--create-velocities"),
             message="--create-velocities draws velocities at --temperature-K",
             note="no option: --temperature-K replaced a file's velocities silently"),
        Case("hunt68", "hpc stencil jacobi --grid 2 8 8 --boundary periodic (hunt 68)", _const(
            "hpc", "stencil", "--kind", "jacobi", "--grid", "2", "8", "8", "--boundary",
            "periodic", "--preset", "small", "--steps", "3"),
            message="a periodic axis needs at least 3 points",
            note="an all-zero problem reported solved (2 2 2: a ZeroDivisionError traceback)"),
        Case("hunt68", "hpc stencil bicgstab --tol 1e-12 (hunt 68)", _const(
            "hpc", "stencil", "--kind", "bicgstab", "--grid", "8", "8", "8", "--dtype", "fp32",
            "--tol", "1e-12", "--preset", "small"),
            message="is below what fp32 BiCGSTAB's residual can certify",
            note="ran the whole solve, then exit 1 'out of reach'"),
        Case("hunt68", "launch --nproc 2 -- python -c 1 (hunt 68)", _const(
            "launch", "--nproc", "2", "--", "python", "-c", "1"),
            message="wse launch runs wse commands: 'python' is none",
            note="both children started; 2-2.7 s; pointed at python -m wse_cli"),
    ]  # fmt: skip
