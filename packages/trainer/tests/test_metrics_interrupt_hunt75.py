"""Hunt 75: a Ctrl-C during `wse train` hung for ever in `MetricsLog.close` (1 of 8 tries):
landing inside tensorboardX's `add_scalar` (a multiprocessing queue's put) it left the queue's
feeder thread waiting for ever, and `SummaryWriter.close` joins its logger thread with no
limit. A record is now written whole (`interrupt.held`) and the close is bounded. And a second
SIGTERM while the first one's cleanups ran was only recorded (SLURM and `timeout` send SIGTERM,
then SIGKILL after a grace): it now ends the process at once.

The oracles are the process's own: it ends within seconds, with one line, and every line of
metrics.jsonl parses as JSON (`json.loads`)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from wse_trainer.metrics import CLOSE_BOUND_S, _closed_within

# records as fast as it can, as the training loop's log_steps=1 would, until Ctrl-C
_RECORDER = """import sys
from pathlib import Path
from wse_trainer.metrics import MetricsLog
log = MetricsLog(Path(sys.argv[1]), resume_step=None)
step = 0
try:
    print("ready", flush=True)
    while True:
        step += 1
        log.record(step, "train", {f"k{i}": step * 0.5 + i for i in range(8)})
except KeyboardInterrupt:
    log.close()
    print("interrupted (Ctrl-C)", file=sys.stderr, flush=True)
    sys.exit(130)
"""


def _whole_json_lines(path: Path) -> int:
    lines = path.read_text().splitlines()
    for line in lines:
        json.loads(line)  # a torn line raises
    return len(lines)


@pytest.mark.timeout(240)
def _ctrl_c(child: subprocess.Popen, wait_s: float, what: str) -> str:
    """SIGINT to `child`, its stderr once it ends: within the close's bound and a margin, or
    the test fails (it is killed after `wait_s`)."""
    child.send_signal(signal.SIGINT)
    sent = time.monotonic()
    try:
        _, err = child.communicate(timeout=wait_s)
    except subprocess.TimeoutExpired:
        child.kill()
        pytest.fail(f"{what}: still running {wait_s:g} s after Ctrl-C")
    assert time.monotonic() - sent < CLOSE_BOUND_S + 5
    return err


def test_ctrl_c_at_many_points_of_recording_ends_in_seconds_with_whole_records(tmp_path):
    for k in range(10):
        run = tmp_path / f"r{k}"
        run.mkdir()
        child = subprocess.Popen(
            [sys.executable, "-c", _RECORDER, str(run)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert child.stdout.readline().strip() == "ready"
        time.sleep(0.05 + 0.037 * k)  # several points of the record loop
        err = _ctrl_c(child, CLOSE_BOUND_S + 10, f"try {k}")
        assert child.returncode == 130, err
        assert err.strip().splitlines() == ["interrupted (Ctrl-C)"]
        assert _whole_json_lines(run / "metrics.jsonl") > 0


class _NeverCloses:
    """A writer whose close never returns: the hang tensorboardX's unbounded join made."""

    def close(self) -> None:
        time.sleep(3600)


def test_a_writer_that_never_closes_is_left_after_the_bound():
    t0 = time.monotonic()
    assert _closed_within(_NeverCloses(), 0.2) is False
    assert time.monotonic() - t0 < 2


_HUNG_CLEANUP = """import sys, time
from wse_cli import interrupts
interrupts.install()
try:
    print("ready", flush=True)
    while True:
        time.sleep(0.01)
finally:
    print("cleaning", flush=True)
    while True:  # a cleanup that hangs, as the close did
        time.sleep(0.01)
"""


def test_a_second_sigterm_during_the_cleanup_ends_the_process_at_once():
    child = subprocess.Popen(
        [sys.executable, "-c", _HUNG_CLEANUP],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout.readline().strip() == "ready"
    child.send_signal(signal.SIGTERM)
    assert child.stdout.readline().strip() == "cleaning"
    child.send_signal(signal.SIGTERM)
    try:
        _, err = child.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        child.kill()
        pytest.fail("a second SIGTERM did not end the process")
    assert child.returncode == -signal.SIGTERM  # killed by it, as a shell's 143
    assert err.strip().splitlines() == ["stopped by SIGTERM"]


QUICK = ["model.vocab_size=300", "train_input.batch_size=2", "eval_input.batch_size=2",
         "runconfig.sample_tokens=0", "runconfig.max_steps=100000",
         "runconfig.checkpoint_steps=100000", "runconfig.log_steps=1"]  # fmt: skip


@pytest.mark.timeout(300)
def test_ctrl_c_of_wse_train_at_several_steps_ends_in_seconds_with_one_line(tmp_path):
    for k, records in enumerate((1, 4, 12)):
        run = tmp_path / f"run{k}"
        child = subprocess.Popen(
            [sys.executable, "-m", "wse_cli", "train", "tiny", *QUICK, "-o", str(run)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as a terminal's
        )
        metrics, deadline = run / "metrics.jsonl", time.monotonic() + 120
        while time.monotonic() < deadline and child.poll() is None:
            if metrics.exists() and metrics.read_text().count("\n") >= records:
                break
            time.sleep(0.02)
        err = _ctrl_c(child, CLOSE_BOUND_S + 20, "wse train")
        assert child.returncode == 130, err[-2000:]
        assert len(err.strip().splitlines()) == 1 and err.startswith("interrupted (Ctrl-C)")
        assert _whole_json_lines(metrics) >= records
