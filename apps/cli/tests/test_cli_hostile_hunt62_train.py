"""Hostile `wse train` and `wse plan -m params.yaml` inputs of hunt 62: each exits 2 with one
line naming the input and what would be right, early, and leaves nothing new on disk. Before
the fixes: a run folder's entry of the wrong kind (a folder run.log or metrics.jsonl, a file
train, hf or checkpoints) was a traceback after the tokenizer or after the whole run; a FIFO
tokenizer.json hung the run and one linked to /dev/zero read until memory ran out; `wse plan
-m params.yaml` skipped wse train's config checks (num_csx 0: ZeroDivisionError; batch_size
-16: a TypeError in the micro-batch planner; max_seq_len under max_sequence_length planned);
eval_steps 0 evaluated nothing (a NaN loss, exit 0), a negative eval_frequency evaluated every
|n| steps; a seed of 2**64 was jax.random.key's OverflowError after the run folder was made;
a checkpoint refused on restore (another tokenizer, a truncated file, an unsealed step) left
the new run folder and its tokenizer.json behind; a shuffle_seed other than the checkpoint's
was refused only after the tokenizer; `-o '~/x'` made a folder named '~'; a model_dir inside
its data_dir was refused as a data_dir that "mixes file kinds"; `--mode eval` with no
checkpoint evaluated the random initial weights, exit 0."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke, refused_in_one_line
from wse_trainer.testing import QUICK_OVERRIDES, narrow_jsonl, text_docs

pytestmark = pytest.mark.timeout(300)
ROOT = typer.main.get_command(app)
# these refusals and run folders do not depend on the data
QUICK = ["runconfig.max_steps=2", *QUICK_OVERRIDES]


def _train(run: Path, *extra: object, mode: str = "train") -> list[str]:
    return ["train", "tiny", *QUICK, *map(str, extra), "--mode", mode, "-o", str(run)]


def _tree(d: Path) -> dict[str, str]:
    """Each entry under `d` and its kind (lstat: a link is a link, never followed)."""
    kinds = {}
    for p in sorted(d.rglob("*")):
        st = p.lstat()
        kind = "link" if p.is_symlink() else "dir" if p.is_dir() else "fifo" if p.is_fifo() else ""
        kinds[str(p.relative_to(d))] = kind or f"file {st.st_size}"
    return kinds


# --- a run folder's entries of the wrong kind -------------------------------------------


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda r: (r / "run.log").mkdir(), "run.log' is a folder, not a regular file: a run "
         "writes its run.log file there; move it away, or give a new model_dir (-o)"),
        (lambda r: (r / "metrics.jsonl").mkdir(), "metrics.jsonl' is a folder, not a regular "
         "file: a run writes its metrics.jsonl file there"),
        (lambda r: (r / "train").touch(), "train' is a file, not a folder: a run writes its "
         "train folder there"),
        (lambda r: ((r / "tokenizer.json").write_text("{}"), (r / "hf").write_text("x\n")),
         "hf' is a file, not a folder: a run writes its hf folder there"),
        (lambda r: (r / "checkpoints").write_text("x\n"), "checkpoints' is a file, not a folder"),
        (lambda r: os.mkfifo(r / "tokenizer.json"), "tokenizer.json' is a FIFO, not a regular "
         "file: a run writes its tokenizer.json file there"),
        (lambda r: (r / "tokenizer.json").symlink_to("/dev/zero"),
         "tokenizer.json' is a device, not a regular file"),
        (lambda r: (r / "tokenizer.json").symlink_to(r / "nowhere"),
         "tokenizer.json' is a broken link, not a regular file"),
        (lambda r: (r / "eval").symlink_to(r / "eval"), "eval' is a broken link, not a folder"),
    ],
    ids=["run.log folder", "metrics.jsonl folder", "train file", "hf file", "checkpoints file",
         "tokenizer FIFO", "tokenizer /dev/zero", "tokenizer dangling", "eval link loop"],
)  # fmt: skip
def test_a_run_folder_entry_of_the_wrong_kind_is_refused_at_the_start(tmp_path, make, message):
    run = tmp_path / "run"
    run.mkdir()
    make(run)
    before = _tree(tmp_path)
    refused_in_one_line(ROOT, _train(run), f"'{run}/{message}")
    assert _tree(tmp_path) == before  # nothing written, nothing read past its kind


# --- wse plan -m params.yaml runs wse train's config checks ------------------------------


def _params(tmp_path: Path, old: str, new: str) -> Path:
    from wse_trainer.config import shipped_config

    text = shipped_config("tiny").read_text()
    assert old in text
    path = tmp_path / "p.yaml"
    path.write_text(text.replace(old, new, 1))
    return path


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("num_csx: 1", "num_csx: 0", "runconfig.num_csx must be positive, got 0"),
        ("num_csx: 1", "num_csx: -1", "runconfig.num_csx must be positive, got -1"),
        ("batch_size: 16", "batch_size: 0", "train_input.batch_size must be positive, got 0"),
        ("batch_size: 16", "batch_size: -16", "train_input.batch_size must be positive, got -16"),
        ("max_sequence_length: 128", "max_sequence_length: 128\n  micro_batch_size: 0",
         "train_input.micro_batch_size must be positive, got 0"),
        ("max_seq_len: 256", "max_seq_len: 64",
         "train_input.max_sequence_length=128 exceeds the model's max_seq_len=64; use at most 64"),
        ("vocab_size: 2048", "vocab_size: 10", "set model.vocab_size to at least 257"),
    ],
    ids=["num_csx 0", "num_csx -1", "batch 0", "batch -16", "micro 0", "max_seq_len", "vocab"],
)  # fmt: skip
def test_plan_from_a_params_file_refuses_what_wse_train_refuses(tmp_path, old, new, message):
    params = _params(tmp_path, old, new)
    said = refused_in_one_line(ROOT, ["train", params, "--validate-only"], message)  # the oracle
    for plan in (["plan", "train", "--tokens", "1e9"], ["plan", "infer"]):
        assert refused_in_one_line(ROOT, [*plan, "--model", params], message) == said


# --- values wse train took ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("eval_input.eval_steps=0", "eval_input.eval_steps must be positive (batches per "
         "evaluation), got 0"),
        ("runconfig.eval_frequency=0", "runconfig.eval_frequency must be positive (steps "
         "between evaluations in train_and_eval), got 0; leave it unset"),
        ("runconfig.eval_frequency=-2", "runconfig.eval_frequency must be positive"),
        ("runconfig.sample_tokens=-1", "runconfig.sample_tokens must be >= 0 (tokens sampled "
         "after training; 0: none), got -1"),
        ("runconfig.seed=18446744073709551616", "runconfig.seed must be a 64-bit integer in "
         "[-9223372036854775808, 9223372036854775807], got 18446744073709551616"),
        ("runconfig.seed=9223372036854775808", "got 9223372036854775808"),  # 2**63: jax's bound
        ("runconfig.seed=-9223372036854775809", "got -9223372036854775809"),
    ],
    ids=["eval_steps 0", "eval_frequency 0", "eval_frequency -2", "sample_tokens -1",
         "seed 2**64", "seed 2**63", "seed -2**63-1"],
)  # fmt: skip
def test_a_run_value_out_of_range_is_refused_by_validate_only_and_a_run(tmp_path, override,
                                                                        message):  # fmt: skip
    refused_in_one_line(ROOT, ["train", "tiny", override, "--validate-only"], message)
    refused_in_one_line(ROOT, ["train", "tiny", override, "-o", tmp_path / "run"], message)
    assert list(tmp_path.iterdir()) == []


def test_the_seed_range_is_the_one_jax_random_key_takes():
    import jax
    from wse_trainer.config_check import SEED_MAX, SEED_MIN

    for seed in (SEED_MIN, SEED_MAX):
        jax.random.key(seed)
    for seed in (SEED_MIN - 1, SEED_MAX + 1):
        with pytest.raises(OverflowError):
            jax.random.key(seed)


# --- where the run folder is --------------------------------------------------------------


def test_a_tilde_model_dir_is_the_home_folder_as_modelzoo_users_expect(tmp_path, monkeypatch):
    # hunt 62: `-o '~/x'` (quoted, or model_dir=~/x in the params) made a folder named '~'
    monkeypatch.chdir(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    env = {"HOME": str(home)}
    for i, args in enumerate([_train(Path("~/x0"), mode="eval"),
                              ["train", "tiny", *QUICK, "runconfig.model_dir=~/x1",
                               "runconfig.mode=eval"]]):  # fmt: skip
        code, output = invoke(ROOT, args, env)
        assert code == 0 and str(home / f"x{i}") in " ".join(output.split()), output[-2000:]
        assert (home / f"x{i}" / "run.log").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home"]  # no '~' folder


def test_eval_without_a_checkpoint_says_it_uses_random_weights(tmp_path):
    # hunt 62: an eval of the random initial weights ran without a word; ModelZoo logs
    # "No checkpoint was provided. Using randomly initialized model parameters." and runs
    code, output = invoke(ROOT, _train(tmp_path / "run", mode="eval"))
    assert code == 0, output[-2000:]
    assert "No checkpoint was provided. Using randomly initialized model parameters." in output


def test_a_model_dir_inside_its_data_dir_is_refused_as_such(tmp_path):
    docs = text_docs(tmp_path / "docs")
    for run in (docs / "run", docs / "sub" / ".." / "run"):
        refused_in_one_line(
            ROOT, _train(run, f"train_input.data_dir={docs}"),
            f"model_dir '{run}' is inside train_input.data_dir '{docs}': the run's own files "
            "would be read as its data; give a model_dir outside the data folder",
        )  # fmt: skip
    size = (docs / "a.txt").stat().st_size
    assert _tree(tmp_path) == {"docs": "dir", "docs/a.txt": f"file {size}"}


def test_a_shuffle_seed_other_than_the_checkpoints_is_refused_before_the_tokenizer(tmp_path):
    # hunt 62: refused by the data iterator's restore after the tokenizer (8.7 s); the step's
    # meta (all `check_resume` reads) says the seed
    import dataclasses

    from wse_trainer.config import load_config
    from wse_trainer.session import model_config

    model = json.loads(json.dumps(dataclasses.asdict(model_config(load_config("tiny", QUICK)))))
    step = tmp_path / "run" / "checkpoints" / "2"
    (step / "meta").mkdir(parents=True)
    meta = {"step": 2, "model": model, "data": {"seed": 1, "epoch": 0, "index": 2}}
    (step / "meta" / "metadata").write_text(json.dumps(meta))
    before = _tree(tmp_path)
    line = refused_in_one_line(
        ROOT, _train(tmp_path / "run", "train_input.shuffle_seed=5"),
        f"model_dir '{tmp_path / 'run'}': checkpoint step 2 ({step}) was trained with "
        "train_input.shuffle_seed=1, 5 here; resume with train_input.shuffle_seed=1, or give a "
        "new model_dir (-o)",
    )  # fmt: skip
    assert "Traceback" not in line
    assert _tree(tmp_path) == before


# --- a checkpoint refused on restore leaves no run folder ---------------------------------


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A 2-step tiny run on a slice of the stdlib corpus (one per file)."""
    run = tmp_path_factory.mktemp("trained") / "run"
    code, output = invoke(ROOT, _train(run))
    assert code == 0, output[-2000:]
    return run


@pytest.mark.slow
def test_a_checkpoint_of_another_tokenizer_leaves_no_new_run_folder(tmp_path, trained):
    # hunt 62: refused after 4.9 s, new/tokenizer.json left behind
    docs = text_docs(tmp_path / "docs")
    args = _train(tmp_path / "new", f"train_input.data_dir={docs}", "--checkpoint-path", trained)
    refused_in_one_line(
        ROOT, args, "was trained with another tokenizer than "
        f"{tmp_path / 'new' / 'tokenizer.json'} (the one this run trained on its data); "
        "copy its run's tokenizer "
        f"({trained / 'tokenizer.json'}) into {tmp_path / 'new'} to fine-tune from it",  # hunt 70
    )  # fmt: skip
    assert sorted(p.name for p in tmp_path.iterdir()) == ["docs"]


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["truncated", "unsealed"])
def test_a_broken_checkpoint_path_leaves_no_new_run_folder(tmp_path, trained, fault):
    source = tmp_path / "source"
    shutil.copytree(trained, source)
    step = source / "checkpoints" / "2"
    if fault == "truncated":
        data = max((p for p in step.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
        size = data.stat().st_size
        os.truncate(data, 10)
        message = f"{data.relative_to(step)} has 10 bytes where {size} were written"
    else:
        (step / "wse_sha256.json").unlink()
        message = (
            "its wse_sha256.json is missing (the run stopped before sealing it, or it was removed)"
        )
    before = _tree(tmp_path)
    refused_in_one_line(
        ROOT, _train(tmp_path / "new", "--checkpoint-path", step),
        f"checkpoint step 2 in {source / 'checkpoints'} cannot be used: {message}",
    )  # fmt: skip
    assert _tree(tmp_path) == before  # no new/, nothing of source moved


def test_train_refuses_narrow_jsonl_records_naming_too_many_fields_before_the_run_folder(tmp_path):
    # hunt 61's leftover: 20,000 records of two fields each, each but "text" its own name,
    # made HF datasets build 20,001 columns of 20,000 rows (47 s to load, 90 s to a 2-step
    # run); the names add up over the split's files, so the second file is the one refused
    docs = narrow_jsonl(tmp_path / "docs")
    args = ["train", "tiny", "runconfig.max_steps=2", "runconfig.mode=train",
            "model.vocab_size=300", "train_input.batch_size=2", "runconfig.sample_tokens=0",
            f"train_input.data_dir={docs}", "-o", tmp_path / "run"]  # fmt: skip
    t0 = time.perf_counter()
    refused_in_one_line(ROOT, args, "the split's JSON records name 1,201 distinct fields by "
                        f"line 600 of data file '{docs / 'b.jsonl'}', over the limit of 1,000 "
                        "(set WSE_LIMIT_JSON_KEYS to lift it)")  # fmt: skip
    assert time.perf_counter() - t0 < 10
    assert not (tmp_path / "run").exists()
