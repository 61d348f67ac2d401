"""What a run writes while it trains: metrics.jsonl, TensorBoard events, the run log.

- `<model_dir>/metrics.jsonl`: one JSON object per step (`{"step", "mode", "loss", ...}`);
  on resume, records past the restored step (from the killed run) are dropped first, so the
  file always reads as one uninterrupted run.
- `<model_dir>/train/` and `<model_dir>/eval/`: tensorboardX event files (ModelZoo's layout).
- `<model_dir>/run.log`: every log line, appended.
- `NullLog`: the same interface writing nothing (processes other than 0 of a run).
- `train_line` / `eval_line`: the Cerebras ModelZoo log line, plus tokens/s and the fraction
  of the step the host spent streaming weights (`StepStats.stall_s`).
- `StepStats`: what one `StreamedTrainer.step` reports.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from pathlib import Path
from typing import Any

__all__ = ["MetricsLog", "NullLog", "StepStats", "train_line", "eval_line", "read_metrics"]


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


def eval_line(step: int, loss: float) -> str:
    ppl = math.exp(min(loss, 700.0))
    return f"| Eval Device=CSX, GlobalStep={step}, Loss={loss:.5f}, Perplexity={ppl:.3f}"


def read_metrics(model_dir: str | Path) -> list[dict[str, Any]]:
    path = Path(model_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class MetricsLog:
    """Appends metrics and log lines for one run in `model_dir`."""

    def __init__(self, model_dir: str | Path, *, resume_step: int = 0, echo=None):
        self.dir = Path(model_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.echo = echo
        kept = [m for m in read_metrics(self.dir) if m["step"] <= resume_step]
        (self.dir / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in kept))
        self._jsonl = open(self.dir / "metrics.jsonl", "a")  # noqa: SIM115 (closed in close)
        self._log = open(self.dir / "run.log", "a")  # noqa: SIM115
        self._writers: dict[str, Any] = {}

    def _writer(self, mode: str):
        if mode not in self._writers:
            from tensorboardX import SummaryWriter

            self._writers[mode] = SummaryWriter(str(self.dir / mode))
        return self._writers[mode]

    def record(self, step: int, mode: str, values: dict[str, float]) -> None:
        """One step's scalars: to metrics.jsonl and TensorBoard."""
        self._jsonl.write(json.dumps({"step": step, "mode": mode, **values}) + "\n")
        self._jsonl.flush()
        writer = self._writer(mode)
        for key, value in values.items():
            if isinstance(value, int | float):
                writer.add_scalar(key, value, step)

    def line(self, text: str) -> None:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        self._log.write(f"{stamp} INFO: {text}\n")
        self._log.flush()
        if self.echo is not None:
            self.echo(text)

    def close(self) -> None:
        for w in self._writers.values():
            w.close()
        self._jsonl.close()
        self._log.close()


class NullLog:
    """A `MetricsLog` that writes nothing: the other processes of a multi-process run."""

    def record(self, step: int, mode: str, values: dict[str, float]) -> None:
        pass

    def line(self, text: str) -> None:
        pass

    def close(self) -> None:
        pass
