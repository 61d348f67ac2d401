"""Hostile inputs fixed by hunt 60: each exits 2 with one line naming the input and what
would be right. Before the fixes: `wse train tiny model.vocab_size=300 model.vocab_size=1`
took the last value (and `runconfig.max_steps=2 --max-steps 5` the flag's), where a
single-valued option given twice is refused (`wse_cli.option_repeats`); `WSE_DEVICES=' '`
was refused as "got ''" (the blank stripped away); data_dir=/ read 48,000 folders (3.5 s
with a cold cache) before its 100,001st data file was refused. Found by the hunt: a FIFO in a
data folder hung the check, a link there was a traceback, a folder `notes.md` was read as a
file, `data_dir=` a link loop was looked up on the Hub; an output option at a broken link
was the writer's traceback after the work; a newline or ESC in a path reached the error
line raw (two lines; the terminal driven)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke, refused_in_one_line

pytestmark = pytest.mark.timeout(120)
ROOT = typer.main.get_command(app)
CHECK = ["train", "tiny", "--validate-only"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["model.vocab_size=300", "model.vocab_size=1"],
         "model.vocab_size is given twice ('300', then '1'); give it once"),
        (["optimizer.learning_rate=1e-3", "runconfig.seed=1", "optimizer.learning_rate=2e-3"],
         "optimizer.learning_rate is given twice ('1e-3', then '2e-3')"),
        (["runconfig.max_steps=2", "--max-steps", "5"],
         "runconfig.max_steps is given twice ('2', then --max-steps '5'); give it once"),
        (["runconfig.model_dir=a", "-o", "b"], "runconfig.model_dir is given twice ('a', then "
         "--model-dir 'b')"),
    ],
    ids=["model key", "optimizer key", "override and flag", "model_dir and -o"],
)  # fmt: skip
def test_one_key_given_two_values_is_refused_naming_both(tmp_path, overrides, message):
    refused_in_one_line(ROOT, [*CHECK, *overrides], message)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "overrides",
    [
        ["model.vocab_size=300", "model.vocab_size=300"],
        ["runconfig.max_steps=5", "--max-steps", "5"],
    ],
)
def test_one_key_given_its_value_twice_is_taken(overrides):
    code, output = invoke(ROOT, [*CHECK, *overrides])
    assert code == 0 and "config is valid" in output, output


@pytest.mark.parametrize(("value", "shown"), [(" ", "got ' '"), ("\t", "got '\\t'"),
                                              (" x ", "got ' x '")])  # fmt: skip
def test_a_blank_or_padded_wse_devices_is_echoed_as_given(value, shown):
    line = refused_in_one_line(ROOT, ["wafer", "info"], "WSE_DEVICES", {"WSE_DEVICES": value})
    assert line.endswith(shown), line


def _corpus(root: Path, folders: int) -> Path:
    """`folders` folders of one 200-word document each (one batch of tiny at batch 2 needs
    257 tokens: 1,000 bytes each is plenty)."""
    for i in range(folders):
        (root / f"doc{i}").mkdir(parents=True)
        (root / f"doc{i}" / "text.txt").write_text("the wafer streams weights " * 40)
    return root


def test_a_data_dir_of_too_many_folders_is_refused_while_walking(tmp_path, monkeypatch):
    from wse_trainer.data_files import data_files

    monkeypatch.setenv("WSE_LIMIT_DATA_FOLDERS", "4")
    corpus = _corpus(tmp_path / "corpus", 5)
    args = ["train", "tiny", "train_input.batch_size=2", f"train_input.data_dir={corpus}",
            "-o", tmp_path / "run"]  # fmt: skip
    refused_in_one_line(ROOT, args, "holds more than 4 folders; give the corpus's own folder, "
                        "or pack its documents into .jsonl or .parquet shards (set "
                        "WSE_LIMIT_DATA_FOLDERS to lift it)")  # fmt: skip
    assert not (tmp_path / "run").exists()
    monkeypatch.setenv("WSE_LIMIT_DATA_FOLDERS", "5")  # at the limit: every document found
    builder, files = data_files(str(corpus))
    assert builder == "text" and sorted(files) == sorted(map(str, corpus.rglob("*.txt")))


def _run(tmp_path: Path, corpus: Path) -> list:
    return ["train", "tiny", "train_input.batch_size=2", f"train_input.data_dir={corpus}",
            "-o", tmp_path / "run"]  # fmt: skip


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: os.mkfifo(p), "f.txt' is a FIFO, not a regular file; give a file"),
        (lambda p: p.symlink_to(p), "f.txt' cannot be read (Too many levels of symbolic links)"),
        (lambda p: p.symlink_to("/nonexistent/x"), "f.txt' cannot be read (No such file or"),
    ],
    ids=["FIFO", "link loop", "dangling link"],
)
def test_a_data_folder_holding_what_is_no_file_is_refused_naming_it(tmp_path, make, message):
    # hunt 60: a FIFO hung the check's read forever, a link was a FileNotFoundError traceback
    corpus = _corpus(tmp_path / "corpus", 1)
    make(corpus / "f.txt")
    refused_in_one_line(ROOT, _run(tmp_path, corpus), message)  # hung before
    assert not (tmp_path / "run").exists()


def test_a_folder_named_like_a_data_file_is_walked_not_read():
    # hunt 60: a folder `notes.md` was taken for a data file (IsADirectoryError traceback)
    from wse_trainer.data_files import data_files

    with tempfile.TemporaryDirectory() as tmp:
        corpus = _corpus(Path(tmp) / "corpus", 2)
        (corpus / "notes.md").mkdir()
        (corpus / "notes.md" / "inside.txt").write_text("more text")
        builder, files = data_files(str(corpus))
        assert builder == "text" and sorted(files) == sorted(map(str, corpus.rglob("*.txt")))


@pytest.mark.parametrize("target", ["self", "/nonexistent/x"], ids=["loop", "dangling"])
def test_a_data_dir_that_is_a_broken_link_is_refused_not_looked_up_as_a_dataset(
    tmp_path, monkeypatch, target
):
    # hunt 60: `data_dir=loop` (no suffix) was taken for a dataset name: HF was asked, 5 retries
    monkeypatch.chdir(tmp_path)
    Path("corpus").symlink_to("corpus" if target == "self" else target)
    refused_in_one_line(ROOT, _run(tmp_path, Path("corpus")), "data file 'corpus' cannot be read")


OUTPUTS = [
    ["hpc", "md", "potential", "--elements", "Cu", "--out"],
    ["train", "tiny", "--validate-only", "--trace"],
    ["experiments", "run", "wafer-yield", "--quick", "--out"],
    ["wafer", "defects", "--preset", "wse1", "--png"],
]


@pytest.mark.parametrize("args", OUTPUTS, ids=lambda a: " ".join(a[:2] + a[-1:]))
@pytest.mark.parametrize("where", ["loop", "dangling", "under a loop"])
def test_an_output_through_a_broken_link_is_refused_at_parsing(tmp_path, monkeypatch, args, where):
    # hunt 60: each was the writer's OSError traceback (ELOOP, FileNotFoundError or
    # FileExistsError from makedirs), after the work
    monkeypatch.chdir(tmp_path)
    Path("loop").symlink_to("loop")
    Path("dangling").symlink_to("/nonexistent/dir/x")
    path = {"loop": "loop", "dangling": "dangling", "under a loop": "loop/x.png"}[where]
    if args[-1] == "--png" and where != "under a loop":
        path += ".png"  # the name the option writes (a name without .png gets it)
        Path(path).symlink_to(path if where == "loop" else "/nonexistent/dir/x")
    message = "cannot be written" if where == "under a loop" else "symbolic link that cannot"
    before = sorted(os.listdir(tmp_path))
    line = refused_in_one_line(ROOT, [*args, path], message)
    assert line.startswith(f"Error: {args[-1]} ") and sorted(os.listdir(tmp_path)) == before


def test_view_of_a_link_loop_is_one_line():
    # hunt 60: refuse_overlap's Path.resolve raised RuntimeError on the loop
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "t.npz").symlink_to(Path(tmp) / "t.npz")
        refused_in_one_line(ROOT, ["view", Path(tmp) / "t.npz"], "no trace file")


@pytest.mark.parametrize(
    ("name", "escaped"),
    [("a\nb.npz", "a\\nb.npz"), ("\x1b[2J\x1b[31mred.npz", "\\x1b[2J\\x1b[31mred.npz"),
     ("evil\u202egpj.npz", "evil\\u202egpj.npz"), ("tab\there.npz", "tab\\there.npz")],
    ids=["newline", "ESC", "RTL override", "tab"],
)  # fmt: skip
def test_control_characters_in_an_error_line_are_escaped(name, escaped):
    # hunt 60: a newline made two lines; ESC sequences reached the terminal (clear, colours)
    line = refused_in_one_line(ROOT, ["view", name], "no trace file")
    assert line == f"Error: no trace file {escaped}", line


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["infer", "generate", "--model-dir", "no-model", "--prompt", "ab\udcff"],
         "--prompt 'ab\\udcff' is not UTF-8 text (byte 0xff at character 2); give UTF-8 text"),
        (["infer", "generate", "--model-dir", "no-model", "--prompt", "x", "--stop", "\udce9"],
         "--stop '\\udce9' is not UTF-8 text (byte 0xe9 at character 0)"),
        ([*CHECK, "runconfig.sample_prompt=\udcff"],
         "runconfig.sample_prompt '\\udcff' is not UTF-8 text"),
        ([*CHECK, "model.preset=\udcff"], "unknown model preset '\\udcff'"),
    ],
    ids=["prompt", "stop", "sample_prompt", "model preset"],
)  # fmt: skip
def test_text_that_is_not_utf8_is_refused_before_any_file(args, message):
    # hunt 60: argv's undecodable bytes arrive as lone surrogates: --prompt $'\xff' was the
    # tokenizer's UnicodeEncodeError after the model loaded, sample_prompt the same after the
    # whole training run, and any override's value a traceback in the YAML depth check
    refused_in_one_line(ROOT, args, message)


CFD = ["hpc", "cfd", "--grid", "8", "8", "1", "--steps", "1", "--restart", "--out"]


def _step_file(folder: Path, **change) -> None:
    import numpy as np

    fields = {k: np.zeros((8, 8, 1), np.float32) for k in "uvwpT"}
    # named as the writer names it: a step naming no case is refused for a rayleigh-benard
    # run since hunt 67 (its T could be the full temperature or theta)
    case = {"case": np.asarray("rayleigh-benard")}
    arrays = {**fields, **case, "step": np.int64(10), "time": np.float64(0.5), **change}
    np.savez(folder / "step_0000010.npz", **arrays)


@pytest.mark.parametrize(
    ("change", "message"),
    [({"step": -5}, "step must be one integer >= 0, got -5"),
     ({"step": [10, 11]}, "step must be one integer >= 0"),
     ({"step": 2.5}, "step must be one integer >= 0"),
     ({"time": float("inf")}, "time must be one finite number >= 0, got inf")],
    ids=["step -5", "two steps", "step 2.5", "time inf"],
)  # fmt: skip
def test_a_cfd_step_files_step_and_time_are_checked(tmp_path, change, message):
    # hunt 60: step -5 and time inf ran on from them; a step of two values was a TypeError
    _step_file(tmp_path, **change)
    refused_in_one_line(ROOT, [*CFD, tmp_path], f"step_0000010.npz's {message}")


def test_a_cfd_step_file_as_written_restarts(tmp_path):
    _step_file(tmp_path)  # the refusals above change only what they name
    code, output = invoke(ROOT, [*CFD, tmp_path])
    assert code == 0 and (tmp_path / "step_0000011.npz").exists(), output


@pytest.mark.parametrize(
    ("args", "message"),
    [(CFD, "is not a step file: it is a FIFO, not a regular file"),
     (["hpc", "tlrmvm", "run", "--operator"], "cannot read TLR operator '{}': it is a FIFO")],
    ids=["cfd --restart", "tlrmvm --operator"],
)  # fmt: skip
def test_a_fifo_as_an_npz_input_is_refused_not_waited_on(tmp_path, args, message):
    # hunt 60: np.load's open of a FIFO waited for a writer forever
    fifo = tmp_path / ("step_0000010.npz" if args is CFD else "op.npz")
    os.mkfifo(fifo)
    refused_in_one_line(ROOT, [*args, tmp_path if args is CFD else fifo], message.format(fifo))


@pytest.mark.parametrize(
    ("override", "message"),
    [('model.tie_embeddings="false"', "model.tie_embeddings must be true or false, got 'false'"),
     ("model.rope_scaling=5", "model.rope_scaling must be null or a mapping of factor"),
     ("model.rope_scaling={factor: x}", "model.rope_scaling.factor must be a finite number"),
     ("model.rope_scaling={factor: 8, bogus: 1}", "got {'factor': 8, 'bogus': 1}")],
    ids=["tie text", "rope 5", "rope factor x", "rope unknown key"],
)  # fmt: skip
def test_a_model_sections_flag_and_rope_scaling_are_checked(tmp_path, override, message):
    # hunt 60: the text "false" tied the embeddings; rope_scaling=5 was an AttributeError
    # after the run folder and tokenizer were made, {factor: x} a TypeError
    args = ["train", "tiny", "model.preset=tiny-llama", "model.vocab_size=300", override]
    refused_in_one_line(ROOT, [*args, "-o", tmp_path / "run"], message)
    assert not (tmp_path / "run").exists()


def test_a_model_sections_rope_scaling_mapping_is_read():
    from wse_models import RopeScaling
    from wse_trainer.config import load_config
    from wse_trainer.session import model_config

    config = load_config("tiny", ["model.preset=tiny-llama", "model.rope_scaling={factor: 8}"])
    assert model_config(config).rope_scaling == RopeScaling(factor=8.0)


@pytest.mark.parametrize("kind", ["FIFO", "folder"])
def test_a_model_dirs_safetensors_that_is_no_file_is_refused(tmp_path, kind):
    # hunt 60: safetensors' safe_open of a FIFO waited for a writer forever
    from wse_inference.testing import save_tiny_model

    save_tiny_model(tmp_path / "m", n_layers=1)
    (st,) = (tmp_path / "m").glob("*.safetensors")
    st.unlink()
    os.mkfifo(st) if kind == "FIFO" else st.mkdir()
    args = ["infer", "generate", "--model-dir", tmp_path / "m", "--prompt-ids", "1,2"]
    what = "a FIFO" if kind == "FIFO" else "a folder"
    refused_in_one_line(ROOT, args, f"{st} is {what}, not a regular file")


@pytest.mark.parametrize(
    ("change", "message"),
    [({"step": -5}, "step_0000010.npz's step must be one integer >= 0, got -5"),
     ({"time": float("inf")}, "step_0000010.npz's time must be one finite number >= 0"),
     (None, "is not a step file: it is a FIFO, not a regular file")],
    ids=["step -5", "time inf", "FIFO"],
)  # fmt: skip
def test_a_bad_cfd_step_file_is_refused_before_jax(tmp_path, change, message):
    # hunt 60: the step file was read after the case was built, JAX imported (1.5 s)
    import subprocess
    import sys

    from wse_cli.testing import NO_JAX_PROBE, clean_env

    _step_file(tmp_path, **change) if change else os.mkfifo(tmp_path / "step_0000010.npz")
    r = subprocess.run([sys.executable, "-c", NO_JAX_PROBE, *CFD, str(tmp_path)],
                       capture_output=True, text=True, timeout=120, env=clean_env())  # fmt: skip
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and r.stdout == "", r.stdout + r.stderr
    assert lines[0].startswith("Error: --restart: ") and message in lines[0], r.stderr
    assert lines[1:] == ["jax imported: False"], r.stderr


@pytest.mark.parametrize("kind", ["FIFO", "folder"])
def test_a_model_dirs_config_json_that_is_no_file_is_refused(tmp_path, kind):
    # hunt 60: it was "has safetensors but no config.json"
    from wse_inference.testing import save_tiny_model

    save_tiny_model(tmp_path / "m", n_layers=1)
    config = tmp_path / "m" / "config.json"
    config.unlink()
    os.mkfifo(config) if kind == "FIFO" else config.mkdir()
    what = "a FIFO" if kind == "FIFO" else "a folder"
    message = f"{str(config)!r} is {what}, not a regular file; config.json must be a JSON file"
    for command in (["generate", "--prompt-ids", "1,2"], ["serve", "--port", "0"]):
        refused_in_one_line(ROOT, ["infer", *command, "--model-dir", tmp_path / "m"], message)


def test_a_served_model_name_is_bounded():
    # hunt 60: 100,000 characters were taken (and served back by /v1/models)
    args = ["infer", "serve", "--model-dir", "mock", "--served-model-name", "x" * 100_000]
    line = refused_in_one_line(ROOT, args, "'... (100,000 characters) is longer than 256 ")
    assert len(line) < 400, len(line)
    refused_in_one_line(ROOT, [*args[:-1], "a\tb"], "'a\\tb' must be printable UTF-8 text")
    from wse_cli.commands.infer_serve import _served_name

    assert _served_name("y" * 256) == "y" * 256
