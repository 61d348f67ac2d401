"""Hunt 62's trainer fixes below the CLI: `undone_on_error` removes only what its own block
made (the tokenizer it wrote, the folders `make_model_dir` made), and the run folder's
tokenizer is read within the file limits (`read_tokenizer`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from wse_core.host.limits import LimitError
from wse_trainer.data import read_tokenizer
from wse_trainer.run_folder import make_model_dir, undone_on_error


class _Refused(Exception):
    pass


def test_a_refused_block_removes_the_folder_and_tokenizer_it_made(tmp_path):
    run = tmp_path / "a" / "run"
    with pytest.raises(_Refused), undone_on_error(run):
        make_model_dir(run)
        (run / "tokenizer.json").write_text("{}")
        raise _Refused
    assert list(tmp_path.iterdir()) == []  # a/ too: make_model_dir made it


def test_a_refused_block_keeps_a_run_folder_and_the_tokenizer_it_had(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "tokenizer.json").write_text("{}")
    with pytest.raises(_Refused), undone_on_error(run):
        make_model_dir(run)
        raise _Refused
    assert sorted(p.name for p in run.iterdir()) == ["tokenizer.json"]


def test_a_folder_an_earlier_block_made_is_not_a_later_refusals_to_remove(tmp_path):
    # the same process, the same path: a refusal before make_model_dir (a config check)
    # must not remove the folder an earlier run made (and the user emptied) there
    run = tmp_path / "run"
    with undone_on_error(run):
        make_model_dir(run)
    with pytest.raises(_Refused), undone_on_error(run):
        raise _Refused
    assert run.is_dir()


def test_a_tokenizer_past_the_file_limit_is_refused_before_it_is_read(tmp_path, monkeypatch):
    path = tmp_path / "tokenizer.json"
    path.write_text('{"version": "1.0", ' + " " * 5000 + "}")
    monkeypatch.setenv("WSE_LIMIT_FILE_BYTES", "4096")
    with pytest.raises(LimitError, match=r"tokenizer file '.*' .*WSE_LIMIT_FILE_BYTES"):
        read_tokenizer(path)


def test_a_tokenizer_of_latin1_bytes_is_one_line(tmp_path):
    from wse_trainer.config import ConfigError

    path = tmp_path / "tokenizer.json"
    path.write_bytes(b'{"caf\xe9": 1}')
    with pytest.raises(ConfigError, match=r"cannot read tokenizer file .*: not UTF-8 text"):
        read_tokenizer(path)


def test_a_run_folders_tokenizer_still_reads(tmp_path):
    from wse_trainer.data import train_tokenizer

    tok = train_tokenizer(["def f(a, b):\n    return a + b\n"] * 50, 300)
    tok.save(str(tmp_path / "tokenizer.json"))
    again = read_tokenizer(Path(tmp_path / "tokenizer.json"))
    assert again.encode("def g(x):").ids == tok.encode("def g(x):").ids


def test_a_refusal_at_a_model_dir_that_is_a_file_is_not_masked_by_the_undo(tmp_path):
    # the block now starts before make_model_dir: its undo must never replace the refusal
    from wse_trainer.config import ConfigError

    (tmp_path / "r").write_text("precious\n")
    with (
        pytest.raises(ConfigError, match="is a file; give a folder"),
        undone_on_error(tmp_path / "r"),
    ):
        make_model_dir(tmp_path / "r")
    assert (tmp_path / "r").read_text() == "precious\n"
