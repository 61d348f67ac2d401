"""Hunt 71's `wse train` override and split holes, as the command meets them.

Before the fixes: `train_input.data_dir=` (an unset `$DATA`) dropped the key and trained on
the standard library, exit 0; `model.vocab_szie=null` was taken silently (`=5` is refused);
eval data inside the training data (eval `d2` of train `[d1, d2]`) was evaluated on trained
text with no note; `runconfig.eval_frequency` with mode train did nothing, unsaid (now a note); a
data_dir list's null was "data file 'None' does not exist", a nested list its repr, '' blamed
the model_dir, and `d1,d2` an HFValidationError after the run had started.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
import yaml
from wse_cli.app import app
from wse_cli.testing import invoke, refused_in_one_line

pytestmark = pytest.mark.timeout(300)
ROOT = typer.main.get_command(app)
WORDS = ("alpha", "beta", "gamma", "delta")


def _docs(folder: Path, n: int) -> Path:
    folder.mkdir(parents=True)
    for i in range(n):
        body = " ".join(WORDS[(i * 5 + j * 3) % 4] for j in range(120))
        (folder / f"doc{i:02d}.txt").write_text(f"{folder.name} document {i} {body}\n")
    return folder


@pytest.fixture
def setup(tmp_path, monkeypatch):
    """Two folders of 30 one-document files and a 1-layer model's params over d1."""
    monkeypatch.chdir(tmp_path)
    d1, d2 = _docs(tmp_path / "d1", 30), _docs(tmp_path / "d2", 30)
    inp = {"data_dir": "d1", "batch_size": 2, "max_sequence_length": 16}
    params = {
        "train_input": inp,
        "eval_input": {**inp, "eval_steps": 1},
        "model": {"preset": "tiny-gpt2", "vocab_size": 300, "d_model": 32, "n_layers": 1,
                  "n_heads": 2, "n_kv_heads": 2, "d_ff": 64, "max_seq_len": 32},
        "optimizer": {"learning_rate": 0.01, "lr_schedule": "constant"},
        "runconfig": {"max_steps": 1, "checkpoint_steps": 1, "log_steps": 1, "mode": "train",
                      "sample_tokens": 0},
    }  # fmt: skip
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(params))
    return tmp_path, d1, d2


def _refused(where: Path, override: str, line: str) -> None:
    """`wse train p.yaml OVERRIDE -o run` refused in one line, nothing left on disk."""
    before = sorted(p.name for p in where.iterdir())
    said = refused_in_one_line(ROOT, ["train", "p.yaml", override, "-o", "run"], line)
    assert said == f"Error: {line}"
    assert sorted(p.name for p in where.iterdir()) == before  # no run folder


def test_an_empty_override_value_is_refused(setup):
    _refused(setup[0], "train_input.data_dir=", "override 'train_input.data_dir=' has an empty "
             "value; give a value ('' for empty text), or train_input.data_dir=null to drop "
             "the key and take its default")  # fmt: skip


def test_null_on_an_unknown_key_is_refused(setup):
    keys = ("preset, arch, d_ff, d_model, dtype, head_dim, max_seq_len, mlp_activation, "
            "n_heads, n_kv_heads, n_layers, norm_eps, param_dtype, rope_scaling, rope_theta, "
            "tie_embeddings, vocab_size")  # fmt: skip
    _refused(setup[0], "model.vocab_szie=null", "unknown key model.vocab_szie (did you mean "
             f"'vocab_size'?) in override 'model.vocab_szie=null'; valid keys: {keys}")  # fmt: skip
    args = ["train", "p.yaml", "model.vocab_szie=5", "-o", "run"]
    valued = refused_in_one_line(ROOT, args, "unknown key model.vocab_szie (did you mean "
                                 "'vocab_size'?)")  # fmt: skip
    assert valued.endswith(f"; valid keys: {keys}")  # the same keys the null is told


def test_eval_frequency_in_mode_train_is_said_and_validates(setup):
    args = ["train", "p.yaml", "runconfig.eval_frequency=1", "-o", "run", "--validate-only"]
    code, out = invoke(ROOT, args)
    assert code == 0, out[-2000:]
    assert ("note: runconfig.eval_frequency=1 has no effect with mode train, which never "
            "evaluates; it applies to mode train_and_eval") in out.replace("\n", " ")  # fmt: skip


@pytest.mark.parametrize(
    ("override", "line"),
    [("train_input.data_dir=[d1,null]", "train_input.data_dir lists null (entry 2 of 2); "
      "each entry names a file or folder: give train_input.data_dir=[d1]"),
     ("train_input.data_dir=[d1,[d2]]", "train_input.data_dir lists a list, [d2] (entry 2 of "
      "2); each entry names a file or folder: give train_input.data_dir=[d1, d2]"),
     ("train_input.data_dir=[d1,'']", "train_input.data_dir lists an empty name (entry 2 of "
      "2); each entry names a file or folder: give train_input.data_dir=[d1]"),
     ("train_input.data_dir=d1,d2", "train_input.data_dir 'd1,d2' is no file or folder, and "
      "no dataset's name holds a ','; to read several, give a list: "
      "train_input.data_dir=[d1, d2]")],
    ids=["null", "nested", "empty entry", "commas"],
)  # fmt: skip
def test_a_data_dir_naming_no_data_is_said_plainly(setup, override, line):
    _refused(setup[0], override, line)


def test_eval_documents_also_trained_on_are_noted_at_the_start(setup):
    _, d1, d2 = setup
    # by hand: d2 holds 30 one-document files, all read by train within its default cap
    sizes = [f.stat().st_size for f in [*d1.iterdir(), *d2.iterdir()]]
    assert len(sizes) == 60 and sum(sizes) < 3_000_000 and len(list(d2.iterdir())) == 30
    overlap = ["train_input.data_dir=[d1,d2]", "eval_input.data_dir=d2"]
    args = ["train", "p.yaml", "-o", "run", "runconfig.mode=train_and_eval", *overlap]
    code, out = invoke(ROOT, args)
    lines = out.splitlines()
    assert code == 0, out[-2000:]
    note = [i for i, s in enumerate(lines) if s.startswith("note: all 30 eval documents")]
    first_step = next(i for i, s in enumerate(lines) if s.startswith("| Train"))
    assert len(note) == 1 and note[0] < first_step, out  # once, at the run's start
    assert lines[note[0]] == (
        "note: all 30 eval documents of eval_input.data_dir 'd2' are also training documents "
        "(train_input.data_dir ['d1', 'd2']): the eval loss is on trained text; give eval "
        "data apart from the training data for a held-out loss"
    )
