"""What a run writes while it trains: metrics.jsonl, TensorBoard events, the run log.

- `<model_dir>/metrics.jsonl`: one JSON object per step (`{"step", "mode", "loss", ...}`);
  on resume, records past the restored step (from the killed run) are dropped first, so the
  file always reads as one uninterrupted run; a last line a kill cut off is dropped with a
  note, any other line that is no record is a ConfigError naming it (`read_metrics`). Each
  write checks the file is still the run's (`RunFolderGone`: the folder deleted mid-run).
- `<model_dir>/train/` and `<model_dir>/eval/`: TensorBoard event files (ModelZoo's layout),
  each record flushed as it is written; on resume, each event file holding steps past the
  restored one is rewritten without them, atomically, as metrics.jsonl is, and the resumed
  run's file opens with the purge marker of PyTorch's `SummaryWriter(purge_step=resume_step
  + 1)`, so every TensorBoard loader shows metrics.jsonl's one run (`tensorboard_events`;
  hunt 77: a rewind showed steps 9-12 twice, a kill -9 left a 0-byte event file; review 77:
  the marker alone held for TensorBoard's Python loaders only, and never for an older file);
  bytes of an event file that hold no whole record are skipped, each said on stderr (hunt 78:
  one damaged record cut every record after it, silently). `MetricsLog.recorded` is a step's
  record on file when the log opened: a rerun that trains nothing evaluates no step twice, and
  one that evaluates it again (other eval settings; `--mode eval`, hunt 80) replaces its
  record (review 78).
- `<model_dir>/run.log`: every log line, appended.
- A record is written whole (`interrupt.held`: a signal inside it is raised at its end), and
  `close` waits for TensorBoard's writer at most `CLOSE_BOUND_S` (hunt 75: tensorboardX's
  logger thread, joined with no limit, hung a Ctrl-C'd run for ever); metrics.jsonl and the
  events are flushed at each record.
- `NullLog`: the same interface writing nothing (processes other than 0 of a run).
- `train_line` / `eval_line`: the Cerebras ModelZoo log line, plus tokens/s and the fraction
  of the step the host spent streaming weights (`StepStats.stall_s`).
- `StepStats`: what one `StreamedTrainer.step` reports; `Throughput`: the rates of a run's
  steps, its first (compiling) step apart.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from wse_core.errors import RunFault
from wse_core.host.atomic import write_atomically

from wse_trainer import interrupt
from wse_trainer.tensorboard_events import EventFile, drop_scalars, event_files, trim_events

__all__ = ["MetricsLog", "NullLog", "RunFolderGone", "StepStats", "Throughput", "train_line",
           "eval_line", "read_metrics"]  # fmt: skip

CLOSE_BOUND_S = 3.0  # TensorBoard's close: a flush and a thread's join, milliseconds when well


@dataclasses.dataclass(frozen=True)
class StepStats:
    """What one `StreamedTrainer.step` reports: the loss, the gradient's global norm (before
    clipping), wall, stall and compute seconds and the bytes streamed, and for a ReLU-like
    model (`ModelConfig.relu_like`) the fraction of exact zeros in each layer's MLP hidden
    activation over the step's tokens, counted in the forward pass (recomputed layers are
    not counted twice). Dense activations count nothing: their layers run the same function
    as before."""

    loss: float
    wall_s: float
    stall_s: float  # host seconds streaming weights (copies dispatched, never waited for)
    broadcast_bytes: int
    reduce_bytes: int
    recomputed_layers: int
    tokens: int
    mlp_zero_fraction: tuple[float, ...] | None = None  # per layer; ReLU-like models only
    grad_norm: float = 0.0  # global L2 norm of the step's gradient, before clipping

    @property
    def compute_s(self) -> float:
        return self.wall_s - self.stall_s

    @property
    def stall_fraction(self) -> float:
        return self.stall_s / self.wall_s if self.wall_s > 0 else 0.0


@dataclasses.dataclass
class Throughput:
    """The rates of one invocation's steps (`StepStats`), its first step apart: the XLA
    compile runs inside it (hunt 70: 1.3 s beside 0.16 s steps cut a 3-step run's tokens/s
    3.4x, a bf16 run's measured step was 25x its steady one), so rates are over the steps
    after it, as ModelZoo's GlobalRate starts after the compile; with one step, over it
    (`compile_included`)."""

    first: StepStats | None = None
    steps: int = 0  # after the first
    wall_s: float = 0.0
    stall_s: float = 0.0
    tokens: int = 0

    def add(self, st: StepStats) -> None:
        if self.first is None:
            self.first = st
            return
        self.steps, self.wall_s = self.steps + 1, self.wall_s + st.wall_s
        self.stall_s, self.tokens = self.stall_s + st.stall_s, self.tokens + st.tokens

    @property
    def compile_included(self) -> bool:
        """True while the first step is all there is to time."""
        return self.steps == 0

    def _timed(self) -> tuple[int, float, float, int]:
        """(steps, wall_s, stall_s, tokens) the rates are over."""
        if self.compile_included and self.first is not None:
            f = self.first
            return 1, f.wall_s, f.stall_s, f.tokens
        return self.steps, self.wall_s, self.stall_s, self.tokens

    def step_s(self) -> float:
        steps, wall, _, _ = self._timed()
        return wall / steps if steps else 0.0

    def tokens_per_s(self) -> float:
        _, wall, _, tokens = self._timed()
        return tokens / wall if wall > 0 else 0.0

    def stall_fraction(self) -> float:
        _, wall, stall, _ = self._timed()
        return stall / wall if wall > 0 else 0.0

    def window_s(self, window: list[StepStats]) -> tuple[int, float]:
        """(steps, wall_s) of a log window, the first step left out unless it is alone."""
        timed = [w for w in window if w is not self.first] or window
        return len(timed), sum(w.wall_s for w in timed)

    def summary(self, start: int) -> str:
        """The line that says what the rates are over, the first step's seconds apart."""
        first = self.first.wall_s if self.first is not None else 0.0
        if self.compile_included:
            return f"timing: one step, {first:.3g} s, its compile included"
        last = start + 1 + self.steps
        after = f"steps {start + 2}-{last}" if self.steps > 1 else f"step {last}"
        return (
            f"timing: first step {first:.3g} s (compile included); {after}: "
            f"{self.step_s():.4g} s each, {self.tokens_per_s():,.0f} tokens/s"
        )


def train_line(
    step: int,
    loss: float,
    rate: float,
    global_rate: float,
    tokens_per_s: float,
    stall_fraction: float,
) -> str:
    return (
        f"| Train Device=CSX, Step={step}, Loss={loss:.5f}, Rate={rate:.2f} samples/sec, "
        f"GlobalRate={global_rate:.2f} samples/sec, TokenRate={tokens_per_s:.0f} tokens/sec, "
        f"StallFraction={stall_fraction:.3f}"
    )


def eval_line(step: int, loss: float, accuracy: float | None = None) -> str:
    """ModelZoo's eval line: the loss, its perplexity and (None: not on record, an eval
    recorded before hunt 80) the next-token accuracy."""
    ppl = math.exp(min(loss, 700.0))
    said = "" if accuracy is None else f", Accuracy={accuracy:.5f}"
    return f"| Eval Device=CSX, GlobalStep={step}, Loss={loss:.5f}, Perplexity={ppl:.3f}{said}"


def read_metrics(model_dir: str | Path) -> list[dict[str, Any]]:
    """The records of `<model_dir>/metrics.jsonl` (none when it is missing), as a JSON-lines
    reader takes them: a last line cut off (no newline: what a kill or a full disk leaves
    mid-write) is dropped; any other line that is not a JSON object with an integer "step"
    is a ConfigError naming its line number (hunt 64: a 67-line JSONDecodeError after the
    compile, every retry)."""
    return _read_records(Path(model_dir) / "metrics.jsonl")[0]


def _read_records(path: Path) -> tuple[list[dict[str, Any]], int | None, bool]:
    """(records, the number of the cut-off last line dropped or None, whether the file
    ends with a newline: the next record starts a line of its own)."""
    from wse_trainer.config import ConfigError

    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return [], None, True
    except OSError as e:
        raise ConfigError(f"cannot read {str(path)!r}: {e.strerror}") from None
    lines = data.split(b"\n")
    records: list[dict[str, Any]] = []
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        problem, record = _record(raw)
        if problem is None:
            records.append(record)
        elif number == len(lines):  # no newline after it: a write cut short
            return records, number, False
        else:
            raise ConfigError(
                f"{str(path)!r} line {number:,} is not a JSON record of a step ({problem}); "
                "remove that line to resume, or give a new model_dir (-o)"
            )
    return records, None, not data or data.endswith(b"\n")


def _record(raw: bytes) -> tuple[str | None, Any]:
    """(None, the record) or (why it is none, None) for one line of metrics.jsonl."""
    try:
        record = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        return f"not UTF-8 at byte {e.start + 1}", None
    except (ValueError, RecursionError) as e:
        return " ".join(str(e).split())[:80], None
    if not isinstance(record, dict):
        return f"a JSON {type(record).__name__}, not an object", None
    step = record.get("step")
    if not isinstance(step, int) or isinstance(step, bool):
        return f"its step is {json.dumps(step)[:20]}, not an integer", None
    return None, record


class RunFolderGone(RunFault):
    """The model_dir was deleted or replaced while the run wrote to it (exit 1)."""


class MetricsLog:
    """Appends metrics and log lines for one run in `model_dir`. Records past `resume_step`
    (from a killed run) are dropped first, and a cut-off last line (said on stderr); None
    keeps them all (an eval: it only adds its record). The event files drop the same steps
    (`trim_events`), and each event folder that holds events opens a file with the purge
    marker at once (module doc).
    Each write first checks that metrics.jsonl is still the file it opened: `RunFolderGone`
    otherwise."""

    def __init__(self, model_dir: str | Path, *, resume_step: int | None = 0, echo=None):
        self.dir = Path(model_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.echo = echo
        path = self.dir / "metrics.jsonl"
        records, torn, whole = _read_records(path)
        kept = [m for m in records if resume_step is None or m["step"] <= resume_step]
        if torn is not None:
            print(
                f"note: dropped the cut-off last line ({torn:,}) of {path}: a write a kill or "
                "a full disk interrupted",
                file=sys.stderr,
                flush=True,
            )
        if not whole or len(kept) < len(records):  # a kill now leaves the old file whole
            write_atomically(path, "".join(json.dumps(m) + "\n" for m in kept))
        self._jsonl = open(path, "a")  # noqa: SIM115 (closed in close)
        self._log = open(self.dir / "run.log", "a")  # noqa: SIM115
        self._writers: dict[str, Any] = {}
        self._kept = {(m["step"], m.get("mode")): m for m in kept}  # the last of each, on record
        self._purge_step = None if resume_step is None else resume_step + 1
        for mode in ("train", "eval") if resume_step is not None else ():
            for note in trim_events(self.dir / mode, resume_step):  # every loader, older file
                print(note, file=sys.stderr, flush=True)  # damage said, as a cut-off line is
            if event_files(self.dir / mode):  # marked now, even where this run writes none
                self._writer(mode)

    def check(self) -> None:
        """RunFolderGone when metrics.jsonl is no longer the file this log writes (hunt 64:
        a run whose folder was deleted wrote on into deleted files and said it succeeded).
        The open file keeps its inode from reuse, so a new file of that name differs."""
        path = self.dir / "metrics.jsonl"
        mine = os.fstat(self._jsonl.fileno())
        try:
            now = os.stat(path)
        except OSError:
            now = None
        if now is None or (now.st_dev, now.st_ino) != (mine.st_dev, mine.st_ino):
            raise RunFolderGone(
                f"model_dir {str(self.dir)!r} was deleted or replaced during the run (its "
                f"metrics.jsonl is {'gone' if now is None else 'another file'}); the run "
                "stopped, its logs and checkpoints from then on unwritten; start it again"
            )

    def recorded(self, step: int, mode: str) -> dict[str, Any] | None:
        """The record of `step` and `mode` that metrics.jsonl held when this log opened (the
        last, where it held several), or None (hunt 78: a rerun of a finished run)."""
        return self._kept.get((step, mode))

    def _writer(self, mode: str):
        if mode not in self._writers:
            self._writers[mode] = EventFile(self.dir / mode, purge_step=self._purge_step)
        return self._writers[mode]

    def record(self, step: int, mode: str, values: dict[str, float]) -> None:
        """One step's scalars: to metrics.jsonl and TensorBoard. A record of a step and mode
        on file when the log opened (a rerun's eval of its start step; `--mode eval` of a
        step evaluated before, hunt 80) replaces it in both, never a second record of it
        (review 78)."""
        self.check()
        with interrupt.held():
            if self._kept.pop((step, mode), None) is not None:
                self._drop(step, mode)
            self._jsonl.write(json.dumps({"step": step, "mode": mode, **values}) + "\n")
            self._jsonl.flush()
            scalars = {k: v for k, v in values.items() if isinstance(v, int | float)}
            self._writer(mode).add_scalars(step, scalars)

    def _drop(self, step: int, mode: str) -> None:
        """metrics.jsonl (rewritten whole) and `mode`'s older event files without the
        records of `step` and `mode`."""
        path = self.dir / "metrics.jsonl"
        records = [m for m in _read_records(path)[0] if (m["step"], m.get("mode")) != (step, mode)]
        write_atomically(path, "".join(json.dumps(m) + "\n" for m in records))
        self._jsonl.close()  # the old file's, once the new one is whole
        self._jsonl = open(path, "a")  # noqa: SIM115 (closed in close)
        mine = frozenset(w.path for w in self._writers.values())
        for note in drop_scalars(self.dir / mode, step, skip=mine):
            print(note, file=sys.stderr, flush=True)

    def line(self, text: str) -> None:
        self.check()
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        self._log.write(f"{stamp} INFO: {text}\n")
        self._log.flush()
        if self.echo is not None:
            self.echo(text)

    def close(self) -> None:
        try:
            late = [mode for mode, w in self._writers.items() if not _closed_within(w)]
            if late:
                self._log.write(
                    f"note: TensorBoard's writer of {', '.join(late)} did not close within "
                    f"{CLOSE_BOUND_S:g} s (its events were flushed at each record; metrics.jsonl "
                    "has them all)\n"
                )
        finally:
            self._jsonl.close()
            self._log.close()


def _closed_within(writer: Any, seconds: float = CLOSE_BOUND_S) -> bool:
    """Close a TensorBoard writer in a daemon thread, waiting at most `seconds` (a file on a
    hung network disk; a tensorboardX SummaryWriter's logger thread);
    False where it did not close (its queue's exit-time join is then cancelled too); what
    its close raised is raised here."""
    event_writer = getattr(getattr(writer, "file_writer", None), "event_writer", None)
    queue = getattr(event_writer, "_event_queue", None)
    failed: list[BaseException] = []

    def close() -> None:
        try:
            writer.close()
        except BaseException as e:  # noqa: BLE001 (raised again in the caller's thread)
            failed.append(e)

    closing = threading.Thread(target=close, name="wse-tensorboard-close", daemon=True)
    closing.start()
    closing.join(seconds)
    if failed:
        raise failed[0]
    if not closing.is_alive():
        return True
    if queue is not None:
        queue.cancel_join_thread()
    return False


class NullLog:
    """A `MetricsLog` that writes nothing: the other processes of a multi-process run."""

    def check(self) -> None:
        pass

    def recorded(self, step: int, mode: str) -> dict[str, Any] | None:
        return None

    def record(self, step: int, mode: str, values: dict[str, float]) -> None:
        pass

    def line(self, text: str) -> None:
        pass

    def close(self) -> None:
        pass
