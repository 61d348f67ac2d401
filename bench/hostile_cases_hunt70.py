"""The CLI refusals of session 70 (hunts 70, each fixed), as `hostile_cases.Case`s whose
commands and messages are those of their tests: apps/cli/tests/test_bench_datasets_hunt70.py
and packages/trainer/tests/test_trainer_hunt70.py. One case per distinct refusal; the bench's
come before any request (its URL is never reached). Select them with `--only '(hunt 70)'`."""

from __future__ import annotations

from hostile_cases import Case, _const

DEAD = "http://127.0.0.1:9"


def _bench(*args: str):
    return _const("infer", "bench", "--url", DEAD, *args)


def hunt70_cases() -> list[Case]:
    """Session 70's refusals: each ran, was ignored or missing on the code before (the note)."""
    return [
        Case("hunt70", "train lr_schedule constant with decay settings (hunt 70)", _const(
            "train", "tiny", "--validate-only", "optimizer.lr_schedule=constant",
            "optimizer.decay_steps=50"),
            message="have no effect with lr_schedule constant",
            note="accepted: decay_steps and min_learning_rate ignored unsaid"),
        Case("hunt70", "train tiny as sgd names the null overrides (hunt 70)", _const(
            "train", "tiny", "--validate-only", "optimizer.optimizer_type=sgd"),
            message="drop them (optimizer.beta2=null optimizer.eps=null)",
            note="new: tiny gives adamw's beta2 and eps; KEY=null was 'must be float'"),
        Case("hunt70", "infer bench --dataset-name nope (hunt 70)", _bench(
            "--dataset-name", "nope"), message="--dataset-name must be one of prompt, random",
            note="no --dataset-name: one fixed prompt only"),
        Case("hunt70", "infer bench random --random-range-ratio 1 (hunt 70)", _bench(
            "--dataset-name", "random", "--random-range-ratio", "1"),
            message="--random-range-ratio must be a finite number in [0, 1)", note="new option"),
        Case("hunt70", "infer bench sharegpt without a path (hunt 70)", _bench(
            "--dataset-name", "sharegpt"), message="needs --dataset-path FILE.json",
            note="new option"),
        Case("hunt70", "infer bench random with --prompt (hunt 70)", _bench(
            "--dataset-name", "random", "--prompt", "hi"),
            message="--prompt is an option of --dataset-name prompt", note="new option"),
        Case("hunt70", "infer bench -n and --num-prompts differ (hunt 70)", _bench(
            "-n", "5", "--num-prompts", "6"), message="and --num-prompts 6 differ",
            note="new option"),
        Case("hunt70", "infer bench random prompts past memory (hunt 70)", _bench(
            "--dataset-name", "random", "--random-input-len", "1048576", "-c", "200"),
            message="--random-input-len", note="new option: ~5.8 GB of prompts in flight"),
    ]  # fmt: skip
