"""Hunt 77: after a kill, a SIGTERM or a `--checkpoint-path` rewind, TensorBoard disagreed with
metrics.jsonl (which reads as one uninterrupted run): a rewind to 8 of a 12-step run showed 16
loss points (9-12 twice), and a kill -9 left a 0-byte event file (tensorboardX flushed every
120 s). A resume's event file now opens with PyTorch's `SummaryWriter(purge_step=T)` marker
(a SessionLog START at T = resume_step + 1) and each record is flushed as it is written.

Oracles: metrics.jsonl's (step, loss) records, against the event files read as TensorBoard
reads them by a reader written here from the formats' specs (TensorBoard is not a test
dependency; its EventAccumulator and its default Rust loader were checked by hand, stop 77's
note) (TFRecord framing with its masked CRC-32C, itself checked on
CRC-32C's published check value; TensorBoard's rule for a SessionLog START at step T: the
events before it whose step is >= T are purged)."""

from __future__ import annotations

import json
import signal
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from wse_trainer.metrics import MetricsLog
from wse_trainer.testing import crc32c, masked_crc32c


def test_the_crc_is_crc32c():
    assert crc32c(b"123456789") == 0xE3069283  # the published check value


def _records(path: Path) -> list[bytes]:
    data, at, out = path.read_bytes(), 0, []
    while at < len(data):
        header = data[at : at + 8]
        (n,) = struct.unpack("<Q", header)
        (hcrc,) = struct.unpack("<I", data[at + 8 : at + 12])
        body = data[at + 12 : at + 12 + n]
        (bcrc,) = struct.unpack("<I", data[at + 12 + n : at + 16 + n])
        assert hcrc == masked_crc32c(header) and bcrc == masked_crc32c(body), path
        out.append(body)
        at += 16 + n
    return out


def _shown(folder: Path, tag: str = "loss") -> list[tuple[int, float]]:
    """(step, value) of `tag` as TensorBoard shows the event files of `folder`."""
    from tensorboardX.proto.event_pb2 import Event, SessionLog

    shown: list[tuple[int, float]] = []
    for path in sorted(p for p in folder.iterdir() if "tfevents" in p.name):
        for raw in _records(path):
            event = Event.FromString(raw)
            if event.HasField("session_log") and event.session_log.status == SessionLog.START:
                shown = [(s, v) for s, v in shown if s < event.step]
            shown += [(event.step, v.simple_value) for v in event.summary.value if v.tag == tag]
    return shown


def _jsonl(folder: Path, mode: str) -> list[tuple[int, float]]:
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], float(np.float32(r["loss"]))) for r in rows if r["mode"] == mode]


def _train(log: MetricsLog, steps: range, offset: float, evals: tuple[int, ...] = ()) -> None:
    for step in steps:
        log.record(step, "train", {"loss": offset + step / 7, "tokens": 64})
        if step in evals:
            log.record(step, "eval", {"loss": offset + step / 3})
    log.close()


@pytest.mark.parametrize("resume_step", [0, 4, 8, 12])
def test_a_resume_shows_in_tensorboard_what_metrics_jsonl_holds(tmp_path, resume_step):
    _train(MetricsLog(tmp_path), range(1, 13), 1.0, evals=(4, 8, 12))
    # the resumed run records train steps, no eval: the old evals past it go from both
    _train(MetricsLog(tmp_path, resume_step=resume_step), range(resume_step + 1, 13), 5.0)
    for mode in ("train", "eval"):
        want = _jsonl(tmp_path, mode)
        assert _shown(tmp_path / mode) == want, mode  # before: 1-12, then 9-12 again
    assert [s for s, _ in _shown(tmp_path / "train")] == list(range(1, 13))


def test_a_resume_then_a_rewind_each_hide_the_steps_metrics_jsonl_dropped(tmp_path):
    _train(MetricsLog(tmp_path), range(1, 7), 1.0)  # killed at 6 after checkpoint 4
    _train(MetricsLog(tmp_path, resume_step=4), range(5, 13), 2.0)
    _train(MetricsLog(tmp_path, resume_step=8), range(9, 13), 3.0)  # --checkpoint-path 8
    assert _shown(tmp_path / "train") == _jsonl(tmp_path, "train")
    assert [v for _, v in _shown(tmp_path / "train")][-1] == pytest.approx(3 + 12 / 7)


def test_an_eval_run_replaces_the_record_of_its_step_and_hides_nothing(tmp_path):
    _train(MetricsLog(tmp_path), range(1, 5), 1.0, evals=(2, 4))
    log = MetricsLog(tmp_path, resume_step=None)  # mode eval
    log.record(4, "eval", {"loss": 9.0})  # hunt 80: a second record of step 4 was added
    log.record(5, "eval", {"loss": 7.0})  # a step with no eval on record: added
    log.close()
    kept = [(2, float(np.float32(1 + 2 / 3))), (4, 9.0), (5, 7.0)]  # TensorBoard: float32
    assert _shown(tmp_path / "eval") == _jsonl(tmp_path, "eval") == kept
    assert [s for s, _ in _shown(tmp_path / "train")] == [1, 2, 3, 4]  # train's: untouched


_KILLED = """import sys, time
from wse_trainer.metrics import MetricsLog
log = MetricsLog(sys.argv[1])
for step in range(1, 7):
    log.record(step, "train", {"loss": step * 0.5})
print("recorded", flush=True)
time.sleep(600)
"""


def test_a_kill_loses_no_recorded_step(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", _KILLED, str(tmp_path)],
                             stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert child.stdout.readline().strip() == "recorded"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    # before: a 0-byte event file, steps 1-6 gone though metrics.jsonl held them
    assert (
        _shown(tmp_path / "train")
        == _jsonl(tmp_path, "train")
        == [(s, s * 0.5) for s in range(1, 7)]
    )


# Review 77: the purge marker held for TensorBoard's Python loaders only. TensorBoard 2.21's
# default Rust data server never applies it (a resume to 4 still showed eval steps 8 and 12),
# and a file written before the marker (tensorboardX's own SummaryWriter, an older version of
# ours, a `mode: eval` run's eval/) showed a resume's steps twice. A resume now rewrites each
# older event file without the steps past it. Oracle: the raw records of each file, read with
# no purge rule at all (what a loader that ignores the marker shows), against metrics.jsonl.


def _events(path: Path) -> list:
    from tensorboardX.proto.event_pb2 import Event

    return [Event.FromString(raw) for raw in _records(path)]


def _raw(folder: Path, tag: str = "loss") -> list[tuple[int, float]]:
    """(step, value) of `tag` in every file of `folder` in name order, no purge rule."""
    files = sorted(p for p in folder.iterdir() if "tfevents" in p.name)
    return [(e.step, v.simple_value) for p in files for e in _events(p)
            for v in e.summary.value if v.tag == tag]  # fmt: skip


def _old_run(folder: Path, steps: int, evals: tuple[int, ...]) -> None:
    """A run folder an older version left: tensorboardX's SummaryWriter's files, no marker."""
    from tensorboardX import SummaryWriter

    rows, writers = [], {m: SummaryWriter(str(folder / m)) for m in ("train", "eval")}
    for step in range(1, steps + 1):
        for mode, loss in [("train", 1 + step / 7)] + [("eval", 1 + step / 3)] * (step in evals):
            writers[mode].add_scalar("loss", loss, step)
            rows.append(json.dumps({"step": step, "mode": mode, "loss": loss}) + "\n")
    for w in writers.values():
        w.close()
    (folder / "metrics.jsonl").write_text("".join(rows))


@pytest.mark.parametrize("resume_step", [0, 4, 8, 12])
def test_an_older_versions_files_drop_the_steps_past_a_resume(tmp_path, resume_step):
    _old_run(tmp_path, 12, evals=(4, 8, 12))
    old = {m: sorted((tmp_path / m).iterdir()) for m in ("train", "eval")}
    _train(MetricsLog(tmp_path, resume_step=resume_step), range(resume_step + 1, 15), 5.0)
    for mode, files in old.items():
        for path in files:  # the raw steps: no purge rule needed
            events = _events(path)
            assert events[0].file_version == "brain.Event:2", path  # kept
            assert max(e.step for e in events) <= resume_step, path
        assert _raw(tmp_path / mode) == _shown(tmp_path / mode) == _jsonl(tmp_path, mode)
    assert [s for s, _ in _raw(tmp_path / "train")] == list(range(1, 15))
    assert [s for s, _ in _raw(tmp_path / "eval")] == [s for s in (4, 8, 12) if s <= resume_step]
    assert not [p for p in tmp_path.rglob("*") if ".wse-trim." in p.name]


def test_every_loader_shows_a_resume_as_metrics_jsonl_does(tmp_path):
    # the review's repro: evals at 4, 8, 12, a resume to 4 records steps 5-10 and no eval
    _train(MetricsLog(tmp_path), range(1, 13), 1.0, evals=(4, 8, 12))
    _train(MetricsLog(tmp_path, resume_step=4), range(5, 11), 5.0)
    for mode in ("train", "eval"):  # before: the raw eval steps were 4, 8, 12
        assert _raw(tmp_path / mode) == _shown(tmp_path / mode) == _jsonl(tmp_path, mode)
    assert [s for s, _ in _raw(tmp_path / "eval")] == [4]


def test_a_cut_off_tail_is_dropped_and_an_untouched_file_stays(tmp_path):
    _train(MetricsLog(tmp_path), range(1, 5), 1.0)
    first = next((tmp_path / "train").iterdir())
    _train(MetricsLog(tmp_path, resume_step=4), range(5, 9), 2.0)  # nothing past 4 to drop
    second = next(p for p in (tmp_path / "train").iterdir() if p != first)
    before = first.stat()
    whole = second.read_bytes()
    last = whole[-(len(_records(second)[-1]) + 16) :]  # its step-8 record, framed
    second.write_bytes(whole + last[:-5])  # a record a power cut cut off
    second.chmod(0o640)
    MetricsLog(tmp_path, resume_step=6).close()
    assert (first.stat().st_ino, first.stat().st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert [e.step for e in _events(second) if e.summary.value] == [5, 6]  # CRCs checked
    assert second.stat().st_mode & 0o777 == 0o640
    assert _raw(tmp_path / "train") == _jsonl(tmp_path, "train")


_KILLED_REWRITE = """import os, signal, sys
from pathlib import Path
import wse_trainer.tensorboard_events as tb
real = os.replace
def killed(src, dst):  # the temporary file written whole and fsynced, not yet renamed
    if ".wse-trim." in str(src):
        os.kill(os.getpid(), signal.SIGKILL)
    real(src, dst)
tb.os.replace = killed
from wse_trainer.metrics import MetricsLog
MetricsLog(sys.argv[1], resume_step=4)
"""


def test_a_kill_during_the_rewrite_leaves_the_old_file_whole(tmp_path):
    _train(MetricsLog(tmp_path), range(1, 9), 1.0)
    (path,) = (tmp_path / "train").iterdir()
    old = path.read_bytes()
    child = subprocess.run([sys.executable, "-c", _KILLED_REWRITE, str(tmp_path)], timeout=120)
    assert child.returncode == -signal.SIGKILL
    assert path.read_bytes() == old  # the old file stays until its replacement is whole
    (left,) = [p for p in (tmp_path / "train").iterdir() if p != path]
    assert "tfevents" not in left.name  # no reader takes it for an event file
    _train(MetricsLog(tmp_path, resume_step=4), range(5, 7), 2.0)  # the next resume
    assert not left.exists()  # the killed rewrite's leftover removed
    assert _raw(tmp_path / "train") == _jsonl(tmp_path, "train")
    assert [s for s, _ in _raw(tmp_path / "train")] == list(range(1, 7))
