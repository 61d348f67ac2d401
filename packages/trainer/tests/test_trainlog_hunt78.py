"""Hunt 78: a run's logs at a resume.

1. One damaged byte in an event file (the step-2 record of a 12-step run) made a resume to 8
   cut the file from 2,807 bytes to 299, silently: the rewrite kept only the records before
   the damage, steps 3-8 gone though the resume kept them. Now the bytes that hold no whole
   record are skipped to the next whole frame, every whole record of a step <= the resume's
   is kept byte for byte, and each skip is a line on stderr.
2. A rerun of a finished run (nothing to train) evaluated its last step again: metrics.jsonl
   and eval/ held step N's eval twice. Now a rerun reads the eval on record.
3. `runconfig.num_epochs: null` was refused as an unknown key; ModelZoo's null is unset.

Oracles: the frames of the undamaged file, read by a strict TFRecord reader written here from
the format's spec (length, masked CRC-32C of it, data, masked CRC-32C of it; the CRC is
`wse_trainer.testing.crc32c`, bit by bit, checked on its published check value in
test_tensorboard_hunt77.py), each frame's bytes compared with the rewritten file's
(TensorBoard is not installed here: its EventAccumulator cannot be asked); metrics.jsonl's
line counts; the config of the file without the null keys.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import yaml
from wse_trainer.config import ConfigError, config_from_dict, load_config, shipped_config
from wse_trainer.metrics import MetricsLog
from wse_trainer.testing import masked_crc32c, run_on_preset, tensorboard_scalars, tiny_config


def _frames(data: bytes) -> list[bytes]:
    """The framed records of an undamaged file, each checked; anything else fails."""
    at, out = 0, []
    while at < len(data):
        (n,) = struct.unpack_from("<Q", data, at)
        frame = data[at : at + 16 + n]
        assert struct.unpack_from("<I", frame, 8)[0] == masked_crc32c(frame[:8])
        assert struct.unpack_from("<I", frame, 12 + n)[0] == masked_crc32c(frame[12 : 12 + n])
        out.append(frame)
        at += 16 + n
    return out


def _event(frame: bytes):
    from tensorboardX.proto.event_pb2 import Event

    return Event.FromString(frame[12:-4])


def _finished(folder: Path) -> tuple[Path, list[bytes]]:
    """A finished 12-step run's train event file and its frames, read before any damage."""
    log = MetricsLog(folder)
    for step in range(1, 13):
        log.record(step, "train", {"loss": 1 + step / 7, "tokens": 64})
    log.close()
    (path,) = (folder / "train").glob("events.out.tfevents*")
    return path, _frames(path.read_bytes())


def _damage(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))


def _steps(frames: list[bytes]) -> list[int]:
    return [e.step for e in map(_event, frames) if e.summary.value]


@pytest.mark.parametrize("where", ["length", "length crc", "event", "event crc"])
def test_a_damaged_record_costs_that_record_alone(tmp_path, capsys, where):
    path, frames = _finished(tmp_path)
    i = next(k for k, f in enumerate(frames) if _event(f).step == 2)  # the step-2 record
    start = sum(map(len, frames[:i]))
    n = len(frames[i]) - 16
    _damage(path, start + {"length": 0, "length crc": 9, "event": 20, "event crc": 13 + n}[where])
    MetricsLog(tmp_path, resume_step=8).close()
    kept = [f for k, f in enumerate(frames) if k != i and _event(f).step <= 8]
    data = path.read_bytes()
    assert data == b"".join(kept)  # every other record of steps <= 8, byte for byte
    assert _steps(_frames(data)) == [1, 3, 4, 5, 6, 7, 8]  # before: [1] (299 bytes)
    notes = capsys.readouterr().err.splitlines()
    end = start + len(frames[i]) - 1
    assert notes == [
        f"note: skipped bytes {start:,}-{end:,} of {path}: a damaged event record (its step "
        "unknown), the records after it kept"
    ]


def test_a_damaged_file_version_does_not_empty_the_file(tmp_path, capsys):
    path, frames = _finished(tmp_path)
    assert _event(frames[0]).file_version == "brain.Event:2"
    _damage(path, 20)  # inside the file version record
    MetricsLog(tmp_path, resume_step=8).close()
    left = _frames(path.read_bytes())
    assert _event(left[0]).file_version == "brain.Event:2"  # written anew
    assert left[1:] == [f for f in frames[1:] if _event(f).step <= 8]
    assert "skipped bytes 0-" in capsys.readouterr().err


def test_a_damaged_record_is_skipped_where_the_resume_drops_nothing(tmp_path, capsys):
    path, frames = _finished(tmp_path)
    _damage(path, sum(map(len, frames[:5])) + 20)  # a record of step 4
    MetricsLog(tmp_path, resume_step=12).close()
    assert _steps(_frames(path.read_bytes())) == [s for s in range(1, 13) if s != 4]
    assert capsys.readouterr().err.count("note: skipped bytes") == 1


def test_a_cut_off_tail_is_said(tmp_path, capsys):
    path, frames = _finished(tmp_path)
    path.write_bytes(path.read_bytes() + frames[-1][:-7])  # a record a kill cut off
    MetricsLog(tmp_path, resume_step=12).close()
    assert _frames(path.read_bytes()) == frames
    err = capsys.readouterr().err
    assert f"note: dropped the last {len(frames[-1]) - 7:,} bytes of {path}" in err


def test_a_file_of_no_whole_record_is_left_as_it_is(tmp_path, capsys):
    folder = tmp_path / "train"
    folder.mkdir()
    path = folder / "events.out.tfevents.1.host.1.000"
    junk = bytes(range(256)) * 3
    path.write_bytes(junk)
    MetricsLog(tmp_path, resume_step=4).close()
    assert path.read_bytes() == junk
    assert f"note: {path} holds no whole event record; left as it is" in capsys.readouterr().err


# -- 2: a rerun of a finished run evaluates its step no more --------------------------------


def _lines(model_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (model_dir / "metrics.jsonl").read_text().splitlines()]


def test_a_rerun_of_a_finished_run_evaluates_no_step_twice(tmp_path):
    config = tiny_config(tmp_path, "runconfig.max_steps=2", "runconfig.checkpoint_steps=2",
                         "runconfig.mode=train", "runconfig.sample_tokens=0")  # fmt: skip
    model_dir = Path(config.runconfig.model_dir)
    run_on_preset(config)  # trains 1-2, no eval on record
    data = config.to_dict()
    data["runconfig"]["mode"] = "train_and_eval"
    rerun = config_from_dict(data)
    first = run_on_preset(rerun)  # nothing to train: step 2 evaluated, once
    evals = [r for r in _lines(model_dir) if r["mode"] == "eval"]
    assert [r["step"] for r in evals] == [2] and len(_lines(model_dir)) == 3
    lines: list[str] = []
    again = run_on_preset(rerun, echo=lines.append)  # before: step 2's eval a second time
    assert len(_lines(model_dir)) == 3  # 2 train + 1 eval, one uninterrupted run
    assert [s for s, _ in tensorboard_scalars(model_dir / "eval")["loss"]] == [2]
    assert again.eval_loss == first.eval_loss == evals[0]["loss"]
    assert not [x for x in lines if x.startswith("| Eval") or x.startswith("predicted eval")]
    assert not [x for x in lines if "evaluating" in x], lines  # no batches said where none run
    assert f"eval of step 2 on record in metrics.jsonl (loss {evals[0]['loss']:.5f})" in (
        " ".join(lines)
    )


# -- 3: ModelZoo's null epochs are unset -----------------------------------------------------


def _params(tmp_path: Path, **runconfig) -> Path:
    data = yaml.safe_load(shipped_config("tiny").read_text())
    data["runconfig"] = {**data.get("runconfig", {}), **runconfig}
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("key", ["num_epochs", "steps_per_epoch"])
def test_a_null_epoch_key_is_the_key_left_out(tmp_path, key):
    plain = load_config("tiny")
    assert load_config(_params(tmp_path, **{key: None})) == plain  # before: unknown key
    assert load_config("tiny", [f"runconfig.{key}=null"]) == plain
    assert load_config(_params(tmp_path, **{key: 3}), [f"runconfig.{key}=null"]) == plain
    with pytest.raises(ConfigError, match="no epochs here"):
        load_config(_params(tmp_path, **{key: 3}))  # a value still has no meaning here
