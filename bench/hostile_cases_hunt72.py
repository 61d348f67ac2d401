"""The CLI refusals of session 72 (hunt 72, each fixed), as `hostile_cases.Case`s whose
commands and messages are those of their tests: packages/wse_core/tests/test_wafer_hunt72.py,
apps/cli/tests/test_plan_hunt72.py, packages/trainer/tests/test_zoo_hunt72.py. One case per
distinct refusal. Select them with `--only '(hunt 72)'`."""

from __future__ import annotations

from pathlib import Path

from hostile_cases import Case, Fixtures, _const


def _spec_with(text: str):
    """`wse wafer info` of a spec file holding `text` after `base: wse3`, in `tmp`."""

    def build(fx: Fixtures, tmp: Path) -> list[str]:
        (tmp / "spec.yaml").write_text(f"base: wse3\n{text}\n", encoding="utf-8")
        return ["wafer", "info", "--spec", str(tmp / "spec.yaml")]

    return build


def _train(*overrides: str):
    return lambda fx, tmp: ["train", "tiny", "--validate-only", "-o", str(tmp / "run"), *overrides]


def hunt72_cases() -> list[Case]:
    """Session 72's refusals: each ran, crashed or misled on the code before."""
    return [
        Case("hunt72", "wafer info clock_hz with a unit (hunt 72)", _spec_with("clock_hz: 1.1 GHz"),
             message="must be a number without a unit (clock_hz is in Hz)",
             note="told to write it unquoted as it was written"),
        Case("hunt72", "wafer check default grid past the wafer (hunt 72)",
             _const("wafer", "check", "-p", "tiny"), message="the default --grid 13 21",
             note="named a 13 x 21 grid the user never gave"),
        Case("hunt72", "plan infer --tokens-per-round without --draft (hunt 72)",
             _const("plan", "infer", "--model", "llama3-8b", "--tokens-per-round", "2"),
             message="--tokens-per-round needs --draft", note="a new option"),
        Case("hunt72", "plan infer --tokens-per-round past gamma + 1 (hunt 72)", _const(
            "plan", "infer", "--model", "llama3-8b", "--draft", "llama3-1b",
            "--tokens-per-round", "9"), message="must be in [1, gamma + 1 = 5]",
             note="a new option"),
        Case("hunt72", "train optimizer.betas not a pair (hunt 72)",
             _train("optimizer.betas=[0.9]"),
             message="optimizer.betas must be a list [beta1, beta2]",
             note="'did you mean beta2' for ModelZoo's own key"),
        Case("hunt72", "train optimizer.betas against beta2 (hunt 72)",
             _train("optimizer.betas=[0.9, 0.95]", "optimizer.beta2=0.99"),
             message="give it once", note="'did you mean beta2' for ModelZoo's own key"),
    ]  # fmt: skip
