"""The CLI refusals of session 71 (hunts 71, each fixed), as `hostile_cases.Case`s whose
commands and messages are those of their tests: apps/cli/tests/test_bench_hunt71.py,
test_train_overrides_hunt71.py, test_cli_tlrmvm_hunt71.py and
packages/hpc_kernels/tests/test_fields_cavity_hunt71.py. One case per distinct refusal; the
bench's come before any request (its URL is never reached). Select them with
`--only '(hunt 71)'`."""

from __future__ import annotations

from pathlib import Path

from hostile_cases import Case, Fixtures, _const

DEAD = "http://127.0.0.1:9"


def _bench(*args: str):
    return _const("infer", "bench", "--url", DEAD, *args)


def _sharegpt(name: str, text: str):
    """A ShareGPT file of one conversation whose first turn is `text` (raw JSON), in `tmp`."""

    def build(fx: Fixtures, tmp: Path) -> list[str]:
        turns = f'[{{"from": "human", "value": {text}}}, {{"from": "gpt", "value": "ok ok ok"}}]'
        (tmp / name).write_text(f'[{{"id": "a", "conversations": {turns}}}]', encoding="utf-8")
        return ["infer", "bench", "--url", DEAD, "--dataset-name", "sharegpt",
                "--dataset-path", str(tmp / name)]  # fmt: skip

    return build


def _over_dataset(fx: Fixtures, tmp: Path) -> list[str]:
    path = tmp / "sg.json"
    path.write_text('[{"id": "a", "conversations": []}]', encoding="utf-8")
    return ["infer", "bench", "--url", DEAD, "--dataset-name", "sharegpt", "--dataset-path",
            str(path), "--out", str(path)]  # fmt: skip


def _train(*overrides: str):
    return _const("train", "tiny", "--validate-only", *overrides)


def hunt71_cases() -> list[Case]:
    """Session 71's refusals: each ran, crashed or was taken unsaid on the code before."""
    return [
        Case("hunt71", "infer bench sharegpt lone surrogate (hunt 71)",
             _sharegpt("s.json", '"hi \\ud800 there"'), message="lone UTF-16 surrogate",
             note="99-line UnicodeEncodeError traceback, exit 1"),
        Case("hunt71", "infer bench sharegpt 4301-digit integer (hunt 71)",
             _sharegpt("i.json", "1" * 4301), message="integer of 4,301 digits",
             note="76-line ValueError traceback, exit 1"),
        Case("hunt71", "infer bench --out over its --dataset-path (hunt 71)", _over_dataset,
             message="--dataset-path", note="the dataset overwritten by the summary, exit 0"),
        Case("hunt71", "infer bench --burstiness 5e-324 (hunt 71)", _bench(
            "--burstiness", "5e-324", "--request-rate", "0.5"),
            message="--burstiness must be a finite number in [0.001, 1000]",
            note="ZeroDivisionError traceback"),
        Case("hunt71", "infer bench --request-rate 5e-324 (hunt 71)", _bench(
            "--request-rate", "5e-324", "-n", "3"), message="past a day (86,400 s)",
            note="waited forever, --timeout-s did not cut it"),
        Case("hunt71", "infer bench --sharegpt-output-len 2045 (hunt 71)", _bench(
            "--dataset-name", "sharegpt", "--dataset-path", "x.json",
            "--sharegpt-output-len", "2045"),
            message="--sharegpt-output-len must be an integer in [1, 2044]",
            note="refused after tokenizing every conversation, the option unnamed"),
        Case("hunt71", "train override with an empty value (hunt 71)", _train(
            "train_input.data_dir="), message="has an empty value",
            note="the key dropped: trained on the standard library, exit 0"),
        Case("hunt71", "train null on an unknown key (hunt 71)", _train(
            "model.vocab_szie=null"), message="did you mean 'vocab_size'?",
            note="accepted silently"),
        Case("hunt71", "train data_dir list holding null (hunt 71)", _train(
            "train_input.data_dir=[a,null]"), message="lists null (entry 2 of 2)",
            note="data file 'None' does not exist"),
        Case("hunt71", "train data_dir 'd1,d2' (hunt 71)", _train(
            "train_input.data_dir=d1,d2"), message="to read several, give a list",
            note="a Hugging Face HFValidationError 6 s into the run"),
        Case("hunt71", "hpc tlrmvm compress --threshold-rule nope (hunt 71)", _const(
            "hpc", "tlrmvm", "compress", "--threshold-rule", "nope", "--out", "op.npz"),
            message="unknown --threshold-rule 'nope'; use one of matrix, tile",
            note="new option (ecrc's acc is the default now)"),
        Case("hunt71", "hpc cfd 3D cavity --dt past the 3D limit (hunt 71)", _const(
            "hpc", "cfd", "--case", "cavity", "--grid", "16", "16", "16", "--re", "1",
            "--steps", "1", "--dt", "0.002", "--preset", "small"),
            message="breaks the explicit step's limit 0.000651",
            note="the 2D limit 0.0009766 quoted; the 3D default itself blew up"),
    ]  # fmt: skip
