"""Hostile inputs left by earlier hunts, fixed by hunt 59: each exits 2 with one line naming
the input and what would be right. Before the fixes: a 6,000-character `--prompt-ids` (or
`--preset`, a number option, a model key) came back whole in its error line; a path too long
for the file system (`wse train QQQ...`, `wse view`, `infer serve --model-dir`) was an OSError
traceback; `infer generate --stop` took any number of strings of any length (the server
takes 4 of 1,024 characters); `model.vocab_size=1` was refused only after the tokenizer was
trained; `--max-steps 5 --num-steps 10` ran 5 steps; `--devices 8 --devices 9` ran on 9
(click keeps the last); `WSE_DEVICES=''` was read as unset; `hpc swe --steps 2147483647`
ran for days; an .npz of 200,000 members was refused only after zipfile read its whole
directory, and data_dir=/ was walked with Path.rglob at ~10 s per million entries."""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest
import typer
from wse_cli.app import app
from wse_cli.testing import invoke, refused_in_one_line

pytestmark = pytest.mark.timeout(120)
ROOT = typer.main.get_command(app)
LONG = "Q" * 6_000


def _refused(args: list, message: str, env: dict[str, str] | None = None) -> str:
    line = refused_in_one_line(ROOT, [str(a) for a in args], message, env)
    assert len(line) < 400, line  # never the argument whole
    return line


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["infer", "generate", "--model-dir", "m", "--prompt-ids", "1," + LONG],
         "got '1,QQQQ"),
        (["wafer", "info", "--preset", LONG], "unknown wafer preset 'QQQ"),
        (["plan", "train", "--gpus", LONG], "--gpus must be an integer >= 1, got QQQ"),
        (["train", "tiny", f"model.{LONG}=1"], "unknown key model.QQQ"),
        (["train", "tiny", f"runconfig.mode={LONG}"], "runconfig.mode='QQQ"),
        (["hpc", "cfd", "--case", LONG], "unknown --case 'QQQ"),
        (["experiments", "run", "wafer-yield", "--assume", LONG], "--assume takes KEY=VALUE"),
    ],
    ids=["prompt-ids", "preset", "number", "model key", "choice", "case", "assume"],
)  # fmt: skip
def test_a_long_argument_is_echoed_as_its_head_and_length(args, message):
    line = _refused(args, message)
    assert "... (6,00" in line and "characters)" in line


@pytest.mark.parametrize(
    "args",
    [["train", LONG[:300]], ["view", LONG[:300]], ["infer", "serve", "--model-dir", LONG[:300]]],
)
def test_a_path_too_long_for_the_file_system_is_one_line(args):
    _refused(args, "is too long for this file system")


@pytest.mark.parametrize(
    ("stop", "message"),
    [
        (["s"] * 65, "--stop is given 65 times; give at most 64 stop strings"),
        (["s" * 1025], "(1,025 characters) is too long; a stop string has at most 1,024"),
    ],
)
def test_generate_stop_strings_are_bounded_as_the_server_bounds_them(stop, message):
    args = ["infer", "generate", "--model-dir", "no-model", "--prompt", "hi"]
    _refused([*args, *(a for s in stop for a in ("--stop", s))], message)  # before any file


def test_stop_strings_within_the_bounds_pass_the_check():
    args = ["infer", "generate", "--model-dir", "no-model", "--prompt", "hi"]
    args += [a for s in ("a", "b", "c", "s" * 1024) for a in ("--stop", s)]
    line = _refused(args, "no-model")  # on to the model dir, which is not there
    assert "--stop" not in line


def test_a_vocabulary_smaller_than_the_byte_tokenizer_is_refused_before_the_run(tmp_path):
    run = tmp_path / "run"
    line = _refused(["train", "tiny", "model.vocab_size=1", "-o", run], "model.vocab_size is 1")
    assert "at least 257" in line and not run.exists()
    _refused(["train", "tiny", "model.vocab_size=256", "--validate-only"], "at least 257")
    code, output = invoke(ROOT, ["train", "tiny", "model.vocab_size=257", "--validate-only"])
    assert code == 0 and "config is valid" in output, output


def test_num_steps_past_max_steps_is_refused_naming_both(tmp_path):
    run = tmp_path / "run"
    args = ["train", "tiny", "--max-steps", "5", "--num-steps", "10", "-o", run]
    line = _refused(args, "runconfig.num_steps=10 (--num-steps")
    assert "runconfig.max_steps=5 (--max-steps" in line and not run.exists()
    code, output = invoke(ROOT, ["train", "tiny", "--max-steps", "10", "--num-steps", "5",
                                 "--validate-only"])  # fmt: skip
    assert code == 0, output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--devices", "8", "--devices", "9", "wafer", "info"],
         "--devices is given twice ('8', then '9'); give it once"),
        (["--devices=8", "--devices", "9", "wafer", "info"], "--devices is given twice"),
        (["wafer", "info", "--preset", "wse2", "--preset", "wse3"], "--preset is given twice"),
        (["train", "tiny", "-o", "a", "--model_dir", "b"], "--model-dir is given twice ('a'"),
        (["hpc", "stencil", "--kind", "jacobi", "--grid", "2", "2", "2", "--grid", "2", "2", "3"],
         "--grid is given twice ('2' '2' '2', then '2' '2' '3')"),
    ],
)  # fmt: skip
def test_a_single_valued_option_given_twice_with_two_values_is_refused(args, message):
    _refused(args, message)


def test_an_option_repeated_with_its_value_or_a_repeatable_one_is_taken():
    code, output = invoke(ROOT, ["--devices", "8", "--devices", "8", "wafer", "info", "--json"])
    assert code == 0, output
    code, output = invoke(ROOT, ["wafer", "info", "--set", "clock_hz=1e9", "--set",
                                 "link_bytes_per_cycle=4", "--json"])  # fmt: skip
    assert code == 0, output  # --set is repeatable
    # a value that looks like an option is a value: on to the model dir, which is not there
    _refused(["infer", "generate", "--model-dir", "no-model", "--prompt", "--model-dir"],
             "no-model")  # fmt: skip


@pytest.mark.parametrize("value", ["", " "])
def test_wse_devices_set_but_empty_is_refused_naming_the_variable(value):
    line = _refused(["wafer", "info"], "WSE_DEVICES", env={"WSE_DEVICES": value})
    assert "integer" in line and "--devices" not in line


STENCIL = ["hpc", "stencil", "--kind", "jacobi", "--grid", "4", "4", "4"]


@pytest.mark.parametrize("cmd", [["hpc", "swe"], ["hpc", "cfd"], STENCIL])
def test_hpc_steps_past_the_time_steps_limit_are_refused(cmd):
    line = _refused([*cmd, "--steps", 2**31 - 1], "--steps is 2,147,483,647, over the limit")
    assert "WSE_LIMIT_TIME_STEPS" in line


def _many_members(path: Path, n: int) -> Path:
    one = io.BytesIO()
    np.save(one, np.zeros(1))
    with zipfile.ZipFile(path, "w") as z:
        for i in range(n):
            z.writestr(f"a{i}.npy", one.getvalue())
    return path


def test_an_npz_of_too_many_members_is_refused_from_its_end_record(tmp_path, monkeypatch):
    from wse_core.host.readers import open_npz

    path = _many_members(tmp_path / "many.npz", 70_000)  # past 65,535: a zip64 end record
    monkeypatch.setattr(zipfile.ZipFile, "_RealGetContents", _never_read)
    with pytest.raises(ValueError, match="holds 70,000 members; an .npz read here holds at most"):
        open_npz(path, "x")
    _refused(["hpc", "tlrmvm", "run", "--operator", path], "holds 70,000 members")


def _never_read(self):
    raise AssertionError("the zip directory was read")


def test_a_small_npz_still_opens(tmp_path):
    from wse_core.host.readers import open_npz

    np.savez(tmp_path / "ok.npz", a=np.arange(3))
    with open_npz(tmp_path / "ok.npz", "x") as z:
        assert z.files == ["a"] and list(z["a"]) == [0, 1, 2]


def test_the_data_walk_finds_what_rglob_finds_and_stops_at_the_limit(tmp_path, monkeypatch):
    from wse_trainer import data_files

    root = tmp_path / "corpus"
    (root / "a" / "b").mkdir(parents=True)
    for rel in ("x.txt", "a/y.jsonl", "a/b/z.parquet", "a/b/no.bin", ".hidden.md", "a/.t.txt"):
        (root / rel).write_text("t")
    os.symlink(root / "a", root / "link")  # not entered, as rglob does not
    os.symlink(root / "x.txt", root / "alias.txt")
    oracle = sorted(str(f) for f in root.rglob("*") if f.suffix in data_files.BUILDERS)
    assert data_files._walk(root) == oracle and len(oracle) == 6
    monkeypatch.setenv("WSE_LIMIT_DATA_ENTRIES", "5")
    with pytest.raises(ValueError, match="holds more than 5 entries"):
        data_files._walk(root)


def test_a_config_json_key_given_twice_is_one_checkpoint_error(tmp_path):
    # tests/test_fuzz_parsers found it: json_keys' ValueError escaped from_pretrained
    import wse_models

    (tmp_path / "config.json").write_text('{"model_type": "llama", "model_type": "gpt2"}')
    with pytest.raises(wse_models.CheckpointError, match="'model_type' appears more than once"):
        wse_models.from_pretrained(tmp_path)
