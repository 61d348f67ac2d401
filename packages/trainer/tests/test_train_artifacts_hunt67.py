"""Hunt 67: files one `wse train` writes and the next one reads. Broken before:
- a checkpoint step's seal (`<step>/wse_sha256.json`) was read whole without limits: a FIFO
  hung `wse train` (resume, --mode eval, --checkpoint-path) forever, a link to /dev/zero read
  until a MemoryError traceback, '[' * 200000 was an 83-line RecursionError traceback. Now
  the seal goes through `wse_core.host.readers` and such a step is not trusted, as a seal of
  bad JSON was already: the run falls back to the previous step, naming why;
- a tokenizer.json already in the model_dir was never checked against model.vocab_size: a
  300-token one with vocab_size=260 trained 30 s to "loss is nan ... lower the learning
  rate" (ids 260..299 lie past the embedding) and left metrics.jsonl, run.log and train/.
  Now `wse train` refuses it in one line before JAX starts, leaving the folder as it was.
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest
import typer
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace
from wse_cli.app import app
from wse_cli.testing import refused_in_one_line
from wse_trainer.checkpoints import SEAL, SEALED_KEY, Checkpointer, newest_readable
from wse_trainer.data import EOS
from wse_trainer.session import check_inputs
from wse_trainer.testing import tiny_config

ROOT = typer.main.get_command(app)


# --- the seal, read bounded ----------------------------------------------------------------
def _tree(step: int) -> dict:
    return {"w": np.arange(16, dtype=np.float32).reshape(4, 4) * step}


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    """A checkpoints folder with steps 1 and 2 of a small tree, sealed."""
    folder = tmp_path_factory.mktemp("sealed") / "checkpoints"
    ckpt = Checkpointer(folder)
    for step in (1, 2):
        ckpt.save(step, _tree(step), {"step": step})
    ckpt.close()
    return folder


def _fifo(seal: Path) -> None:
    os.mkfifo(seal)


def _device(seal: Path) -> None:  # /dev/null: refused from stat alone, as /dev/zero is
    os.symlink("/dev/null", seal)


def _deep(seal: Path) -> None:
    seal.write_text("[" * 200_000)


def _huge(seal: Path) -> None:  # sparse: 70 MB on no disk
    with open(seal, "wb") as f:
        f.truncate(70_000_000)


def _read_within(folder: Path, seconds: float) -> tuple:
    """`newest_readable` of steps 1 and 2; a read still blocked on the FIFO after `seconds`
    is let go (a writer opened and closed) and fails the test."""
    got: list = []

    def read() -> None:
        try:
            got.append(newest_readable(folder, [1, 2], _tree(0), meta_keys=["step"]))
        except BaseException as e:  # raised again below, in the test's thread
            got.append(e)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(seconds)
    if reader.is_alive():
        os.close(os.open(folder / "2" / SEAL, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(30)
        pytest.fail(f"reading the step blocked on its {SEAL} (a FIFO) for {seconds} s")
    if isinstance(got[0], BaseException):
        raise got[0]
    return got[0]


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (_fifo, f"its {SEAL} is a FIFO, not a regular file"),
        (_device, f"its {SEAL} is a device, not a regular file"),
        (_deep, f"its {SEAL} is unreadable: its nesting is 200,000 levels, over the limit of "
                "64 levels"),
        (_huge, f"its {SEAL} is unreadable: it is 70,000,000 bytes, over the limit of "
                "67,108,864 bytes"),
    ],
    ids=["fifo", "device", "deep", "huge"],
)  # fmt: skip
def test_a_seal_past_the_readers_limits_is_a_corrupt_step(saved, tmp_path, make, problem):
    folder = tmp_path / "checkpoints"
    shutil.copytree(saved, folder)
    seal = folder / "2" / SEAL
    seal.unlink()
    make(seal)
    kind = os.lstat(seal).st_mode
    start, got, bad = _read_within(folder, 20)
    assert start == 1 and bad == [(2, problem)]  # the line resume and eval print
    np.testing.assert_array_equal(np.asarray(got.state["w"]), _tree(1)["w"])
    assert got.meta == {"step": 1, SEALED_KEY: True}
    assert os.lstat(seal).st_mode == kind  # step 2 left as it was (an eval moves nothing)


def test_a_seal_of_bad_json_is_still_a_corrupt_step(saved, tmp_path):
    folder = tmp_path / "checkpoints"
    shutil.copytree(saved, folder)
    (folder / "2" / SEAL).write_text('{"state/x": [1, "ab"')
    assert _read_within(folder, 20)[2] == [(2, f"its {SEAL} is unreadable")]


# --- a tokenizer.json already in the model_dir, against model.vocab_size -------------------
def _tokenizer(path: Path, ids: list[int]) -> bytes:
    """A word-level tokenizer.json whose tokens have `ids` (EOS the first)."""
    vocab = {EOS: ids[0], **{f"w{i}": i for i in ids[1:]}}
    tok = Tokenizer(WordLevel(vocab, unk_token=EOS))
    tok.pre_tokenizer = Whitespace()
    path.parent.mkdir(parents=True, exist_ok=True)
    tok.save(str(path))
    return path.read_bytes()


QUICK = ["runconfig.max_steps=1", "train_input.batch_size=2", "eval_input.batch_size=2",
         "runconfig.sample_tokens=0", "runconfig.mode=train"]  # fmt: skip


def test_wse_train_refuses_a_tokenizer_larger_than_the_vocab_before_any_work(tmp_path):
    run = tmp_path / "tokmix"
    written = _tokenizer(run / "tokenizer.json", list(range(300)))
    line = refused_in_one_line(
        ROOT, ["train", "tiny", *QUICK, "model.vocab_size=260", "-o", run], "tokenizer.json"
    )
    assert line == (
        f"Error: {run}/tokenizer.json has 300 tokens but model.vocab_size=260; raise "
        "model.vocab_size to at least 300 or remove tokenizer.json to train one"
    )
    assert [p.name for p in run.iterdir()] == ["tokenizer.json"]  # no metrics, log or train/
    assert (run / "tokenizer.json").read_bytes() == written


def test_a_tokenizer_with_an_id_past_the_vocab_is_refused_by_its_largest_id(tmp_path):
    from wse_trainer.config import ConfigError

    cfg = tiny_config(tmp_path)  # vocab_size 320
    path = Path(cfg.runconfig.model_dir) / "tokenizer.json"
    _tokenizer(path, [0, 1, 320])  # three tokens, one of them past the embedding
    with pytest.raises(ConfigError) as e:
        check_inputs(cfg)
    assert str(e.value) == (
        f"{path} has token ids up to 320 but model.vocab_size=320; raise model.vocab_size to "
        "at least 321 or remove tokenizer.json to train one"
    )


@pytest.mark.parametrize("size", [320, 250], ids=["equal", "padded"])
def test_a_tokenizer_within_the_vocab_is_kept(tmp_path, size):
    cfg = tiny_config(tmp_path)  # vocab_size 320: a larger vocab is padding, as HF models have
    _tokenizer(Path(cfg.runconfig.model_dir) / "tokenizer.json", list(range(size)))
    check_inputs(cfg)
