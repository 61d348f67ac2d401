"""The CLI refusals of session 67 (hunt 67, each fixed), as `hostile_cases.Case`s whose commands
and messages are those of their tests: apps/cli/tests/test_cli_plan_defects_hunt67.py,
test_cli_plan_assume_hunt67.py, test_cli_leftovers_hunt67.py, test_cli_options_hunt67.py,
test_cli_outputs_hunt67.py and packages/hpc_kernels/tests/test_fields_restart_hunt67.py. One
case per distinct refusal, each writing the files it needs into its own temporary folder.
Select them with `--only '(hunt 67)'`."""

from __future__ import annotations

from pathlib import Path

from hostile_cases import Case, _const

_INFER = ["plan", "infer", "-m", "tiny-gpt2", "--users", "1", "--prompt-tokens", "16",
          "--output-tokens", "16"]  # fmt: skip
_CFD = ["hpc", "cfd", "--grid", "8", "8", "1", "--steps", "1", "--preset", "tiny"]


def _defective_spec(tmp: Path) -> str:
    (tmp / "def.yaml").write_text("base: wse3\ndefect_rate: 0.05\n")
    return str(tmp / "def.yaml")


def _caseless_step(tmp: Path) -> str:
    import numpy as np

    fields = {k: np.zeros((8, 8, 1), np.float32) for k in "uvwpT"}
    np.savez(tmp / "step_0000004.npz", **fields, step=np.int64(4), time=np.float64(0.2))
    return str(tmp)


def hunt67_cases() -> list[Case]:
    """Session 67's refusals: each ran, priced or crashed on the code before (the note)."""
    return [
        Case("hunt67", "plan infer --spec <defect_rate 0.05> (hunt 67)",
             lambda fx, tmp: [*_INFER, "--spec", _defective_spec(tmp)],
             message="does not repair to its 762 x 1176 PE grid at defect_rate 0.05",
             note="priced the full grid as if perfect"),
        Case("hunt67", "plan infer --assume foo=1 (hunt 67)", _const(*_INFER, "--assume", "foo=1"),
             message="unknown assumption 'foo'", note="plan had no --assume"),
        Case("hunt67", "hpc cfd --restart <a step naming no case> (hunt 67)",
             lambda fx, tmp: [*_CFD, "--restart", "--out", _caseless_step(tmp)],
             message="names no case", note="T read as theta or the full temperature by a key"),
        Case("hunt67", "hpc stencil --trace /proc/self/mem (hunt 67)", _const(
            "hpc", "stencil", "--kind", "jacobi", "--grid", "4", "4", "4", "--steps", "1",
            "--preset", "tiny", "--trace", "/proc/self/mem"),
            message="takes no new files", note="a traceback after the run"),
        Case("hunt67", "hpc tlrmvm compress --out /dev/null (hunt 67)", _const(
            "hpc", "tlrmvm", "compress", "--n", "64", "--nb", "16", "--out", "/dev/null"),
            message="would keep nothing", note="a TypeError traceback after compressing"),
        Case("hunt67", "wafer defects --png 'a<newline>b.png' (hunt 67)",
             lambda fx, tmp: ["wafer", "defects", "--preset", "tiny", "--png",
                              str(tmp / "a\nb.png")],
             message="contains a newline", note="the one-line report split in two"),
        Case("hunt67", "train --checkpoint-path null (hunt 67)", _const(
            "train", "tiny", "--validate-only", "--checkpoint-path", "null"),
            message="no committed checkpoint at 'null'",
            note="read as YAML: dropped, the run started from step 0"),
        Case("hunt67", "hpc md --potential F --steps 0 --steps 5 (hunt 67)", _const(
            "hpc", "md", "--lattice", "fcc", "--element", "Cu", "--a", "3.615", "--cells", "4",
            "4", "4", "--preset", "small", "--potential", "x.eam", "--steps", "0", "--steps",
            "5"),
            message="--steps is given twice ('0', then '5')", note="ran 5 steps"),
        Case("hunt67", "infer serve --speculative-config '' (hunt 67)", _const(
            "infer", "serve", "--model-dir", "mock", "--port", "0", "--no-warmup",
            "--speculative-config", ""),
            message="--speculative-config is empty", note="taken as not given"),
        Case("hunt67", "plan infer --draft --alpha 5 (hunt 67)", _const(
            "plan", "infer", "-m", "tiny-gpt2", "--draft", "tiny-gpt2", "--alpha", "5"),
            message="--alpha must be a finite number in [0, 1]",
            note="refused later without naming the option"),
        Case("hunt67", "hpc swe --steps 1e12 (hunt 67)", _const(
            "hpc", "swe", "--n", "8", "--steps", "1e12"),
            message="over the limit of", note="named int32's range, not the limit"),
    ]  # fmt: skip
