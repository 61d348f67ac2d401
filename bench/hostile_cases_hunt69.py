"""The CLI refusals of session 69 (hunts 69, each fixed), as `hostile_cases.Case`s whose
commands and messages are those of their tests: apps/cli/tests/test_cli_wafer_hunt69.py,
test_cli_tlrmvm_hunt69.py, test_cli_train_hunt69.py and test_cli_assumptions_hunt69.py. One
case per distinct refusal, each writing the files it needs into its own temporary folder.
Select them with `--only '(hunt 69)'`."""

from __future__ import annotations

from pathlib import Path

from hostile_cases import Case, Fixtures, _const


def _h5_folder(fx: Fixtures, tmp: Path) -> list[str]:
    """A ModelZoo HDF5 data folder (its preprocessed token ids), with a README beside it."""
    (tmp / "h5").mkdir()
    (tmp / "h5" / "data-0.h5").write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(64))
    (tmp / "h5" / "README.md").write_text("ModelZoo's preprocessed Pile\n")
    return ["train", "tiny", "--validate-only", f"train_input.data_dir={tmp / 'h5'}"]


def hunt69_cases() -> list[Case]:
    """Session 69's refusals: each ran, was ignored or crashed on the code before (the note)."""
    return [
        Case("hunt69", "wafer check --grid 2 2 (hunt 69)", _const("wafer", "check", "--grid",
             "2", "2"), message="needs at least 3 rows; give --grid ROWS >= 3",
             note="failed after JAX's start with 'multicast distance 3 is past the grid'"),
        Case("hunt69", "wafer info -p WSE3 (hunt 69)", _const("wafer", "info", "-p", "WSE3"),
             message="(did you mean 'wse3'?)", note="no suggestion for a case slip"),
        Case("hunt69", "wafer info --set pe_rows=1.5 (hunt 69)", _const(
            "wafer", "info", "-p", "wse3", "--set", "pe_rows=1.5"),
            message="pe_rows must be an integer in [1, 100,000]", note="'must be a number'"),
        Case("hunt69", "hpc tlrmvm compress --threshold 1e-9 (hunt 69)", _const(
            "hpc", "tlrmvm", "compress", "--threshold", "1e-9", "--out", "op.npz"),
            message="the least an fp32 operator can certify",
            note="exit 0; run then showed 'error 0.00e+00' (true 1.37e-7)"),
        Case("hunt69", "hpc tlrmvm compress --nb 1 (hunt 69)", _const(
            "hpc", "tlrmvm", "compress", "--nb", "1", "--out", "op.npz"),
            message="give --nb 4 or more", note="1,048,576 SVDs: killed at 120 s"),
        Case("hunt69", "hpc tlrmvm compress --threshold 1_0e-3 (hunt 69)", _const(
            "hpc", "tlrmvm", "compress", "--threshold", "1_0e-3", "--out", "op.npz"),
            message="got 1_0e-3", note="read as 0.01"),
        Case("hunt69", "train optimizer sgd + beta1 (hunt 69)", _const(
            "train", "tiny", "--validate-only", "optimizer.optimizer_type=sgd",
            "optimizer.beta1=0.5"),
            message="no effect with optimizer_type sgd",
            note="accepted; sgd's momentum and adam's weight_decay were dropped unsaid too"),
        Case("hunt69", "train decay_steps below warmup_steps (hunt 69)", _const(
            "train", "tiny", "--validate-only", "optimizer.decay_steps=5",
            "optimizer.warmup_steps=10", "optimizer.lr_schedule=cosine"),
            message="is not past optimizer.warmup_steps=10",
            note="accepted: the rate fell 10x in one step after warm-up"),
        Case("hunt69", "train on a ModelZoo HDF5 folder (hunt 69)", _h5_folder,
             message="which this trainer does not read",
             note="trained on the README beside the .h5 files, exit 0"),
        Case("hunt69", "plan infer --assume memoryx_bytes_per_s (hunt 69)", _const(
            "plan", "infer", "-m", "llama3-8b", "--assume", "memoryx_bytes_per_s=1e11"),
            message="wse plan infer does not read it",
            note="listed as in force while it moved nothing"),
    ]  # fmt: skip
