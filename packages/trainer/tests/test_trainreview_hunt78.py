"""Review 78 of the trainer's log changes.

1. A train_and_eval rerun that trains nothing said the eval loss on record even when the eval's
   settings had changed: trained with eval_input.eval_steps 2, rerun with 1, it said
   "eval of step 6 on record ... (loss 5.33426): not run again" where `--mode eval` gives
   5.33365. Now it skips only when the eval_input and model sections are those of every saved
   params file; else it says why and evaluates, its record replacing the old one in
   metrics.jsonl and eval/ (a resume keeps the records of its start step: the second eval was
   appended beside the first).
2. Resyncing a damaged event file tried every offset with a pure-Python CRC: 1 MiB of zeros
   inside a file took 2.6 s (5.5 s on a loaded 2-core machine), 64 MiB ~170 s. The scan is
   vectorised now.

Oracles: the `--mode eval` run's loss of the same step and settings (the reviewer's "right");
metrics.jsonl's records and the event files read raw (no purge rule) by
`wse_trainer.testing.tensorboard_scalars`, against the records the test wrote; for the scan,
the byte-at-a-time scan it replaced, written here over the bit-by-bit CRC-32C of
`wse_trainer.testing` (its check value tested in test_tensorboard_hunt77.py).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from wse_trainer.config import apply_overrides, config_from_dict
from wse_trainer.metrics import MetricsLog
from wse_trainer.resume import eval_on_record, params_on_file
from wse_trainer.tensorboard_events import _frame_starts, _record_spans
from wse_trainer.testing import masked_crc32c, run_on_preset, tensorboard_scalars, tiny_config

# -- 1: a rerun evaluates again where the eval's settings changed ---------------------------


def _evals(model_dir: Path) -> list[tuple[int, float]]:
    rows = [json.loads(x) for x in (model_dir / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["loss"]) for r in rows if r["mode"] == "eval"]


def _with(config, *overrides: str):
    return config_from_dict(apply_overrides(config.to_dict(), list(overrides)))


def test_a_rerun_with_other_eval_settings_evaluates_and_replaces_the_record(tmp_path):
    config = tiny_config(tmp_path, "runconfig.mode=train_and_eval")  # 6 steps, eval_steps 2
    model_dir = Path(config.runconfig.model_dir)
    first = run_on_preset(config)
    lines: list[str] = []
    rerun = run_on_preset(_with(config, "eval_input.eval_steps=1"), echo=lines.append)
    evals, shown = _evals(model_dir), tensorboard_scalars(model_dir / "eval")["loss"]
    oracle = run_on_preset(_with(config, "eval_input.eval_steps=1", "runconfig.mode=eval"))
    assert oracle.eval_loss != pytest.approx(first.eval_loss)  # the test can tell them apart
    assert rerun.eval_loss == oracle.eval_loss  # before: first.eval_loss, "not run again"
    assert evals == [(6, rerun.eval_loss)]  # replaced, not a second record of step 6
    assert shown == [(6, float(np.float32(rerun.eval_loss)))]  # eval/ too, read raw
    said = f"eval of step 6 on record in metrics.jsonl (loss {first.eval_loss:.5f}) ran with"
    assert f"{said} other settings (eval_input.eval_steps was 2, now 1): evaluating it again" in (
        lines
    )
    assert [x for x in lines if x.startswith("| Eval")] == [
        f"| Eval Device=CSX, GlobalStep=6, Loss={rerun.eval_loss:.5f}, "
        f"Perplexity={np.exp(rerun.eval_loss):.3f}, Accuracy={rerun.eval_accuracy:.5f}"
    ]
    lines.clear()  # the same settings again: on record now (the eval run's file agrees too)
    again = run_on_preset(_with(config, "eval_input.eval_steps=1"), echo=lines.append)
    assert (again.eval_loss, again.eval_accuracy) == (rerun.eval_loss, rerun.eval_accuracy)
    assert f"eval of step 6 on record in metrics.jsonl (loss {rerun.eval_loss:.5f}): not run " in (
        " ".join(lines)
    )
    assert _evals(model_dir) == [(6, oracle.eval_loss)]  # the eval run's replaced it (hunt 80)


class _Log:
    """A MetricsLog's `recorded` and `line`: step 6's eval on record, lines kept."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def recorded(self, step: int, mode: str) -> dict | None:
        return {"step": 6, "mode": "eval", "loss": 1.25} if (step, mode) == (6, "eval") else None

    def line(self, text: str) -> None:
        self.lines.append(text)


@pytest.mark.parametrize(
    "change",
    [
        "eval_input.eval_steps=1",
        "eval_input.batch_size=2",
        "eval_input.max_sequence_length=16",
        "eval_input.data_dir=other",
        "eval_input.packing=true",
        "model.d_ff=32",
    ],
)
def test_each_setting_the_eval_depends_on_makes_it_run_again(tmp_path, change):
    config = tiny_config(tmp_path)
    saved = config.to_dict()  # as params_train.yaml holds it
    session = SimpleNamespace(config=_with(config, change), settings=_with(config, change).to_dict)
    log = _Log()
    assert eval_on_record(log, 6, session, [saved]) is None
    key, value = change.split("=")
    assert f"{key} was " in log.lines[0] and log.lines[0].endswith(": evaluating it again")
    same = SimpleNamespace(config=config, settings=config.to_dict)
    assert eval_on_record(log, 6, same, [saved]) == 1.25  # none changed: on record
    assert eval_on_record(log, 6, same, [saved, saved]) == 1.25
    assert eval_on_record(log, 6, same, [saved, _with(config, change).to_dict()]) is None


def test_what_cannot_be_compared_evaluates(tmp_path):
    config = tiny_config(tmp_path)
    same = SimpleNamespace(config=config, settings=config.to_dict)
    for on_file in (
        [],
        [None],
        [config.to_dict(), None],
        [{"eval_input": config.to_dict()["eval_input"]}],
    ):
        assert eval_on_record(_Log(), 6, same, on_file) is None, on_file
    rewound = _with(config, f"runconfig.checkpoint_path={tmp_path / 'other' / 'checkpoints' / '6'}")
    other = SimpleNamespace(config=rewound, settings=config.to_dict)  # another run's weights
    assert eval_on_record(_Log(), 6, other, [config.to_dict()]) is None


def test_params_on_file_reads_what_exists_and_marks_what_does_not_read(tmp_path):
    assert params_on_file(tmp_path) == []
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "params_train.yaml").write_text("eval_input: {eval_steps: 2}\n")
    assert params_on_file(tmp_path) == [{"eval_input": {"eval_steps": 2}}]
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "params_eval.yaml").write_bytes(b"a: [\n\xff")
    assert params_on_file(tmp_path) == [{"eval_input": {"eval_steps": 2}}, None]


def test_a_resumes_record_of_its_start_step_replaces_the_one_on_file(tmp_path):
    log = MetricsLog(tmp_path)
    for step in range(1, 7):
        log.record(step, "train", {"loss": 1 + step / 7})
        if step in (3, 6):
            log.record(step, "eval", {"loss": 1 + step / 3})
    log.close()
    before = (tmp_path / "metrics.jsonl").read_text().splitlines()
    log = MetricsLog(tmp_path, resume_step=6)
    assert log.recorded(6, "eval") == {"step": 6, "mode": "eval", "loss": 3.0}
    log.record(6, "eval", {"loss": 9.5})
    log.close()
    after = (tmp_path / "metrics.jsonl").read_text().splitlines()
    old, new = (
        '{"step": 6, "mode": "eval", "loss": 3.0}',
        '{"step": 6, "mode": "eval", "loss": 9.5}',
    )
    assert after == [x for x in before if x != old] + [new]  # the others byte for byte
    shown = tensorboard_scalars(tmp_path / "eval")["loss"]  # raw: no purge rule
    assert shown == [(3, 2.0), (6, 9.5)]  # before: (3, 2.0), (6, 3.0), (6, 9.5)
    assert [s for s, _ in tensorboard_scalars(tmp_path / "train")["loss"]] == list(range(1, 7))


# -- 2: the resync scan ------------------------------------------------------------------------


def _framed(event: bytes) -> bytes:
    header = struct.pack("<Q", len(event))
    return (
        header
        + struct.pack("<I", masked_crc32c(header))
        + event
        + struct.pack("<I", masked_crc32c(event))
    )


def _slow_spans(data: bytes) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """The scan it replaced: every offset tried in turn, each CRC the bit-by-bit oracle's."""

    def end_at(at: int) -> int | None:
        if at + 16 > len(data):
            return None
        (n,) = struct.unpack_from("<Q", data, at)
        end = at + 16 + n
        if end > len(data) or struct.unpack_from("<I", data, at + 8)[0] != masked_crc32c(
            data[at : at + 8]
        ):
            return None
        ok = struct.unpack_from("<I", data, end - 4)[0] == masked_crc32c(data[at + 12 : end - 4])
        return end if ok else None

    spans, unread, at = [], [], 0
    while at < len(data):
        end = end_at(at)
        if end is None:
            resync = at + 1
            while resync < len(data) and end_at(resync) is None:
                resync += 1
            unread.append((at, resync))
            at = resync
        else:
            spans.append((at, end))
            at = end
    return spans, unread


def _damaged_file(seed: int) -> bytes:
    """Frames of random events (an empty one among them) with zeros, random bytes, flipped
    bytes and a cut-off frame between them."""
    rng = np.random.default_rng(seed)
    frames = [_framed(rng.bytes(int(rng.integers(0, 40)))) for _ in range(30)] + [_framed(b"")]
    parts = []
    for i in rng.permutation(len(frames)):
        frame = bytearray(frames[i])
        kind = int(rng.integers(0, 6))
        if kind == 0:
            parts.append(bytes(int(rng.integers(1, 300))))
        elif kind == 1:
            parts.append(rng.bytes(int(rng.integers(1, 100))))
        elif kind == 2:
            frame[int(rng.integers(0, len(frame)))] ^= 1 << int(rng.integers(0, 8))
        elif kind == 3:
            frame = frame[: int(rng.integers(1, len(frame)))]
        parts.append(bytes(frame))
    return b"".join(parts) + bytes(int(rng.integers(0, 40)))


@pytest.mark.parametrize("seed", range(6))
def test_the_scan_keeps_the_records_the_slow_scan_kept(seed):
    from tensorboardX.record_writer import masked_crc32c as crc

    data = _damaged_file(seed)
    spans, unread = _record_spans(data, crc)
    assert (spans, unread) == _slow_spans(data)
    assert len(spans) > 10 and unread  # damage and records both met
    assert np.array_equal(_frame_starts(data, chunk=7), _frame_starts(data))  # chunk edges
    headers = [
        at
        for at in range(len(data) - 15)
        if struct.unpack_from("<Q", data, at)[0] <= len(data) - 16 - at
        and struct.unpack_from("<I", data, at + 8)[0] == masked_crc32c(data[at : at + 8])
    ]
    assert _frame_starts(data).tolist() == headers  # every plausible frame start, no other


@pytest.mark.timeout(120)  # a byte-at-a-time scan takes minutes here; this one ~0.4 s
def test_a_zero_run_is_skipped_at_once(tmp_path, capsys):
    log = MetricsLog(tmp_path)
    for step in range(1, 13):
        log.record(step, "train", {"loss": 1 + step / 7})
    log.close()
    (path,) = (tmp_path / "train").glob("events.out.tfevents*")
    data = path.read_bytes()
    half = 7 * (len(data) // 13)
    cut = next(a for a, _ in _slow_spans(data)[0] if a >= half)
    hole = (64 << 20) - len(data)  # the file_bytes limit: the largest file a resume rewrites
    path.write_bytes(data[:cut] + bytes(hole) + data[cut:])
    MetricsLog(tmp_path, resume_step=12).close()
    assert path.read_bytes() == data  # every record kept, the zeros gone
    assert f"note: skipped bytes {cut:,}-{cut + hole - 1:,} of {path}" in capsys.readouterr().err
