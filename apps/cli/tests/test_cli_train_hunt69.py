"""Hunt 69's `wse train` holes with ModelZoo configs and data, as the command meets them.
Before: `optimizer_type: AdamW` was refused ("did you mean 'adam'?") and sgd's momentum
and adam's weight_decay passed unread; a folder of ModelZoo .h5 shards trained on its
README.md; a wrong text_key passed --validate-only (the run found it after reading and
caching every record); `runconfig.model_dir: ''` trained into the current folder; a decay
shorter than the warm-up, and ModelZoo's `learning_rate:` scheduler list (a repr of its
dicts), were taken or refused without a way forward; data listed twice was read twice,
unsaid."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import typer
import yaml
from wse_cli.app import app
from wse_cli.testing import invoke, refused_in_one_line

pytestmark = pytest.mark.timeout(300)
ROOT = typer.main.get_command(app)
WORDS = "the quick brown fox jumps over lazy dog alpha beta gamma delta wafer stream".split()


def _small(tmp_path: Path, data: Path) -> Path:
    """The hunt's small.yaml over `data` (a 2-step run of a 1-layer model)."""
    inp = {"data_dir": str(data), "batch_size": 2, "max_sequence_length": 16}
    params = {
        "train_input": inp,
        "eval_input": {**inp, "eval_steps": 1},
        "model": {"preset": "tiny-gpt2", "vocab_size": 300, "d_model": 32, "n_layers": 1,
                  "n_heads": 2, "n_kv_heads": 2, "d_ff": 64, "max_seq_len": 32},
        "optimizer": {"optimizer_type": "adamw", "learning_rate": 0.01, "lr_schedule": "constant"},
        "runconfig": {"max_steps": 2, "checkpoint_steps": 1, "log_steps": 1, "mode": "train",
                      "sample_tokens": 0, "model_dir": str(tmp_path / "run")},
    }  # fmt: skip
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(params))
    return path


def _txt(folder: Path) -> Path:
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for i in range(40):
        (folder / f"doc{i:03d}.txt").write_text(" ".join(rng.choice(WORDS, 200)) + "\n")
    return folder


def _files(d: Path) -> set[str]:
    return {str(p.relative_to(d)) for p in d.rglob("*")}


@pytest.fixture
def hf_cache(tmp_path, monkeypatch) -> Path:
    """A datasets cache of this test's own (under `tmp_path`, so `_files` sees it too), empty:
    the shared $HF_HOME took other processes' Parquet loads' .lock files meanwhile (hunt 78).
    `datasets` reads $HF_HOME as it is imported: imported first, its cache paths are set."""
    import datasets

    root = tmp_path / "hf" / "datasets"
    root.mkdir(parents=True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", root)
    for name, sub in (("DOWNLOADED_DATASETS_PATH", "downloads"),
                      ("EXTRACTED_DATASETS_PATH", "downloads/extracted")):  # fmt: skip
        monkeypatch.setattr(datasets.config, name, str(root / sub))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(root))  # for a process the command starts
    return root


def test_modelzoo_optimizers_validate_and_notes_are_said(tmp_path):
    txt = _txt(tmp_path / "txt")
    params = _small(tmp_path, txt)
    code, output = invoke(ROOT, ["train", params, "optimizer.optimizer_type=SGD",
                                 "optimizer.momentum=0.9", "optimizer.nesterov=true",
                                 "optimizer.warmup_steps=5", f"train_input.data_dir=['{txt}', "
                                 f"'{txt}/']", "--validate-only"])  # fmt: skip
    lines = output.strip().splitlines()
    assert code == 0 and "config is valid" in lines[-3], output[-2000:]
    assert lines[-2:] == [
        "note: optimizer.warmup_steps=5 is not below runconfig.max_steps=2: the learning rate "
        "ramps up from 0 and reaches 0.002 at the last step, not optimizer.learning_rate=0.01; "
        "use fewer warm-up steps to train at it",
        f"note: train_input.data_dir lists '{txt}/', the same as '{txt}'; each file is read once",
    ]
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["optimizer.optimizer_type=AdamW", "optimizer.momentum=0.9"],
         "Error: optimizer.momentum=0.9 has no effect with optimizer_type adamw, which reads "
         "beta1, beta2, eps and eps_placement; drop it (optimizer.momentum=null), or use "
         "optimizer_type sgd or momentum"),
        (["optimizer.optimizer_type=adamW W"], "(did you mean 'adamw'?)"),
        (["optimizer.lr_schedule=cosine", "optimizer.warmup_steps=20", "optimizer.decay_steps=10"],
         "Error: optimizer.decay_steps=10 is not past optimizer.warmup_steps=20"),
        (["optimizer.learning_rate=[{scheduler: Linear, initial_learning_rate: 0.0, "
          "end_learning_rate: 0.001, total_iters: 10}, {scheduler: CosineDecay, "
          "initial_learning_rate: 0.001, end_learning_rate: 0.0001, total_iters: 90}]"],
         "for this list, learning_rate: 0.001, warmup_steps: 10, lr_schedule: cosine, "
         "decay_steps: 100, min_learning_rate: 0.0001"),
        (["runconfig.checkpoint_path=''", "--mode", "eval"],
         "Error: runconfig.checkpoint_path is empty; give a run folder or one of its steps"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("how", [["--validate-only"], []])
def test_an_optimizer_or_run_setting_it_cannot_use_is_one_line(tmp_path, extra, message, how):
    params = _small(tmp_path, _txt(tmp_path / "txt"))
    before = _files(tmp_path)
    refused_in_one_line(ROOT, ["train", params, *extra, *how], message)
    assert _files(tmp_path) == before  # no run folder


def test_an_empty_model_dir_is_refused_and_the_current_folder_left_alone(tmp_path, monkeypatch):
    params = _small(tmp_path, _txt(tmp_path / "txt"))
    here = tmp_path / "e"
    here.mkdir()
    monkeypatch.chdir(here)
    refused_in_one_line(
        ROOT, ["train", params, "runconfig.model_dir=''"],
        "Error: runconfig.model_dir is empty; give a folder name, e.g. model_dir/run1",
    )  # fmt: skip
    assert list(here.iterdir()) == []


def test_a_folder_of_modelzoo_hdf5_is_refused_before_anything_is_read(tmp_path, hf_cache):
    h5 = tmp_path / "h5"
    h5.mkdir()
    for i in range(3):
        (h5 / f"data-{i:05d}.h5").write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(4000))
    (h5 / "data_params.json").write_text(json.dumps({"processing": {"max_seq_length": 16}}))
    params = _small(tmp_path, h5)
    before = _files(tmp_path)
    for how in (["--validate-only"], []):
        refused_in_one_line(
            ROOT, ["train", params, *how],
            f"Error: data_dir '{h5}' holds 3 HDF5 files (.h5: ModelZoo's preprocessed token "
            "ids), which this trainer does not read",
        )  # fmt: skip
    assert _files(tmp_path) == before and not any(hf_cache.iterdir())


def test_a_wrong_text_key_is_refused_from_the_first_record_leaving_no_cache(tmp_path, hf_cache):
    path = tmp_path / "big.jsonl"
    path.write_text((json.dumps({"text": "lorem ipsum dolor sit amet " * 40}) + "\n") * 50)
    params = _small(tmp_path, path)
    before = _files(tmp_path)
    for how in (["--validate-only"], []):
        refused_in_one_line(
            ROOT, ["train", params, "train_input.text_key=content", *how],
            f"Error: data file '{path}' line 1 has no column 'content'; columns: text (set "
            "train_input.text_key)",
        )  # fmt: skip
    assert _files(tmp_path) == before and not any(hf_cache.iterdir())
